"""A topology as a Dagster component: ``type: trident_assets.TopologyComponent`` in a defs.yaml.

What ``dg scaffold defs trident_assets.TopologyComponent <name>`` writes, ``dg check defs``
validates and ``dg dev`` / ``dg launch`` load: the same definitions as
``trident_definitions([topology], TridentResource(...))`` (assets, coordinator sensor, checks,
``trident_io_manager``), built from four YAML attributes. Every attribute a user can get wrong
is refused when the definitions load, by a :class:`~trident_assets.errors.ConfigError` naming
the attribute and what to write instead.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._record import copy
from dagster.components.component_scaffolding import scaffold_component
from pydantic import BaseModel, Field

from trident_assets.backends.postgres_config import is_postgres_dsn
from trident_assets.errors import ConfigError
from trident_assets.stream.topology import TridentTopology

__all__ = ["TopologyComponent"]

_SHARED: dict[tuple[str, str], Any] = {}
"""One resource object per key and configuration: Dagster merges the definitions of a project's
components only if a resource key names the same object in each (several topologies, one home)."""

STORE_HELP = (
    "'duckdb' (the state in <home>/state.duckdb), a DuckDB file path ending in .duckdb, or a "
    "PostgreSQL DSN postgresql://user[:password]@host:port/database"
)


class TopologyParams(BaseModel):
    """What ``dg scaffold defs trident_assets.TopologyComponent NAME`` accepts as options."""

    topology: str | None = Field(
        default=None,
        description="module:attribute of the topology (default <project>.topologies:NAME).",
    )
    home: str = Field(default=".trident", description="Directory of the log and state.")
    store: str = Field(default="duckdb", description=f"Where the state lives: {STORE_HELP}.")
    live: bool = Field(default=False, description="Run the topology live.")


class TopologyScaffolder(dg.Scaffolder[TopologyParams]):
    """Writes ``defs/NAME/defs.yaml`` with every attribute, ready to edit."""

    @classmethod
    def get_scaffold_params(cls) -> type[TopologyParams]:
        """The options of ``dg scaffold defs``."""
        return TopologyParams

    def scaffold(self, request: dg.ScaffoldRequest[TopologyParams]) -> None:
        """Write the defs.yaml; ``topology`` defaults to ``<root module>.topologies:NAME``."""
        params = request.params
        target = Path(request.target_path)
        defs = next((p for p in target.parents if p.name == "defs"), None)
        package = defs.parent.name if defs is not None else "my_project"
        topology = params.topology or f"{package}.topologies:{target.name}"
        attributes = {"topology": topology, **params.model_dump(exclude={"topology"})}
        scaffold_component(request, attributes)


@dg.scaffold_with(TopologyScaffolder)
class TopologyComponent(dg.Component, dg.Resolvable, dg.Model):
    """A trident_assets topology: its txid-partitioned assets, coordinator sensor and checks.

    Relative paths (``home``, a DuckDB ``store``) are relative to the project's root, the
    directory holding its pyproject.toml.
    """

    topology: str = Field(
        description="The TridentTopology to run, as module:attribute (e.g. "
        "my_project.topologies:shop); the module must be importable by the project.",
    )
    home: str = Field(
        default=".trident", description="Directory holding the topology's log and state."
    )
    store: str = Field(default="duckdb", description=f"Where the state lives: {STORE_HELP}.")
    live: bool = Field(
        default=False,
        description="Live mode: one long-lived run commits each txid seconds after its records "
        "arrive, instead of a sensor-launched run per txid.",
    )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """What ``trident_definitions`` returns for this topology, home and store.

        Raises:
            ConfigError: ``topology`` is not module:attribute, its module does not import, the
                attribute is missing or not a TridentTopology, or ``store`` is not one of the
                stores above; nothing is opened or written before.
        """
        from trident_assets.dagster.factory import trident_definitions
        from trident_assets.dagster.resources import TridentResource

        root = Path(context.project_root)
        home = root / self.home
        database, dsn = self._store(root)
        trident = TridentResource(home=str(home), state_database=database, state_dsn=dsn)
        defs = trident_definitions([self.load_topology()], trident, live=self.live)
        resources = {
            key: _SHARED.setdefault((key, _config(value)), value)
            for key, value in (defs.resources or {}).items()
        }
        return copy(defs, resources=resources)

    def load_topology(self) -> TridentTopology:
        """The topology ``topology`` names, imported.

        Raises:
            ConfigError: it cannot be found, or is not a TridentTopology.
        """
        module_name, _, attribute = self.topology.partition(":")
        names = [*module_name.split("."), attribute]
        if not attribute or not all(name.isidentifier() for name in names):
            msg = (
                f"topology: {self.topology!r} is not module:attribute; write the module that "
                "declares the topology and its name, e.g. topology: my_project.topologies:shop"
            )
            raise ConfigError(msg)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as missing:
            if missing.name is None or not f"{module_name}.".startswith(f"{missing.name}."):
                raise  # the module itself imports something missing: its own error says what
            msg = (
                f"topology: no module {module_name!r} (no module named {missing.name!r}); put "
                "it in the project's package (e.g. src/<project>/topologies.py, module "
                "<project>.topologies) or install it"
            )
            raise ConfigError(msg) from None
        found = getattr(module, attribute, None)
        if found is None:
            msg = (
                f"topology: module {module_name} has no attribute {attribute!r}; name the "
                f"module-level TridentTopology declared there (e.g. {attribute} = "
                f"ta.TridentTopology({attribute!r}))"
            )
            raise ConfigError(msg)
        if not isinstance(found, TridentTopology):
            msg = (
                f"topology: {self.topology} is a {type(found).__name__}, not a "
                f"TridentTopology; name the module-level ta.TridentTopology(...) of {module_name}"
            )
            raise ConfigError(msg)
        return found

    def _store(self, root: Path) -> tuple[str | None, str | None]:
        """``(state_database, state_dsn)`` of the TridentResource for ``store``."""
        store = self.store.strip()
        if store == "duckdb":
            return None, None
        if is_postgres_dsn(store):
            return None, store
        if store.endswith(".duckdb"):
            return str(root / store), None
        msg = f"store: {self.store!r} is not a state store; use {STORE_HELP}"
        raise ConfigError(msg)


def _config(resource: Any) -> str:
    """A resource's class and configuration, as text."""
    fields = json.dumps(resource.model_dump(), sort_keys=True, default=str)
    return f"{type(resource).__qualname__}:{fields}"

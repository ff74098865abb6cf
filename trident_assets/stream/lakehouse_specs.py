"""Lakehouse tables a state or an output is published to: ``DeltaTable`` and ``IcebergTable``.

``counts.publish(ta.DeltaTable("/lake/word_counts"))`` or
``stream.as_output("words").publish(ta.IcebergTable("lake.words"))`` declares a
:class:`Publication`: after each txid commits, its rows go to the table as **one** table commit
stamped with the txid (Delta: an application transaction, version = txid; Iceberg: the snapshot
summary). What a publication writes:

* a map state with ``mode="table"`` (the default for a state): the state's current values, the
  txid's changed keys merged in (columns: the key fields, the value field, ``txid``: the txid
  that last changed the key);
* a state with ``mode="changelog"``: the txid's new values appended (the same columns);
* an output stream (always ``"changelog"``): the txid's tuples appended, with ``txid``.

Nothing here opens a table: :mod:`trident_assets.lakehouse` does, after the commit.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from trident_assets.errors import ConfigError

__all__ = [
    "MODES",
    "DeltaTable",
    "IcebergTable",
    "LakehouseTable",
    "Publication",
    "publish_output",
    "publish_state",
]

MODES = ("table", "changelog")
"""How a state is published: its current values (merged per txid) or its new values appended."""
Mode = Literal["table", "changelog"]
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _check_mode(what: str, mode: str | None) -> None:
    if mode is not None and mode not in MODES:
        msg = f"{what}: mode must be 'table' or 'changelog', got {mode!r}"
        raise ConfigError(msg)


def _location(what: str, path: str | Path) -> str:
    """A local path made absolute (relative to the current directory), or a URL as given."""
    text = str(path)
    if not text:
        msg = f"{what} needs a path or a URL, got an empty one"
        raise ConfigError(msg)
    if _URL.match(text) and not text.startswith("file://"):
        return text
    return str(Path(text.removeprefix("file://")).expanduser().resolve())


@dataclass(frozen=True)
class LakehouseTable(ABC):
    """A table outside the store that committed txids are published to (one commit per txid)."""

    format: ClassVar[str] = ""
    """``"delta"`` or ``"iceberg"``: the Dagster kind of the table's asset."""
    mode: Mode | None = None
    """``"table"`` or ``"changelog"``; None: ``"table"`` for a state, ``"changelog"`` for an
    output stream."""

    @abstractmethod
    def describe(self) -> str:
        """The table for messages (its format and location)."""


@dataclass(frozen=True, init=False)
class DeltaTable(LakehouseTable):
    """A Delta Lake table at ``path`` (a local path or a URL ``deltalake`` writes to)."""

    format: ClassVar[str] = "delta"
    path: str = ""

    def __init__(self, path: str | Path, *, mode: Mode | None = None) -> None:
        """Declare Delta table ``path`` (relative paths are taken from the current directory).

        Raises:
            ConfigError: an empty path or a mode other than ``"table"``/``"changelog"``.
        """
        _check_mode(f"DeltaTable({str(path)!r})", mode)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "path", _location("DeltaTable", path))

    def describe(self) -> str:
        """``Delta table '<path>'``."""
        return f"Delta table {self.path!r}"


@dataclass(frozen=True, init=False)
class IcebergTable(LakehouseTable):
    """An Apache Iceberg table ``identifier`` (``"namespace.table"``) in a SQL catalog.

    ``catalog_uri``: the catalog's SQLAlchemy URL (default: the SQLite file
    ``iceberg_catalog.db`` beside a DuckDB state file, or the PostgreSQL database of a
    PostgreSQL store). ``warehouse``: where the table's files go (default: ``iceberg/``
    beside a DuckDB state file; required with a PostgreSQL store).
    """

    format: ClassVar[str] = "iceberg"
    identifier: str = ""
    warehouse: str | None = None
    catalog_uri: str | None = None

    def __init__(
        self,
        identifier: str,
        *,
        mode: Mode | None = None,
        warehouse: str | Path | None = None,
        catalog_uri: str | None = None,
    ) -> None:
        """Declare Iceberg table ``identifier`` (``"namespace.table"``).

        Raises:
            ConfigError: an identifier that is not ``namespace.table`` (letters, digits and
                ``_``), or a bad mode.
        """
        if not isinstance(identifier, str) or not _IDENTIFIER.match(identifier):
            msg = (
                f"IcebergTable identifier must be 'namespace.table' (letters, digits, '_'), "
                f"got {identifier!r}"
            )
            raise ConfigError(msg)
        _check_mode(f"IcebergTable({identifier!r})", mode)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "identifier", identifier)
        where = None if warehouse is None else _location("IcebergTable warehouse", warehouse)
        object.__setattr__(self, "warehouse", where)
        object.__setattr__(self, "catalog_uri", catalog_uri)

    def describe(self) -> str:
        """``Iceberg table '<identifier>'``."""
        return f"Iceberg table {self.identifier!r}"


@dataclass(frozen=True)
class Publication:
    """One state or output of a topology published to one lakehouse table."""

    topology: str
    source: Literal["state", "output"]
    name: str
    """The state's or the output's name."""
    table: LakehouseTable
    mode: Mode
    keys: tuple[str, ...]
    """The key fields (a state published as a table; empty for a global state)."""
    value: str | None
    """The value field of a state (None: an output's or an updater's rows)."""
    rows_table: str
    """The store table holding each recent txid's rows (new values or output tuples)."""

    @property
    def app_id(self) -> str:
        """The Delta application id (and Iceberg summary key) of the publication."""
        return f"trident/{self.topology}/{self.source}/{self.name}"

    @property
    def asset(self) -> str:
        """The name of the table's Dagster asset: ``<name>_<format>``."""
        return f"{self.name}_{self.table.format}"

    def describe(self) -> str:
        """``state 'counts' -> Delta table '/lake/counts'``, for messages."""
        return (
            f"{self.source} {self.name!r} of topology {self.topology!r} -> {self.table.describe()}"
        )


def _check_table(what: str, table: object) -> LakehouseTable:
    if not isinstance(table, LakehouseTable) or not table.format:
        msg = f"{what}.publish needs a ta.DeltaTable or ta.IcebergTable, got {table!r}"
        raise ConfigError(msg)
    return table


def _register(topology: Any, publication: Publication) -> None:
    """Add ``publication`` to ``topology``, claiming its asset name and its table.

    Raises:
        ConfigError: the asset name is taken, or another publication writes the same table.
    """
    for other in topology.publications:
        if other.table.describe() == publication.table.describe():
            msg = (
                f"{publication.describe()}: {other.source} {other.name!r} is already published "
                "to that table; give each publication a table of its own"
            )
            raise ConfigError(msg)
    owner = (
        f"publication of {publication.source} {publication.name!r} to {publication.table.format}"
    )
    topology.claim(owner, (), (publication.asset,))
    topology.publications.append(publication)


def publish_state(state: Any, table: LakehouseTable, map_state: bool, kept_in_store: bool) -> None:
    """Declare ``state`` published to ``table`` (see :meth:`TridentState.publish`).

    ``map_state``: the state is keys and one value each (its kind says); ``kept_in_store``:
    its new values are written to the topology's store (not a key-value cluster's).

    Raises:
        ConfigError: not a DeltaTable/IcebergTable, ``mode="table"`` for a state that is not
            a map of keys to one value, or a state whose values never reach the store.
    """
    what = f"state {state.spec.name!r}"
    table = _check_table(what, table)
    if not kept_in_store:
        msg = (
            f"{what} is kept in a key-value cluster: its values never reach the store, so it "
            "cannot be published; keep it in a StateSpec, or publish a stream derived from it"
        )
        raise ConfigError(msg)
    mode = table.mode or ("table" if map_state else "changelog")
    if mode == "table" and not map_state:
        msg = (
            f"{what} is not a map of keys to one value (a persistent_aggregate), so it cannot "
            f"be published as a table; use {type(table).__name__}(..., mode='changelog') to "
            "append its new values of each txid"
        )
        raise ConfigError(msg)
    keys = tuple(state.group) if mode == "table" else ()
    _register(
        state.topology,
        Publication(
            state.topology.name, "state", state.spec.name, table, mode, keys,
            state.value_field, state.new_values_table,
        ),
    )  # fmt: skip


def publish_output(stream: Any, table: LakehouseTable) -> None:
    """Declare the output ``stream`` is kept as published to ``table`` (``Stream.publish``).

    Raises:
        ConfigError: not a DeltaTable/IcebergTable, the stream is not an output, or
            ``mode="table"`` (an output's tuples are appended).
    """
    topology = stream.topology
    names = [name for name, s in topology.outputs.items() if s is stream]
    if not names:
        msg = (
            "only an output stream can be published: call .as_output(name) first, e.g. "
            "stream.as_output('words').publish(ta.DeltaTable(path))"
        )
        raise ConfigError(msg)
    table = _check_table(f"output {names[0]!r}", table)
    if table.mode == "table":
        msg = (
            f"output {names[0]!r}: an output stream's tuples are appended per txid; publish it "
            f"with mode='changelog' (or no mode), or publish a state as a table"
        )
        raise ConfigError(msg)
    _register(
        topology,
        Publication(
            topology.name, "output", names[0], table, "changelog", (), None,
            topology.output_table(names[0]),
        ),
    )  # fmt: skip

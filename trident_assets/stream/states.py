"""``TridentState``: a persisted state as the user declares it, its tables and its contract.

``persistent_aggregate``, ``partition_persist``, the windows and ``single_join`` of
:mod:`~trident_assets.stream.streams` declare one; :meth:`TridentState.new_values_stream` is
the stream of what each batch changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from trident_assets.core.contracts import StateContract, describe_aggregator
from trident_assets.errors import ConfigError
from trident_assets.stream.graph import Node, StateSpec
from trident_assets.stream.kv_specs import KeyValueStateSpec, refuse_key_value
from trident_assets.stream.lakehouse_specs import LakehouseTable, publish_state
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.stream.streams import Stream
    from trident_assets.stream.topology import TridentTopology

__all__ = ["TridentState", "require_spec"]


class TridentState:
    """A persisted state declared by ``persistent_aggregate`` or ``partition_persist``."""

    def __init__(
        self,
        topology: TridentTopology,
        spec: StateSpec,
        node: Node,
        group: tuple[str, ...],
        value_field: str | None,
    ) -> None:
        """Created by the stream API; not directly."""
        self.topology = topology
        self.spec = spec
        self.node = node
        self.group = group
        self.value_field = value_field

    @property
    def table(self) -> str:
        """The store table holding this state."""
        return f"{self.topology.name}__{self.spec.name}"

    @property
    def new_values_table(self) -> str:
        """The store table of the (key..., new value) rows of each recent txid."""
        return f"{self.table}__new_values"

    @property
    def partials_table(self) -> str:
        """The store table of a grouped combiner state's per-key partials per recent txid."""
        return f"{self.table}__partials"

    def publish(self, table: LakehouseTable) -> TridentState:
        """Publish this state to ``table`` after every commit: one table commit per txid.

        ``table``: a ``ta.DeltaTable(path)`` or ``ta.IcebergTable("namespace.table")``.
        ``mode="table"`` (a map state's default): the state's current values, each txid's
        changed keys merged in; ``mode="changelog"``: each txid's new values appended. Rows
        carry ``txid``. See the guide's "Lakehouse tables out".

        Raises:
            ConfigError: ``mode="table"`` for a state that is not a map of keys to one value,
                a state kept in a key-value cluster, or a table or asset name already taken.
        """
        in_store = not isinstance(self.spec, KeyValueStateSpec)
        publish_state(self, table, state_kind(self.node).map_state, in_store)
        return self

    def new_values_stream(self) -> Stream:
        """The (key..., new value) tuples each batch produced.

        Raises:
            ConfigError: a ``persistent_aggregate`` kept in a key-value store (its new values
                stay there; a single join's joined tuples do come to the driver).
        """
        if state_kind(self.node).in_key_value_store:
            store = cast("KeyValueStateSpec", self.spec).store
            msg = (
                f"{store} state {self.spec.name!r} has no new values stream: its "
                "values are written by the executors and never come to the driver"
            )
            raise ConfigError(msg)
        return self.topology.stream_of(Node("new_values", self.node.fields, (), {"state": self}))

    def contract(self) -> StateContract:
        """The declared contract: what this state's values mean (see ``core.contracts``).

        Key types are not known at declaration (None); the value type is the aggregator's
        ``output_type`` when it sets one. ``first_txid`` is 1 (a declaration covers history).
        """
        declared = state_kind(self.node)
        desc = describe_aggregator(*declared.contract_subject())
        value_type = declared.value_type
        return StateContract(
            topology=self.topology.name,
            state=self.spec.name,
            table=self.table,
            state_type=self.spec.state_type.value,
            key_fields=tuple(self.group),
            key_types=None,
            aggregator=desc["aggregator"],
            aggregator_params=desc["aggregator_params"],
            version=desc["version"],
            value_type=value_type,
            spouts=tuple(sorted(spout.args["spout_id"] for spout in self.node.spouts())),
            first_txid=1,
            note=desc["note"],
        )


def require_spec(spec: object, operation: str) -> None:
    """Refuse a ``spec`` that is not a StateSpec (e.g. a bare state name)."""
    if not isinstance(spec, StateSpec):
        msg = (
            f"{operation} needs a StateSpec as its state, got {spec!r}; "
            "e.g. StateSpec.opaque('counts')"
        )
        raise ConfigError(msg)
    if operation != "persistent_aggregate":
        refuse_key_value(spec, operation)

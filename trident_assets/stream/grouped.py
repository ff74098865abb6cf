"""``GroupedStream``: a stream grouped by key fields, to aggregate, persist or query per group.

``Stream.group_by`` returns one (see :mod:`~trident_assets.stream.streams`); an ungrouped
stream's ``aggregate``, ``partition_aggregate`` and ``persistent_aggregate`` are those of its
one group of no fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trident_assets.core.aggregators import Aggregator, CombinerAggregator, DistinctCount
from trident_assets.errors import ConfigError
from trident_assets.names import check_state_columns
from trident_assets.stream.chained import ChainedAggregatorDeclarer, aggregator_step
from trident_assets.stream.event_windows import declare_window_aggregate
from trident_assets.stream.fields import Fields, as_fields, check_distinct, require_fields
from trident_assets.stream.graph import Node, StateSpec
from trident_assets.stream.state_kinds import STATE_KIND, aggregate_kind
from trident_assets.stream.states import TridentState, require_spec

if TYPE_CHECKING:
    from trident_assets.stream.queries import QueryFunction
    from trident_assets.stream.streams import Stream, StreamAssembly

__all__ = ["GroupedStream"]


class GroupedStream:
    """A stream grouped by key fields."""

    def __init__(self, stream: Stream, group: tuple[str, ...]) -> None:
        """Group ``stream`` by ``group``."""
        self.stream = stream
        self.group = group

    def aggregate(self, inputs: Fields, agg: Aggregator, outputs: Fields) -> Stream:
        """Aggregate each group of the batch: emits ``group + outputs`` per group.

        Combiners combine per-partition partials; reducers fold every tuple of a group.
        Python aggregators declare ``output_type`` (the SQL type of their result).
        """
        return self._aggregate("aggregate", inputs, agg, outputs)

    def partition_aggregate(self, inputs: Fields, agg: Aggregator, outputs: Fields) -> Stream:
        """Aggregate each group within each Spark partition: ``group + outputs`` per pair.

        Partition boundaries are Spark's, so results differ from ``aggregate`` by design
        (one tuple per non-empty partition and group; an empty batch emits nothing).
        """
        return self._aggregate("partition_aggregate", inputs, agg, outputs)

    def _aggregate(self, kind: str, inputs: Any, agg: Any, outputs: Any) -> Stream:
        step = aggregator_step(self.stream.fields, self.group, inputs, agg, outputs, kind)
        fields = (*self.group, step.output)
        args = {"inputs": step.inputs, "agg": agg, "group": self.group, "output": step.output}
        return self.stream.derive(kind, fields, **args)

    def apply_assembly(self, assembly: StreamAssembly) -> Stream:
        """Apply an Assembly per group (e.g. ``FirstN`` of each group)."""
        return assembly.apply(self.stream, self.group)

    def persistent_aggregate(
        self,
        spec: StateSpec,
        inputs: Fields,
        agg: Aggregator | DistinctCount,
        output: str,
    ) -> TridentState:
        """Aggregate each batch per group into state ``spec`` under the batch txid.

        Combiners combine partials in Spark before the state is touched; reducers see
        every tuple of a group. The new values stream carries ``group + [output]``.

        Raises:
            ConfigError: a combiner with more than one input field, bad names, a key or
                output field named like a store column (``txid``, ``curr``, ``prev``,
                ``_trident...``; ``key`` for an ungrouped state's output), or a state whose
                tables or assets another declaration of the topology uses.
        """
        require_spec(spec, "persistent_aggregate")
        ins = as_fields(inputs, "persistent_aggregate inputs")
        require_fields(ins, self.stream.fields, "persistent_aggregate")
        (out,) = as_fields(output, "persistent_aggregate output")
        check_distinct((out,), self.group, "persistent_aggregate")
        check_state_columns(spec.name, "key field", self.group)
        # an ungrouped state's one key column is GLOBAL_COLUMN ("key")
        extra = () if self.group else ("key",)
        check_state_columns(spec.name, "output field", (out,), extra=extra)
        if isinstance(agg, CombinerAggregator | DistinctCount) and len(ins) > 1:
            what = (
                "DistinctCount takes"
                if isinstance(agg, DistinctCount)
                else "combiner aggregators take"
            )
            msg = f"{what} a single input field, got {list(ins)}"
            raise ConfigError(msg)
        kind = aggregate_kind(agg, spec)
        topo = self.stream.topology
        topo.check_exactly_once(spec, self.stream.node)
        node = Node(
            "persist",
            (*self.group, out),
            (self.stream.node,),
            {"inputs": ins, "agg": agg, "group": self.group, "output": out, "spec": spec}
            | {STATE_KIND: kind},
        )
        state = TridentState(topo, spec, node, group=self.group, value_field=out)
        topo.register_state(state)
        return state

    window_aggregate = declare_window_aggregate
    """Aggregate per group and event-time window into a state: :func:`.declare_window_aggregate`."""

    def state_query(
        self,
        state: TridentState,
        inputs: Fields,
        query: QueryFunction,
        output: Fields,
    ) -> Stream:
        """Query ``state`` for each tuple (the grouping only routes tuples, as in Trident)."""
        return self.stream.state_query(state, inputs, query, output)

    def chained_agg(self) -> ChainedAggregatorDeclarer[Stream]:
        """Several aggregators per group in one pass; emits ``group + outputs``."""
        return ChainedAggregatorDeclarer(self.stream, self.group)

"""Streams as the user declares them: ``Stream`` (``GroupedStream`` and ``TridentState`` too).

Each operation validates its fields and returns a new :class:`Stream` over a new
:class:`~trident_assets.stream.graph.Node`; ``group_by`` returns a
:class:`~trident_assets.stream.grouped.GroupedStream`; persisting returns a
:class:`~trident_assets.stream.states.TridentState`.
:class:`~trident_assets.stream.topology.TridentTopology` creates the first streams (spouts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from trident_assets.core.aggregators import Aggregator, DistinctCount
from trident_assets.errors import ConfigError
from trident_assets.names import check_output_columns, check_state_columns
from trident_assets.spouts.config import validate_name
from trident_assets.stream.chained import ChainedAggregatorDeclarer
from trident_assets.stream.comparison import Comparator, declare_comparison
from trident_assets.stream.fields import Fields, as_fields, check_distinct, require_fields
from trident_assets.stream.graph import Node, StateSpec, StateUpdater
from trident_assets.stream.grouped import GroupedStream
from trident_assets.stream.lakehouse_specs import LakehouseTable, publish_output
from trident_assets.stream.operations import Filter, FlatMapFunction, Function, MapFunction
from trident_assets.stream.partitioning import Partitioning, parallelism_hint, repartition
from trident_assets.stream.queries import QueryFunction, TupleCollectionGet
from trident_assets.stream.state_kinds import STATE_KIND
from trident_assets.stream.states import TridentState, require_spec
from trident_assets.stream.trident_windows import window_config, window_node

if TYPE_CHECKING:
    from trident_assets.stream.topology import TridentTopology

__all__ = ["GroupedStream", "Stream", "TridentState"]


class StreamAssembly(Protocol):
    """What ``apply_assembly`` takes: an ``Assembly`` such as ``FirstN``."""

    def apply(self, stream: Stream, group: tuple[str, ...] = ()) -> Stream:
        """The stream the assembly makes of ``stream`` (per group of ``group``)."""
        ...


class Stream:
    """A stream of tuples with named fields; each operation returns a new Stream."""

    def __init__(self, topology: TridentTopology, node: Node) -> None:
        """Wrap ``node`` of ``topology``."""
        self.topology = topology
        self.node = node

    @property
    def fields(self) -> tuple[str, ...]:
        """The stream's output fields."""
        return self.node.fields

    _name: str | None = None
    """The label of the operations declared from this stream on (see :meth:`name`)."""

    def derive(self, kind: str, fields: Sequence[str], **args: Any) -> Stream:
        """A stream of a new ``kind`` node over this one (with this stream's label, if any).

        The operations of the stream API (here and in the ``stream`` modules that declare
        repartitioning, comparisons, assemblies and chained aggregates) build nodes with it.
        """
        if self._name is not None:
            args.setdefault("name", self._name)
        stream = Stream(self.topology, Node(kind, tuple(fields), (self.node,), args))
        stream._name = self._name
        return stream

    def each(self, inputs: Fields, op: Function | Filter, outputs: Fields = ()) -> Stream:
        """Apply a Function (appends ``outputs``) or a Filter (keeps matching tuples)."""
        ins = as_fields(inputs, "each inputs")
        require_fields(ins, self.fields, "each")
        if isinstance(op, Filter):
            if outputs:
                msg = "each with a Filter takes no output fields"
                raise ConfigError(msg)
            return self.derive("filter", self.fields, inputs=ins, filter=op)
        outs = as_fields(outputs, "each outputs")
        check_distinct(outs, self.fields, "each")
        op.validate(ins, outs)
        return self.derive("each", (*self.fields, *outs), inputs=ins, function=op, outputs=outs)

    def filter(self, op: Filter, inputs: Fields | None = None) -> Stream:
        """Keep tuples for which ``op`` holds (over ``inputs``, default all fields)."""
        return self.each(self.fields if inputs is None else inputs, op)

    def project(self, fields: Fields) -> Stream:
        """Keep only ``fields``, in that order."""
        keep = as_fields(fields, "project")
        require_fields(keep, self.fields, "project")
        return self.derive("project", keep)

    def map(self, function: MapFunction, outputs: Fields | None = None) -> Stream:
        """Replace each tuple by one tuple of ``outputs`` (default: the same fields)."""
        return self._fresh("map", MapFunction, function, outputs)

    def flat_map(self, function: FlatMapFunction, outputs: Fields | None = None) -> Stream:
        """Replace each tuple by zero or more tuples of ``outputs`` (default: the same fields)."""
        return self._fresh("flat_map", FlatMapFunction, function, outputs)

    def _fresh(self, kind: str, expected: type[Any], function: Any, outputs: Any) -> Stream:
        if not isinstance(function, expected):
            msg = f"{kind} needs a {expected.__name__}, got {function!r}"
            raise ConfigError(msg)
        require_fields(function.referenced_fields(), self.fields, kind)
        outs = (
            function.default_outputs(self.fields)
            if outputs is None
            else as_fields(outputs, f"{kind} outputs")
        )
        check_distinct(outs, (), kind)
        function.validate(self.fields, outs)
        return self.derive(kind, outs, function=function)

    def partition_aggregate(self, inputs: Fields, agg: Aggregator, outputs: Fields) -> Stream:
        """Aggregate each Spark partition of the batch to one tuple (``partitionAggregate``).

        See :meth:`GroupedStream.partition_aggregate`.
        """
        return GroupedStream(self, ()).partition_aggregate(inputs, agg, outputs)

    def apply_assembly(self, assembly: StreamAssembly) -> Stream:
        """Apply an Assembly such as ``FirstN`` (Trident's ``applyAssembly``)."""
        return assembly.apply(self)

    def as_output(self, name: str) -> Stream:
        """Keep this stream's tuples of every batch as output ``name`` (an asset in Dagster).

        Raises:
            ConfigError: a bad or taken name, or a field named ``txid`` (the output table's
                column holding each row's batch txid).
        """
        validate_name("output", name)
        check_output_columns(f"output {name!r}", self.fields)
        if name in self.topology.outputs:
            msg = f"topology {self.topology.name!r} already has an output {name!r}"
            raise ConfigError(msg)
        self.topology.claim(f"output {name!r}", *self.topology.output_names(name))
        self.topology.outputs[name] = self
        return self

    def publish(self, table: LakehouseTable) -> Stream:
        """Append this output's tuples of every committed txid to ``table``, one commit each.

        ``table``: a ``ta.DeltaTable(path)`` or ``ta.IcebergTable("namespace.table")``; each
        row carries its ``txid``. Call on the stream :meth:`as_output` returned.

        Raises:
            ConfigError: the stream is not an output, ``mode="table"``, or the table or its
                asset name is taken.
        """
        publish_output(self, table)
        return self

    def group_by(self, fields: Fields) -> GroupedStream:
        """Group by ``fields`` for aggregation, persistence or queries."""
        group = as_fields(fields, "group_by")
        require_fields(group, self.fields, "group_by")
        return GroupedStream(self, group)

    def aggregate(self, inputs: Fields, agg: Aggregator, outputs: Fields) -> Stream:
        """Aggregate the whole batch to exactly one tuple.

        An empty batch emits ``zero()`` of a combiner, ``init()`` of a reducer.
        """
        return GroupedStream(self, ()).aggregate(inputs, agg, outputs)

    def persistent_aggregate(
        self,
        spec: StateSpec,
        inputs: Fields,
        agg: Aggregator | DistinctCount,
        output: str,
    ) -> TridentState:
        """Aggregate every batch into one global value kept in state ``spec``."""
        return GroupedStream(self, ()).persistent_aggregate(spec, inputs, agg, output)

    def partition_persist(
        self,
        spec: StateSpec,
        inputs: Fields,
        updater: StateUpdater,
        outputs: Fields = (),
    ) -> TridentState:
        """Hand each whole batch (``inputs`` fields) to ``updater`` under the batch txid.

        Raises:
            ConfigError: bad names, an output field named like a store column (``txid``,
                ``curr``, ``prev``, ``_trident...``), or a state whose tables or assets
                another declaration of the topology uses.
        """
        require_spec(spec, "partition_persist")
        ins = as_fields(inputs, "partition_persist inputs")
        require_fields(ins, self.fields, "partition_persist")
        outs = as_fields(outputs, "partition_persist outputs")
        check_state_columns(spec.name, "output field", outs)
        self.topology.check_exactly_once(spec, self.node)
        args = {"inputs": ins, "updater": updater, "spec": spec, STATE_KIND: "updater"}
        node = Node("persist", outs, (self.node,), args)
        state = TridentState(self.topology, spec, node, group=(), value_field=None)
        self.topology.register_state(state)
        return state

    def state_query(
        self,
        state: TridentState,
        inputs: Fields,
        query: QueryFunction,
        output: Fields,
    ) -> Stream:
        """Append ``output``: ``query`` over ``state`` with one bulk lookup per batch.

        The query reads the state as committed before this batch (Trident's batch phase).
        ``TupleCollectionGet`` appends several fields (the state's keys and value, named by
        ``output``) and emits one tuple per (input tuple, state tuple) pair.
        """
        ins = as_fields(inputs, "state_query inputs")
        require_fields(ins, self.fields, "state_query")
        if state.topology is not self.topology:
            msg = f"state {state.spec.name!r} belongs to another topology"
            raise ConfigError(msg)
        if isinstance(query, TupleCollectionGet):
            outs = query.output_fields(state, output)
            args: dict[str, Any] = {"outputs": outs}
        else:
            (out,) = outs = as_fields(output, "state_query output")
            args = {"output": out}
        check_distinct(outs, self.fields, "state_query")
        stream = self.derive(
            "query", (*self.fields, *outs), inputs=ins, query=query, state=state, **args
        )
        self.topology.queries.append(stream)
        return stream

    # -- Trident windows (see trident_assets.stream.trident_windows) -------------------------------

    def window(
        self,
        config: Any,
        inputs: Fields,
        aggregator: Any,
        output: Fields,
        *,
        spec: StateSpec | str,
    ) -> Stream:
        """The aggregates of the windows of ``config`` as they fire (Trident's ``window``).

        ``spec`` names the window's store (a StateSpec or a name). Each fired window's
        aggregate enters the returned stream once, in the txid in which it fired; see
        docs/trident-windows.md for the firing rules.
        """
        node, state_spec = window_node(self, config, inputs, aggregator, output, spec)
        self.topology.check_exactly_once(state_spec, node)
        state = TridentState(self.topology, state_spec, node, group=(), value_field=None)
        self.topology.register_state(state)
        return state.new_values_stream()

    def tumbling_window(
        self,
        inputs: Fields,
        aggregator: Any,
        output: Fields,
        *,
        count: int | None = None,
        duration: Any = None,
        spec: StateSpec | str,
    ) -> Stream:
        """Windows of ``count`` tuples or of ``duration`` (seconds or timedelta), back to back."""
        config = window_config(count, duration)
        return self.window(config, inputs, aggregator, output, spec=spec)

    def sliding_window(
        self,
        inputs: Fields,
        aggregator: Any,
        output: Fields,
        *,
        slide: Any,
        count: int | None = None,
        duration: Any = None,
        spec: StateSpec | str,
    ) -> Stream:
        """Every ``slide``, the window of the last ``count`` tuples or the last ``duration``."""
        config = window_config(count, duration, slide=slide, sliding=True)
        return self.window(config, inputs, aggregator, output, spec=spec)

    # -- repartitioning (see trident_assets.stream.partitioning) ----------------------------

    def shuffle(self) -> Stream:
        """Spread the tuples round robin over the partitions (Spark ``repartition(n)``)."""
        return repartition(self, Partitioning.SHUFFLE)

    def local_or_shuffle(self) -> Stream:
        """Keep tuples in their partition (Spark's tasks are local); a hint shuffles."""
        return repartition(self, Partitioning.LOCAL_OR_SHUFFLE)

    def partition_by(self, fields: Fields) -> Stream:
        """Hash partition on ``fields``: every key in exactly one partition."""
        return repartition(self, Partitioning.PARTITION_BY, fields)

    def global_(self) -> Stream:
        """Put the whole batch in one partition (Trident's ``global()``)."""
        return repartition(self, Partitioning.GLOBAL)

    def batch_global(self) -> Stream:
        """Put each batch in one partition (a batch runs alone: one partition)."""
        return repartition(self, Partitioning.BATCH_GLOBAL)

    def broadcast(self) -> Stream:
        """Let the next operation see every tuple of the batch (one partition, no copies)."""
        return repartition(self, Partitioning.BROADCAST)

    def identity_partition(self) -> Stream:
        """Keep every tuple in its partition (partition i feeds partition i)."""
        return repartition(self, Partitioning.IDENTITY)

    parallelism_hint = parallelism_hint
    """Run the operations since the last repartitioning in ``n`` Spark partitions."""

    # -- per-partition comparisons (see trident_assets.stream.comparison) -------------------

    def min_by(self, field: str, comparator: Comparator | None = None) -> Stream:
        """The tuple with the smallest ``field`` of each partition (nulls skipped, ties: later)."""
        return declare_comparison(self, field, comparator, largest=False)

    def max_by(self, field: str, comparator: Comparator | None = None) -> Stream:
        """The tuple with the largest ``field`` of each partition (nulls skipped, ties: later)."""
        return declare_comparison(self, field, comparator, largest=True)

    def min(self, comparator: Comparator) -> Stream:
        """The smallest tuple of each partition by ``comparator(a, b)`` over whole tuples."""
        return declare_comparison(self, None, comparator, largest=False)

    def max(self, comparator: Comparator) -> Stream:
        """The largest tuple of each partition by ``comparator(a, b)`` over whole tuples."""
        return declare_comparison(self, None, comparator, largest=True)

    # -- peek, chained_agg, name -----------------------------------------------------------

    def peek(self, fn: Any) -> Stream:
        """Call ``fn(*values)`` for each tuple on the executors; tuples pass through unchanged.

        ``fn`` runs each time Spark computes the stream (again when a batch is replayed).

        Raises:
            ConfigError: ``fn`` is not callable.
        """
        if not callable(fn):
            msg = f"peek needs a callable fn(*values), got {fn!r}"
            raise ConfigError(msg)
        return self.derive("peek", self.fields, function=fn)

    def chained_agg(self) -> ChainedAggregatorDeclarer[Stream]:
        """Several aggregators in one pass: ``.aggregate(...)...chain_end()``."""
        return ChainedAggregatorDeclarer(self, ())

    def name(self, label: str) -> Stream:
        """Label the operations declared from the returned stream on (Trident's ``name``).

        Error messages (and the UI) name those operations by ``label``; it carries on to
        later operations until renamed.

        Raises:
            ConfigError: ``label`` is not a non-empty single-line string of at most 100
                characters.
        """
        if (
            not isinstance(label, str)
            or not label.strip()
            or len(label) > 100
            or not label.isprintable()
        ):
            msg = f"name needs a non-empty one-line label of at most 100 characters, got {label!r}"
            raise ConfigError(msg)
        stream = Stream(self.topology, self.node)
        stream._name = label
        return stream

"""Declaring a topology: ``TridentTopology``, ``Stream``, ``GroupedStream``, ``TridentState``.

Declaration is pure: it validates field names and the exactly-once compatibility of spouts
and states, and builds a graph of nodes. :mod:`trident_assets.spark.executor` runs the graph
for one batch on Spark.

Example:
    >>> from trident_assets.stream.topology import TridentTopology, StateSpec
    >>> from trident_assets.stream.operations import Split
    >>> from trident_assets.core.aggregators import Count
    >>> topo = TridentTopology("word_count")
    >>> # spout: e.g. LogSpout("sentences", StringScheme("sentence"))
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trident_assets.core.aggregators import CombinerAggregator, ReducerAggregator
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError
from trident_assets.spouts.config import SpoutKind, validate_name
from trident_assets.stream.batch_join import JoinType, merge_selections, plan_join
from trident_assets.stream.chained import ChainedAggregatorDeclarer
from trident_assets.stream.comparison import Comparator, declare_comparison
from trident_assets.stream.fields import as_fields, check_distinct, require_fields
from trident_assets.stream.operations import Filter, FlatMapFunction, Function, MapFunction
from trident_assets.stream.partitioning import Partitioning, parallelism_hint, repartition
from trident_assets.stream.queries import QueryFunction, TupleCollectionGet

__all__ = [
    "ExactlyOnceWarning",
    "GroupedStream",
    "PersistedState",
    "StateSpec",
    "StateUpdater",
    "Stream",
    "TridentState",
    "TridentTopology",
]


class ExactlyOnceWarning(UserWarning):
    """A topology combines a spout and a state in a way that cannot be exactly-once."""


@dataclass(frozen=True, slots=True)
class StateSpec:
    """Which state a persist writes: its name (unique in the topology) and replay guarantee."""

    name: str
    state_type: StateType = StateType.OPAQUE

    def __post_init__(self) -> None:
        """Validate the name."""
        validate_name("state", self.name)

    @classmethod
    def opaque(cls, name: str) -> StateSpec:
        """An opaque state: exactly-once with transactional and opaque spouts."""
        return cls(name, StateType.OPAQUE)

    @classmethod
    def transactional(cls, name: str) -> StateSpec:
        """A transactional state: exactly-once with transactional spouts only."""
        return cls(name, StateType.TRANSACTIONAL)

    @classmethod
    def non_transactional(cls, name: str) -> StateSpec:
        """A non-transactional state: at-least-once (replays count twice)."""
        return cls(name, StateType.NON_TRANSACTIONAL)


class StateUpdater:
    """Applies a whole batch to a state (``partition_persist``), in bulk.

    Subclasses implement :meth:`update_state`; it receives the state's store, the table
    name, the batch as a pyarrow Table of the input fields, and the txid, runs inside the
    batch's commit transaction, and returns the new-values rows (a pyarrow Table) or None.
    """

    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> Any:
        """Apply ``batch`` to the state; return the new-values rows or None."""
        msg = f"{type(self).__name__} must implement update_state(store, table, batch, txid)"
        raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class PersistedState:
    """What a QueryFunction's ``batch_retrieve`` gets for a ``partition_persist`` state.

    A StateUpdater keeps its state in tables of its own design, so a query reads them
    through the store (one bulk statement per batch), as committed before the batch.
    """

    store: Any
    """The state store (e.g. a DuckDBStore: ``store.conn``, ``store.registered(arrow)``)."""
    table: str
    """The table name the StateUpdater was given."""


@dataclass(eq=False)
class Node:
    """A node of the topology graph."""

    kind: str
    fields: tuple[str, ...]
    parents: tuple[Node, ...] = ()
    args: dict[str, Any] = field(default_factory=dict)

    def spout_kinds(self) -> set[SpoutKind]:
        """The kinds of every spout upstream of this node."""
        if self.kind == "spout":
            return {self.args["spout"].config.kind}
        kinds: set[SpoutKind] = set()
        for parent in self.parents:
            kinds |= parent.spout_kinds()
        if self.kind == "new_values":
            kinds |= self.args["state"].node.spout_kinds()
        return kinds

    @property
    def label(self) -> str:
        """How errors name this operation: its ``name``, else its kind, inputs and fields."""
        named = self.args.get("name")
        if named:
            return f"{self.kind} {named!r}"
        inputs = self.args.get("inputs")
        head = f"{self.kind}({', '.join(inputs)})" if inputs else self.kind
        return f"{head} -> {', '.join(self.fields)}"


class TridentTopology:
    """A named graph of streams and states; one partition of its assets is one txid."""

    def __init__(self, name: str, *, strict: bool = False) -> None:
        """Declare topology ``name``; ``strict`` turns exactly-once warnings into errors."""
        self.name = validate_name("topology", name)
        self.strict = strict
        self.spouts: dict[str, Node] = {}
        self.states: dict[str, TridentState] = {}
        self.queries: list[Stream] = []
        self.outputs: dict[str, Stream] = {}
        self.static_states: dict[str, TridentState] = {}
        """States queries read but nothing in the topology writes (``new_static_state``)."""

    def new_stream(self, spout_id: str, spout: Any) -> Stream:
        """A stream of the batches a spout emits; ``spout_id`` names its offset metadata."""
        validate_name("spout", spout_id)
        if spout_id in self.spouts:
            msg = f"topology {self.name!r} already has a spout {spout_id!r}; spout ids are unique"
            raise ConfigError(msg)
        node = Node("spout", tuple(spout.fields), args={"spout_id": spout_id, "spout": spout})
        self.spouts[spout_id] = node
        return Stream(self, node)

    def single_join(
        self,
        name: str,
        streams: Sequence[Stream],
        *,
        out_fields: str | Sequence[str],
        join_fields: str | Sequence[str] | None = None,
        sides: Sequence[str] | None = None,
        timeout_batches: int | None = None,
        timeout_s: float | None = None,
        num_buckets: int = 3,
        on_duplicate: str = "error",
        event_time: str | None = None,
    ) -> Stream:
        """Join ``streams`` on their common fields across batches (Storm's SingleJoinBolt).

        Halves wait in state ``name`` (committed with the batch, so replays neither lose nor
        duplicate a join) until every side of their key has arrived; the joined tuples carry
        ``out_fields``, each from the first input that has it. Halves older than
        ``timeout_batches`` batches / ``timeout_s`` of ``event_time`` expire with Storm's
        bucket rotation (between the timeout and timeout x buckets/(buckets-1) after their
        first arrival) into output ``<name>_expired``. A side arriving twice for a pending
        key raises (``on_duplicate="error"``) or replaces it (``"keep_latest"``). ``sides``
        names the inputs (default: their spout ids). See :mod:`trident_assets.stream.single_join`.

        Raises:
            ConfigError: an invalid declaration (checked before anything runs).
        """
        from trident_assets.stream.single_join import declare_single_join

        return declare_single_join(
            self,
            name,
            streams,
            out_fields=out_fields,
            join_fields=join_fields,
            sides=sides,
            timeout_batches=timeout_batches,
            timeout_s=timeout_s,
            num_buckets=num_buckets,
            on_duplicate=on_duplicate,  # type: ignore[arg-type]
            event_time=event_time,
        )

    def new_static_state(self, name: str, source: Any) -> TridentState:
        """A state that queries read and nothing in the topology writes (``newStaticState``).

        ``source`` is a StaticTable (a table of the store) or a StaticFile (loaded once).
        """
        from trident_assets.stream.static_state import StaticSource, StaticState

        if not isinstance(source, StaticSource):
            msg = f"new_static_state needs a StaticTable or StaticFile, got {source!r}"
            raise ConfigError(msg)
        state = StaticState(self, name, source)
        if name in self.states or name in self.static_states:
            msg = f"topology {self.name!r} already has a state {name!r}"
            raise ConfigError(msg)
        self.static_states[name] = state
        return state

    def _own(self, streams: Sequence[Stream], operation: str) -> None:
        for s in streams:
            if not isinstance(s, Stream) or s.topology is not self:
                msg = f"{operation}: {s!r} is not a stream of topology {self.name!r}"
                raise ConfigError(msg)

    def merge(self, *streams: Stream, fields: str | Sequence[str] | None = None) -> Stream:
        """The tuples of every stream in one stream, per batch (Trident's ``merge``).

        Streams must have the first stream's fields (aligned by name); with ``fields`` they
        are aligned by position and renamed.
        """
        self._own(streams, "merge")
        outs, selections = merge_selections([s.fields for s in streams], fields)
        node = Node("merge", outs, tuple(s.node for s in streams), {"selections": selections})
        return Stream(self, node)

    def join(
        self,
        streams: Sequence[Stream],
        join_fields: str | Sequence[str] | Sequence[Sequence[str]],
        out_fields: str | Sequence[str],
        how: str | JoinType | Sequence[str | JoinType] = "inner",
    ) -> Stream:
        """Join streams on key fields within each batch (Trident's ``join``, COMPACT output).

        ``how``: ``"inner"``, ``"outer"``, ``"left"`` (first stream INNER, the others OUTER)
        or one JoinType per stream. Output: the join fields, then each stream's other
        fields, named by ``out_fields``.
        """
        self._own(streams, "join")
        plan = plan_join([s.fields for s in streams], join_fields, out_fields, how)
        node = Node("join", plan.out_fields, tuple(s.node for s in streams), {"plan": plan})
        return Stream(self, node)

    def _register_state(self, state: TridentState) -> None:
        if state.spec.name in self.states or state.spec.name in self.static_states:
            msg = f"topology {self.name!r} already has a state {state.spec.name!r}"
            raise ConfigError(msg)
        self.states[state.spec.name] = state

    def check_exactly_once(self, spec: StateSpec, node: Node) -> None:
        """Warn (or raise in strict mode) if ``spec`` fed by ``node`` cannot be exactly-once."""
        kinds = node.spout_kinds()
        problems = []
        if spec.state_type is StateType.NON_TRANSACTIONAL:
            problems.append("a non-transactional state counts replays twice")
        if SpoutKind.NON_TRANSACTIONAL in kinds:
            problems.append("a non-transactional spout cannot replay a batch")
        if spec.state_type is StateType.TRANSACTIONAL and SpoutKind.OPAQUE in kinds:
            problems.append(
                "a transactional state with an opaque spout skips a replayed batch that may differ"
            )
        if not problems:
            return
        msg = (
            f"state {spec.name!r} of topology {self.name!r} is not exactly-once: "
            + "; ".join(problems)
            + ". Use an opaque state (works with transactional and opaque spouts)."
        )
        if self.strict:
            raise ConfigError(msg)
        warnings.warn(msg, ExactlyOnceWarning, stacklevel=3)


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

    def _derive(self, kind: str, fields: Sequence[str], **args: Any) -> Stream:
        if self._name is not None:
            args.setdefault("name", self._name)
        stream = Stream(self.topology, Node(kind, tuple(fields), (self.node,), args))
        stream._name = self._name
        return stream

    def each(
        self,
        inputs: str | Sequence[str],
        op: Function | Filter,
        outputs: str | Sequence[str] = (),
    ) -> Stream:
        """Apply a Function (appends ``outputs``) or a Filter (keeps matching tuples)."""
        ins = as_fields(inputs, "each inputs")
        require_fields(ins, self.fields, "each")
        if isinstance(op, Filter):
            if outputs:
                msg = "each with a Filter takes no output fields"
                raise ConfigError(msg)
            return self._derive("filter", self.fields, inputs=ins, filter=op)
        outs = as_fields(outputs, "each outputs")
        check_distinct(outs, self.fields, "each")
        op.validate(ins, outs)
        return self._derive("each", (*self.fields, *outs), inputs=ins, function=op, outputs=outs)

    def filter(self, op: Filter, inputs: str | Sequence[str] | None = None) -> Stream:
        """Keep tuples for which ``op`` holds (over ``inputs``, default all fields)."""
        return self.each(self.fields if inputs is None else inputs, op)

    def project(self, fields: str | Sequence[str]) -> Stream:
        """Keep only ``fields``, in that order."""
        keep = as_fields(fields, "project")
        require_fields(keep, self.fields, "project")
        return self._derive("project", keep)

    def map(self, function: MapFunction, outputs: str | Sequence[str] | None = None) -> Stream:
        """Replace each tuple by one tuple of ``outputs`` (default: the same fields)."""
        return self._fresh("map", MapFunction, function, outputs)

    def flat_map(
        self, function: FlatMapFunction, outputs: str | Sequence[str] | None = None
    ) -> Stream:
        """Replace each tuple by zero or more tuples of ``outputs`` (default: the same fields)."""
        return self._fresh("flat_map", FlatMapFunction, function, outputs)

    def _fresh(self, kind: str, expected: type, function: Any, outputs: Any) -> Stream:
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
        return self._derive(kind, outs, function=function)

    def partition_aggregate(
        self,
        inputs: str | Sequence[str],
        agg: CombinerAggregator[Any] | ReducerAggregator[Any],
        outputs: str | Sequence[str],
    ) -> Stream:
        """Aggregate each Spark partition of the batch to one tuple (``partitionAggregate``).

        See :meth:`GroupedStream.partition_aggregate`.
        """
        return GroupedStream(self, ()).partition_aggregate(inputs, agg, outputs)

    def apply_assembly(self, assembly: Any) -> Stream:
        """Apply an Assembly such as ``FirstN`` (Trident's ``applyAssembly``)."""
        return assembly.apply(self)

    def as_output(self, name: str) -> Stream:
        """Keep this stream's tuples of every batch as output ``name`` (an asset in Dagster)."""
        validate_name("output", name)
        if name in self.topology.outputs:
            msg = f"topology {self.topology.name!r} already has an output {name!r}"
            raise ConfigError(msg)
        self.topology.outputs[name] = self
        return self

    def group_by(self, fields: str | Sequence[str]) -> GroupedStream:
        """Group by ``fields`` for aggregation, persistence or queries."""
        group = as_fields(fields, "group_by")
        require_fields(group, self.fields, "group_by")
        return GroupedStream(self, group)

    def aggregate(
        self,
        inputs: str | Sequence[str],
        agg: CombinerAggregator[Any] | ReducerAggregator[Any],
        outputs: str | Sequence[str],
    ) -> Stream:
        """Aggregate the whole batch to exactly one tuple.

        An empty batch emits ``zero()`` of a combiner, ``init()`` of a reducer.
        """
        return GroupedStream(self, ()).aggregate(inputs, agg, outputs)

    def persistent_aggregate(
        self,
        spec: StateSpec,
        inputs: str | Sequence[str],
        agg: CombinerAggregator[Any] | ReducerAggregator[Any],
        output: str,
    ) -> TridentState:
        """Aggregate every batch into one global value kept in state ``spec``."""
        return GroupedStream(self, ()).persistent_aggregate(spec, inputs, agg, output)

    def partition_persist(
        self,
        spec: StateSpec,
        inputs: str | Sequence[str],
        updater: StateUpdater,
        outputs: str | Sequence[str] = (),
    ) -> TridentState:
        """Hand each whole batch (``inputs`` fields) to ``updater`` under the batch txid."""
        ins = as_fields(inputs, "partition_persist inputs")
        require_fields(ins, self.fields, "partition_persist")
        outs = as_fields(outputs, "partition_persist outputs")
        self.topology.check_exactly_once(spec, self.node)
        node = Node(
            "persist", outs, (self.node,), {"inputs": ins, "updater": updater, "spec": spec}
        )
        state = TridentState(self.topology, spec, node, group=(), value_field=None)
        self.topology._register_state(state)
        return state

    def state_query(
        self,
        state: TridentState,
        inputs: str | Sequence[str],
        query: QueryFunction,
        output: str | Sequence[str],
    ) -> Stream:
        """Append ``output``: ``query`` over ``state`` with one bulk lookup per batch.

        The query reads the state as committed before this batch (Trident's batch phase).
        ``TupleCollectionGet`` appends several fields (the state's keys and value, named by
        ``output``) and emits one tuple per (input tuple, state tuple) pair.
        """
        ins = as_fields(inputs, "state_query inputs")
        require_fields(ins, self.fields, "state_query")
        if isinstance(query, TupleCollectionGet):
            return self._all_tuples_query(state, ins, query, output)
        (out,) = as_fields(output, "state_query output")
        check_distinct((out,), self.fields, "state_query")
        if state.topology is not self.topology:
            msg = f"state {state.spec.name!r} belongs to another topology"
            raise ConfigError(msg)
        stream = self._derive(
            "query", (*self.fields, out), inputs=ins, query=query, state=state, output=out
        )
        self.topology.queries.append(stream)
        return stream

    def _all_tuples_query(
        self,
        state: TridentState,
        ins: tuple[str, ...],
        query: TupleCollectionGet,
        output: str | Sequence[str],
    ) -> Stream:
        if state.topology is not self.topology:
            msg = f"state {state.spec.name!r} belongs to another topology"
            raise ConfigError(msg)
        outs = query.output_fields(state, output)
        check_distinct(outs, self.fields, "state_query")
        stream = self._derive(
            "query", (*self.fields, *outs), inputs=ins, query=query, state=state, outputs=outs
        )
        self.topology.queries.append(stream)
        return stream

    # -- repartitioning (see trident_assets.stream.partitioning) ----------------------------

    def shuffle(self) -> Stream:
        """Spread the tuples round robin over the partitions (Spark ``repartition(n)``)."""
        return repartition(self, Partitioning.SHUFFLE)

    def local_or_shuffle(self) -> Stream:
        """Keep tuples in their partition (Spark's tasks are local); a hint shuffles."""
        return repartition(self, Partitioning.LOCAL_OR_SHUFFLE)

    def partition_by(self, fields: str | Sequence[str]) -> Stream:
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

    def parallelism_hint(self, n: int) -> Stream:
        """Run the operations since the last repartitioning in ``n`` Spark partitions."""
        return parallelism_hint(self, n)

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
        return self._derive("peek", self.fields, function=fn)

    def chained_agg(self) -> ChainedAggregatorDeclarer:
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


class GroupedStream:
    """A stream grouped by key fields."""

    def __init__(self, stream: Stream, group: tuple[str, ...]) -> None:
        """Group ``stream`` by ``group``."""
        self.stream = stream
        self.group = group

    def aggregate(
        self,
        inputs: str | Sequence[str],
        agg: CombinerAggregator[Any] | ReducerAggregator[Any],
        outputs: str | Sequence[str],
    ) -> Stream:
        """Aggregate each group of the batch: emits ``group + outputs`` per group.

        Combiners combine per-partition partials; reducers fold every tuple of a group.
        Python aggregators declare ``output_type`` (the SQL type of their result).
        """
        from trident_assets.spark.stream_ops import check_partition_aggregator

        ins = as_fields(inputs, "aggregate inputs")
        require_fields(ins, self.stream.fields, "aggregate")
        outs = as_fields(outputs, "aggregate outputs")
        if len(outs) != 1:
            msg = f"aggregate emits one field per aggregator, got {list(outs)}"
            raise ConfigError(msg)
        check_distinct(outs, self.group, "aggregate")
        check_partition_aggregator(agg, ins)
        return self.stream._derive(
            "aggregate", (*self.group, *outs), inputs=ins, agg=agg, group=self.group, output=outs[0]
        )

    def partition_aggregate(
        self,
        inputs: str | Sequence[str],
        agg: CombinerAggregator[Any] | ReducerAggregator[Any],
        outputs: str | Sequence[str],
    ) -> Stream:
        """Aggregate each group within each Spark partition: ``group + outputs`` per pair.

        Partition boundaries are Spark's, so results differ from ``aggregate`` by design
        (one tuple per non-empty partition and group; an empty batch emits nothing).
        """
        from trident_assets.spark.stream_ops import check_partition_aggregator

        ins = as_fields(inputs, "partition_aggregate inputs")
        require_fields(ins, self.stream.fields, "partition_aggregate")
        outs = as_fields(outputs, "partition_aggregate outputs")
        if len(outs) != 1:
            msg = f"partition_aggregate emits one field per aggregator, got {list(outs)}"
            raise ConfigError(msg)
        check_distinct(outs, self.group, "partition_aggregate")
        check_partition_aggregator(agg, ins)
        return self.stream._derive(
            "partition_aggregate",
            (*self.group, *outs),
            inputs=ins,
            agg=agg,
            group=self.group,
            output=outs[0],
        )

    def apply_assembly(self, assembly: Any) -> Stream:
        """Apply an Assembly per group (e.g. ``FirstN`` of each group)."""
        return assembly.apply(self.stream, self.group)

    def persistent_aggregate(
        self,
        spec: StateSpec,
        inputs: str | Sequence[str],
        agg: CombinerAggregator[Any] | ReducerAggregator[Any],
        output: str,
    ) -> TridentState:
        """Aggregate each batch per group into state ``spec`` under the batch txid.

        Combiners combine partials in Spark before the state is touched; reducers see
        every tuple of a group. The new values stream carries ``group + [output]``.

        Raises:
            ConfigError: a combiner with more than one input field, or bad names.
        """
        ins = as_fields(inputs, "persistent_aggregate inputs")
        require_fields(ins, self.stream.fields, "persistent_aggregate")
        (out,) = as_fields(output, "persistent_aggregate output")
        check_distinct((out,), self.group, "persistent_aggregate")
        if isinstance(agg, CombinerAggregator) and len(ins) > 1:
            msg = f"combiner aggregators take a single input field, got {list(ins)}"
            raise ConfigError(msg)
        if not isinstance(agg, CombinerAggregator | ReducerAggregator):
            msg = (
                f"persistent_aggregate needs a CombinerAggregator or ReducerAggregator, got {agg!r}"
            )
            raise ConfigError(msg)
        topo = self.stream.topology
        topo.check_exactly_once(spec, self.stream.node)
        node = Node(
            "persist",
            (*self.group, out),
            (self.stream.node,),
            {"inputs": ins, "agg": agg, "group": self.group, "output": out, "spec": spec},
        )
        state = TridentState(topo, spec, node, group=self.group, value_field=out)
        topo._register_state(state)
        return state

    def state_query(
        self,
        state: TridentState,
        inputs: str | Sequence[str],
        query: QueryFunction,
        output: str | Sequence[str],
    ) -> Stream:
        """Query ``state`` for each tuple (the grouping only routes tuples, as in Trident)."""
        return self.stream.state_query(state, inputs, query, output)

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        """Several aggregators per group in one pass; emits ``group + outputs``."""
        return ChainedAggregatorDeclarer(self.stream, self.group)


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

    def new_values_stream(self) -> Stream:
        """The (key..., new value) tuples each batch produced."""
        return Stream(self.topology, Node("new_values", self.node.fields, (), {"state": self}))

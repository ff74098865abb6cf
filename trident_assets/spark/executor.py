"""Running one batch (one txid) of a topology on Spark and committing it to the state store.

Order of work for batch ``txid`` (Trident's batch phase, then its commit phase):

1. If the topology already committed ``txid``: nothing runs; the outcome says so.
2. Each spout's coordinator fixes the batch's offset ranges; Spark reads them in parallel
   and the scheme decodes them (failed records become dead letters).
3. Spark computes every stream; each state gets its per-key partials (combined in Spark);
   queries read the state as committed before this batch, with one bulk lookup.
4. ONE store transaction applies every state (one set-based statement each), records the
   new values, outputs and dead letters, makes the spout ranges final, and marks ``txid``
   committed. A crash anywhere leaves the old state or the new, never a mix.

Data moves between Spark and DuckDB only as Arrow tables (``DataFrame.toArrow()``).

:meth:`TopologyRunner.run_batches` pipelines consecutive txids (Trident's max spout pending):
steps 2-3 of a chunk of txids run as one Spark job (:mod:`trident_assets.spark.pipelined`),
the next chunk's job runs while this one commits, and step 4 stays one transaction per txid,
in txid order.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from trident_assets.backends.compaction import CompactionPolicy, maybe_compact
from trident_assets.backends.duckdb_merge import apply_partials, apply_partials_python
from trident_assets.backends.duckdb_spout_meta import DuckDBSpoutMetaStore
from trident_assets.backends.duckdb_store import DuckDBStore, sql_to_arrow
from trident_assets.core.aggregators import ReducerAggregator, apply_reducer
from trident_assets.core.caching import GLOBAL_KEY
from trident_assets.core.commit import commit_batch, decide_commit
from trident_assets.core.maps import NonTransactionalMap, OpaqueMap, TransactionalMap
from trident_assets.core.user_code import call_batch, from_worker_message, guard
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError, TridentError
from trident_assets.spark import stream_ops
from trident_assets.spark.aggregation import combine_partials, is_sql_combiner, reduce_groups
from trident_assets.spark.code_shipping import ship_package, ship_user_modules, topology_code
from trident_assets.spark.pipelined import (
    NodeFrames,
    PipelinedRun,
    all_nodes,
    chunk_pipelinable,
    empty_arrow,
    global_partials,
    live_spouts,
    pipelinable,
)
from trident_assets.spark.tuple_collection import all_tuples_query
from trident_assets.spouts.coordinator import BatchCoordinator
from trident_assets.spouts.ranges import BatchPlan
from trident_assets.stream.queries import MapGet, SnapshotGet, TupleCollectionGet
from trident_assets.stream.single_join import (
    SINGLE_JOIN,
    SINGLE_JOIN_EXPIRED,
    apply_join_state,
    join_batch_table,
)
from trident_assets.stream.topology import Node, PersistedState, TridentState, TridentTopology

__all__ = ["BatchOutcome", "StateOutcome", "TopologyRunner"]

GLOBAL_COLUMN = "key"
"""Key column of an ungrouped (global) state."""
DEAD_LETTERS = "_trident_dead_letters"
NEW_VALUES_KEPT = 50
"""How many recent txids of new values and outputs each table keeps."""
DEFAULT_COMPACTION = CompactionPolicy()
DEFAULT_MAX_SPOUT_PENDING = 10
"""How many consecutive txids may share one Spark job (Trident's ``max.spout.pending``)."""
_EMPTY_KEEPING = frozenset(
    {"each", "filter", "project", "query", "map", "flat_map", "first_n", "merge", "join"}
    | {"peek", "repartition", "comparison"}
)
"""Node kinds whose output is empty when every input is."""

Fault = Callable[[str], None]
"""Called at named points of a batch (``after_emit``, ``after_state_write``,
``before_commit``); the chaos tests kill the process there."""


@dataclass(frozen=True, slots=True)
class StateOutcome:
    """What a batch did to one state."""

    name: str
    table: str
    keys_in: int
    keys_updated: int
    keys_skipped: int
    size: int


@dataclass(slots=True)
class BatchOutcome:
    """The result of :meth:`TopologyRunner.run_batch`."""

    topology: str
    txid: int
    applied: bool
    """False when the txid had committed before: nothing changed."""
    plans: dict[str, BatchPlan] = field(default_factory=dict)
    tuples_in: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    dead_letters_by_spout: dict[str, int] = field(default_factory=dict)
    states: dict[str, StateOutcome] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    compacted: dict[str, int] = field(default_factory=dict)
    """Superseded rows dropped per state table by compaction after the commit."""
    pipelined: int = 1
    """How many txids shared this batch's Spark job (1: it ran alone)."""


class TopologyRunner:
    """Runs batches of one topology against a Spark session, a log and a DuckDB store."""

    def __init__(
        self,
        topology: TridentTopology,
        spark: Any,
        store: DuckDBStore,
        log: Any,
        *,
        fault: Fault | None = None,
        compaction: CompactionPolicy | None = DEFAULT_COMPACTION,
        max_spout_pending: int = DEFAULT_MAX_SPOUT_PENDING,
    ) -> None:
        """Bind the topology to its runtime resources.

        ``compaction``: when to compact a state's versioned log after a batch commits
        (None: never; :meth:`DuckDBStore.compact` by hand). ``max_spout_pending``: how many
        consecutive txids :meth:`run_batches` may process in one Spark job (1: one by one).
        """
        if max_spout_pending < 1:
            msg = f"max_spout_pending must be >= 1, got {max_spout_pending}"
            raise ConfigError(msg)
        self.compaction = compaction
        self.max_spout_pending = max_spout_pending
        self.pipelinable = pipelinable(topology)
        self.topology = topology
        self.spark = spark
        self.store = store
        self.log = log
        self.fault = fault or (lambda _point: None)
        self.meta = DuckDBSpoutMetaStore(store)
        ship_package(spark)
        ship_user_modules(topology_code(all_nodes(topology)))
        self._ensure_tables()

    @property
    def scope(self) -> str:
        """The commit scope: the topology name."""
        return self.topology.name

    def last_committed(self) -> int | None:
        """The last committed txid of the topology."""
        return self.store.last_committed(self.scope)

    def coordinator(self, spout_id: str) -> BatchCoordinator:
        """The batch coordinator of one spout."""
        spout = self.topology.spouts[spout_id].args["spout"]
        return BatchCoordinator(
            self.topology.name, spout_id, spout.source(self.log), spout.config, self.meta
        )

    def backlog(self) -> int:
        """Records available to the next batch across all spouts (before batch-size limits)."""
        total = 0
        for spout_id, node in self.topology.spouts.items():
            source = node.args["spout"].source(self.log)
            done = self.meta.latest_before(self.topology.name, spout_id, 1 << 62, True)
            for partition in source.partitions():
                prev = done.get(partition)
                start = source.earliest(partition) if prev is None else prev.next_offset
                total += max(0, source.latest(partition) - start)
        return total

    def run_batch(self, txid: int) -> BatchOutcome:
        """Process and commit batch ``txid`` exactly once.

        Raises:
            OutOfOrderCommitError: an earlier txid has not committed; nothing was read.
            BatchUnavailableError: a transactional replay can no longer be read.
        """
        with contextlib.closing(self.run_batches([txid])) as outcomes:
            return next(outcomes)

    def run_batches(self, txids: Iterable[int]) -> Iterator[BatchOutcome]:
        """Process and commit ``txids`` (ascending) exactly once each, yielding each outcome.

        Consecutive txids share one Spark job, up to ``max_spout_pending`` at a time, when
        the topology allows (see :mod:`trident_assets.spark.pipelined`); every txid still
        commits on its own, in order, in its own transaction, and is yielded once it has.
        A txid committed before yields an outcome with ``applied=False``.

        Raises:
            OutOfOrderCommitError: an earlier txid has not committed; nothing was read.
            BatchUnavailableError: a transactional replay can no longer be read.
        """
        with _user_code_errors():
            yield from self._run_batches(list(txids))

    def _run_batches(self, ordered: list[int]) -> Iterator[BatchOutcome]:
        i = 0
        ahead: _Chunk | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trident-spark") as pool:
            try:
                while i < len(ordered):
                    chunk, ahead = ahead, None
                    if chunk is None:
                        txid = ordered[i]
                        started = time.perf_counter()
                        last = self.last_committed()
                        if last is not None and txid <= last:
                            yield BatchOutcome(self.scope, txid, False, self._committed_plans(txid))
                            i += 1
                            continue
                        decide_commit(self.scope, last, txid)
                        batches, pipelined = self._emit(txid, self._limit(ordered, i))
                        emit_s = time.perf_counter() - started
                        self.fault("after_emit")
                        if not pipelined:
                            yield self._run_alone(*batches[0], emit_s)
                            i += 1
                            continue
                        chunk = self._start(pool, batches, emit_s)
                    prepared = chunk.future.result()
                    spark_s = (time.perf_counter() - chunk.t_spark) / len(chunk.batches)
                    ahead = self._start_next(pool, chunk, ordered, i + len(chunk.batches))
                    for outcome in self._commit_chunk(chunk, prepared, spark_s):
                        yield outcome
                        i += 1
                        if not outcome.applied:  # another attempt committed it: re-plan
                            _settle(ahead)
                            ahead = None
                            break
            finally:
                _settle(ahead)

    def _limit(self, ordered: list[int], i: int) -> int:
        """How many consecutive txids from ``ordered[i]`` one chunk may take."""
        limit = 1
        while (
            limit < self.max_spout_pending
            and i + limit < len(ordered)
            and ordered[i + limit] == ordered[i] + limit
        ):
            limit += 1
        return limit

    def _coordinators(self) -> dict[str, BatchCoordinator]:
        return {sid: self.coordinator(sid) for sid in self.topology.spouts}

    def _emit(self, txid: int, limit: int) -> tuple[list[tuple[int, dict[str, BatchPlan]]], bool]:
        """Plan a chunk from ``txid``: up to ``limit`` txids that can share one Spark job.

        Returns the chunk and True, or ``[(txid, plans)]`` and False when ``txid`` must run
        alone (the one-batch path).
        """
        coordinators = self._coordinators()
        first = [(txid, {sid: c.emit(txid) for sid, c in coordinators.items()})]
        batches = self._extend(coordinators, list(first), limit)
        return (first, False) if batches is None else (batches, True)

    def _extend(
        self,
        coordinators: dict[str, BatchCoordinator],
        batches: list[tuple[int, dict[str, BatchPlan]]],
        limit: int,
    ) -> list[tuple[int, dict[str, BatchPlan]]] | None:
        """Add successors to a one-batch chunk while they can share its Spark job.

        A successor's plan continues from its predecessor's (as Trident's emitter keeps the
        last batch's metadata in memory); transactional ranges are recorded as planned.
        """
        live = live_spouts(batches[0][1])
        if not self.pipelinable or not chunk_pipelinable(self.topology, live):
            return None
        while len(batches) < limit:
            txid, previous = batches[-1]
            plans = {sid: c.emit_after(previous[sid]) for sid, c in coordinators.items()}
            live |= live_spouts(plans)
            if not chunk_pipelinable(self.topology, live):
                break
            batches.append((txid + 1, plans))
        return batches

    def _start(
        self,
        pool: ThreadPoolExecutor,
        batches: list[tuple[int, dict[str, BatchPlan]]],
        emit_s: float,
    ) -> _Chunk:
        """Build the chunk's DataFrames here, run its Spark jobs in ``pool``."""
        t_spark = time.perf_counter()
        base = _BatchRun(self, *batches[0])
        work = PipelinedRun(self, batches, base).plan()
        return _Chunk(batches, emit_s, base, pool.submit(work), t_spark)

    def _start_next(
        self, pool: ThreadPoolExecutor, chunk: _Chunk, ordered: list[int], j: int
    ) -> _Chunk | None:
        """Plan and start the chunk after ``chunk`` (from ``ordered[j]``) before it commits.

        Trident keeps batches in flight while earlier ones commit; the next chunk's plans
        continue from ``chunk``'s last plans, and its Spark work overlaps these commits.
        """
        last_txid, last_plans = chunk.batches[-1]
        if j >= len(ordered) or ordered[j] != last_txid + 1:
            return None
        started = time.perf_counter()
        coordinators = self._coordinators()
        first = {sid: c.emit_after(last_plans[sid]) for sid, c in coordinators.items()}
        batches = self._extend(coordinators, [(last_txid + 1, first)], self._limit(ordered, j))
        if batches is None:
            return None
        emit_s = time.perf_counter() - started
        self.fault("after_emit")
        return self._start(pool, batches, emit_s)

    def _run_alone(self, txid: int, plans: dict[str, BatchPlan], emit_s: float) -> BatchOutcome:
        """The one-batch path: run every stream on Spark, then commit."""
        t_spark = time.perf_counter()
        run = _BatchRun(self, txid, plans)
        prepared = run.prepare()
        spark_s = time.perf_counter() - t_spark
        return self._commit_one(run, prepared, {"emit": emit_s, "spark": spark_s}, 1)

    def _commit_chunk(
        self, chunk: _Chunk, prepared: dict[int, _Prepared], spark_s: float
    ) -> Iterator[BatchOutcome]:
        """Commit the chunk's txids one by one, in order; stop at one that was not applied."""
        share = len(chunk.batches)
        for txid, plans in chunk.batches:
            run = _BatchRun(self, txid, plans)
            run.value_types = dict(chunk.base.value_types)
            timings = {"emit": chunk.emit_s / share, "spark": spark_s}
            outcome = self._commit_one(run, prepared[txid], timings, share)
            yield outcome
            if not outcome.applied:
                return

    def _commit_one(
        self, run: _BatchRun, prepared: _Prepared, timings: dict[str, float], share: int
    ) -> BatchOutcome:
        """Commit one txid in its own transaction, then compact what the policy says."""
        t_commit = time.perf_counter()
        result = commit_batch(self.store, self.scope, run.txid, lambda _tx: run.commit(prepared))
        outcome = (
            result.result
            if result.applied and result.result
            else BatchOutcome(self.scope, run.txid, False, run.plans)
        )
        timings["commit"] = time.perf_counter() - t_commit
        if outcome.applied and self.compaction is not None:
            t_compact = time.perf_counter()
            live = {s.table: s.size for s in outcome.states.values()}
            outcome.compacted = maybe_compact(self.store, live, self.compaction)
            timings["compact"] = time.perf_counter() - t_compact
        timings["total"] = sum(timings.values())
        outcome.timings_s = timings
        outcome.pipelined = share
        return outcome

    def _committed_plans(self, txid: int) -> dict[str, BatchPlan]:
        """The recorded ranges of committed ``txid`` (spouts whose ranges were cleaned up omitted).

        Read only: a committed batch is final, so nothing is planned, recorded or re-read.
        """
        plans: dict[str, BatchPlan] = {}
        for spout_id, node in self.topology.spouts.items():
            stored = self.meta.ranges(self.scope, spout_id, txid)
            if stored is not None and stored[1]:
                kind = node.args["spout"].config.kind
                plans[spout_id] = BatchPlan.of(
                    self.scope, spout_id, txid, kind, stored[0], replay=True
                )
        return plans

    def _ensure_tables(self) -> None:
        self.store.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {DEAD_LETTERS} (topology VARCHAR NOT NULL, "
            "spout VARCHAR NOT NULL, txid BIGINT NOT NULL, topic VARCHAR, partition INTEGER, "
            '"offset" BIGINT, reason VARCHAR NOT NULL, value BLOB)'
        )


@dataclass
class _Prepared:
    partials: dict[str, pa.Table]
    outputs: dict[str, pa.Table]
    dead: dict[str, pa.Table]
    tuples_in: dict[str, int]


@dataclass
class _Chunk:
    """Consecutive txids whose Spark work runs as one job (maybe while earlier ones commit)."""

    batches: list[tuple[int, dict[str, BatchPlan]]]
    emit_s: float
    base: _BatchRun
    """Builds the chunk's streams that receive no tuples; its value types type query results."""
    future: Future[dict[int, _Prepared]]
    t_spark: float


@contextlib.contextmanager
def _user_code_errors() -> Iterator[None]:
    """Re-raise a user function's failure on a Spark worker as the UserCodeError it was.

    Spark wraps it in its own exception with the worker's traceback; the batch failed and
    nothing was committed either way.
    """
    try:
        yield
    except TridentError:
        raise
    except Exception as exc:
        found = from_worker_message(str(exc))
        if found is None:
            raise
        raise found from exc


def _settle(chunk: _Chunk | None) -> None:
    """Wait for a chunk started ahead that will not commit (its result is dropped)."""
    if chunk is not None:
        with contextlib.suppress(Exception):  # its txids are re-planned and re-run later
            chunk.future.result()


class _BatchRun(NodeFrames):
    """The Spark side of one batch: lazily built DataFrames, memoised per node."""

    def __init__(self, runner: TopologyRunner, txid: int, plans: dict[str, BatchPlan]) -> None:
        self.runner = runner
        self.spark = runner.spark
        self.txid = txid
        self.plans = plans
        self.frames: dict[int, Any] = {}
        self.dead: dict[str, Any] = {}
        self.new_values: dict[str, pa.Table] = {}
        self.expired: dict[str, pa.Table] = {}
        """Expired halves of each single join this batch (its ``<join>_expired`` output)."""
        self.value_types: dict[str, pa.DataType] = {}
        """Arrow type of each combiner state's batch partials (typing empty query results)."""

    # -- building DataFrames ---------------------------------------------------------------

    def is_empty(self, node: Node) -> bool:
        """True when ``node`` certainly has no tuples this batch (its spouts read nothing)."""
        if node.kind == "spout":
            return self.plans[node.args["spout_id"]].record_count == 0
        if node.kind == "aggregate" and node.args["group"]:
            return self.is_empty(node.parents[0])
        return node.kind in _EMPTY_KEEPING and all(self.is_empty(p) for p in node.parents)

    def collect(self, node: Node) -> pa.Table:
        """The node's tuples as Arrow; an empty node costs no Spark job.

        Neither does a global SQL-combiner aggregate of an empty stream: its one row is
        ``agg.zero()``, as :func:`combine_partials` computes it.
        """
        frame = self.frame(node)
        if self.is_empty(node):
            return empty_arrow(frame)
        a = node.args
        if (
            node.kind == "aggregate"
            and not a["group"]
            and is_sql_combiner(a["agg"])
            and self.is_empty(node.parents[0])
        ):
            (field_,) = empty_arrow(frame).schema
            return pa.table({field_.name: pa.array([a["agg"].zero()], field_.type)})
        return frame.toArrow()

    def _build(self, node: Node) -> Any:
        a = node.args
        if node.kind == "spout":
            spout = a["spout"]
            raw = spout.read(self.spark, self.runner.log, self.plans[a["spout_id"]])
            good, dead = spout.scheme.decode(raw)
            self.dead[a["spout_id"]] = dead
            return good
        if node.kind == "new_values":
            state: TridentState = a["state"]
            return self.spark.createDataFrame(self.new_values[state.spec.name])
        if node.kind == SINGLE_JOIN_EXPIRED:
            return self.spark.createDataFrame(self.expired[a["state"].spec.name])
        if node.kind in stream_ops.NODE_KINDS:
            return stream_ops.build(node, [self.frame(p) for p in node.parents])
        parent = self.frame(node.parents[0])
        built = self.row_wise(node, parent)
        if built is not None:
            return built
        if node.kind == "aggregate":
            agg = guard(a["agg"], node.label)
            if isinstance(agg, ReducerAggregator):
                return reduce_groups(parent, a["group"], a["inputs"], agg, a["output"])
            return combine_partials(parent, a["group"], a["inputs"][0], agg, a["output"])
        if node.kind == "query":
            return self._query(parent, {**a, "parent": node.parents[0], "label": node.label})
        msg = f"cannot run node kind {node.kind!r}"
        raise AssertionError(msg)

    def _query(self, parent: Any, a: dict[str, Any]) -> Any:
        from pyspark.sql import functions as F

        state: TridentState = a["state"]
        store = self.runner.store
        if isinstance(a["query"], TupleCollectionGet):  # several outputs per input tuple
            feed = None if state.node.kind == "static_state" else state.node.parents[0]
            return all_tuples_query(
                self.spark,
                store,
                parent,
                a,
                empty=self.is_empty(a["parent"]),
                feed=None if feed is None else self.frame(feed),
                value_type=self._value_type(state),
            )
        out = a["output"]
        if state.node.kind == "static_state":
            return stream_ops.static_query(self.spark, store, parent, a)
        if isinstance(a["query"], SnapshotGet):
            value = _read_global(store, state)
            return parent.withColumn(out, F.lit(value))
        if self.is_empty(a["parent"]):
            return parent.withColumn(out, self._null_column(state))
        keys = parent.select(*a["inputs"]).distinct().toArrow()
        if isinstance(a["query"], MapGet) and store.layout(state.table) is not None:
            found = _bulk_lookup(store, state, keys, a["inputs"], out)
        else:
            read = (
                PersistedState(store, state.table)
                if "updater" in state.node.args
                else _read_state(store, state)
            )
            args = [tuple(row.values()) for row in keys.to_pylist()]
            query = a["query"]
            results = call_batch(a["label"], query.batch_retrieve, args, read, args)
            if len(results) != len(args):
                msg = (
                    f"{type(a['query']).__name__}.batch_retrieve returned {len(results)} results "
                    f"for {len(args)} inputs; it must return one result per input"
                )
                raise ValueError(msg)
            column = pa.array(results)
            known = self._value_type(state)
            if pa.types.is_null(column.type) and known is not None:
                column = column.cast(known)
            found = keys.append_column(out, column)
        if found.num_rows == 0:
            return parent.withColumn(out, self._null_column(state))
        lookup = self.spark.createDataFrame(found)
        return parent.join(F.broadcast(lookup), on=list(a["inputs"]), how="left")

    def _value_type(self, state: TridentState) -> pa.DataType | None:
        """The Arrow type of the state's values: stored layout, else this batch's partials."""
        layout = self.runner.store.layout(state.table)
        if layout is not None:
            return sql_to_arrow(layout.value_type)
        return self.value_types.get(state.spec.name)

    def _null_column(self, state: TridentState) -> Any:
        """A NULL query result typed as the state's values (so outputs keep one type)."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_type

        known = self._value_type(state)
        return F.lit(None) if known is None else F.lit(None).cast(from_arrow_type(known))

    # -- the two phases --------------------------------------------------------------------

    def prepare(self) -> _Prepared:
        """Run Spark for everything that does not depend on this batch's new state."""
        topo = self.runner.topology
        partials: dict[str, pa.Table] = {}
        for name, state in topo.states.items():
            if not _depends_on_new_values(state.node):  # else computed during the commit
                partials[name] = self._state_input(state)
        outputs = {
            name: self.collect(stream.node)
            for name, stream in topo.outputs.items()
            if not _depends_on_new_values(stream.node)
        }
        for spout_id in topo.spouts:
            self.frame(topo.spouts[spout_id])
        dead = {
            sid: empty_arrow(df) if self.plans[sid].record_count == 0 else df.toArrow()
            for sid, df in self.dead.items()
        }
        tuples_in = {sid: p.record_count for sid, p in self.plans.items()}
        return _Prepared(partials, outputs, dead, tuples_in)

    def _state_input(self, state: TridentState) -> pa.Table:
        from pyspark.sql import functions as F

        a = state.node.args
        if SINGLE_JOIN in a:
            return join_batch_table(self, state)
        parent = self.frame(state.node.parents[0])
        if "updater" in a:
            return parent.select(*a["inputs"]).toArrow()
        agg = a["agg"]
        group, out = a["group"], a["output"]
        if is_sql_combiner(agg) and self.is_empty(state.node.parents[0]):
            return self._empty_partials(state)
        if isinstance(agg, ReducerAggregator):
            cols = F.struct(*[F.col(c) for c in a["inputs"]])
            grouped = (
                parent.groupBy(*group).agg(F.collect_list(cols).alias("__tuples"))
                if group
                else parent.agg(F.collect_list(cols).alias("__tuples"))
            )
            return grouped.toArrow()
        agg = guard(agg, state.node.label)
        table = combine_partials(parent, group, a["inputs"][0], agg, out).toArrow()
        self.value_types[state.spec.name] = table.schema.field(out).type
        if not group:
            for name, column in global_partials(table.column(out)).items():
                table = table.append_column(name, column)
        return table

    def _empty_partials(self, state: TridentState) -> pa.Table:
        """The partials of a SQL-combiner state whose input is empty, without a Spark job.

        Grouped: no rows. Global: the one row of ``agg.zero()`` (as :func:`combine_partials`).
        """
        a = state.node.args
        parent = self.frame(state.node.parents[0])
        group, out, agg = a["group"], a["output"], a["agg"]
        schema = empty_arrow(combine_partials(parent, group, a["inputs"][0], agg, out)).schema
        self.value_types[state.spec.name] = schema.field(out).type
        if group:
            return schema.empty_table()
        zero = pa.array([agg.zero()], schema.field(out).type)
        return pa.table({out: zero, **global_partials(zero)})

    def commit(self, prepared: _Prepared) -> BatchOutcome:
        """Apply everything inside the open store transaction."""
        runner = self.runner
        store = runner.store
        topo = runner.topology
        outcome = BatchOutcome(topo.name, self.txid, True, self.plans, prepared.tuples_in)
        for name, state in topo.states.items():
            batch = prepared.partials.get(name)
            if batch is None:
                batch = self._state_input(state)
            outcome.states[name] = self._apply_state(state, batch)
        runner.fault("after_state_write")
        outputs = dict(prepared.outputs)
        for name, stream in topo.outputs.items():
            if name not in outputs:
                outputs[name] = self.collect(stream.node)
        for name, table in outputs.items():
            _store_rows(store, f"{topo.name}__out_{name}", self.txid, table)
            outcome.outputs[name] = table.num_rows
        for name, table in self.new_values.items():
            _store_rows(store, f"{topo.name}__{name}__new_values", self.txid, table)
        outcome.dead_letters = _store_dead_letters(store, topo.name, self.txid, prepared.dead)
        outcome.dead_letters_by_spout = {sid: t.num_rows for sid, t in prepared.dead.items()}
        for spout_id, plan in self.plans.items():
            runner.coordinator(spout_id).commit(plan)
        runner.fault("before_commit")
        return outcome

    def _apply_state(self, state: TridentState, batch: pa.Table) -> StateOutcome:
        store = self.runner.store
        a = state.node.args
        spec = state.spec
        txid = self.txid
        if SINGLE_JOIN in a:
            return apply_join_state(self, state, batch)
        if "updater" in a:
            updater = a["updater"]
            new = call_batch(
                state.node.label, updater.update_state, batch, store, state.table, batch, txid
            )
            if new is not None:
                self.new_values[spec.name] = new
            rows = batch.num_rows
            return StateOutcome(spec.name, state.table, rows, rows, 0, _size(store, state.table))
        agg = a["agg"]
        keys = list(a["group"]) or [GLOBAL_COLUMN]
        out = a["output"]
        if isinstance(agg, ReducerAggregator):
            result = _apply_reducer(store, state, batch, keys, txid)
        elif is_sql_combiner(agg):
            result = apply_partials(
                store,
                state.table,
                batch,
                key_columns=keys,
                value_column=out,
                combine=agg.sql_combine,
                state_type=spec.state_type,
                txid=txid,
                return_new_values=True,
            )
        else:
            result = apply_partials_python(
                store,
                state.table,
                batch,
                key_columns=keys,
                value_column=out,
                agg=guard(agg, state.node.label),
                state_type=spec.state_type,
                txid=txid,
                return_new_values=True,
            )
        if result.new_values is not None:
            # the declared fields: group + [output] (a global state's key column is internal)
            self.new_values[spec.name] = result.new_values.select(list(state.node.fields))
        return StateOutcome(
            spec.name,
            state.table,
            result.keys_in,
            result.keys_updated,
            result.keys_skipped,
            _size(store, state.table),
        )


def _depends_on_new_values(node: Node) -> bool:
    return node.kind in ("new_values", SINGLE_JOIN_EXPIRED) or any(
        _depends_on_new_values(p) for p in node.parents
    )


def _size(store: DuckDBStore, table: str) -> int:
    return store.size(table) if store.layout(table) is not None else 0


def _map_state(store: DuckDBStore, state: TridentState, **layout: Any) -> Any:
    backing = store.map(state.table, **layout)
    if state.spec.state_type is StateType.OPAQUE:
        return OpaqueMap(backing)
    if state.spec.state_type is StateType.TRANSACTIONAL:
        return TransactionalMap(backing)
    return NonTransactionalMap(backing)


def _read_state(store: DuckDBStore, state: TridentState) -> Any:
    """The state as committed (read outside any batch: ``curr`` of each value)."""
    return _map_state(store, state)


def _read_global(store: DuckDBStore, state: TridentState) -> Any:
    if store.layout(state.table) is None:
        return None
    return _read_state(store, state).multi_get([GLOBAL_KEY])[0]


def _bulk_lookup(
    store: DuckDBStore, state: TridentState, keys: pa.Table, inputs: tuple[str, ...], out: str
) -> pa.Table:
    """ONE SQL join of the batch's distinct keys against the state table."""
    layout = store.layout(state.table)
    assert layout is not None
    value = "t.curr"
    conds = " AND ".join(
        f'k."{i}" IS NOT DISTINCT FROM t."{c}"'
        for i, c in zip(inputs, layout.key_columns, strict=True)
    )
    select = ", ".join(f'k."{i}"' for i in inputs)
    with store.registered(keys) as name:
        # the current rows of just these keys (not the whole map view)
        latest = store.latest_sql(layout, name, inputs)
        return store.conn.sql(
            f'SELECT {select}, {value} AS "{out}" FROM {name} AS k '
            f"LEFT JOIN ({latest}) AS t ON {conds}"
        ).to_arrow_table()


def _apply_reducer(
    store: DuckDBStore, state: TridentState, batch: pa.Table, keys: list[str], txid: int
) -> Any:
    from trident_assets.backends.duckdb_merge import MergeResult

    agg = guard(state.node.args["agg"], state.node.label)
    rows = batch.to_pylist()
    key_tuples = (
        [tuple(r[k] for k in keys) for r in rows] if state.group else [GLOBAL_KEY] * len(rows)
    )
    groups = [[tuple(t.values()) for t in r["__tuples"]] for r in rows]
    flat_keys = [k for k, g in zip(key_tuples, groups, strict=True) for _ in g]
    flat_tuples = [t for g in groups for t in g]
    mstate = _map_state(store, state, key_columns=tuple(keys))
    mstate.begin_commit(txid)
    unique, new = apply_reducer(mstate, agg, flat_keys, flat_tuples)
    mstate.commit(txid)
    new_values = pa.table(
        {**{k: [u[i] for u in unique] for i, k in enumerate(keys)}, state.value_field: new}
    )
    return MergeResult(len(unique), len(unique), 0, new_values)


def _store_rows(store: DuckDBStore, table: str, txid: int, rows: pa.Table) -> None:
    """Replace the rows of ``txid`` in a per-txid output table (one statement each)."""
    conn = store.conn
    with_txid = rows.add_column(0, "txid", pa.array([txid] * rows.num_rows, pa.int64()))
    with store.registered(with_txid) as name:
        conn.execute(f'CREATE TABLE IF NOT EXISTS "{table}" AS SELECT * FROM {name} LIMIT 0')
        _type_null_columns(store, table, name)
        conn.execute(
            f'DELETE FROM "{table}" WHERE txid = ? OR txid <= ?', [txid, txid - NEW_VALUES_KEPT]
        )
        conn.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM {name}')


def _type_null_columns(store: DuckDBStore, table: str, view: str) -> None:
    """Give a column created untyped (all NULL in its first batch) the type it now has.

    A query or output column that was NULL in every row of the batch that created the table
    has DuckDB type ``NULL``; without this, the first batch with values could not be stored.
    """
    conn = store.conn
    stored = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?",
        [table],
    ).fetchall()
    untyped = [col for col, typ in stored if typ.strip('"').upper() == "NULL"]
    if not untyped:
        return
    incoming = {row[0]: row[1] for row in conn.execute(f"DESCRIBE SELECT * FROM {view}").fetchall()}
    for col in untyped:
        typ = incoming.get(col)
        if typ is not None and typ.strip('"').upper() != "NULL":
            conn.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{col}" SET DATA TYPE {typ}')


def _store_dead_letters(
    store: DuckDBStore, topology: str, txid: int, dead: dict[str, pa.Table]
) -> int:
    conn = store.conn
    conn.execute(f"DELETE FROM {DEAD_LETTERS} WHERE topology = ? AND txid = ?", [topology, txid])
    total = 0
    for spout_id, table in dead.items():
        if table.num_rows == 0:
            continue
        total += table.num_rows
        with store.registered(table) as name:
            conn.execute(
                f'INSERT INTO {DEAD_LETTERS} SELECT ?, ?, ?, topic, partition, "offset", reason, '
                f"value FROM {name}",
                [topology, spout_id, txid],
            )
    return total

"""Pipelined batches (Trident's ``topology.max.spout.pending``): one Spark job, ordered commits.

Trident keeps up to ``max.spout.pending`` batches in flight at once; only their state
commits are strictly ordered by txid. Here the Spark work of a chunk of consecutive txids
runs as ONE job: the batches are read together, every tuple tagged with its txid, and each
state's per-key partials are grouped by ``(txid, key)``. The driver splits the Arrow result
by txid and the runner commits the txids one at a time, in order, each in its own store
transaction, exactly as if they had run one by one. A crash between two commits leaves the
earlier txids committed and the later ones to be replayed (opaque: re-planned from the last
commit; transactional: the ranges recorded at their first emission).

A chunk is pipelined only when the topology's states are all persistent aggregates with a
SQL combiner (Count, Sum, Min, Max) or event-time windows timed by the record timestamp
(:mod:`.event_window_chunks`: late records decided at each commit), and every node that
receives tuples in the chunk is row-wise (``spout``, ``each``, ``filter``, ``project``,
``peek``). Whatever reads the state a batch leaves behind (a state query over a non-empty
stream, new-values streams, single joins, updaters, reducers) runs batch by batch. Streams
that receive no tuples in the chunk cost no Spark job: their (empty) results are typed from
the DataFrame schema.

Dead letters are counted by an ``Observation`` during the partials job; a second Spark job
fetches them only when there are any.

Which topologies and chunks qualify is decided by :mod:`trident_assets.planner`
(``pipelinable``, ``chunk_pipelinable``; re-exported here).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.window_store import last_max_event_us
from trident_assets.log.timestamps import UNKNOWN
from trident_assets.planner import (
    chunk_pipelinable,
    is_live,
    live_spouts,
    pipelinable,
    record_time_spout,
)
from trident_assets.runtime.outcomes import Prepared
from trident_assets.spark.codegen_conf import codegen_conf
from trident_assets.spark.event_window_chunks import WindowSlice, chunk_bounds, chunk_window_job
from trident_assets.spark.node_frames import NodeFrames, empty_arrow
from trident_assets.spark.observation import observed_metrics
from trident_assets.spark.partials import ChunkPartials, combiner_partials
from trident_assets.spark.scoped_conf import scoped_conf
from trident_assets.spark.txid_tags import TXID_COLUMN, split_by_txid
from trident_assets.spouts.ranges import BatchPlan
from trident_assets.stream.state_kinds import EventWindowKind, state_kind

if TYPE_CHECKING:
    from trident_assets.runtime.context import BatchContext, RunContext
    from trident_assets.stream.event_windows import WindowedState
    from trident_assets.stream.graph import Node
    from trident_assets.stream.streams import TridentState

__all__ = [
    "TXID_COLUMN",
    "PipelinedRun",
    "chunk_pipelinable",
    "empty_arrow",
    "pipelinable",
    "split_by_txid",
]

UNBOUNDED = 1 << 62
"""A batch's largest event time when the log cannot bound it: every record a candidate."""

Batches = Sequence[tuple[int, dict[str, BatchPlan]]]
"""The chunk: ``(txid, {spout id: plan})`` for consecutive txids, ascending."""


class PipelinedRun(NodeFrames):
    """The Spark side of a pipelined chunk: builds tagged DataFrames, returns per-txid inputs."""

    def __init__(
        self,
        runner: RunContext,
        batches: Batches,
        empty: BatchContext,
        event_tops: dict[str, int | None] | None = None,
    ) -> None:
        """``empty`` builds the nodes that receive no tuples in the chunk (no Spark job).

        ``event_tops``: per event-time window, an upper bound of the largest event time of
        the chunk in flight before this one (see :mod:`.event_window_chunks`).
        """
        self.runner = runner
        self.spark = runner.spark
        self.batches = list(batches)
        self.txids = [txid for txid, _ in self.batches]
        self.live = set().union(*(live_spouts(plans) for _, plans in self.batches))
        self.empty = empty
        self.frames: dict[int, Any] = {}
        self.dead: dict[str, tuple[Any, Any]] = {}
        self.raws: dict[str, Any] = {}
        self.conf: dict[str, str] = {}
        """Spark settings for the chunk's jobs (how the reads split into tasks)."""
        self.value_types: dict[str, pa.DataType] = empty.value_types
        """Arrow type of each combiner state's partials: its base run's, which builds the
        streams without tuples (their query results are typed by them)."""
        self.event_tops: dict[str, int | None] = dict(event_tops or {})
        """Per event-time window: an upper bound of its largest event time after the chunk
        (before :meth:`plan`: after the chunk in flight)."""

    @property
    def spilled(self) -> list[Any]:
        """Cleanups of the partials the chunk's job spilled (run once its txids committed)."""
        return self.empty.spilled

    def raw(self, node: Node) -> Any:
        """The spout's raw records of the whole chunk, tagged with their batch (built once)."""
        from pyspark.sql import functions as F

        sid, spout = node.args["spout_id"], node.args["spout"]
        if sid in self.raws:
            return self.raws[sid]
        mine = [(tag, plans[sid]) for tag, (_, plans) in enumerate(self.batches)]
        nonempty = [(tag, plan) for tag, plan in mine if plan.record_count > 0]
        if hasattr(spout, "read_many"):  # one scan for the whole chunk
            raw = spout.read_many(self.spark, self.runner.log, nonempty, TXID_COLUMN)
            if len(self.batches) > 1 and hasattr(spout, "split_conf"):
                self.conf.update(spout.split_conf(self.runner.log, nonempty))
        else:
            reads = [
                spout.read(self.spark, self.runner.log, plan).withColumn(
                    TXID_COLUMN, F.lit(tag).cast("bigint")
                )
                for tag, plan in nonempty
            ]
            raw = reduce(lambda x, y: x.unionByName(y), reads)
        self.raws[sid] = raw
        return raw

    def _build(self, node: Node) -> Any:
        from pyspark.sql import Observation

        if node.kind == "spout":
            sid, spout = node.args["spout_id"], node.args["spout"]
            observation = Observation(f"trident_dead_{sid}_{uuid.uuid4().hex}")
            good, dead = spout.scheme.decode(
                self.raw(node), keep=(TXID_COLUMN,), observation=observation
            )
            self.dead[sid] = (dead, observation)
            return good
        built = self.row_wise(node, self.frame(node.parents[0]), keep=(TXID_COLUMN,))
        if built is not None:
            return built
        msg = f"node kind {node.kind!r} cannot be pipelined"
        raise AssertionError(msg)

    def tagged(self, node: Node) -> Any:
        """``node``'s DataFrame with its tag; a node without tuples in the chunk: typed only."""
        from pyspark.sql import functions as F

        if is_live(node, self.live):
            return self.frame(node)
        return self.empty.frame(node).withColumn(TXID_COLUMN, F.lit(0).cast("bigint"))

    def tagged_raw(self, spout: Node) -> Any:
        """``spout``'s raw records of the chunk, tagged."""
        return self.raw(spout)

    def has_no_tuples(self, node: Node) -> bool:
        """True when ``node`` receives no tuples in the chunk."""
        return not is_live(node, self.live)

    def _partials_job(self, state: TridentState) -> Callable[[], ChunkPartials]:
        """Plan the state's partials now; the returned call runs its Spark job."""
        if isinstance(state_kind(state.node), EventWindowKind):
            window = self._window_job(state)  # type: ignore[arg-type]
            return lambda: ChunkPartials(dict(window()))
        job = combiner_partials(
            self, state, self.runner.topology, self.runner.spill, self.empty.spilled
        )
        self.value_types[state.spec.name] = job.value_type  # types empty query results
        return job.run

    def _window_job(self, state: WindowedState) -> Callable[[], dict[int, WindowSlice]]:
        """An event-time window's job: lateness bounded by the log's timestamps."""
        spout = record_time_spout(state)
        assert spout is not None  # pipelinable() admits no other window
        sid, reader = spout.args["spout_id"], spout.args["spout"]
        spec = state.windowed
        committed = last_max_event_us(self.runner.store, state)
        inflight = self.event_tops.get(state.spec.name)
        before = max((t for t in (committed, inflight) if t is not None), default=None)
        tops: list[int | None] = []
        for _, plans in self.batches:
            plan = plans[sid]
            top = reader.max_timestamp_ms(self.runner.log, plan) if plan.record_count else None
            tops.append(UNBOUNDED if top is UNKNOWN else None if top is None else top * 1000)
        bounds, after = chunk_bounds(before, tops, spec.window.lateness_us)
        self.event_tops[state.spec.name] = after
        return chunk_window_job(self, state, bounds)

    def records(self, spout: Node) -> int:
        """How many records ``spout`` reads in the chunk."""
        sid = spout.args["spout_id"]
        return sum(plans[sid].record_count for _, plans in self.batches)

    def _output_job(self, stream_node: Node) -> Callable[[], dict[int, pa.Table]]:
        if not is_live(stream_node, self.live):
            table = self.empty.collect(stream_node)
            return lambda: dict.fromkeys(self.txids, table)
        df = self.frame(stream_node)
        return lambda: split_by_txid(df.toArrow(), self.txids)

    def _dead_letters_job(
        self, sid: str, node: Node
    ) -> Callable[[int | None], dict[int, pa.Table]]:
        """The spout's dead letters per txid; the call takes those an Arrow kernel counted."""
        if sid not in self.live:  # read nothing: its empty table, found once per runner
            table = self.empty.empty_dead_letters(sid)
            return lambda counted: dict.fromkeys(self.txids, table)
        observed = sid in self.dead  # its tuples feed a state or output: a job observes them
        self.frame(node)
        dead, observation = self.dead[sid]
        none = empty_arrow(dead)

        def run(counted: int | None) -> dict[int, pa.Table]:
            if counted == 0:  # an Arrow kernel decoded all of the spout's records
                return split_by_txid(none, self.txids)
            if observed and counted is None:
                metrics = observed_metrics(observation)  # None: unknown, fetched below
                if metrics is not None and metrics["dead"] == 0:
                    return split_by_txid(none, self.txids)
            return split_by_txid(dead.toArrow(), self.txids)

        return run

    def plan(self) -> Callable[[], dict[int, Prepared]]:
        """Build every DataFrame (this thread: it reads the store); return the Spark work.

        The returned call touches only Spark, so it may run in another thread while this
        one commits earlier txids. It returns each txid's partials, outputs and dead letters.
        """
        topo = self.runner.topology
        records = sum(p.record_count for _, plans in self.batches for p in plans.values())
        self.conf.update(codegen_conf(self.spark, records))
        partials = {name: self._partials_job(state) for name, state in topo.states.items()}
        outputs = {name: self._output_job(stream.node) for name, stream in topo.outputs.items()}
        dead = {sid: self._dead_letters_job(sid, node) for sid, node in topo.spouts.items()}

        def run() -> dict[int, Prepared]:
            with scoped_conf(self.spark, self.conf):
                p = {name: job() for name, job in partials.items()}
                o = {name: job() for name, job in outputs.items()}
                counted: dict[str, int] = {}
                for found in p.values():
                    for sid, n in found.counted_dead.items():
                        counted[sid] = counted.get(sid, 0) + n
                # after the jobs observing them
                d = {sid: job(counted.get(sid)) for sid, job in dead.items()}
            return {
                txid: Prepared(
                    partials={name: found.tables[txid] for name, found in p.items()},
                    outputs={name: t[txid] for name, t in o.items()},
                    dead={sid: t[txid] for sid, t in d.items()},
                    tuples_in={sid: plan.record_count for sid, plan in plans.items()},
                    nulls={n: f.nulls[txid] for n, f in p.items() if txid in f.nulls},
                )
                for txid, plans in self.batches
            }

        return run

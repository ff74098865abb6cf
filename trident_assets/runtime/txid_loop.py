"""The one loop that owns a runner's txids: plan a chunk, run it on the engine, commit in order.

Spark's ``MicroBatchExecution`` in Trident's terms. For each txid asked for (ascending):
a txid committed before yields its recorded outcome; otherwise the spouts' coordinators emit
its ranges, consecutive txids that can share one engine job form a chunk
(:mod:`~trident_assets.runtime.chunks`, up to ``max_spout_pending``), the chunk's job runs in
a one-worker pool while the next chunk is planned behind it, and the chunk's txids commit one
by one, in order, through the one commit function (:func:`~.commit.commit`). A txid that must
run alone (its topology reads state its batch leaves behind) is a chunk of its own.

The loop knows no engine: an :class:`Execution` (Spark's is
:class:`~trident_assets.spark.execution.SparkExecution`) builds a chunk's work, gives the
engine each txid commits through (:class:`~.commit.TxidEngine`) and releases what a chunk
left behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from trident_assets.core.commit import decide_commit
from trident_assets.runtime.chunks import Chunk, chunk_limit, extend_chunk, settle
from trident_assets.runtime.commit import CommitTarget, TxidEngine, commit
from trident_assets.runtime.outcomes import BatchOutcome, Prepared

if TYPE_CHECKING:
    from trident_assets.spouts.coordinator import BatchCoordinator
    from trident_assets.spouts.ranges import BatchPlan
    from trident_assets.stream.states import TridentState

__all__ = ["Batches", "Execution", "LoopRunner", "PlannedChunk", "TxidLoop"]

Batches = list[tuple[int, dict[str, "BatchPlan"]]]
"""A chunk's txids with their spouts' plans, ascending."""


class LoopRunner(CommitTarget["TridentState"], Protocol):
    """What the loop needs of its runner (a ``TopologyRunner``): its txids commit to it."""

    max_spout_pending: int
    pipelinable: bool
    """Whether the topology's txids may share a job at all (:func:`~.planner.pipelinable`)."""

    def ensure_built(self) -> None:
        """Build the states still to be built from the log (before the first txid)."""

    def last_committed(self) -> int | None:
        """The topology's last committed txid."""

    def committed_plans(self, txid: int) -> dict[str, BatchPlan]:
        """The ranges committed ``txid`` read, per spout."""

    def coordinators(self) -> dict[str, BatchCoordinator]:
        """The spouts' batch coordinators."""


@dataclass(frozen=True)
class PlannedChunk:
    """A chunk's engine work, built on the loop's thread."""

    work: Callable[[], dict[int, Prepared]]
    """The engine job: each txid's prepared batch (touches only the engine: any thread)."""
    base: Any
    """What the engine keeps of the chunk until it is released."""
    event_tops: dict[str, int | None]
    """Per event-time window: an upper bound of its largest event time after the chunk."""


class Execution(Protocol):
    """How an engine runs the loop's txids."""

    def plan_chunk(self, batches: Batches, event_tops: dict[str, int | None]) -> PlannedChunk:
        """Build ``batches``' work (DataFrames, jobs) here; do not run it."""

    def engine(self, chunk: Chunk, txid: int) -> AbstractContextManager[TxidEngine[TridentState]]:
        """The engine ``txid`` of ``chunk`` commits through (its states' applies)."""

    def release(self, chunk: Chunk) -> None:
        """Drop what ``chunk``'s job left behind (e.g. spilled partials)."""


class TxidLoop:
    """The txid loop of one runner, on one engine."""

    def __init__(self, runner: LoopRunner, execution: Execution) -> None:
        """Loop over ``runner``'s txids, running them on ``execution``."""
        self.runner = runner
        self.execution = execution

    def run(self, ordered: list[int]) -> Iterator[BatchOutcome]:
        """Process and commit ``ordered`` (ascending txids) exactly once each, in order.

        Consecutive txids share one engine job, up to ``max_spout_pending``, where the
        topology allows; each commits alone, in order, and is yielded once it has.
        """
        self.runner.ensure_built()
        release = self.execution.release
        i = 0
        ahead: Chunk | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trident-spark") as pool:
            try:
                while i < len(ordered):
                    chunk, ahead = ahead, None
                    if chunk is None:
                        txid = ordered[i]
                        started = time.perf_counter()
                        last = self.runner.last_committed()
                        if last is not None and txid <= last:
                            yield BatchOutcome(
                                self.runner.scope, txid, False, self.runner.committed_plans(txid)
                            )
                            i += 1
                            continue
                        decide_commit(self.runner.scope, last, txid)
                        limit = chunk_limit(ordered, i, self.runner.max_spout_pending)
                        batches, pipelined = self.emit(txid, limit)
                        emit_s = time.perf_counter() - started
                        self.runner.fault("after_emit")
                        if not pipelined:
                            yield from self._alone(batches, emit_s)
                            i += 1
                            continue
                        chunk = self._start(pool, batches, emit_s)
                    # plan the next chunk while this one's job runs: queued behind it in the
                    # one-worker pool, it starts the moment this job ends, so the engine never
                    # idles while the driver plans or this chunk commits
                    ahead = self._start_next(pool, chunk, ordered, i + len(chunk.batches))
                    try:
                        t_spark, prepared = chunk.future.result()
                    except BaseException:
                        release(chunk)
                        raise
                    spark_s = (chunk.plan_s + time.perf_counter() - t_spark) / len(chunk.batches)
                    for outcome in self._in_order(chunk, prepared, spark_s):
                        yield outcome
                        i += 1
                        if not outcome.applied:  # another attempt committed it: re-plan
                            settle(ahead, release)
                            ahead = None
                            break
            finally:
                settle(ahead, release)

    def emit(self, txid: int, limit: int) -> tuple[Batches, bool]:
        """Plan a chunk from ``txid``: up to ``limit`` txids that can share one engine job.

        Returns the chunk and True, or ``[(txid, plans)]`` and False when ``txid`` must run
        alone (the one-batch path).
        """
        coordinators = self.runner.coordinators()
        first = [(txid, {sid: c.emit(txid) for sid, c in coordinators.items()})]
        batches = extend_chunk(
            self.runner.topology, self.runner.pipelinable, coordinators, list(first), limit
        )
        return (first, False) if batches is None else (batches, True)

    def _alone(self, batches: Batches, emit_s: float) -> Iterator[BatchOutcome]:
        """A chunk of one, its job on this thread (it asks the states' engines), committed."""
        t_spark = time.perf_counter()
        planned = self.execution.plan_chunk(batches, {})
        chunk = Chunk(batches, emit_s, planned.base, Future())
        try:
            prepared = planned.work()
        except BaseException:
            self.execution.release(chunk)
            raise
        yield from self._in_order(chunk, prepared, time.perf_counter() - t_spark)

    def _start(
        self,
        pool: ThreadPoolExecutor,
        batches: Batches,
        emit_s: float,
        event_tops: dict[str, int | None] | None = None,
    ) -> Chunk:
        """Build the chunk's work here, run its engine job in ``pool``.

        ``event_tops``: the chunk in flight before it's (:attr:`Chunk.event_tops`).

        The chunk's job returns when it started in the pool (it may queue behind the
        previous chunk's); ``plan_s`` is what building its work took here.
        """
        t_plan = time.perf_counter()
        planned = self.execution.plan_chunk(batches, dict(event_tops or {}))

        def run() -> tuple[float, dict[int, Prepared]]:
            return time.perf_counter(), planned.work()

        plan_s = time.perf_counter() - t_plan
        future = pool.submit(run)
        return Chunk(batches, emit_s, planned.base, future, plan_s, planned.event_tops)

    def _start_next(
        self, pool: ThreadPoolExecutor, chunk: Chunk, ordered: list[int], j: int
    ) -> Chunk | None:
        """Plan and start the chunk after ``chunk`` (from ``ordered[j]``) before it commits.

        Trident keeps batches in flight while earlier ones commit; the next chunk's plans
        continue from ``chunk``'s last plans (nothing in them waits for ``chunk``'s job or
        commits), and its engine work queues right behind ``chunk``'s, overlapping its
        commits.
        """
        last_txid, last_plans = chunk.batches[-1]
        if j >= len(ordered) or ordered[j] != last_txid + 1:
            return None
        started = time.perf_counter()
        coordinators = self.runner.coordinators()
        first = {sid: c.emit_after(last_plans[sid]) for sid, c in coordinators.items()}
        limit = chunk_limit(ordered, j, self.runner.max_spout_pending)
        batches = extend_chunk(
            self.runner.topology,
            self.runner.pipelinable,
            coordinators,
            [(last_txid + 1, first)],
            limit,
        )
        if batches is None:
            return None
        emit_s = time.perf_counter() - started
        self.runner.fault("after_emit")
        return self._start(pool, batches, emit_s, chunk.event_tops)

    def _in_order(
        self, chunk: Chunk, prepared: dict[int, Prepared], spark_s: float
    ) -> Iterator[BatchOutcome]:
        """Commit the chunk's txids one by one, in order; stop at one that was not applied."""
        share = len(chunk.batches)
        try:
            for txid, plans in chunk.batches:
                timings = {"emit": chunk.emit_s / share, "spark": spark_s}
                with self.execution.engine(chunk, txid) as engine:
                    outcome = commit(
                        self.runner, txid, plans, prepared[txid], engine, timings, share
                    )
                yield outcome
                if not outcome.applied:
                    return
        finally:
            self.execution.release(chunk)

"""The one loop that owns a runner's txids: plan a chunk, run it on Spark, commit in order.

Spark's ``MicroBatchExecution`` in Trident's terms. For each txid asked for (ascending):
a txid committed before yields its recorded outcome; otherwise the spouts' coordinators emit
its ranges, consecutive txids that can share one Spark job form a chunk
(:mod:`~trident_assets.spark.chunks`, up to ``max_spout_pending``), the chunk's job runs in a
one-worker pool while the next chunk is planned behind it, and the chunk's txids commit one
by one, in order, through the runner's one commit function
(:meth:`~trident_assets.spark.executor.TopologyRunner.commit_run`). A txid that must run alone
(its topology reads state its batch leaves behind) is a chunk of its own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from trident_assets.core.commit import decide_commit
from trident_assets.runtime.outcomes import BatchOutcome, Prepared
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spark.chunks import Chunk, chunk_limit, extend_chunk, settle
from trident_assets.spark.codegen_conf import codegen_conf
from trident_assets.spark.pipelined import PipelinedRun
from trident_assets.spark.scoped_conf import scoped_conf
from trident_assets.spark.spilled import drop_spilled
from trident_assets.spouts.ranges import BatchPlan

__all__ = ["TxidLoop"]


class TxidLoop:
    """The txid loop of one runner (a :class:`~trident_assets.spark.executor.TopologyRunner`)."""

    def __init__(self, runner: Any) -> None:
        """Loop over ``runner``'s txids: its topology, coordinators, Spark and commits."""
        self.runner = runner

    def run(self, ordered: list[int]) -> Iterator[BatchOutcome]:
        """Process and commit ``ordered`` (ascending txids) exactly once each, in order.

        Consecutive txids share one Spark job, up to ``max_spout_pending``, where the
        topology allows; each commits alone, in order, and is yielded once it has.
        """
        self.runner.ensure_built()
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
                            yield self._run_alone(*batches[0], emit_s)
                            i += 1
                            continue
                        chunk = self._start(pool, batches, emit_s)
                    # plan the next chunk while this one's job runs: queued behind it in the
                    # one-worker pool, it starts the moment this job ends, so Spark never idles
                    # while the driver plans or this chunk commits
                    ahead = self._start_next(pool, chunk, ordered, i + len(chunk.batches))
                    try:
                        prepared = chunk.future.result()
                    except BaseException:
                        drop_spilled(chunk.base.spilled)
                        raise
                    spark_s = (chunk.plan_s + time.perf_counter() - chunk.t_spark) / len(
                        chunk.batches
                    )
                    for outcome in self._commit_chunk(chunk, prepared, spark_s):
                        yield outcome
                        i += 1
                        if not outcome.applied:  # another attempt committed it: re-plan
                            settle(ahead)
                            ahead = None
                            break
            finally:
                settle(ahead)

    def emit(self, txid: int, limit: int) -> tuple[list[tuple[int, dict[str, BatchPlan]]], bool]:
        """Plan a chunk from ``txid``: up to ``limit`` txids that can share one Spark job.

        Returns the chunk and True, or ``[(txid, plans)]`` and False when ``txid`` must run
        alone (the one-batch path).
        """
        coordinators = self.runner.coordinators()
        first = [(txid, {sid: c.emit(txid) for sid, c in coordinators.items()})]
        batches = extend_chunk(
            self.runner.topology, self.runner.pipelinable, coordinators, list(first), limit
        )
        return (first, False) if batches is None else (batches, True)

    def _start(
        self,
        pool: ThreadPoolExecutor,
        batches: list[tuple[int, dict[str, BatchPlan]]],
        emit_s: float,
        event_tops: dict[str, int | None] | None = None,
    ) -> Chunk:
        """Build the chunk's DataFrames here, run its Spark jobs in ``pool``.

        ``event_tops``: the chunk in flight before it's (:attr:`Chunk.event_tops`).

        The chunk's ``t_spark`` is when its job starts in the pool (it may queue behind the
        previous chunk's), ``plan_s`` what building its DataFrames took here.
        """
        t_plan = time.perf_counter()
        base = BatchRun(self.runner, *batches[0])
        prun = PipelinedRun(self.runner, batches, base, event_tops)
        work = prun.plan()
        now = time.perf_counter()
        chunk = Chunk(batches, emit_s, base, Future(), now, now - t_plan, prun.event_tops)

        def run() -> dict[int, Prepared]:
            chunk.t_spark = time.perf_counter()
            return work()

        chunk.future = pool.submit(run)
        return chunk

    def _start_next(
        self, pool: ThreadPoolExecutor, chunk: Chunk, ordered: list[int], j: int
    ) -> Chunk | None:
        """Plan and start the chunk after ``chunk`` (from ``ordered[j]``) before it commits.

        Trident keeps batches in flight while earlier ones commit; the next chunk's plans
        continue from ``chunk``'s last plans (nothing in them waits for ``chunk``'s job or
        commits), and its Spark work queues right behind ``chunk``'s, overlapping its commits.
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

    def _run_alone(self, txid: int, plans: dict[str, BatchPlan], emit_s: float) -> BatchOutcome:
        """The one-batch path: run every stream on Spark, then commit."""
        t_spark = time.perf_counter()
        records = sum(plan.record_count for plan in plans.values())
        with scoped_conf(
            self.runner.spark, codegen_conf(self.runner.spark, records)
        ):  # commit's jobs too
            run = BatchRun(self.runner, txid, plans, spill=True)
            try:
                prepared = run.prepare()
                spark_s = time.perf_counter() - t_spark
                return self.runner.commit_run(run, prepared, {"emit": emit_s, "spark": spark_s}, 1)
            finally:
                drop_spilled(run.spilled)

    def _commit_chunk(
        self, chunk: Chunk, prepared: dict[int, Prepared], spark_s: float
    ) -> Iterator[BatchOutcome]:
        """Commit the chunk's txids one by one, in order; stop at one that was not applied."""
        share = len(chunk.batches)
        try:
            for txid, plans in chunk.batches:
                run = BatchRun(self.runner, txid, plans, spill=True)
                run.value_types = dict(chunk.base.value_types)
                timings = {"emit": chunk.emit_s / share, "spark": spark_s}
                try:
                    outcome = self.runner.commit_run(run, prepared[txid], timings, share)
                finally:
                    drop_spilled(run.spilled)
                yield outcome
                if not outcome.applied:
                    return
        finally:
            drop_spilled(chunk.base.spilled)

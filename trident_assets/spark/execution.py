"""Spark as the txid loop's engine: a chunk's DataFrames and jobs, a txid alone, a commit.

:class:`SparkExecution` is the :class:`~trident_assets.runtime.txid_loop.Execution` of a
:class:`~trident_assets.spark.executor.TopologyRunner`. Every txid's Spark work is built by
one :class:`~trident_assets.spark.batch_run.BatchRun` over its chunk (a txid run alone is a
chunk of one), and every txid commits through the runner's one commit function
(:meth:`~trident_assets.spark.executor.TopologyRunner.commit_run`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from trident_assets.runtime.txid_loop import Batches, PlannedChunk
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spark.scoped_conf import scoped_conf
from trident_assets.spark.spilled import drop_spilled

if TYPE_CHECKING:
    from trident_assets.runtime.chunks import Chunk
    from trident_assets.runtime.outcomes import BatchOutcome, Prepared
    from trident_assets.spouts.ranges import BatchPlan

__all__ = ["SparkExecution"]


class SparkExecution:
    """The txid loop's engine for one runner: Spark."""

    def __init__(self, runner: Any) -> None:
        """Run ``runner``'s txids on its Spark session."""
        self.runner = runner

    def plan_chunk(self, batches: Batches, event_tops: dict[str, int | None]) -> PlannedChunk:
        """Build the chunk's DataFrames (this thread: it reads the store); not its jobs."""
        run = BatchRun(self.runner, batches, spill=True, event_tops=event_tops)
        return PlannedChunk(run.plan(), run, run.event_tops)

    def run_alone(self, txid: int, plans: dict[str, BatchPlan], emit_s: float) -> BatchOutcome:
        """A chunk of one, on this thread: its batch phase, then its commit."""
        t_spark = time.perf_counter()
        run = BatchRun.alone(self.runner, txid, plans, spill=True)
        try:
            prepared = run.plan()()[txid]
            spark_s = time.perf_counter() - t_spark
            with scoped_conf(self.runner.spark, run.conf):  # the commit's jobs too
                return self.runner.commit_run(run, prepared, {"emit": emit_s, "spark": spark_s}, 1)
        finally:
            drop_spilled(run.spilled)

    def commit(
        self,
        chunk: Chunk,
        txid: int,
        plans: dict[str, BatchPlan],
        prepared: Prepared,
        timings: dict[str, float],
    ) -> BatchOutcome:
        """Commit one txid of ``chunk``: its queries typed by the chunk's value types."""
        run = chunk.base.for_txid(txid)
        try:
            return self.runner.commit_run(run, prepared, timings, len(chunk.batches))
        finally:
            if run is not chunk.base:  # (its own spills, if any; the chunk's at release)
                drop_spilled(run.spilled)

    def release(self, chunk: Chunk) -> None:
        """Remove the partials ``chunk``'s job spilled."""
        drop_spilled(chunk.base.spilled)

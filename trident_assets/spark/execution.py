"""Spark as the txid loop's engine: a chunk's DataFrames and jobs, and a txid's applies.

:class:`SparkExecution` is the :class:`~trident_assets.runtime.txid_loop.Execution` of a
:class:`~trident_assets.spark.executor.TopologyRunner`. Every txid's Spark work is built by
one :class:`~trident_assets.spark.batch_run.BatchRun` over its chunk (a txid run alone is a
chunk of one). Every txid commits through the one commit function
(:func:`~trident_assets.runtime.commit.commit`), which asks :class:`SparkTxid` (its
:class:`~trident_assets.runtime.commit.TxidEngine`) to apply each state (its kind's engine,
:mod:`~trident_assets.spark.state_engines`) and to compute the states and outputs that read
the batch's new values; Spark writes no table of a txid itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from trident_assets.backends.spilled_partials import SpilledPartials
from trident_assets.runtime.commit import CommitTarget
from trident_assets.runtime.txid_loop import Batches, PlannedChunk
from trident_assets.spark.batch_context import RunContext
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spark.scoped_conf import scoped_conf
from trident_assets.spark.state_apply import spilled_previews, state_previews
from trident_assets.spark.state_engines import engine_for

if TYPE_CHECKING:
    import pyarrow as pa

    from trident_assets.runtime.chunks import Chunk
    from trident_assets.runtime.outcomes import Applied
    from trident_assets.stream.streams import TridentState

__all__ = ["SparkExecution", "SparkRunner", "SparkTxid"]


class SparkRunner(RunContext, CommitTarget["TridentState"], Protocol):
    """A runner on Spark: what its batches read and what its txids commit to."""


class SparkExecution:
    """The txid loop's engine for one runner: Spark."""

    def __init__(self, runner: SparkRunner) -> None:
        """Run ``runner``'s txids on its Spark session."""
        self.runner = runner

    def plan_chunk(self, batches: Batches, event_tops: dict[str, int | None]) -> PlannedChunk:
        """Build the chunk's DataFrames (this thread: it reads the store); not its jobs."""
        run = BatchRun(self.runner, batches, spill=True, event_tops=event_tops)
        return PlannedChunk(run.plan(), run, run.event_tops)

    @contextmanager
    def engine(self, chunk: Chunk, txid: int) -> Iterator[SparkTxid]:
        """``txid`` of ``chunk`` as a chunk of one, typed by the chunk's value types."""
        run = chunk.base.mode.txid_run(chunk.base, txid)
        try:
            with scoped_conf(self.runner.spark, run.conf):  # a chunk of one's: its commit's jobs
                yield SparkTxid(run)
        finally:
            if run is not chunk.base:  # (its own spills, if any; the chunk's at release)
                run.drop_spilled()

    def release(self, chunk: Chunk) -> None:
        """Remove the partials ``chunk``'s job spilled."""
        chunk.base.drop_spilled()


class SparkTxid:
    """The engine one txid commits through: its chunk of one's states, applied on Spark."""

    def __init__(self, run: BatchRun) -> None:
        """Apply ``run``'s txid (a chunk of one)."""
        self.run = run

    def apply(self, state: TridentState, batch: Any, nulls: int) -> Applied:
        """Apply ``batch`` to ``state`` through its kind's engine, with its previews."""
        applied = engine_for(state).apply(self.run, state, batch)
        if isinstance(batch, SpilledPartials):  # its nulls and previews read from the files
            previews = spilled_previews(self.run.runner.store, state, self.run.txid)
            return replace(applied, previews=previews)
        outcome = replace(applied.outcome, null_values_skipped=nulls)
        previews = state_previews(state, batch, applied.new_values) | applied.previews
        return replace(applied, outcome=outcome, previews=previews)

    def late_input(
        self, state: TridentState, new_values: dict[str, pa.Table], expired: dict[str, pa.Table]
    ) -> tuple[Any, int]:
        """``state``'s batch input, read from this batch's new values, and its nulls."""
        self.run.read_applied(new_values, expired)
        return self.run.state_input(state), self.run.nulls.get(state.spec.name, 0)

    def late_output(
        self, name: str, new_values: dict[str, pa.Table], expired: dict[str, pa.Table]
    ) -> pa.Table:
        """Output ``name``'s tuples, read from this batch's new values."""
        self.run.read_applied(new_values, expired)
        return self.run.collect(self.run.runner.topology.outputs[name].node)

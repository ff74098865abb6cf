"""What a batch produced: the outcome records and the Spark results a commit applies.

* :class:`StateOutcome`, :class:`BatchOutcome`: what :meth:`TopologyRunner.run_batch
  <trident_assets.spark.executor.TopologyRunner.run_batch>` reports per state and per txid.
* :class:`Prepared`: a batch's Spark results (per-state partials, outputs, dead letters),
  computed before its commit transaction opens (by :class:`~trident_assets.spark.batch_run.
  BatchRun` alone, or per txid by a pipelined chunk).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from trident_assets.spouts.ranges import BatchPlan

__all__ = ["GLOBAL_COLUMN", "BatchOutcome", "Prepared", "StateOutcome"]

GLOBAL_COLUMN = "key"
"""Key column of an ungrouped (global) state."""


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
    """The result of :meth:`~trident_assets.spark.executor.TopologyRunner.run_batch`."""

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


@dataclass
class Prepared:
    """One batch's Spark results, ready for its commit transaction."""

    partials: dict[str, pa.Table]
    """Per state: the batch's input (per-key partials, grouped tuples or updater rows)."""
    outputs: dict[str, pa.Table]
    """Per output: its tuples (outputs that read this batch's new values are left out)."""
    dead: dict[str, pa.Table]
    """Per spout: the records its scheme could not decode."""
    tuples_in: dict[str, int]
    """Per spout: how many records the batch read."""

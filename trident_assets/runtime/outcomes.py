"""What a batch produced: the outcome records and the Spark results a commit applies.

* :class:`StateOutcome`, :class:`BatchOutcome`: what :meth:`TopologyRunner.run_batch
  <trident_assets.spark.executor.TopologyRunner.run_batch>` reports per state and per txid.
* :class:`Prepared`: a batch's Spark results (per-state partials, outputs, dead letters),
  computed before its commit transaction opens (by :class:`~trident_assets.spark.batch_run.
  BatchRun` alone, or per txid by a pipelined chunk).
* :func:`top_rows`, :func:`head_rows`: the few rows of a batch table an outcome keeps as a
  preview (:attr:`BatchOutcome.previews`), computed from the batch alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.spouts.ranges import BatchPlan

__all__ = [
    "GLOBAL_COLUMN",
    "PREVIEW_ROWS",
    "Applied",
    "BatchOutcome",
    "Prepared",
    "StateInput",
    "StateOutcome",
    "dead_letter_rows",
    "head_rows",
    "top_rows",
]

GLOBAL_COLUMN = "key"
"""Key column of an ungrouped (global) state."""
PREVIEW_ROWS = 10
"""Rows kept per preview of a batch outcome."""
DEAD_LETTER_COLUMNS = ("topic", "partition", "offset", "reason")
"""The columns of a dead letters preview (the record's value is left out)."""


@dataclass(frozen=True, slots=True)
class StateOutcome:
    """What a batch did to one state."""

    name: str
    table: str
    keys_in: int
    keys_updated: int
    keys_skipped: int
    size: int | None
    """The keys the state holds after the batch; None: unknown (a memcached state: its
    servers cannot count a state's keys)."""
    total: float | None = None
    """The sum of all the state's values (Count/Sum states; None for others)."""
    null_values_skipped: int = 0
    """Null input values a Sum/Min/Max state skipped this batch (they change no value)."""


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying one batch to one state produced (returned, never written elsewhere)."""

    outcome: StateOutcome
    new_values: pa.Table | None = None
    """The (key..., new value) rows of the batch: its ``new_values_stream`` (joined rows of
    a single join, windows fired or made final of a window)."""
    expired: pa.Table | None = None
    """A single join's halves expired this batch (its ``<join>_expired`` output)."""
    dead: dict[str, pa.Table] = field(default_factory=dict)
    """Dead letters the apply decided (an event window's late records), by key."""
    partials: pa.Table | None = None
    """A grouped state's per-key partials this batch (its partials asset, kept per txid)."""
    window: Any = None
    """An event window's ``WindowOutcome`` (watermark, windows made final, late records)."""
    previews: dict[str, pa.Table] = field(default_factory=dict)
    """Previews the apply made itself, keyed like ``BatchOutcome.previews`` (a key-value
    state's ``state:<name>``: its executors return the rows, the driver never holds the batch)."""


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
    published: dict[str, list[int]] = field(default_factory=dict)
    """Per lakehouse table asset: the txids published to it after this commit (normally this
    one; earlier ones too when the table was behind)."""
    pipelined: int = 1
    """How many txids shared this batch's Spark job (1: it ran alone)."""
    lag: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per spout, per partition: records waiting in the source after this txid (consumer lag,
    read when it committed)."""
    quarantined: int = 0
    """Records this txid set aside in the quarantine instead of processing them."""
    reprocessed_txid: int | None = None
    """The quarantined txid whose records this txid processed (a quarantine replay)."""
    previews: dict[str, pa.Table] = field(default_factory=dict)
    """At most :data:`PREVIEW_ROWS` rows per asset of the txid, with the asset's schema, keyed
    ``state:<name>`` (the keys the txid touched, highest new value first), ``partials:<name>``,
    ``new_values:<name>``, ``output:<name>`` and ``dead_letters:<spout>``."""
    windows: dict[str, Any] = field(default_factory=dict)
    """Per event-window state: its ``WindowOutcome`` (watermark, windows made final, late
    records...; see :mod:`trident_assets.backends.window_store`)."""


@dataclass(frozen=True)
class StateInput:
    """A state's batch input, as its kind's engine computed it, and what the job found."""

    batch: Any
    """What the commit applies (per-key partials, grouped tuples, rows, a window's rows)."""
    value_type: pa.DataType | None = None
    """A combiner's partial values' Arrow type (types empty query results); None: none."""
    nulls: int | None = None
    """The null input values a Sum/Min/Max skipped (None: not counted)."""
    counted_dead: dict[str, int] = field(default_factory=dict)
    """Per spout: the dead letters the job met and counted (no job of their own if 0)."""
    folded_dead: dict[str, pa.Table] = field(default_factory=dict)
    """Per spout: the dead letters the job itself collected (no job of their own)."""


@dataclass(frozen=True)
class Prepared:
    """What the engine prepared for one txid, ready for its commit transaction.

    A state or an output left out reads this batch's new values: the engine computes it
    inside the transaction. A quarantined txid is an empty batch (:meth:`set_aside`).
    """

    partials: dict[str, Any]
    """Per state: the batch's input (per-key partials, grouped tuples or updater rows)."""
    outputs: dict[str, pa.Table]
    """Per output: its tuples (outputs that read this batch's new values are left out)."""
    dead: dict[str, pa.Table]
    """Per spout: the records its scheme could not decode."""
    tuples_in: dict[str, int]
    """Per spout: how many records the batch read."""
    nulls: dict[str, int] = field(default_factory=dict)
    """Per Sum/Min/Max state: the null input values its partials skipped."""
    recorded: dict[str, BatchPlan] | None = None
    """The ranges the commit makes final (None: those the txid read; a quarantine replay
    records its spouts' positions instead of the quarantined ranges it reads)."""
    quarantine: str | None = None
    """Set aside: the txid's ranges go to the quarantine with this error, unprocessed."""
    replays: int | None = None
    """The quarantined txid whose records this txid processes (marked replayed with it)."""

    @classmethod
    def set_aside(cls, plans: dict[str, BatchPlan], error: str) -> Prepared:
        """A quarantined txid: nothing read, ``plans`` made final, kept with ``error``."""
        return cls({}, {}, {}, dict.fromkeys(plans, 0), recorded=plans, quarantine=error)


def head_rows(table: pa.Table, k: int = PREVIEW_ROWS) -> pa.Table:
    """The first ``k`` rows of ``table`` (its schema kept)."""
    return table.slice(0, k)


def top_rows(table: pa.Table, value: str, keys: Sequence[str], k: int = PREVIEW_ROWS) -> pa.Table:
    """The ``k`` rows of ``table`` with the highest ``value``, ties by ``keys`` ascending.

    Linear in the rows of ``table`` (a selection, not a sort), so a preview costs O(batch).
    Falls back to :func:`head_rows` when a column cannot be ordered (e.g. a struct value).
    """
    columns = [value, *(key for key in keys if key != value)]
    if table.num_rows <= 1 or not all(
        c in table.column_names and _orderable(table.schema.field(c).type) for c in columns
    ):
        return head_rows(table, k)
    order = [(value, "descending"), *((key, "ascending") for key in columns[1:])]
    picked = table.take(pc.select_k_unstable(table, k=min(k, table.num_rows), sort_keys=order))
    return picked.take(pc.sort_indices(picked, sort_keys=order))


def _orderable(kind: pa.DataType) -> bool:
    """True for the scalar types Arrow's selection orders (nested types are not)."""
    t = pa.types
    return bool(
        t.is_integer(kind)
        or t.is_floating(kind)
        or t.is_decimal(kind)
        or t.is_string(kind)
        or t.is_large_string(kind)
        or t.is_binary(kind)
        or t.is_boolean(kind)
        or t.is_temporal(kind)
    )


def dead_letter_rows(dead: pa.Table, k: int = PREVIEW_ROWS) -> pa.Table:
    """The first ``k`` dead letters of a batch: topic, partition, offset and reason."""
    columns = [c for c in DEAD_LETTER_COLUMNS if c in dead.column_names]
    return head_rows(dead.select(columns), k)

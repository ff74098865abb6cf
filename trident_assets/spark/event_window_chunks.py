"""Several txids of an event-time window in ONE Spark job, lateness decided at each commit.

A txid's late records are decided against the watermark committed before it, so a chunk of
txids cannot know its later txids' watermarks before its job runs. What it can know, when
the window's time field is the record timestamp
(:func:`~trident_assets.stream.graph.record_time_spout`), is an upper bound of every
watermark: the log's statistics bound each batch's timestamps without reading a record
(:mod:`trident_assets.log.timestamps`), so the watermark before the chunk's ``i``-th batch
is at most ``bound_i`` = the allowed-lateness-shifted maximum of the committed largest
event time and the bounds of every batch before it (this chunk's and the one in flight).

Only a record whose first window ends at or before ``bound_i`` can be late or partly late
(sliding). The job (tumbling and sliding alike) reads the chunk once and groups by (batch,
key, window, reason, value): an ordinary record's value is left out, so it adds to its
windows' partials; a candidate's value is kept, so identical candidates share a row
(counted in ``__dup``) that keeps its event time and its first and last windows; an
unreadable record (null or unparseable event time) is a dead letter row. The bounds are an
array literal indexed by the batch tag, which Spark's generated code references instead of
inlining: with the log reader's tags by segment file, chunks compile the same code.

At the commit of each txid (inside its transaction, with the committed watermark ``wm``),
:meth:`WindowSlice.resolve` turns its rows into what :func:`window_input` returns for one
batch, exactly: a candidate row whose last window is final is that many late records
(dead letters, with the same reason text), one whose first window is final is partly late
(counted), its open windows' partials join the others. An ordinary row in a final window
would mean the bound was wrong: the commit is refused, nothing written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends import window_store
from trident_assets.errors import TridentError
from trident_assets.log.timestamps import UNKNOWN
from trident_assets.spark.batch_context import ChunkPartials
from trident_assets.spark.column_cache import reuse
from trident_assets.spark.observed import count_dead, observed_frame
from trident_assets.spark.txid_tags import TXID_COLUMN, split_by_txid
from trident_assets.spark.window_columns import (
    DEAD,
    DUP,
    KIND,
    PARTIAL,
    REASON,
    SOURCE,
    VALUE,
    WE,
    WS,
    N,
    T,
    window_columns,
)
from trident_assets.stream.graph import record_time_spout
from trident_assets.stream.state_kinds import EVENT_WINDOW

UNBOUNDED = 1 << 62
"""A batch's largest event time when the log cannot bound it: every record a candidate."""

NO_BOUND = -(1 << 62)
"""A batch's watermark bound while no event time is known: below every Spark timestamp's
microseconds (year 1), so no record is a candidate."""

if TYPE_CHECKING:
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.event_windows import WindowedAggregation, WindowedState

__all__ = [
    "UNBOUNDED",
    "WindowSlice",
    "chunk_bounds",
    "late_reason",
    "window_chunk_job",
]

FIRST, LAST = "__first", "__last"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ARROW_COMBINE = {"sum": "sum", "min": "min", "max": "max"}


def _utc(micros: int) -> str:
    """``YYYY-MM-DD HH:MM:SS.ffffff UTC``, as the one-batch job's Spark expression prints it."""
    t = _EPOCH + timedelta(microseconds=micros)
    return f"{t.year:04d}-{t:%m-%d %H:%M:%S}.{t.microsecond:06d} UTC"


def late_reason(last_start: int, size: int, wm: int) -> str:
    """A late tumbling/sliding record's dead-letter reason (its last window is final)."""
    return (
        f"late record: its window [{_utc(last_start)}, {_utc(last_start + size)}) is final "
        f"(window_end <= watermark {_utc(wm)})"
    )


def chunk_bounds(
    top_before: int | None, batch_tops: Sequence[int | None], lateness: int
) -> tuple[list[int | None], int | None]:
    """``(bound of each batch's watermark, bound of the largest event time after the chunk)``.

    ``top_before``: an upper bound of the largest event time committed before the chunk;
    ``batch_tops``: an upper bound of each batch's largest event time (None: no record).
    All in epoch microseconds; a watermark bound is None while no event time is known.
    """
    bounds: list[int | None] = []
    top = top_before
    for batch_top in batch_tops:
        bounds.append(None if top is None else top - lateness)
        if batch_top is not None:
            top = batch_top if top is None else max(top, batch_top)
    return bounds, top


@dataclass
class WindowSlice:
    """One txid's rows of a chunk's window job, resolved at its commit (:meth:`resolve`)."""

    state: WindowedState
    rows: pa.Table

    def resolve(self, wm: int | None) -> pa.Table:
        """The txid's partials and dead letters against the committed watermark ``wm``.

        The same table :func:`~trident_assets.spark.event_windows.window_input` gives for
        this batch alone.

        Raises:
            TridentError: a record the job did not flag as a candidate falls in a final
                window (its bound was below the watermark); nothing was written.
        """
        spec: WindowedAggregation = self.state.node.args[EVENT_WINDOW]
        size, group, out = spec.window.size_us, list(spec.group), spec.output
        rows = self.rows
        ws = rows.column(WS)
        readable = pc.is_valid(ws)
        candidate = pc.and_kleene(readable, pc.is_valid(rows.column(VALUE)))
        n = pa.nulls(rows.num_rows, pa.int64())
        if wm is None:
            keep = readable
            late = pa.array([False] * rows.num_rows)
        else:
            final = pc.less_equal(rows.column(WE), wm)
            ordinary = pc.and_kleene(readable, pc.invert(candidate))
            if pc.any(pc.and_kleene(ordinary, final)).as_py():
                msg = (
                    f"windowed state {self.state.spec.name!r}: a record not expected to be "
                    f"late falls in a window final at watermark {_utc(wm)} (the log's "
                    "timestamp statistics are below its records' timestamps); nothing was "
                    "written. Check the log with `trident log verify`, then run the txid again"
                )
                raise TridentError(msg)
            is_last = pc.and_kleene(candidate, pc.equal(ws, rows.column(LAST)))
            late = pc.and_kleene(is_last, final)
            first_final = pc.less_equal(pc.add(rows.column(FIRST), size), wm)
            partly = pc.and_kleene(pc.and_kleene(is_last, pc.invert(final)), first_final)
            n = pc.if_else(partly, rows.column(DUP), 0)
            keep = pc.and_kleene(readable, pc.invert(final))
        partials = rows.append_column("__n", n).filter(keep)
        partials = _combine(partials, group, out, spec.agg.sql_combine)
        dead = rows.filter(pc.or_kleene(pc.invert(readable), late))
        return _window_table(partials, dead, group, out, size, wm)


def _combine(rows: pa.Table, group: list[str], out: str, combine: str) -> pa.Table:
    """One row per (key, window): a candidate's open windows merged with the others."""
    how = _ARROW_COMBINE.get(combine)
    if how is None or rows.num_rows == 0:
        return rows.select([*group, WS, WE, out, T, "__n"])
    keys = [*group, WS, WE]
    merged = rows.group_by(keys, use_threads=False).aggregate(
        [(out, how), (T, "max"), ("__n", "sum")]
    )
    names = {f"{out}_{how}": out, f"{T}_max": T, "__n_sum": "__n"}
    merged = merged.rename_columns([names.get(c, c) for c in merged.column_names])
    return merged.select([*keys, out, T, "__n"]).cast(
        pa.schema([rows.schema.field(c) for c in [*keys, out, T, "__n"]])
    )


def _window_table(
    partials: pa.Table, dead: pa.Table, group: list[str], out: str, size: int, wm: int | None
) -> pa.Table:
    """Partial and dead-letter rows in the one-batch job's columns, its watermark recorded."""
    reasons = dead.column(REASON).to_pylist()
    if wm is not None:
        lasts = dead.column(LAST).to_pylist()
        texts = {s: late_reason(s, size, wm) for s in set(lasts) if s is not None}
        reasons = [r if r is not None else texts[s] for r, s in zip(reasons, lasts, strict=True)]
    p, d = partials.num_rows, dead.num_rows

    def typed(table: pa.Table, name: str) -> pa.DataType:
        return table.schema.field(name).type

    columns = {}
    for name in [*group, WS, WE, out]:
        columns[name] = pa.concat_arrays(
            [
                partials.column(name).combine_chunks(),
                dead.column(name).combine_chunks().cast(typed(partials, name))
                if name in group
                else pa.nulls(d, typed(partials, name)),
            ]
        )
    columns[KIND] = pa.array([PARTIAL] * p + [DEAD] * d, pa.int32())
    columns[REASON] = pa.concat_arrays([pa.nulls(p, pa.string()), pa.array(reasons, pa.string())])
    columns[VALUE] = pa.concat_arrays(
        [pa.nulls(p, pa.binary()), dead.column(VALUE).combine_chunks().cast(pa.binary())]
    )
    columns[T] = pa.concat_arrays(
        [partials.column(T).combine_chunks(), dead.column(T).combine_chunks().cast(pa.int64())]
    )
    columns[N] = pa.concat_arrays(
        [partials.column("__n").combine_chunks(), pa.nulls(d, pa.int64())]
    )
    columns[DUP] = pa.concat_arrays([pa.nulls(p, pa.int64()), dead.column(DUP).combine_chunks()])
    for name in (c for c in SOURCE if c in dead.column_names):  # a dead letter's record
        kind = dead.schema.field(name).type
        columns[name] = pa.concat_arrays([pa.nulls(p, kind), dead.column(name).combine_chunks()])
    table = pa.table(columns)
    return table.replace_schema_metadata({b"watermark_us": b"" if wm is None else str(wm).encode()})


def window_chunk_job(
    frames: BatchContext, state: WindowedState, inflight: int | None
) -> tuple[Callable[[], ChunkPartials], int | None]:
    """An event-time window's job over the chunk, its lateness bounded by the log's timestamps.

    ``inflight``: an upper bound of the window's largest event time after the chunk in
    flight before this one (None: none). Builds the DataFrame now and returns its one Spark
    job (none when the state receives no tuple: its rows typed from the schema) and the same
    bound after this chunk. The job's ``Observation`` on the spout's decode counts the
    spout's dead letters too (``counted_dead``), so they cost a job of their own only when
    there are any.
    """
    from trident_assets.planner import is_live
    from trident_assets.spark.frame_schemas import empty_arrow

    spout = record_time_spout(state.node.args[EVENT_WINDOW], state.node.parents[0])
    assert spout is not None  # the planner admits no other window into a chunk
    sid, reader = spout.args["spout_id"], spout.args["spout"]
    runner = frames.runner
    committed = window_store.last_committed(runner.store, state)[0]  # largest event time
    before = max((t for t in (committed, inflight) if t is not None), default=None)
    tops: list[int | None] = []
    for _, plans in frames.batches:
        plan = plans[sid]
        top = reader.max_timestamp_ms(runner.log, plan) if plan.record_count else None
        tops.append(UNBOUNDED if top is UNKNOWN else None if top is None else top * 1000)
    bounds, after = chunk_bounds(before, tops, state.windowed.window.lateness_us)
    parent, txids = state.node.parents[0], frames.txids
    if not is_live(parent, frames.live):
        tagged = frames.tagged(parent)
        none = empty_arrow(_chunk_frame(tagged, state, bounds)).drop_columns([TXID_COLUMN])
        return lambda: ChunkPartials({txid: WindowSlice(state, none) for txid in txids}), after
    # each tuple with its record (a dead letter's provenance); its decode counts dead letters
    traced = observed_frame(frames.tagged_raw, parent, SOURCE, (TXID_COLUMN,))
    df = _chunk_frame(frames.tagged(parent) if traced is None else traced[0], state, bounds)

    def run() -> ChunkPartials:
        split = split_by_txid(df.toArrow(), txids)
        counted = {} if traced is None else count_dead(traced[1])
        slices = {txid: WindowSlice(state, rows) for txid, rows in split.items()}
        return ChunkPartials(dict(slices), counted_dead=counted)

    return run, after


def _chunk_frame(parent: Any, state: WindowedState, bounds: Sequence[int | None]) -> Any:
    """The chunk job's DataFrame over ``parent`` (the state's input, tagged by batch)."""
    from pyspark.sql import functions as F

    spec: WindowedAggregation = state.node.args[EVENT_WINDOW]
    w, group = spec.window, list(spec.group)
    key = (spec, parent.schema.json(), "chunk")
    c = reuse(
        state, "window_chunk", key, parent, lambda: window_columns(parent, spec, (TXID_COLUMN,))
    )
    tag = F.col(TXID_COLUMN)
    # one SQL call; no null element (its nullability would change the generated code)
    known = ", ".join(f"{NO_BOUND if b is None else int(b)}L" for b in bounds)
    bound = F.element_at(F.expr(f"array({known})"), (tag + 1).cast("int"))
    records = parent.select(*c.base, tag).withColumns(c.bounds)
    dead = c.unreadable
    candidate = c.readable & (c.first_end <= bound)
    sliding = w.slide_us != w.size_us
    ws = F.when(~dead, c.windows)
    rows = records.select(
        tag,
        *[F.col(g) for g in group],
        F.col("__in"),
        F.col(T),
        F.col(FIRST),
        F.col(LAST),
        F.when(dead, F.col(REASON)).alias(REASON),
        F.when(dead | candidate, F.col(VALUE)).alias(VALUE),
        *[F.when(dead | candidate, F.col(s)).alias(s) for s in c.source],
        (F.explode_outer(ws) if sliding else ws).alias(WS),
    ).withColumn(WE, c.window_end)
    grouped = rows.groupBy(tag, *group, WS, WE, REASON, VALUE, *c.source).agg(
        *c.aggs,
        F.count(F.lit(1)).alias(DUP),
        F.max(FIRST).alias(FIRST),
        F.max(LAST).alias(LAST),
    )
    return grouped.select(
        tag,
        *[F.col(g) for g in group],
        F.col(WS).cast("bigint").alias(WS),
        F.col(WE).cast("bigint").alias(WE),
        F.col(spec.output),
        F.col(REASON).cast("string").alias(REASON),
        F.col(VALUE).cast("binary").alias(VALUE),
        F.col(T).cast("bigint").alias(T),
        F.col(DUP).cast("bigint").alias(DUP),
        F.col(FIRST).cast("bigint").alias(FIRST),
        F.col(LAST).cast("bigint").alias(LAST),
        *[F.col(s) for s in c.source],
    )

"""Running an event-time windowed aggregation for one batch.

Declared by :mod:`trident_assets.stream.event_windows`, under the rules of
:mod:`trident_assets.core.event_windows`. A window timed by the record timestamp runs
several txids in one job instead (:mod:`.event_window_chunks`); its commit half is
:func:`apply_window_state` too. Two halves around the commit, like a single join:

* :func:`window_input` (batch phase): one Spark action gives the partials and the dead
  letters (unreadable or late records) as one Arrow table, late decided against the
  watermark committed before this txid; the spout's dead letters are counted by the same
  scan (:mod:`.observed`) and fetched only when there are any.
* :func:`apply_window_state` (inside the commit transaction): the partials go to the store
  (:mod:`trident_assets.backends.window_store`), the dead letters to the batch's, the
  windows the new watermark made final to the state's new values.

The job's columns and their watermark-free expressions (built once per state:
:mod:`trident_assets.spark.column_cache`) are in :mod:`trident_assets.spark.window_columns`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends.window_store import (
    Committed,
    WindowBatch,
    apply_window_batch,
    last_watermark_us,
)
from trident_assets.core.event_windows import EventWindow
from trident_assets.runtime.outcomes import Applied, StateInput, StateOutcome
from trident_assets.spark.column_cache import reuse
from trident_assets.spark.dead_letter_jobs import take_spout_dead, with_spout_dead
from trident_assets.spark.observed import count_dead, observed_frame
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
    WindowColumns,
    utc_text,
    window_columns,
)
from trident_assets.stream.event_windows import WindowedAggregation
from trident_assets.stream.state_kinds import EVENT_WINDOW

if TYPE_CHECKING:
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.event_windows import WindowedState

__all__ = ["apply_window_state", "window_input"]


def window_input(run: BatchContext, state: WindowedState) -> StateInput:
    """The batch's partials and dead letters for ``state`` as one Arrow table (one action).

    Columns: the key fields, ``__ws``/``__we`` (window bounds in epoch microseconds), the
    output field (the partial), ``__kind`` (partial or dead letter), ``__reason`` and
    ``__value`` (a dead letter's reason and its record as JSON), ``__t`` (the largest event
    time of a partial's records), ``__n`` (sliding, once a watermark exists: the partly
    late records, i.e. with some of their windows final, each counted in the row of its
    last window) and, tumbling/sliding, ``__dup`` (a dead letter row stands for this many
    identical ones). The table's metadata records the watermark the batch was decided against.

    Raises:
        ConfigError: the time field's type does not fit the declaration; nothing was
            written.
    """
    from pyspark.sql import functions as F

    store = run.runner.store
    spec: WindowedAggregation = state.node.args[EVENT_WINDOW]
    w, group = spec.window, list(spec.group)
    wm = last_watermark_us(store, state)
    node = state.node.parents[0]
    # each tuple with its source record (a dead letter's provenance), where one spout's
    # records reach the window row by row; None otherwise
    traced = observed_frame(run.raw, node, SOURCE)
    observed = None
    if traced is not None and w.kind != "session" and run.uncounted_spout(state.node) is not None:
        observed = traced  # its one scan counts the spout's dead letters too
    fold = None
    if observed is not None:
        parent = observed[0]
    else:
        parent = traced[0] if traced is not None else run.frame(node)
        fold = run.fold_dead(state.node)
    key = (spec, parent.schema.json())
    c = reuse(state, "window_input", key, parent, lambda: window_columns(parent, spec))
    base = parent.select(*c.base)
    wm_lit = None if wm is None else F.lit(wm).cast("bigint")
    if w.kind == "session":
        result = _sessions(base, c, w, group, wm_lit)
    else:
        result = _one_pass(base, c, w, group, spec.output, wm_lit)
    if fold is not None:
        result = with_spout_dead(result, fold[1], state)
    table = result.toArrow()
    # the dead letters job (spark/dead_letter_jobs.py) reads them only if there are any
    counted = {} if observed is None else count_dead(observed[1])
    folded: dict[str, pa.Table] = {}
    if fold is not None:
        schema = run.empty_dead_letters(fold[0]).schema
        table, folded[fold[0]] = take_spout_dead(schema, table)
    meta = {b"watermark_us": b"" if wm is None else str(wm).encode()}
    batch = table.replace_schema_metadata(meta)
    return StateInput(batch, counted_dead=counted, folded_dead=folded)


def _sessions(base: Any, c: WindowColumns, w: EventWindow, group: list[str], wm_lit: Any) -> Any:
    """Sessions: partials of the live records (islands need them sorted), then dead letters.

    Two branches of one action: the records are read twice.
    """
    from pyspark.sql import functions as F

    live = base.where(c.readable)
    late = None
    if wm_lit is not None:
        late = F.col(T) < wm_lit
        live = live.where(~late)
    for name, column in c.islands.items():  # __island reads __new
        live = live.withColumn(name, column)
    partials = live.groupBy(*group, "__island").agg(*c.aggs)
    part_rows = partials.select(*c.rows, F.lit(None).cast("bigint").alias(N))
    if late is None:
        dead_rows = base.where(c.unreadable).select(*c.dead_rows, REASON)
    else:  # _split puts the unreadable records first (by __t null)
        reason = F.coalesce(F.col(REASON), _late_reason(w, wm_lit)).alias(REASON)
        dead_rows = base.where(c.unreadable | late).select(*c.dead_rows, reason, T)
    return part_rows.unionByName(dead_rows, allowMissingColumns=True)


def _one_pass(
    base: Any, c: WindowColumns, w: EventWindow, group: list[str], out: str, wm_lit: Any
) -> Any:
    """Tumbling/sliding: partials and dead letters from ONE scan and one aggregation.

    A dead record (unreadable event time, or late: its last window is final) keeps one row
    with a null ``__ws``, its reason and its value; a live one a row per window of it that
    is not final. Grouping by (key, window, reason, value) gives the partials (reason and
    value null) and the dead letters (window null), identical dead letters counted in
    ``__dup``.
    """
    from pyspark.sql import functions as F

    late = None if wm_lit is None else c.last_end <= wm_lit
    records = base.withColumns(c.bounds).withColumn(
        "__dead", c.unreadable if late is None else c.unreadable | late
    )
    dead = F.col("__dead")
    reason = F.col(REASON) if late is None else F.coalesce(F.col(REASON), _late_reason(w, wm_lit))
    sliding = w.slide_us != w.size_us
    ws = F.when(~dead, c.windows)
    rows = records.select(
        *[F.col(g) for g in group],
        F.col("__in"),
        F.col(T),
        F.col("__first"),
        F.col("__last"),
        F.when(dead, reason).alias(REASON),
        F.when(dead, F.col(VALUE)).alias(VALUE),
        *[F.when(dead, F.col(s)).alias(s) for s in c.source],
        (F.explode_outer(ws) if sliding else ws).alias(WS),
    ).withColumn(WE, c.window_end)
    aggs = [*c.aggs, F.count(F.lit(1)).alias(DUP)]
    partly = F.lit(None).cast("bigint")
    if wm_lit is not None and sliding:  # drop a partly late record's final windows
        rows = rows.where(F.col(WS).isNull() | (F.col(WE) > wm_lit))
        counted = F.when(c.is_last & (c.first_end <= wm_lit), 1).otherwise(0)
        aggs.append(F.sum(counted).cast("bigint").alias(N))
        partly = F.col(N)
    grouped = rows.groupBy(*group, WS, WE, REASON, VALUE, *c.source).agg(*aggs)
    return grouped.select(
        *[F.col(g) for g in group],
        F.col(WS).cast("bigint").alias(WS),
        F.col(WE).cast("bigint").alias(WE),
        F.col(out),
        F.when(F.col(WS).isNull(), F.lit(DEAD)).otherwise(F.lit(PARTIAL)).alias(KIND),
        F.col(REASON).cast("string").alias(REASON),
        F.col(VALUE).cast("binary").alias(VALUE),
        F.col(T).cast("bigint").alias(T),
        partly.alias(N),
        F.col(DUP),
        *[F.col(s) for s in c.source],
    )


def _late_reason(window: EventWindow, wm_lit: Any) -> Any:
    """A late record's dead-letter reason (a string column), naming the watermark."""
    from pyspark.sql import functions as F

    if window.kind == "session":
        return F.concat(
            F.lit("late record: event time "),
            utc_text(F.col(T)),
            F.lit(" is before the watermark "),
            utc_text(wm_lit),
            F.lit(" (sessions ending at or before the watermark are final)"),
        )
    last_end = F.col("__last") + F.lit(window.size_us).cast("bigint")
    return F.concat(
        F.lit("late record: its window ["),
        utc_text(F.col("__last")),
        F.lit(", "),
        utc_text(last_end),
        F.lit(") is final (window_end <= watermark "),
        utc_text(wm_lit),
        F.lit(")"),
    )


def _split(table: pa.Table, state: WindowedState) -> tuple[pa.Table, pa.Table, int | None, int]:
    """``(partials, dead letters, batch max event time, partly late records)``.

    The batch's largest event time is the largest of its partials': a late record's event
    time is below the watermark it was decided against, hence below the committed maximum,
    so leaving it out changes no stored maximum; a batch without partials has none (None).
    """
    spec: WindowedAggregation = state.node.args[EVENT_WINDOW]
    kinds = table.column(KIND)
    rows = table.filter(pc.equal(kinds, PARTIAL))
    partials = rows.select([*spec.group, WS, WE, spec.output])
    dead = table.filter(pc.equal(kinds, DEAD))
    if DUP in dead.column_names:  # one row per group of identical dead letters: expand
        dup = dead.column(DUP).fill_null(1).to_numpy(zero_copy_only=False)
        dead = dead.take(pa.array(np.repeat(np.arange(dead.num_rows), dup)))
    source = [c for c in SOURCE if c in dead.column_names]
    order = dead.select([T, VALUE, *source])
    order = order.append_column("__valid", pc.is_valid(dead.column(T)))
    # unreadable first, then by event time, value and source record: the same order on
    # every replay
    keys = ["__valid", T, VALUE, *source]
    dead = dead.take(pc.sort_indices(order, [(k, "ascending") for k in keys]))
    top = pc.max(rows.column(T)).as_py()
    partly = pc.sum(rows.column(N)).as_py() or 0
    n = dead.num_rows
    where = dict(zip(("topic", "partition", "offset"), SOURCE, strict=True))
    types = {"topic": pa.string(), "partition": pa.int32(), "offset": pa.int64()}
    letters = pa.table(
        {
            **{
                name: dead.column(where[name]).cast(kind)
                if where[name] in dead.column_names
                else pa.nulls(n, kind)
                for name, kind in types.items()
            },
            "reason": dead.column(REASON).cast(pa.string()),
            "value": dead.column(VALUE).cast(pa.binary()),
        }
    )
    return partials, letters, top, int(partly)


def apply_window_state(
    run: BatchContext, state: WindowedState, table: pa.Table, committed: Committed | None = None
) -> Applied:
    """Apply the batch inside the open commit transaction.

    ``table``: :func:`window_input`'s, or a chunk's resolved
    :class:`~trident_assets.spark.event_window_chunks.WindowSlice`; ``committed``: the
    state's last watermark row when read in this transaction already (it resolved the slice).

    Returns what it did: the windows this txid made final (its new values), its dead
    letters (late records) and its ``WindowOutcome``.
    """
    store = run.runner.store
    partials, letters, top, partly = _split(table, state)
    raw = (table.schema.metadata or {}).get(b"watermark_us", b"")
    decided = int(raw) if raw else None
    result = apply_window_batch(
        store, state, run.txid, WindowBatch(partials, top, decided, committed)
    )
    name = state.spec.name
    late = int(pc.sum(pc.starts_with(letters.column("reason"), "late record")).as_py() or 0)
    outcome = StateOutcome(
        name, state.table, partials.num_rows, partials.num_rows, 0, result.open_windows
    )
    return Applied(
        outcome,
        new_values=result.finals,
        dead={f"window:{name}": letters},  # no spout id holds ":"
        window=result.outcome(late, letters.num_rows - late, partly),
    )

"""Running an event-time windowed aggregation for one batch.

Declared by :mod:`trident_assets.stream.event_windows`.

Two halves around the commit, like a single join:

* :func:`window_input` (batch phase, before the commit transaction): one Spark job computes
  the batch's partials per (key, window) (tumbling/sliding by column arithmetic, sliding
  exploded to each window of a record; sessions per key within the batch, as gap islands
  of the sorted events), the records that go to dead letters (null, unparseable or late
  event time, with their reason) and the batch's largest event time. Late is decided
  against the watermark committed before this txid (the rules of
  :mod:`trident_assets.core.event_windows`). Everything comes back as one Arrow table.
* :func:`apply_window_state` (inside the commit transaction): the partials go to the store
  (:mod:`trident_assets.backends.window_store`), the dead letters to the batch's dead
  letters, the windows the new watermark made final to the state's new values.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends.window_store import (
    WindowBatch,
    apply_window_batch,
    check_window_store,
    last_watermark_us,
)
from trident_assets.core.event_windows import EventWindow
from trident_assets.errors import ConfigError
from trident_assets.spark.aggregation import sql_expr
from trident_assets.spark.outcomes import StateOutcome
from trident_assets.stream.event_windows import EVENT_WINDOW, WindowedAggregation

if TYPE_CHECKING:
    from trident_assets.spark.batch_run import BatchRun
    from trident_assets.stream.event_windows import WindowedState

__all__ = ["KIND", "WS", "apply_window_state", "window_dead_letters_key", "window_input"]

T, WS, WE, KIND, REASON, VALUE, N = (
    "__t",
    "__ws",
    "__we",
    "__kind",
    "__reason",
    "__value",
    "__n",
)
PARTIAL, DEAD, STATS = 0, 1, 2
"""``__kind`` of a row: a partial of one (key, window), a dead letter, the batch's stats."""


def window_dead_letters_key(state: str) -> str:
    """The ``spout`` column of a windowed state's dead letters (no spout id holds ``:``)."""
    return f"window:{state}"


def _event_micros(df: Any, window: EventWindow) -> tuple[Any, Any]:
    """``(micros, reason)`` columns: the event time in epoch microseconds, and why it is null.

    The micros column is null where the field is null or unreadable.

    Raises:
        ConfigError: the field's type does not fit ``window.time_unit``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        DateType,
        IntegralType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    name = window.time_field
    col = F.col(name)
    kind = df.schema[name].dataType
    null_reason = F.lit(f"event time field {name!r} is null")
    if window.time_unit == "timestamp":
        if isinstance(kind, TimestampType | TimestampNTZType | DateType):
            micros = F.unix_micros(col.cast("timestamp"))
            return micros, F.when(col.isNull(), null_reason)
        if isinstance(kind, StringType):
            parsed = F.try_to_timestamp(col)
            micros = F.unix_micros(parsed)
            bad = F.concat(
                F.lit(f"event time field {name!r} value '"),
                col,
                F.lit("' is not a timestamp (ISO-8601, e.g. 2026-01-31 12:00:00)"),
            )
            return micros, F.when(col.isNull(), null_reason).when(parsed.isNull(), bad)
        msg = (
            f"event time field {name!r} is {kind.simpleString()}: a timestamp window needs a "
            "TIMESTAMP (or an ISO-8601 string); for integer epoch times declare "
            "time_unit='ms' or time_unit='s'"
        )
        raise ConfigError(msg)
    if isinstance(kind, IntegralType):
        micros = col.cast("bigint") * F.lit(window.to_micros(1))
        return micros, F.when(col.isNull(), null_reason)
    msg = (
        f"event time field {name!r} is {kind.simpleString()}: time_unit={window.time_unit!r} "
        "needs an integer field (epoch); for a TIMESTAMP field use time_unit='timestamp'"
    )
    raise ConfigError(msg)


def _utc(micros: Any) -> Any:
    """A micros column as ``YYYY-MM-DD HH:MM:SS.ffffff UTC`` text (the session is in UTC)."""
    from pyspark.sql import functions as F

    text = F.date_format(F.timestamp_micros(micros), "yyyy-MM-dd HH:mm:ss.SSSSSS")
    return F.concat(text, F.lit(" UTC"))


def window_input(run: BatchRun, state: WindowedState) -> pa.Table:
    """The batch's partials, dead letters and stats for ``state`` as one Arrow table.

    Columns: the key fields, ``__ws``/``__we`` (window bounds in epoch microseconds), the
    output field (the partial), ``__kind`` (partial, dead letter or stats), ``__reason`` and
    ``__value`` (a dead letter's reason and its record as JSON) and ``__n``. The stats row
    holds the batch's largest event time in ``__ws`` and its partly late records (sliding
    records with some of their windows final) in ``__n``. The table's metadata records the
    watermark the batch was decided against.

    Raises:
        ConfigError: the store cannot hold event windows, or the time field's type does
            not fit the declaration; nothing was written.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    store = run.runner.store
    check_window_store(store)
    spec: WindowedAggregation = state.node.args[EVENT_WINDOW]
    w, group, out = spec.window, list(spec.group), spec.output
    wm = last_watermark_us(store, state)
    parent = run.frame(state.node.parents[0])
    fields = list(parent.columns)
    micros, reason = _event_micros(parent, w)
    value = F.to_json(F.struct(*[F.col(f) for f in fields])).cast("binary")
    column = spec.input or w.time_field
    base = parent.select(
        *[F.col(g) for g in group],
        F.col(column).alias("__in"),
        micros.alias(T),
        reason.alias(REASON),
        value.alias(VALUE),
    )
    base = base.persist()  # read and decoded once for the three parts below
    agg_value = sql_expr(spec.agg, "__in").alias(out)
    wm_lit = F.lit(wm).cast("bigint")
    valid = base.where(F.col(T).isNotNull())
    if w.kind == "session":
        late = wm_lit.isNotNull() & (F.col(T) < wm_lit)
        late_reason = F.concat(
            F.lit("late record: event time "),
            _utc(F.col(T)),
            F.lit(" is before the watermark "),
            _utc(wm_lit),
            F.lit(" (sessions ending at or before the watermark are final)"),
        )
        live = valid.where(~late) if wm is not None else valid
        order = Window.partitionBy(*group).orderBy(T)
        gap = F.lit(w.gap_us).cast("bigint")
        prev_end = F.max(F.col(T) + gap).over(order.rowsBetween(Window.unboundedPreceding, -1))
        fresh = F.when(prev_end.isNull() | (F.col(T) >= prev_end), 1).otherwise(0)
        islands = live.withColumn("__new", fresh).withColumn(
            "__island", F.sum("__new").over(order.rowsBetween(Window.unboundedPreceding, 0))
        )
        partials = islands.groupBy(*group, "__island").agg(
            F.min(T).alias(WS), (F.max(T) + gap).alias(WE), agg_value
        )
        partly = F.lit(0).cast("bigint")
    else:
        size, slide = F.lit(w.size_us).cast("bigint"), F.lit(w.slide_us).cast("bigint")
        start = F.col(T) - F.col(T) % slide  # % is the remainder; fixed below for t < 0
        start = F.when(F.col(T) % slide < 0, start - slide).otherwise(start)
        first = F.col(T) - size
        first_start = F.when(first % slide < 0, first - first % slide - slide).otherwise(
            first - first % slide
        )
        first_start = first_start + slide
        valid = valid.withColumn("__last", start).withColumn("__first", first_start)
        last_end = F.col("__last") + size
        first_end = F.col("__first") + size
        late = wm_lit.isNotNull() & (last_end <= wm_lit)
        late_reason = F.concat(
            F.lit("late record: its window ["),
            _utc(F.col("__last")),
            F.lit(", "),
            _utc(last_end),
            F.lit(") is final (window_end <= watermark "),
            _utc(wm_lit),
            F.lit(")"),
        )
        partly = F.sum(
            F.when(wm_lit.isNotNull() & (first_end <= wm_lit) & (last_end > wm_lit), 1).otherwise(0)
        ).cast("bigint")
        exploded = valid.withColumn(
            WS, F.explode(F.sequence(F.col("__first"), F.col("__last"), slide))
        ).withColumn(WE, F.col(WS) + size)
        if wm is not None:
            exploded = exploded.where(F.col(WE) > wm_lit)
        partials = exploded.groupBy(*group, WS, WE).agg(agg_value)
    part_rows = partials.select(
        *group,
        F.col(WS).cast("bigint").alias(WS),
        F.col(WE).cast("bigint").alias(WE),
        F.col(out),
        F.lit(PARTIAL).alias(KIND),
        F.lit(None).cast("string").alias(REASON),
        F.lit(None).cast("binary").alias(VALUE),
        F.lit(None).cast("bigint").alias(N),
    )
    unreadable = base.where(F.col(T).isNull()).select(*group, REASON, VALUE)
    late_rows = valid.where(late).select(*group, late_reason.alias(REASON), VALUE)
    dead_rows = unreadable.unionByName(late_rows).select(
        *group,
        F.lit(None).cast("bigint").alias(WS),
        F.lit(None).cast("bigint").alias(WE),
        F.lit(None).cast(part_rows.schema[out].dataType).alias(out),
        F.lit(DEAD).alias(KIND),
        REASON,
        VALUE,
        F.lit(None).cast("bigint").alias(N),
    )
    stats = valid.agg(F.max(T).alias(WS), partly.alias(N)).select(
        *[F.lit(None).cast(parent.schema[g].dataType).alias(g) for g in group],
        F.col(WS).cast("bigint").alias(WS),
        F.lit(None).cast("bigint").alias(WE),
        F.lit(None).cast(part_rows.schema[out].dataType).alias(out),
        F.lit(STATS).alias(KIND),
        F.lit(None).cast("string").alias(REASON),
        F.lit(None).cast("binary").alias(VALUE),
        F.col(N),
    )
    try:
        table = reduce(lambda a, b: a.unionByName(b), [part_rows, dead_rows, stats]).toArrow()
    finally:
        base.unpersist()
    meta = {b"watermark_us": b"" if wm is None else str(wm).encode()}
    return table.replace_schema_metadata(meta)


def _split(table: pa.Table, state: WindowedState) -> tuple[pa.Table, pa.Table, int | None, int]:
    """``(partials, dead letters, batch max event time, partly late records)``."""
    spec: WindowedAggregation = state.node.args[EVENT_WINDOW]
    kinds = table.column(KIND)
    partials = table.filter(pc.equal(kinds, PARTIAL)).select([*spec.group, WS, WE, spec.output])
    dead = table.filter(pc.equal(kinds, DEAD))
    stats = table.filter(pc.equal(kinds, STATS))
    top = stats.column(WS)[0].as_py() if stats.num_rows else None
    partly = (stats.column(N)[0].as_py() or 0) if stats.num_rows else 0
    n = dead.num_rows
    letters = pa.table(
        {
            "topic": pa.nulls(n, pa.string()),
            "partition": pa.nulls(n, pa.int32()),
            "offset": pa.nulls(n, pa.int64()),
            "reason": dead.column(REASON).cast(pa.string()),
            "value": dead.column(VALUE).cast(pa.binary()),
        }
    )
    return partials, letters, top, int(partly)


def apply_window_state(run: BatchRun, state: WindowedState, table: pa.Table) -> StateOutcome:
    """Apply the batch (from :func:`window_input`) inside the open commit transaction.

    Leaves the windows this txid made final in ``run.new_values``, the dead letters in
    ``run.extra_dead`` and what it did in ``run.windows``.
    """
    store = run.runner.store
    partials, letters, top, partly = _split(table, state)
    raw = (table.schema.metadata or {}).get(b"watermark_us", b"")
    decided = int(raw) if raw else None
    result = apply_window_batch(store, state, run.txid, WindowBatch(partials, top, decided))
    name = state.spec.name
    run.new_values[name] = result.finals
    run.extra_dead[window_dead_letters_key(name)] = letters
    late = int(pc.sum(pc.starts_with(letters.column("reason"), "late record")).as_py() or 0)
    run.windows[name] = result.outcome(late, letters.num_rows - late, partly)
    return StateOutcome(
        name, state.table, partials.num_rows, partials.num_rows, 0, result.open_windows
    )

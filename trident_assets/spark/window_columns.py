"""The columns of an event-time windowed state's job, and their watermark-free expressions.

The job's table has the key fields and the ``__``-named columns below (:data:`T`, :data:`WS`,
...), each row a partial of one (key, window) or a dead letter (:data:`KIND`).
:func:`window_columns` builds the column expressions that do not depend on the watermark
once per state (:class:`WindowColumns`); :mod:`trident_assets.spark.event_windows` and
:mod:`trident_assets.spark.event_window_chunks` build their jobs from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trident_assets.core.event_windows import EventWindow
from trident_assets.errors import ConfigError
from trident_assets.spark.aggregation import sql_expr
from trident_assets.stream.event_windows import WindowedAggregation

__all__ = [
    "DEAD",
    "DUP",
    "KIND",
    "PARTIAL",
    "REASON",
    "SOURCE",
    "SPOUT_DEAD",
    "SPOUT_DEAD_COLUMNS",
    "VALUE",
    "WE",
    "WS",
    "N",
    "T",
    "WindowColumns",
    "utc_text",
    "window_columns",
]

T, WS, WE, KIND, REASON, VALUE, N, DUP = (
    "__t",
    "__ws",
    "__we",
    "__kind",
    "__reason",
    "__value",
    "__n",
    "__dup",
)
PARTIAL, DEAD, SPOUT_DEAD = 0, 1, 2
"""``__kind`` of a row: a partial of one (key, window), a dead letter of the state, a dead
letter of the spout's scheme (collected for :class:`BatchRun`, not part of the result)."""
SOURCE = ("__src_topic", "__src_partition", "__src_offset")
"""The columns under which a window's input may carry each tuple's source record (topic,
partition, offset): a dead letter's provenance."""
SPOUT_DEAD_COLUMNS = {"topic": "__topic", "partition": "__partition", "offset": "__offset"}
"""The spout dead letters' own columns in the job's table (``reason``/``value``: ``__reason``,
``__value``)."""


def event_micros(df: Any, window: EventWindow) -> tuple[Any, Any]:
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


def utc_text(micros: Any) -> Any:
    """A micros column as ``YYYY-MM-DD HH:MM:SS.ffffff UTC`` text (the session is in UTC)."""
    from pyspark.sql import functions as F

    text = F.date_format(F.timestamp_micros(micros), "yyyy-MM-dd HH:mm:ss.SSSSSS")
    return F.concat(text, F.lit(" UTC"))


@dataclass(frozen=True)
class WindowColumns:
    """The watermark-free column expressions of one windowed state (built once, reused)."""

    base: list[Any]
    """Select list of the batch's records: key fields, ``__in``, ``__t``, reason, ``__value``."""
    readable: Any
    """Filter: the event time could be read."""
    unreadable: Any
    """Filter: the event time is null or could not be read."""
    aggs: list[Any]
    """The aggregates per (key, window): the partial and ``__t`` (its largest event time);
    sessions also the window bounds."""
    rows: list[Any]
    """Select list of a partial row: every column of the result but ``__n``."""
    dead_rows: list[Any]
    """Select list of a dead letter's row but its reason (missing columns: typed nulls)."""
    source: tuple[str, ...] = ()
    """The :data:`SOURCE` columns the input carries (a dead letter's provenance), or none."""
    islands: dict[str, Any] | None = None
    """Session: ``__new`` (the record opens a session) and ``__island`` (its session)."""
    bounds: dict[str, Any] | None = None
    """Tumbling/sliding: ``__last``/``__first``, the starts of a record's last/first window."""
    windows: Any = None
    """Tumbling/sliding: ``__ws`` of a live record's row; sliding: an array of the starts of
    its windows (exploded), tumbling: the start of its one window (no explode)."""
    window_end: Any = None
    """Tumbling/sliding: ``__we`` of a row's window."""
    last_end: Any = None
    """Tumbling/sliding: the end of a record's last window."""
    first_end: Any = None
    """Tumbling/sliding: the end of a record's first window."""
    is_last: Any = None
    """Tumbling/sliding: the row's window is the record's last one."""


def window_columns(
    parent: Any, spec: WindowedAggregation, skip: tuple[str, ...] = ()
) -> WindowColumns:
    """Build :class:`WindowColumns` for ``spec`` over ``parent``'s fields.

    ``skip``: columns of ``parent`` that are not fields of the stream (a chunk's batch tag),
    left out of a dead letter's value. The :data:`SOURCE` columns ``parent`` carries are kept
    in the base and a dead letter's row, never in its value.

    Raises:
        ConfigError: the time field's type does not fit ``spec.window.time_unit``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w, group, out = spec.window, list(spec.group), spec.output
    micros, reason = event_micros(parent, w)
    source = tuple(c for c in SOURCE if c in parent.columns)
    fields = [f for f in parent.columns if f not in skip and f not in source]
    value = F.to_json(F.struct(*[F.col(f) for f in fields])).cast("binary")
    t = F.col(T)
    common = {
        "base": [
            *[F.col(g) for g in group],
            F.col(spec.input or w.time_field).alias("__in"),
            micros.alias(T),
            reason.alias(REASON),
            value.alias(VALUE),
            *[F.col(c) for c in source],
        ],
        "source": source,
        "readable": t.isNotNull(),
        "unreadable": t.isNull(),
        "rows": [
            *[F.col(g) for g in group],
            F.col(WS).cast("bigint").alias(WS),
            F.col(WE).cast("bigint").alias(WE),
            F.col(out),
            F.lit(PARTIAL).alias(KIND),
            F.lit(None).cast("string").alias(REASON),
            F.lit(None).cast("binary").alias(VALUE),
            t.cast("bigint").alias(T),
        ],
        "dead_rows": [
            *[F.col(g) for g in group],
            F.lit(DEAD).alias(KIND),
            F.col(VALUE),
            *[F.col(c) for c in source],
        ],
    }
    agg_value = sql_expr(spec.agg, "__in").alias(out)
    if w.kind == "session":
        order = Window.partitionBy(*group).orderBy(T)
        gap = F.lit(w.gap_us).cast("bigint")
        prev_end = F.max(t + gap).over(order.rowsBetween(Window.unboundedPreceding, -1))
        islands = {
            "__new": F.when(prev_end.isNull() | (t >= prev_end), 1).otherwise(0),
            "__island": F.sum("__new").over(order.rowsBetween(Window.unboundedPreceding, 0)),
        }
        aggs = [F.min(T).alias(WS), (F.max(T) + gap).alias(WE), agg_value, F.max(T).alias(T)]
        return WindowColumns(**common, aggs=aggs, islands=islands)
    size, slide = F.lit(w.size_us).cast("bigint"), F.lit(w.slide_us).cast("bigint")
    start = t - t % slide  # % is the remainder; fixed below for t < 0
    start = F.when(t % slide < 0, start - slide).otherwise(start)
    first = t - size
    first_start = F.when(first % slide < 0, first - first % slide - slide).otherwise(
        first - first % slide
    )
    return WindowColumns(
        **common,
        aggs=[agg_value, F.max(T).alias(T)],
        bounds={"__last": start, "__first": first_start + slide},
        windows=F.col("__last")
        if w.slide_us == w.size_us  # a tumbling record's first window is its last one
        else F.sequence(F.col("__first"), F.col("__last"), slide),
        window_end=F.col(WS) + size,
        last_end=F.col("__last") + size,
        first_end=F.col("__first") + size,
        is_last=F.col(WS) == F.col("__last"),
    )

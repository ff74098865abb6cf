"""The log's records: the segment schema, one record to append, and tables normalized to it."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.errors import ConfigError

__all__ = [
    "HEADERS_TYPE",
    "LOG_SCHEMA",
    "SEGMENT_PATTERN",
    "SPARK_ARROW_SCHEMA",
    "PartitionInfo",
    "Record",
    "Segment",
    "check_offset",
    "log_spark_schema",
    "now_ms",
    "records_to_table",
    "to_body",
]

HEADERS_TYPE = pa.list_(
    pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
)
"""Arrow type of the ``headers`` column: ``list<struct<key: string, value: binary>>``."""

LOG_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary(), nullable=False),
        pa.field("headers", HEADERS_TYPE),
    ]
)
"""Schema of every segment file and of every table :meth:`PartitionedLog.read` returns.

``timestamp`` is Parquet ``TIMESTAMP(MILLIS, isAdjustedToUTC=true)``: Spark reads it as a
``TimestampType`` (usable in windows) and Arrow as ``timestamp[ms, UTC]``; its integer value
is Kafka's epoch-millisecond timestamp.
"""

SPARK_ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)
"""The Arrow spelling of :func:`log_spark_schema` (what ``mapInArrow`` emits). Every field is
nullable because Spark reads Parquet files that way; the log never stores nulls in ``topic``,
``partition``, ``offset``, ``timestamp`` or ``value``."""

_BODY_SCHEMA = pa.schema([LOG_SCHEMA.field(n) for n in ("key", "value", "timestamp", "headers")])

SEGMENT_PATTERN = re.compile(r"(\d{20})-(\d{20})\.parquet")
"""Final segment file names (always used with ``fullmatch``); nothing else is ever read."""

BYTES = (bytes, bytearray, memoryview)
"""The Python types a record's key and value may have."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record to append.

    Attributes:
        value: The payload bytes (required, may be empty).
        key: The key bytes, or ``None`` (a null key is not the same as ``b""``).
        timestamp_ms: Epoch milliseconds (Kafka ``CreateTime``); ``None`` means "now" at append.
        headers: Ordered ``(name, value)`` pairs, or ``None``.
    """

    value: bytes
    key: bytes | None = None
    timestamp_ms: int | None = None
    headers: list[tuple[str, bytes | None]] | None = None


@dataclass(frozen=True, slots=True)
class Segment:
    """One published segment file holding offsets ``first .. last`` (inclusive)."""

    first: int
    last: int
    path: Path


class PartitionInfo(NamedTuple):
    """Offsets of one partition: ``earliest`` readable offset and ``latest`` (next to write)."""

    partition: int
    earliest: int
    latest: int


def now_ms() -> int:
    """The time now in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def _binary_column(col: pa.ChunkedArray | pa.Array, name: str) -> pa.ChunkedArray | pa.Array:
    t = col.type
    if t == pa.binary():
        return col
    kinds = ("binary", "large_binary", "binary_view", "string", "large_string", "string_view")
    if pa.types.is_null(t) or any(getattr(pa.types, f"is_{k}")(t) for k in kinds):
        return col.cast(pa.binary())
    msg = f"column {name!r} must be binary or string, got {t}"
    raise ConfigError(msg)


def _normalize_table(table: pa.Table) -> pa.Table:
    """Return ``table`` as ``key, value, timestamp, headers`` typed like :data:`LOG_SCHEMA`."""
    names = list(table.column_names)
    if len(set(names)) != len(names):
        msg = f"records table has duplicate column names: {names}"
        raise ConfigError(msg)
    allowed = {
        "key",
        "value",
        "timestamp",
        "timestamp_ms",
        "headers",
        "topic",
        "partition",
        "offset",
    }
    unknown = [n for n in names if n not in allowed]
    if unknown:
        msg = (
            f"records table has unknown column(s) {unknown}; expected 'value' and optionally "
            "'key', 'timestamp' (or 'timestamp_ms'), 'headers' (topic/partition/offset are "
            "ignored and reassigned)"
        )
        raise ConfigError(msg)
    if "value" not in names:
        msg = f"records table has no 'value' column (columns: {names})"
        raise ConfigError(msg)
    if "timestamp" in names and "timestamp_ms" in names:
        msg = "records table has both 'timestamp' and 'timestamp_ms'; keep one"
        raise ConfigError(msg)
    n = table.num_rows
    value = _binary_column(table.column("value"), "value")
    if value.null_count:
        msg = f"records table has {value.null_count} null value(s); values are required bytes"
        raise ConfigError(msg)
    key = _binary_column(table.column("key"), "key") if "key" in names else pa.nulls(n, pa.binary())
    ts_name = "timestamp" if "timestamp" in names else "timestamp_ms"
    ts_type = LOG_SCHEMA.field("timestamp").type
    if ts_name in names:
        ts = table.column(ts_name)
        if pa.types.is_integer(ts.type) or pa.types.is_null(ts.type):
            ts = ts.cast(pa.int64()).cast(ts_type)
        elif pa.types.is_timestamp(ts.type):
            # A naive timestamp is taken as UTC; sub-millisecond precision is truncated.
            ts = pc.cast(ts, pa.timestamp("ms", tz="UTC"), safe=False)
        else:
            msg = f"column {ts_name!r} must be int64 epoch ms or a timestamp, got {ts.type}"
            raise ConfigError(msg)
        if ts.null_count:
            ts = ts.fill_null(pa.scalar(now_ms(), pa.int64()).cast(ts_type))
    else:
        ts = pa.array(np.full(n, now_ms(), dtype=np.int64)).cast(ts_type)
    if "headers" in names:
        try:
            headers = table.column("headers").cast(HEADERS_TYPE)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            msg = f"column 'headers' must be {HEADERS_TYPE}, got {table.column('headers').type}"
            raise ConfigError(msg) from exc
    else:
        headers = pa.nulls(n, HEADERS_TYPE)
    return pa.Table.from_arrays([key, value, ts, headers], schema=_BODY_SCHEMA)


def records_to_table(
    values: Sequence[Any],
    keys: Sequence[Any],
    timestamps: Sequence[int | None],
    headers: Sequence[Any],
) -> pa.Table:
    """A body table (key, value, timestamp, headers) of columns; ``None`` timestamps: now.

    Raises:
        ConfigError: a value, key, timestamp or header of the wrong type.
    """
    now = now_ms()
    ts = [now if t is None else t for t in timestamps]
    hdrs: list[Any] = [
        None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers
    ]
    try:
        return pa.Table.from_arrays(
            [
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
                pa.array(ts, pa.int64()).cast(LOG_SCHEMA.field("timestamp").type),
                pa.array(hdrs, HEADERS_TYPE)
                if any(h is not None for h in hdrs)
                else pa.nulls(len(hdrs), HEADERS_TYPE),
            ],
            schema=_BODY_SCHEMA,
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        msg = (
            "invalid record: value must be bytes, key bytes or None, timestamp_ms an int or "
            f"None, headers a list of (str, bytes) pairs or None ({exc})"
        )
        raise ConfigError(msg) from exc


def to_body(records: pa.Table | pa.RecordBatch | Sequence[Record]) -> pa.Table:
    """``records`` (an Arrow table or batch, or a list of :class:`Record`) as a body table.

    Raises:
        ConfigError: a column or a record is not what the log stores (named in the message).
    """
    if isinstance(records, pa.RecordBatch):
        records = pa.Table.from_batches([records])
    if isinstance(records, pa.Table):
        return _normalize_table(records)
    if isinstance(records, (str, bytes)) or not isinstance(records, Sequence):
        msg = f"records must be a pyarrow Table or a list of Record, got {type(records).__name__}"
        raise ConfigError(msg)
    for r in records:
        if not isinstance(r, Record):
            msg = f"records must be a pyarrow Table or a list of Record, found {type(r).__name__}"
            raise ConfigError(msg)
        if r.value is None:
            msg = "invalid record: value is None; values are required bytes (may be b'')"
            raise ConfigError(msg)
        if not isinstance(r.value, BYTES) or not (r.key is None or isinstance(r.key, BYTES)):
            msg = (
                f"invalid record: value must be bytes and key bytes or None, got value "
                f"{type(r.value).__name__} and key {type(r.key).__name__}"
            )
            raise ConfigError(msg)
    return records_to_table(
        [r.value for r in records],
        [r.key for r in records],
        [r.timestamp_ms for r in records],
        [r.headers for r in records],
    )


def check_offset(value: Any, what: str) -> int:
    """``value`` as an int offset.

    Raises:
        ConfigError: ``value`` is not an int (``what`` names it).
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        msg = f"{what} must be an int offset, got {value!r}"
        raise ConfigError(msg)
    return int(value)


def log_spark_schema() -> Any:
    """Return the Spark ``StructType`` of log records (the Spark view of ``LOG_SCHEMA``).

    Columns: ``topic`` string, ``partition`` int, ``offset`` bigint, ``timestamp`` timestamp
    (UTC instant), ``key`` binary, ``value`` binary,
    ``headers`` array<struct<key: string, value: binary>>: :data:`SPARK_ARROW_SCHEMA`.
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(SPARK_ARROW_SCHEMA)

"""The largest record timestamp of an offset range, from the segments' Parquet statistics.

No record is read: each segment's footer holds, per row group, the smallest and largest
``offset`` and ``timestamp``. The row groups whose offsets overlap the range bound the
range's timestamps from above (a row group that also holds offsets outside the range can
only raise the bound). Footers are read once per (path, size, modification time).

Used to decide, before a Spark job, which records of a batch could be late for an
event-time window whose time field is the record timestamp
(:mod:`trident_assets.spark.event_window_chunks`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pyarrow.parquet as pq

from trident_assets.log.store import PartitionedLog

__all__ = ["UNKNOWN", "max_timestamp_ms"]

UNKNOWN = object()
"""Returned when a footer lacks the statistics needed: no bound is known."""

_Groups = list[tuple[int, int, int | None]]
"""Per row group: (first offset, last offset, largest timestamp in epoch ms or None)."""
_FOOTERS: dict[tuple[str, int, int], _Groups] = {}
_FOOTERS_MAX = 4096


def _row_groups(path: str) -> _Groups:
    st = os.stat(path)
    key = (path, st.st_size, st.st_mtime_ns)
    cached = _FOOTERS.get(key)
    if cached is not None:
        return cached
    with pq.ParquetFile(path) as pf:
        meta = pf.metadata
        names = pf.schema_arrow.names
        offset, stamp = names.index("offset"), names.index("timestamp")
        groups: _Groups = []
        for rg in range(meta.num_row_groups):
            o = meta.row_group(rg).column(offset).statistics
            t = meta.row_group(rg).column(stamp).statistics
            if o is None or not o.has_min_max:
                groups.append((-1, 1 << 62, None))  # unknown offsets: it may overlap anything
                continue
            top = int(t.max_raw) if t is not None and t.has_min_max else None
            groups.append((int(o.min), int(o.max), top))
    if len(_FOOTERS) >= _FOOTERS_MAX:
        _FOOTERS.clear()
    _FOOTERS[key] = groups
    return groups


def max_timestamp_ms(
    log: PartitionedLog, ranges: Sequence[tuple[str, int, int, int]]
) -> int | object | None:
    """The largest timestamp (epoch ms) of the records in ``ranges``, or an upper bound of it.

    ``ranges`` are ``(topic, partition, first, last)`` (inclusive). Returns None when the
    ranges hold no record, :data:`UNKNOWN` when a footer of a file they touch lacks the
    statistics. A bound at least as large as every record's timestamp in the ranges.
    """
    top: int | None = None
    for topic, partition, first, last in ranges:
        if last < first:
            continue
        for path in log.segment_files(topic, partition, first, last):
            for lo, hi, stamp in _row_groups(path):
                if hi < first or lo > last:
                    continue
                if stamp is None:
                    return UNKNOWN
                top = stamp if top is None else max(top, stamp)
    return top

"""Reading a partition: checking an offset range, finding its segments, reading them.

Every read verifies the segments' checksums (:mod:`trident_assets.log.corruption`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trident_assets.errors import ConfigError, CorruptSegmentError
from trident_assets.log.corruption import corrupt_segment_error, read_failure, read_verified
from trident_assets.log.records import Segment, check_offset
from trident_assets.log.segments import (
    covering,
    list_segments,
    next_offset,
    read_log_start,
    read_segment,
    unavailable,
)

__all__ = ["offset_at_or_after", "range_segments", "read_segments"]


def range_segments(
    pdir: Path, topic: str, partition: int, first: Any, last: Any
) -> list[Segment] | None:
    """Validate a range of partition ``pdir`` and return its segments, or ``None`` when empty.

    Raises:
        ConfigError: the range is malformed.
        BatchUnavailableError: the range is not (or no longer) readable.
    """
    first, last = check_offset(first, "first"), check_offset(last, "last")
    if first < 0 or last < first - 1:
        msg = (
            f"invalid offset range {first}..{last} for topic {topic!r} partition "
            f"{partition}: need 0 <= first and last >= first - 1 (last = first - 1 is empty)"
        )
        raise ConfigError(msg)
    earliest = read_log_start(pdir)
    latest = next_offset(list_segments(pdir), earliest)
    if last == first - 1:
        if first > latest:
            raise unavailable(topic, partition, first, last, earliest, latest)
        return None
    if first < earliest or last >= latest:
        raise unavailable(topic, partition, first, last, earliest, latest)
    return covering(topic, partition, pdir, first, last)


def read_segments(
    pdir: Path,
    topic: str,
    partition: int,
    segs: list[Segment],
    first: int,
    last: int,
    required: bool,
) -> pa.Table:
    """Read offsets ``first .. last`` from ``segs``, the range's segments in partition ``pdir``.

    ``required``: every segment must have a checksum file.

    Raises:
        BatchUnavailableError: retention removed a segment meanwhile.
        CorruptSegmentError: the segments did not hold exactly the range's offsets.
    """
    pieces = []
    try:
        for seg in segs:
            pieces.append(read_segment(topic, partition, seg, first, last, required))
    except FileNotFoundError:
        earliest = read_log_start(pdir)
        if first < earliest:
            raise unavailable(topic, partition, first, last, earliest, None) from None
        raise
    table = pa.concat_tables(pieces)
    offsets = table.column("offset")
    if (
        table.num_rows != last - first + 1
        or offsets[0].as_py() != first
        or offsets[-1].as_py() != last
    ):
        files = ", ".join(repr(str(s.path)) for s in segs)
        msg = (
            f"corrupt log: topic {topic!r} partition {partition}: a read of offsets "
            f"{first}..{last} returned {table.num_rows} rows from file(s) {files}; the "
            f"files disagree with their names; `trident log verify {topic}` names the "
            "damaged segment"
        )
        raise CorruptSegmentError(msg)
    return table


def offset_at_or_after(
    pdir: Path, topic: str, partition: int, timestamp_ms: int, start: int, required: bool
) -> int | None:
    """The first offset from log start ``start`` with a timestamp ``>= timestamp_ms``, or None.

    ``required``: every segment must have a checksum file.
    """
    for seg in list_segments(pdir):
        if seg.last < start:
            continue
        try:
            data = read_verified(topic, partition, seg, required)
            pf = pq.ParquetFile(pa.BufferReader(data))
        except FileNotFoundError:
            continue  # removed by retention meanwhile: all its offsets are below the start
        except (pa.ArrowException, OSError) as exc:
            raise corrupt_segment_error(topic, partition, seg, read_failure(exc)) from exc
        with pf:
            ts_idx = pf.schema_arrow.get_field_index("timestamp")
            for rg in range(pf.metadata.num_row_groups):
                stats = pf.metadata.row_group(rg).column(ts_idx).statistics
                if stats is not None and stats.has_min_max and stats.max_raw < timestamp_ms:
                    continue
                t = pf.read_row_group(rg, columns=["offset", "timestamp"])
                ts = t.column("timestamp").cast(pa.int64()).to_numpy()
                offs = t.column("offset").to_numpy()
                hits = np.nonzero((ts >= timestamp_ms) & (offs >= start))[0]
                if len(hits):
                    return int(offs[hits[0]])
    return None

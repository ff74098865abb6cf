"""A partition's segment files: listing them, its retention start, and reading a range.

Segments are Parquet files named ``<first>-<last>.parquet`` (:data:`SEGMENT_PATTERN`), each
with a CRC-32 checksum file; ``log_start.json`` holds the first offset retention kept. A read
checks the offset range, finds the segments covering it and reads them, verifying their
checksums (:mod:`trident_assets.log.corruption`). Every failure names the file and the
offsets.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trident_assets.errors import (
    BatchUnavailableError,
    ConfigError,
    CorruptLogMetadataError,
    CorruptSegmentError,
)
from trident_assets.log.corruption import (
    corrupt_segment_error,
    gap_error,
    read_failure,
    read_verified,
)
from trident_assets.log.files import UnknownTopicError
from trident_assets.log.records import LOG_SCHEMA, SEGMENT_PATTERN, Segment, check_offset

__all__ = [
    "covering",
    "gap",
    "list_segments",
    "next_offset",
    "offset_at_or_after",
    "range_segments",
    "read_log_start",
    "read_segment",
    "read_segments",
    "unavailable",
]


_PARSED: dict[Path, dict[str, Segment | None]] = {}
"""Per partition directory: each file name of its last listing, parsed (None: no segment)."""
_PARSED_LOCK = threading.Lock()


def list_segments(pdir: Path) -> list[Segment]:
    """The partition's published segments, by first offset.

    The directory is listed on every call (what it holds now); only the parsing of names
    seen before is saved: a live topology calls this several times a txid, over thousands
    of small segments.

    Raises:
        UnknownTopicError: the partition's directory is missing.
    """
    try:
        names = os.listdir(pdir)
    except FileNotFoundError:
        msg = f"partition directory {str(pdir)!r} is missing (topic deleted?)"
        raise UnknownTopicError(msg) from None
    with _PARSED_LOCK:
        known = _PARSED.get(pdir, {})
    parsed: dict[str, Segment | None] = {}
    for name in names:
        if name in known:
            parsed[name] = known[name]
            continue
        m = SEGMENT_PATTERN.fullmatch(name)
        parsed[name] = None if m is None else Segment(int(m[1]), int(m[2]), pdir / name)
    with _PARSED_LOCK:
        _PARSED[pdir] = parsed
    return sorted((s for s in parsed.values() if s is not None), key=lambda s: s.first)


def read_log_start(pdir: Path) -> int:
    """The partition's first readable offset (retention moves it; 0 without its file).

    Raises:
        CorruptLogMetadataError: the file is unreadable.
    """
    path = pdir / "log_start.json"
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return 0
    try:
        value = json.loads(text)["log_start"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problem = f"'log_start' is {value!r}"
            raise ValueError(problem)
    except (ValueError, KeyError, TypeError) as exc:
        msg = (
            f"the retention start file {str(path)!r} is unreadable ({exc}); restore it "
            'from a copy of the log, or write {"log_start": N} with the partition\'s '
            "first readable offset"
        )
        raise CorruptLogMetadataError(msg) from None
    return value


def next_offset(segs: list[Segment], log_start: int) -> int:
    """The offset the partition writes next (Kafka's log end offset)."""
    return max(segs[-1].last + 1, log_start) if segs else log_start


def covering(topic: str, partition: int, pdir: Path, first: int, last: int) -> list[Segment]:
    """Return the segments covering ``first .. last`` in order, checked for gaps.

    A directory listing taken while another writer renames segments in may (per POSIX)
    miss an entry added during the listing, so a gap triggers one fresh listing before the
    partition is declared corrupt.
    """
    for attempt in range(2):
        segs = [s for s in list_segments(pdir) if s.last >= first and s.first <= last]
        expected = first
        ok = bool(segs) and segs[0].first <= first
        for s in segs:
            if s.first > expected:
                ok = False
                break
            expected = s.last + 1
        if ok and expected > last:
            return segs
        if attempt == 0:
            continue
        earliest = read_log_start(pdir)
        if first < earliest:
            raise unavailable(topic, partition, first, last, earliest, None)
    raise gap(topic, partition, pdir, first, last)


def gap(topic: str, partition: int, pdir: Path, first: int, last: int) -> CorruptSegmentError:
    """The error naming the first offsets of ``first .. last`` that no segment holds."""
    segs = list_segments(pdir)
    expected, before = first, None
    for s in segs:
        if s.last < expected:
            before = s.path
            continue
        if s.first > expected:
            return gap_error(topic, partition, (expected, s.first - 1), before, s.path)
        expected, before = s.last + 1, s.path
    return gap_error(topic, partition, (expected, last), before, None)


def unavailable(
    topic: str, partition: int, first: int, last: int, earliest: int, latest: int | None
) -> BatchUnavailableError:
    """The error for offsets ``first .. last`` outside ``earliest .. latest - 1``."""
    if first < earliest:
        why = (
            f"offsets before {earliest} were deleted by retention (earliest readable offset "
            f"is {earliest})"
        )
    else:
        why = (
            f"only offsets below the latest offset {latest} have been written (earliest "
            f"readable offset is {earliest})"
        )
    msg = (
        f"topic {topic!r} partition {partition}: offsets {first}..{last} cannot be read: "
        f"{why}; a transactional batch cannot be re-read exactly"
    )
    return BatchUnavailableError(msg)


def read_segment(
    topic: str, partition: int, seg: Segment, first: int, last: int, required: bool = True
) -> pa.Table:
    """Read offsets ``first .. last`` of ``seg``; every failure names the segment.

    The whole file is read once and its CRC-32 checked against its checksum file
    (missing allowed only when not ``required``) before Parquet decodes it.

    Raises:
        CorruptSegmentError: the checksum does not match (or is missing when required),
            the file is not readable Parquet, or its rows or offsets disagree with its name.
        FileNotFoundError: the file is gone (retention; the caller decides).
    """
    lo = max(first, seg.first) - seg.first  # row index within the segment
    hi = min(last, seg.last) - seg.first
    data = read_verified(topic, partition, seg, required)
    try:
        with pq.ParquetFile(pa.BufferReader(data)) as pf:
            meta = pf.metadata
            size = seg.last - seg.first + 1
            if meta.num_rows != size:
                problem = f"holds {meta.num_rows} rows, its name says {size}"
                raise corrupt_segment_error(topic, partition, seg, problem)
            groups, start, base = [], 0, None
            for rg in range(meta.num_row_groups):
                rows = meta.row_group(rg).num_rows
                if start + rows > lo and start <= hi:
                    groups.append(rg)
                    base = start if base is None else base
                start += rows
            t = pf.read_row_groups(groups)
        t = t.slice(lo - (base or 0), hi - lo + 1)
        t = t.cast(LOG_SCHEMA) if t.schema != LOG_SCHEMA else t
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        raise corrupt_segment_error(topic, partition, seg, read_failure(exc)) from exc
    offsets = t.column("offset")
    want = (lo + seg.first, hi + seg.first)
    if t.num_rows != hi - lo + 1 or (offsets[0].as_py(), offsets[-1].as_py()) != want:
        got = f"{offsets[0].as_py()}..{offsets[-1].as_py()}" if t.num_rows else "none"
        problem = f"rows {lo}..{hi} hold offsets {got}, its name says {want[0]}..{want[1]}"
        raise corrupt_segment_error(topic, partition, seg, problem)
    return t


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

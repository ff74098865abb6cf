"""Naming a damaged log segment: the error every failed segment read raises, and footer checks.

A segment ``<first:020d>-<last:020d>.parquet`` must be a readable Parquet file holding exactly
the offsets ``first .. last``. :func:`footer_problem` checks that from the footer alone (no
row is read): the footer parses, the row count matches the name, and the ``offset`` column's
statistics span exactly ``first .. last``. Every problem is raised as a
:class:`~trident_assets.errors.CorruptSegmentError` naming topic, partition, offsets and file.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from trident_assets.errors import CorruptSegmentError
from trident_assets.log.records import Segment

__all__ = [
    "checksum_path",
    "checksum_problem",
    "corrupt_segment_error",
    "crc32_text",
    "footer_problem",
    "gap_error",
    "read_failure",
    "read_verified",
]

CHECKSUM_SUFFIX = ".crc32"
"""Suffix of a segment's checksum file: ``<segment name>.crc32`` holds ``crc32:<8 hex>``.

The checksum is a CRC-32 (``zlib.crc32``, the IEEE polynomial) of every byte of the segment
file, header, data pages and footer. Any CRC-32 detects every single-bit flip and every burst
of up to 32 bits; ``zlib`` is in the standard library and runs at memory speed.
"""


def _remedy(topic: str) -> str:
    return (
        "restore the file from a copy of the log (segments never change once written); "
        f"`trident log verify {topic}` lists every damaged segment"
    )


def corrupt_segment_error(
    topic: str, partition: int, seg: Segment, problem: str
) -> CorruptSegmentError:
    """The error for segment ``seg`` of ``topic``/``partition``: ``problem`` is what is wrong.

    E.g. ``"holds 3 rows, its name says 10"``.
    """
    msg = (
        f"corrupt log segment: topic {topic!r} partition {partition} offsets "
        f"{seg.first}..{seg.last}, file {str(seg.path)!r}: {problem}; {_remedy(topic)}"
    )
    return CorruptSegmentError(msg)


def read_failure(exc: BaseException) -> str:
    """Describe an exception raised while reading a segment (the problem of an error message)."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"the file cannot be read as Parquet ({type(exc).__name__}: {detail})"


def gap_error(
    topic: str,
    partition: int,
    missing: tuple[int, int],
    before: Path | None,
    after: Path | None,
) -> CorruptSegmentError:
    """The error for offsets ``missing`` (inclusive) that no segment holds (a gap).

    ``before`` and ``after``: the segment files just below and above the gap, if any.
    """
    around = ", ".join(
        f"{where} file {str(path)!r}"
        for where, path in (("after", before), ("before", after))
        if path is not None
    )
    msg = (
        f"corrupt log: topic {topic!r} partition {partition} offsets "
        f"{missing[0]}..{missing[1]}: no segment file holds them ({around or 'no segments'}); "
        f"{_remedy(topic)}"
    )
    return CorruptSegmentError(msg)


def footer_problem(seg: Segment) -> str | None:
    """Check ``seg`` from its Parquet footer only; return what is wrong, or None if it is fine.

    Checks: the footer parses (catches truncation and a wrong magic), the row count equals
    ``last - first + 1``, and, where the footer has statistics, the ``offset`` column spans
    exactly ``first .. last``. A missing file raises :class:`FileNotFoundError` (retention may
    have removed it; the caller decides).
    """
    expected = seg.last - seg.first + 1
    try:
        with pq.ParquetFile(seg.path) as pf:
            meta = pf.metadata
            names = pf.schema_arrow.names
            if meta.num_rows != expected:
                return f"holds {meta.num_rows} rows, its name says {expected}"
            if "offset" not in names:
                return f"has no 'offset' column (columns: {names})"
            column = names.index("offset")
            lows: list[int] = []
            highs: list[int] = []
            for rg in range(meta.num_row_groups):
                stats = meta.row_group(rg).column(column).statistics
                if stats is None or not stats.has_min_max:
                    return None  # no statistics: only a full read can tell
                lows.append(int(stats.min))
                highs.append(int(stats.max))
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as exc:
        return read_failure(exc)
    if lows and (min(lows) != seg.first or max(highs) != seg.last):
        return f"holds offsets {min(lows)}..{max(highs)}, its name says {seg.first}..{seg.last}"
    return None


def checksum_path(path: Path) -> Path:
    """The checksum file of the segment file ``path``."""
    return path.with_name(path.name + CHECKSUM_SUFFIX)


def crc32_text(data: bytes | memoryview) -> str:
    """The content of a checksum file for a segment holding ``data``."""
    return f"crc32:{zlib.crc32(data):08x}\n"


def checksum_problem(path: Path, data: bytes | pa.Buffer, required: bool) -> str | None:
    """Compare ``data`` (all bytes of segment file ``path``) with its checksum file.

    ``required``: the topic was created with checksums (``"checksum": "crc32"`` in
    ``topic.json``), so a missing checksum file is a problem. Segments of topics created
    before checksums existed have none and are read unverified.

    Returns what is wrong, or None if the checksum matches (or is absent and not required).
    """
    side = checksum_path(path)
    try:
        text = side.read_text(encoding="ascii", errors="replace").strip()
    except FileNotFoundError:
        if required:
            return f"its checksum file {str(side)!r} is missing"
        return None
    if not text.startswith("crc32:") or len(text) != 14:
        return f"its checksum file {str(side)!r} is unreadable ({text[:40]!r})"
    actual = f"{zlib.crc32(data):08x}"
    if text[6:] != actual:
        return (
            f"checksum mismatch: the file's CRC-32 is {actual}, {side.name} says {text[6:]} "
            "(the file changed after it was written)"
        )
    return None


def read_verified(topic: str, partition: int, seg: Segment, required: bool) -> pa.Buffer:
    """Read all bytes of ``seg`` and verify them against its checksum file.

    The bytes are in Arrow's own memory, not a Python ``bytes`` object: Parquet's decode
    threads may drop their last reference to the buffer after the read returned, and
    releasing a Python object needs the interpreter, which at process exit is finalizing
    (the thread is then unwound and the process aborts).

    Raises:
        CorruptSegmentError: the checksum does not match, or is missing when required.
        FileNotFoundError: the segment file is gone (retention; the caller decides).
    """
    with pa.OSFile(str(seg.path)) as file:
        data = file.read_buffer()
    problem = checksum_problem(seg.path, data, required)
    if problem is not None:
        raise corrupt_segment_error(topic, partition, seg, problem)
    return data

"""Naming a damaged log segment: the error every failed segment read raises, and footer checks.

A segment ``<first:020d>-<last:020d>.parquet`` must be a readable Parquet file holding exactly
the offsets ``first .. last``. :func:`footer_problem` checks that from the footer alone (no
row is read): the footer parses, the row count matches the name, and the ``offset`` column's
statistics span exactly ``first .. last``. Every problem is raised as a
:class:`~trident_assets.errors.CorruptSegmentError` naming topic, partition, offsets and file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from trident_assets.errors import CorruptSegmentError

__all__ = ["SegmentLike", "corrupt_segment_error", "footer_problem", "gap_error", "read_failure"]


class SegmentLike(Protocol):
    """What the checks need of a segment: its offsets (from its name) and its file."""

    @property
    def first(self) -> int:
        """First offset, from the file name."""
        ...

    @property
    def last(self) -> int:
        """Last offset (inclusive), from the file name."""
        ...

    @property
    def path(self) -> Path:
        """The segment file."""
        ...


def _remedy(topic: str) -> str:
    return (
        "restore the file from a copy of the log (segments never change once written); "
        f"`trident log verify {topic}` lists every damaged segment"
    )


def corrupt_segment_error(
    topic: str, partition: int, seg: SegmentLike, problem: str
) -> CorruptSegmentError:
    """Return the error for segment ``seg`` of ``topic``/``partition`` with ``problem``.

    Args:
        topic: The segment's topic.
        partition: The segment's partition.
        seg: The segment (offsets from its name, and its file).
        problem: What is wrong, e.g. ``"holds 3 rows, its name says 10"``.
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
    """Return the error for offsets ``missing`` that no segment holds (a gap in the partition).

    Args:
        topic: The partition's topic.
        partition: The partition.
        missing: The inclusive range of offsets no segment holds.
        before: The segment file just below the gap, if any.
        after: The segment file just above the gap, if any.
    """
    around = ", ".join(
        part
        for part in (
            f"after file {str(before)!r}" if before is not None else "",
            f"before file {str(after)!r}" if after is not None else "",
        )
        if part
    )
    msg = (
        f"corrupt log: topic {topic!r} partition {partition} offsets "
        f"{missing[0]}..{missing[1]}: no segment file holds them ({around or 'no segments'}); "
        f"{_remedy(topic)}"
    )
    return CorruptSegmentError(msg)


def footer_problem(seg: SegmentLike) -> str | None:
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

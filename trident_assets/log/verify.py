"""Checking a log's segment files: per partition (``trident log verify``) and before a Spark read.

A partition is sound when each segment's checksum and Parquet footer hold (see
:func:`~trident_assets.log.corruption.footer_problem`) and the segments follow each other
without gaps or overlaps from the log start to the latest offset.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trident_assets.log.corruption import checksum_problem, corrupt_segment_error, footer_problem
from trident_assets.log.records import SEGMENT_PATTERN, Segment
from trident_assets.log.segments import list_segments, read_log_start
from trident_assets.log.store import PartitionedLog

__all__ = ["PartitionReport", "check_segment_files", "verify_log", "verify_partition"]

_CHECKED: dict[tuple[str, int, int], None] = {}
_CHECKED_MAX = 100_000


@dataclass(frozen=True, slots=True)
class PartitionReport:
    """The result of checking one partition.

    Attributes:
        topic: The topic.
        partition: The partition.
        segments: How many segment files it has.
        earliest: The log start (first readable offset).
        latest: The next offset to write.
        problems: One line per problem found (empty when the partition is sound).
    """

    topic: str
    partition: int
    segments: int
    earliest: int
    latest: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


def verify_partition(log: PartitionedLog, topic: str, partition: int) -> PartitionReport:
    """Check every segment of ``topic``/``partition`` (footers only) and their contiguity.

    Raises:
        UnknownTopicError: the topic does not exist.
        ConfigError: the partition is out of range.
    """
    pdir = log._pdir(topic, partition)
    required = log.checksums_required(topic)
    start = read_log_start(pdir)
    segs = list_segments(pdir)
    problems: list[str] = []
    expected: int | None = None
    previous: Segment | None = None
    for seg in segs:
        if seg.last < seg.first:
            problems.append(f"{seg.path.name}: its name has last offset before first")
            continue
        if expected is None:
            if seg.first > start:
                problems.append(
                    f"offsets {start}..{seg.first - 1} are missing: the first segment "
                    f"{seg.path.name} starts after the log start {start}"
                )
        elif seg.first > expected:
            problems.append(
                f"offsets {expected}..{seg.first - 1} are missing between "
                f"{previous.path.name if previous else '?'} and {seg.path.name}"
            )
        elif seg.first < expected:
            problems.append(
                f"{seg.path.name} overlaps {previous.path.name if previous else '?'} "
                f"(offsets {seg.first}..{expected - 1} twice)"
            )
        try:
            problem = checksum_problem(seg.path, seg.path.read_bytes(), required)
            problem = problem or footer_problem(seg)
        except FileNotFoundError:
            problem = None if seg.last < read_log_start(pdir) else "file vanished"
        if problem is not None:
            problems.append(f"{seg.path.name} (offsets {seg.first}..{seg.last}): {problem}")
        expected = seg.last + 1 if expected is None else max(expected, seg.last + 1)
        previous = seg
    latest = max(expected or 0, start)
    return PartitionReport(topic, partition, len(segs), start, latest, tuple(problems))


def verify_log(log: PartitionedLog, topic: str | None = None) -> list[PartitionReport]:
    """Check every partition of ``topic`` (default: of every topic), in topic/partition order.

    Raises:
        UnknownTopicError: ``topic`` does not exist.
    """
    names = [topic] if topic is not None else log.topics()
    return [verify_partition(log, name, p) for name in names for p in range(log.partitions(name))]


def check_segment_files(
    topic: str, partition: int, paths: Sequence[str], required: bool = True
) -> None:
    """Check segment files before another reader (Spark) opens them.

    Every call reads each file whole and checks its CRC-32 against its checksum file (bit rot
    changes neither size nor modification time, so this is never cached); a missing checksum
    file is a problem when ``required`` (see
    :meth:`~trident_assets.log.store.PartitionedLog.checksums_required`). The footer check
    runs once per (path, size, modification time).

    Raises:
        CorruptSegmentError: a file is unreadable or disagrees with its name; the message
            names topic, partition, offsets and file.
    """
    for path in paths:
        p = Path(path)
        match = SEGMENT_PATTERN.fullmatch(p.name)
        if match is None:
            continue
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue  # retention removed it meanwhile: Spark's read reports it
        key = (str(p), st.st_size, st.st_mtime_ns)
        seg = Segment(int(match.group(1)), int(match.group(2)), p)
        try:
            problem = checksum_problem(p, p.read_bytes(), required)
            if problem is None and key in _CHECKED:
                continue
            problem = problem or footer_problem(seg)
        except FileNotFoundError:
            continue
        if problem is not None:
            raise corrupt_segment_error(topic, partition, seg, problem)
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[key] = None

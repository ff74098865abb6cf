"""Offset ranges of a batch: per partition, ``[first, next)``.

We store the exclusive end (``next_offset``) instead of Kafka-Trident's inclusive
``lastOffset`` so an empty batch is unambiguous (``first == next``); ``last_offset`` is
derived for display and matches Storm's ``(pos-1, pos-1)`` for empty batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trident_assets.errors import ConfigError
from trident_assets.spouts.config import SpoutKind

__all__ = ["BatchPlan", "PartitionRange", "partition_sort_key", "split_partition"]


def partition_sort_key(partition: str) -> tuple[str, int]:
    """Order partition ids ``topic@n`` by topic, then partition number (Storm's comparator)."""
    topic, _, number = partition.rpartition("@")
    return (topic, int(number)) if number.isdigit() else (partition, -1)


def split_partition(partition: str) -> tuple[str, int]:
    """``"topic@3"`` -> ``("topic", 3)``.

    Raises:
        ConfigError: the id is not ``topic@n``.
    """
    topic, _, number = partition.rpartition("@")
    if not topic or not number.isdigit():
        msg = f"a partition id is 'topic@n', got {partition!r}"
        raise ConfigError(msg)
    return topic, int(number)


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Records ``[first_offset, next_offset)`` of one partition in one batch."""

    partition: str
    first_offset: int
    next_offset: int
    deployment_id: str
    topic_id: str | None = None
    """The incarnation of the partition's topic the offsets belong to (the log's topic ID),
    or None when the source has no topic IDs (or the range was recorded before they existed)."""

    @property
    def count(self) -> int:
        """How many records the range holds."""
        return self.next_offset - self.first_offset

    @property
    def last_offset(self) -> int:
        """The inclusive last offset (``first - 1`` when empty)."""
        return self.next_offset - 1

    @property
    def topic(self) -> str:
        """The topic part of the partition id."""
        return self.partition.rpartition("@")[0]

    @property
    def partition_number(self) -> int:
        """The partition number part of the partition id."""
        return int(self.partition.rpartition("@")[2])


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """What batch ``txid`` reads: one range per partition (empty ranges included)."""

    topology: str
    spout: str
    txid: int
    kind: SpoutKind
    ranges: tuple[PartitionRange, ...]
    replay: bool
    """True when the ranges were fixed by an earlier attempt (transactional or committed)."""
    skipped_by_retention: int = 0
    """Records that retention deleted before this spout could read them (opaque only)."""
    recreated: tuple[str, ...] = ()
    """Partitions whose topic was deleted and re-created since the previous batch; this plan
    reads them from the new topic's earliest offset (opaque and non-transactional only)."""

    @classmethod
    def of(
        cls,
        topology: str,
        spout: str,
        txid: int,
        kind: SpoutKind,
        ranges: Iterable[PartitionRange],
        *,
        replay: bool,
        skipped_by_retention: int = 0,
        recreated: Sequence[str] = (),
    ) -> BatchPlan:
        """Build a plan with ranges sorted by partition."""
        ordered = tuple(sorted(ranges, key=lambda r: partition_sort_key(r.partition)))
        return cls(
            topology,
            spout,
            txid,
            kind,
            ordered,
            replay,
            skipped_by_retention,
            tuple(sorted(recreated, key=partition_sort_key)),
        )

    @property
    def record_count(self) -> int:
        """Records in the batch."""
        return sum(r.count for r in self.ranges)

    def non_empty(self) -> Sequence[PartitionRange]:
        """The ranges with at least one record."""
        return [r for r in self.ranges if r.count > 0]

    def offsets_metadata(self) -> dict[str, list[int]]:
        """``{partition: [first, last]}`` for display (inclusive, Storm style)."""
        return {r.partition: [r.first_offset, r.last_offset] for r in self.ranges}

"""Test doubles shipped with the package: an in-memory partitioned source.

Use it to test topologies and spout semantics without a log on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trident_assets.errors import ConfigError

__all__ = ["MemorySource"]


@dataclass
class _Partition:
    start: int = 0
    timestamps: list[int] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)


class MemorySource:
    """An in-memory PartitionedSource: partitions ``topic@n`` of timestamped byte records."""

    def __init__(self) -> None:
        """Start with no partitions."""
        self._parts: dict[str, _Partition] = {}

    def add_partition(self, partition: str) -> None:
        """Create an empty partition (no-op if it exists)."""
        self._parts.setdefault(partition, _Partition())

    def remove_partition(self, partition: str) -> None:
        """Make a partition vanish (as a deleted topic would)."""
        del self._parts[partition]

    def append(self, partition: str, values: list[bytes], timestamp_ms: int = 0) -> tuple[int, int]:
        """Append records; return (first, next) offsets."""
        self.add_partition(partition)
        part = self._parts[partition]
        first = part.start + len(part.values)
        part.values.extend(values)
        part.timestamps.extend([timestamp_ms] * len(values))
        return first, first + len(values)

    def delete_before(self, partition: str, offset: int) -> None:
        """Retention: make offsets below ``offset`` unreadable."""
        part = self._parts[partition]
        drop = max(0, min(offset, self.latest(partition)) - part.start)
        del part.values[:drop]
        del part.timestamps[:drop]
        part.start += drop

    def read(self, partition: str, first: int, next_offset: int) -> list[bytes]:
        """Return the records ``[first, next_offset)``."""
        part = self._parts[partition]
        if first < part.start or next_offset > self.latest(partition):
            held = f"{part.start}..{self.latest(partition) - 1}"
            msg = f"{partition} holds {held}, not {first}..{next_offset - 1}"
            raise ConfigError(msg)
        return part.values[first - part.start : next_offset - part.start]

    def partitions(self) -> list[str]:
        """The partition ids."""
        return list(self._parts)

    def earliest(self, partition: str) -> int:
        """First readable offset."""
        return self._parts[partition].start

    def latest(self, partition: str) -> int:
        """Next offset to be written."""
        part = self._parts[partition]
        return part.start + len(part.values)

    def offset_for_timestamp(self, partition: str, timestamp_ms: int) -> int | None:
        """First offset with timestamp >= ``timestamp_ms``."""
        part = self._parts[partition]
        for i, ts in enumerate(part.timestamps):
            if ts >= timestamp_ms:
                return part.start + i
        return None

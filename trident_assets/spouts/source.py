"""What the batch coordinator needs: a replayable partitioned log and a batch metadata store.

Batch metadata (our ZooKeeper): per (topology, spout, txid, partition) ranges, ``committed``
once the batch's state commit included them. The state store keeps them
(:mod:`~trident_assets.backends.duckdb_spout_meta`), so metadata and state commit in one
transaction. Also: round-robin partition assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from trident_assets.errors import ConfigError
from trident_assets.spouts.ranges import PartitionRange, partition_sort_key

__all__ = ["PartitionedSource", "SpoutMetaStore", "assign_round_robin"]


class PartitionedSource(Protocol):
    """A replayable, partitioned log (the embedded log or Kafka).

    Partition ids are ``"topic@n"``. Offsets are contiguous per partition.
    """

    def partitions(self) -> list[str]:
        """Return the partition ids that exist now."""

    def earliest(self, partition: str) -> int:
        """Return the first readable offset (the log start after retention)."""

    def latest(self, partition: str) -> int:
        """Return the next offset to be written (the high watermark)."""

    def offset_for_timestamp(self, partition: str, timestamp_ms: int) -> int | None:
        """Return the first offset whose timestamp is >= ``timestamp_ms``, or None."""


class SpoutMetaStore(Protocol):
    """Durable batch metadata of spouts."""

    def ranges(
        self, topology: str, spout: str, txid: int
    ) -> tuple[list[PartitionRange], bool] | None:
        """Return the recorded ranges of ``txid`` and whether they are committed, or None."""

    def record(
        self,
        topology: str,
        spout: str,
        txid: int,
        ranges: Sequence[PartitionRange],
        committed: bool,
    ) -> None:
        """Replace the ranges recorded for ``txid``."""

    def latest_before(
        self, topology: str, spout: str, txid: int, committed_only: bool
    ) -> dict[str, PartitionRange]:
        """For each partition, its range in the greatest recorded txid below ``txid``."""

    def last_committed_txid(self, topology: str, spout: str) -> int | None:
        """Return the greatest committed txid, or None."""

    def cleanup_before(self, topology: str, spout: str, txid: int) -> int:
        """Delete committed rows below ``txid`` except each partition's newest; return the count."""


def assign_round_robin(partitions: Sequence[str], task_index: int, num_tasks: int) -> list[str]:
    """Partitions read by task ``task_index`` of ``num_tasks``: i, i+n, i+2n... of the sorted ids.

    Sorting is by (topic, partition number), so adding partitions to a topic does not move
    existing ones between tasks of the same count (Storm's RoundRobinManualPartitioner).

    Raises:
        ConfigError: the task index or count is out of range.
    """
    if num_tasks < 1 or not 0 <= task_index < num_tasks:
        msg = (
            f"task_index must be in [0, num_tasks) and num_tasks >= 1, got {task_index}/{num_tasks}"
        )
        raise ConfigError(msg)
    ordered = sorted(partitions, key=partition_sort_key)
    return ordered[task_index::num_tasks]

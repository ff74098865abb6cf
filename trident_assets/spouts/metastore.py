"""Where batch metadata lives (our ZooKeeper): per (topology, spout, txid, partition) ranges.

Rows are ``committed`` once the batch's state commit included them. The DuckDB store keeps
them in the state file, so metadata and state commit in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from trident_assets.spouts.ranges import PartitionRange

__all__ = ["SpoutMetaStore"]


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

"""In-memory test models: a spout metadata store (the spout tests' reference) and a counting map."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trident_assets.backends.memory import MemoryBackingMap
from trident_assets.core.protocols import Key
from trident_assets.spouts.ranges import PartitionRange

__all__ = ["CountingBackingMap", "MemorySpoutMetaStore"]


class CountingBackingMap(MemoryBackingMap[Any]):
    """A dict backing map that counts the bulk calls it served."""

    def __init__(self) -> None:
        super().__init__()
        self.get_calls = 0
        self.put_calls = 0

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Return each key's value or None (one call counted)."""
        self.get_calls += 1
        return super().multi_get(keys)

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Store each value (one call counted)."""
        self.put_calls += 1
        super().multi_put(keys, values)


class MemorySpoutMetaStore:
    """An in-memory :class:`~trident_assets.spouts.source.SpoutMetaStore`."""

    def __init__(self) -> None:
        """Start empty."""
        self.rows: dict[tuple[str, str, int], tuple[list[PartitionRange], bool]] = {}

    def ranges(
        self, topology: str, spout: str, txid: int
    ) -> tuple[list[PartitionRange], bool] | None:
        """Return the recorded ranges of ``txid``."""
        found = self.rows.get((topology, spout, txid))
        return None if found is None else (list(found[0]), found[1])

    def record(
        self,
        topology: str,
        spout: str,
        txid: int,
        ranges: Sequence[PartitionRange],
        committed: bool,
    ) -> None:
        """Replace the ranges recorded for ``txid``."""
        self.rows[(topology, spout, txid)] = (list(ranges), committed)

    def latest_before(
        self, topology: str, spout: str, txid: int, committed_only: bool
    ) -> dict[str, PartitionRange]:
        """For each partition, its range in the greatest recorded txid below ``txid``."""
        out: dict[str, PartitionRange] = {}
        for (topo, sp, t), (ranges, committed) in sorted(
            self.rows.items(), key=lambda kv: kv[0][2]
        ):
            if topo == topology and sp == spout and t < txid and (committed or not committed_only):
                for r in ranges:
                    out[r.partition] = r
        return out

    def last_committed_txid(self, topology: str, spout: str) -> int | None:
        """Return the greatest committed txid."""
        done = [
            t
            for (topo, sp, t), (_, c) in self.rows.items()
            if topo == topology and sp == spout and c
        ]
        return max(done, default=None)

    def cleanup_before(self, topology: str, spout: str, txid: int) -> int:
        """Delete old committed rows, keeping each partition's newest range."""
        keep = {r.partition: t for t, r in self._newest(topology, spout, txid)}
        removed = 0
        for key in [k for k in self.rows if k[0] == topology and k[1] == spout and k[2] < txid]:
            ranges, committed = self.rows[key]
            if not committed:
                continue
            kept = [r for r in ranges if keep.get(r.partition) == key[2]]
            removed += len(ranges) - len(kept)
            if kept:
                self.rows[key] = (kept, committed)
            else:
                del self.rows[key]
        return removed

    def _newest(self, topology: str, spout: str, txid: int) -> list[tuple[int, PartitionRange]]:
        newest: dict[str, tuple[int, PartitionRange]] = {}
        for (topo, sp, t), (ranges, committed) in self.rows.items():
            if topo == topology and sp == spout and committed:
                for r in ranges:
                    if r.partition not in newest or newest[r.partition][0] < t:
                        newest[r.partition] = (t, r)
        return list(newest.values())

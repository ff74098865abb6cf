"""Spout batch metadata in the state store (DuckDB or PostgreSQL): offsets commit with state.

Table ``_trident_spout_ranges``: one row per (topology, spout, txid, partition) with
``[first_offset, next_offset)``, the deployment id and whether the batch committed. Every
method is one set-based statement (a bulk insert from Arrow for ``record``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from trident_assets.backends.state_store import StateStore
from trident_assets.names import SPOUT_RANGES_TABLE
from trident_assets.spouts.ranges import PartitionRange

__all__ = ["DuckDBSpoutMetaStore", "ranges_table"]


def ranges_table(ranges: Sequence[PartitionRange]) -> pa.Table:
    """``ranges`` as Arrow: partition, first_offset, next_offset, deployment_id, topic_id."""
    return pa.table(
        {
            "partition": pa.array([r.partition for r in ranges], pa.string()),
            "first_offset": pa.array([r.first_offset for r in ranges], pa.int64()),
            "next_offset": pa.array([r.next_offset for r in ranges], pa.int64()),
            "deployment_id": pa.array([r.deployment_id for r in ranges], pa.string()),
            "topic_id": pa.array([r.topic_id for r in ranges], pa.string()),
        }
    )


class DuckDBSpoutMetaStore:
    """A SpoutMetaStore on a state store's connection (writes join its open transaction)."""

    def __init__(self, store: StateStore) -> None:
        """Create the table if needed."""
        self.store = store
        store.execute(
            f"CREATE TABLE IF NOT EXISTS {SPOUT_RANGES_TABLE} (topology VARCHAR NOT NULL, "
            "spout VARCHAR NOT NULL, txid BIGINT NOT NULL, partition VARCHAR NOT NULL, "
            "first_offset BIGINT NOT NULL, next_offset BIGINT NOT NULL, "
            "deployment_id VARCHAR NOT NULL, committed BOOLEAN NOT NULL, "
            "PRIMARY KEY (topology, spout, txid, partition))"
        )
        # the topic incarnation (log topic ID) each range was read from; NULL for older rows
        store.execute(f"ALTER TABLE {SPOUT_RANGES_TABLE} ADD COLUMN IF NOT EXISTS topic_id VARCHAR")

    def ranges(
        self, topology: str, spout: str, txid: int
    ) -> tuple[list[PartitionRange], bool] | None:
        """Return the recorded ranges of ``txid`` and whether they are committed."""
        rows = self.store.fetch_rows(
            "SELECT partition, first_offset, next_offset, deployment_id, topic_id, committed "
            f"FROM {SPOUT_RANGES_TABLE} WHERE topology = ? AND spout = ? AND txid = ? ORDER BY "
            "partition",
            [topology, spout, txid],
        )
        if not rows:
            return None
        return [PartitionRange(p, f, n, d, t) for p, f, n, d, t, _ in rows], bool(rows[0][5])

    def record(
        self,
        topology: str,
        spout: str,
        txid: int,
        ranges: Sequence[PartitionRange],
        committed: bool,
    ) -> None:
        """Replace the ranges of ``txid`` (in the open transaction, if any)."""
        store = self.store
        with store.transaction():
            store.execute(
                f"DELETE FROM {SPOUT_RANGES_TABLE} WHERE topology = ? AND spout = ? AND txid = ?",
                [topology, spout, txid],
            )
            if ranges:
                with store.staged(ranges_table(ranges)) as name:
                    store.execute(
                        f"INSERT INTO {SPOUT_RANGES_TABLE} (topology, spout, txid, partition, "
                        "first_offset, next_offset, deployment_id, committed, topic_id) SELECT "
                        "?, ?, ?, partition, first_offset, next_offset, deployment_id, ?, topic_id "
                        f'FROM "{name}"',
                        [topology, spout, txid, committed],
                    )

    def latest_before(
        self, topology: str, spout: str, txid: int, committed_only: bool
    ) -> dict[str, PartitionRange]:
        """For each partition, its range in the greatest recorded txid below ``txid``."""
        rows = self.store.fetch_rows(
            self.store.dialect.latest(
                "partition, first_offset, next_offset, deployment_id, topic_id",
                f"{SPOUT_RANGES_TABLE} WHERE topology = ? AND spout = ? AND txid < ? "
                "AND (committed OR NOT CAST(? AS BOOLEAN))",
                "partition",
                "txid",
            ),
            [topology, spout, txid, committed_only],
        )
        return {p: PartitionRange(p, f, n, d, t) for p, f, n, d, t in rows}

    def last_committed_txid(self, topology: str, spout: str) -> int | None:
        """Return the greatest committed txid."""
        row = self.store.fetch_rows(
            f"SELECT max(txid) FROM {SPOUT_RANGES_TABLE} WHERE topology = ? AND spout = ? "
            "AND committed",
            [topology, spout],
        )
        return None if not row or row[0][0] is None else int(row[0][0])

    def cleanup_before(self, topology: str, spout: str, txid: int) -> int:
        """Delete committed rows below ``txid`` that a newer committed row supersedes."""
        return self.store.execute(
            f"DELETE FROM {SPOUT_RANGES_TABLE} AS t WHERE t.topology = ? AND t.spout = ? AND "
            "t.txid < ? AND t.committed AND EXISTS (SELECT 1 FROM "
            f"{SPOUT_RANGES_TABLE} AS n WHERE n.topology = t.topology AND n.spout = t.spout "
            "AND n.partition = t.partition AND n.txid > t.txid AND n.committed)",
            [topology, spout, txid],
        )

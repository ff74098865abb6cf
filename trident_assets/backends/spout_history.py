"""What each committed txid read, per spout: the offset ranges a state catch-up replays.

Table ``_trident_spout_history``: one row per (topology, spout, txid, partition) with
``[first_offset, next_offset)``, the deployment id and the topic incarnation, written in the
txid's commit transaction from the ranges the batch read (a quarantined txid records empty
ranges: it changed no state; its later replay records the quarantined ranges it read).
Unlike ``_trident_spout_ranges`` (the spouts' positions, whose superseded rows are cleaned
up), nothing here is deleted: it is the history a new state is built from
(:mod:`trident_assets.runtime.backfill_plans`). Each call is one set-based statement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from trident_assets.backends.duckdb_spout_meta import ranges_table
from trident_assets.backends.state_store import StateStore
from trident_assets.names import SPOUT_HISTORY_TABLE
from trident_assets.spouts.ranges import PartitionRange

__all__ = ["SpoutJoins", "read_history", "record_history", "spout_joins"]


def record_history(
    store: StateStore, topology: str, txid: int, read: Mapping[str, Sequence[PartitionRange]]
) -> None:
    """Record what ``txid`` read per spout (call inside its commit transaction)."""
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {SPOUT_HISTORY_TABLE} (topology VARCHAR NOT NULL, "
        "spout VARCHAR NOT NULL, txid BIGINT NOT NULL, partition VARCHAR NOT NULL, "
        "first_offset BIGINT NOT NULL, next_offset BIGINT NOT NULL, "
        "deployment_id VARCHAR NOT NULL, topic_id VARCHAR, "
        "PRIMARY KEY (topology, spout, txid, partition))"
    )
    rows = [(sid, r) for sid, ranges in read.items() for r in ranges]
    if not rows:
        return
    spouts = pa.array([sid for sid, _ in rows], pa.string())
    batch = ranges_table([r for _, r in rows]).append_column("spout", spouts)
    with store.staged(batch) as name:
        store.execute(
            f"INSERT INTO {SPOUT_HISTORY_TABLE} (topology, spout, txid, partition, first_offset, "
            "next_offset, deployment_id, topic_id) SELECT ?, spout, ?, partition, "
            f'first_offset, next_offset, deployment_id, topic_id FROM "{name}" '
            "ON CONFLICT DO NOTHING",
            [topology, txid],
        )


def read_history(
    store: StateStore, topology: str, spouts: Sequence[str], first: int, last: int
) -> dict[tuple[str, int], list[PartitionRange]]:
    """The recorded ranges of txids ``first..last`` of ``spouts``, by (spout, txid).

    A (spout, txid) without a recorded range is absent (committed before the history was
    kept, or never committed).
    """
    if not spouts or first > last or not store.has_table(SPOUT_HISTORY_TABLE):
        return {}
    marks = ", ".join("?" for _ in spouts)
    rows = store.fetch_rows(
        "SELECT spout, txid, partition, first_offset, next_offset, deployment_id, topic_id "
        f"FROM {SPOUT_HISTORY_TABLE} WHERE topology = ? AND txid BETWEEN ? AND ? "
        f"AND spout IN ({marks}) ORDER BY spout, txid, partition",
        [topology, first, last, *spouts],
    )
    found: dict[tuple[str, int], list[PartitionRange]] = {}
    for sid, txid, p, f, n, d, t in rows:
        found.setdefault((str(sid), int(txid)), []).append(PartitionRange(p, f, n, d, t))
    return found


@dataclass(frozen=True)
class SpoutJoins:
    """When each spout of a topology first read a batch, as far as the history tells.

    ``first_recorded``: the first txid with recorded ranges (None: nothing recorded);
    ``joined``: per spout, the first txid it read. A spout that read nothing in a txid it
    was not part of (added to the topology later) is *absent* there; a txid before
    ``first_recorded`` is unknown (committed before the history was kept).
    """

    first_recorded: int | None
    joined: dict[str, int]

    def absent(self, spout: str, txid: int) -> bool:
        """True when ``spout`` was not part of the topology at recorded ``txid``."""
        if self.first_recorded is None or txid < self.first_recorded:
            return False
        joined = self.joined.get(spout)
        return joined is None or txid < joined


def spout_joins(store: StateStore, topology: str) -> SpoutJoins:
    """The :class:`SpoutJoins` of ``topology`` (one grouped statement)."""
    if not store.has_table(SPOUT_HISTORY_TABLE):
        return SpoutJoins(None, {})
    rows = store.fetch_rows(
        f"SELECT spout, min(txid) FROM {SPOUT_HISTORY_TABLE} WHERE topology = ? GROUP BY spout",
        [topology],
    )
    joined = {str(sid): int(first) for sid, first in rows}
    return SpoutJoins(min(joined.values(), default=None), joined)

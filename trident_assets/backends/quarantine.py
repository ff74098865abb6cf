"""The quarantine: a poison txid's offset ranges, set aside with its error, until replayed.

One row per (topology, quarantined txid, spout). A quarantined txid commits with no state
change; its ranges are kept here so nothing is lost, and a later txid reprocesses them
(``replayed_txid`` is set in that txid's commit transaction, so they count exactly once).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.errors import QuarantineError
from trident_assets.names import QUARANTINE_TABLE
from trident_assets.spouts.ranges import PartitionRange

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore

__all__ = ["QuarantineEntry", "add_entries", "entries", "mark_replayed", "waiting"]


@dataclass(frozen=True, slots=True)
class QuarantineEntry:
    """The ranges one spout read in a quarantined txid, and why the txid was set aside."""

    topology: str
    txid: int
    spout: str
    ranges: tuple[PartitionRange, ...]
    error: str
    quarantined_at: datetime
    replayed_txid: int | None

    @property
    def records(self) -> int:
        """How many records the ranges hold."""
        return sum(r.count for r in self.ranges)

    def as_row(self) -> dict[str, Any]:
        """The entry as plain values (the CLI's row)."""
        return {
            "topology": self.topology,
            "txid": self.txid,
            "spout": self.spout,
            "ranges": ", ".join(
                f"{r.partition}[{r.first_offset}..{r.last_offset}]" for r in self.ranges if r.count
            ),
            "records": self.records,
            "error": self.error,
            "quarantined_at": self.quarantined_at.isoformat(timespec="seconds"),
            "replayed_txid": self.replayed_txid,
        }


def add_entries(
    store: StateStore,
    topology: str,
    txid: int,
    ranges: dict[str, tuple[PartitionRange, ...]],
    error: str,
) -> None:
    """Record ``txid``'s ranges per spout (inside its commit transaction; set-based)."""
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {QUARANTINE_TABLE} (topology VARCHAR NOT NULL, "
        "txid BIGINT NOT NULL, spout VARCHAR NOT NULL, ranges VARCHAR NOT NULL, "
        "error VARCHAR NOT NULL, quarantined_at TIMESTAMP NOT NULL, replayed_txid BIGINT, "
        "PRIMARY KEY (topology, txid, spout))"
    )
    spouts = sorted(ranges)
    if not spouts:
        return
    rows = pa.table(
        {
            "spout": spouts,
            "ranges": [
                json.dumps(
                    [
                        [r.partition, r.first_offset, r.next_offset, r.deployment_id, r.topic_id]
                        for r in ranges[spout]
                    ]
                )
                for spout in spouts
            ],
        }
    )
    now = datetime.now(UTC).replace(tzinfo=None)
    with store.transaction(), store.staged(rows) as name:
        store.execute(
            f"DELETE FROM {QUARANTINE_TABLE} WHERE topology = ? AND txid = ? "
            f'AND spout IN (SELECT spout FROM "{name}")',
            [topology, txid],
        )
        store.execute(
            f"INSERT INTO {QUARANTINE_TABLE} (topology, txid, spout, ranges, error, "
            f'quarantined_at, replayed_txid) SELECT ?, ?, spout, ranges, ?, ?, NULL FROM "{name}"',
            [topology, txid, error, now],
        )


def entries(
    store: StateStore, topology: str | None = None, *, pending_only: bool = False
) -> list[QuarantineEntry]:
    """The quarantine's entries (of ``topology`` if given), oldest txid first.

    ``pending_only``: only those not replayed yet. A store without the table has none.
    """
    if not store.has_table(QUARANTINE_TABLE):
        return []
    rows = store.fetch_rows(
        f"SELECT topology, txid, spout, ranges, error, quarantined_at, replayed_txid "
        f"FROM {QUARANTINE_TABLE} WHERE (topology = CAST(? AS VARCHAR) OR CAST(? AS VARCHAR) "
        "IS NULL) AND (replayed_txid IS NULL OR NOT CAST(? AS BOOLEAN)) "
        "ORDER BY topology, txid, spout",
        [topology, topology, pending_only],
    )
    return [
        QuarantineEntry(
            topo,
            txid,
            spout,
            tuple(PartitionRange(*r) for r in json.loads(ranges)),
            error,
            at,
            replayed,
        )
        for topo, txid, spout, ranges, error, at, replayed in rows
    ]


def waiting(store: StateStore, topology: str, txid: int | None = None) -> list[QuarantineEntry]:
    """The entries of ``topology`` not replayed yet (of quarantined ``txid`` if given).

    Raises:
        QuarantineError: nothing (or not ``txid``) waits in the quarantine.
    """
    pending = [e for e in entries(store, topology, pending_only=True) if txid in (None, e.txid)]
    if not pending:
        which = "nothing" if txid is None else f"no txid {txid}"
        msg = f"{which} waits in the quarantine of topology {topology!r}"
        raise QuarantineError(msg)
    return pending


def mark_replayed(store: StateStore, topology: str, txid: int, replayed_txid: int) -> None:
    """Mark quarantined ``txid`` reprocessed by ``replayed_txid`` (inside its transaction)."""
    store.execute(
        f"UPDATE {QUARANTINE_TABLE} SET replayed_txid = ? WHERE topology = ? AND txid = ?",
        [replayed_txid, topology, txid],
    )

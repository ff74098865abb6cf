"""The topology's-store half of a single join kept in a key-value store: its clock and count.

The pending halves live on the servers; what must move atomically with the commit marker
stays in the topology's store (DuckDB or PostgreSQL), written in the txid's commit
transaction:

* the join's meta row in :data:`~trident_assets.names.JOIN_META_TABLE` (the last txid
  applied, the event-time watermark, the number of pending entries), as for a join kept in
  the store;
* its clock, :data:`~trident_assets.names.KV_JOIN_CLOCK_TABLE`: one row per txid the join
  applied (``txid``, the batch's event time ``ts``, ``expired_at``). Every entry arriving at
  txid ``t`` has arrival ``(t, ts_t)``, so the entries that expire at a batch are exactly those
  arriving at the txids :func:`due_txids` returns (``txid <= max_arrived_txid`` or
  ``ts < min_live_ts``, see :func:`~trident_assets.core.join.expiry_cutoff`) and not expired
  before. A txid expired at a committed batch is dropped at the next one (its arrival index
  on the servers with it).

A failed txid rolls all of it back, so a re-run finds the same txids due.
"""

from __future__ import annotations

from typing import Any

from trident_assets.backends.join_pending_table import write_meta
from trident_assets.names import KV_JOIN_CLOCK_TABLE

__all__ = ["advance_clock", "due_txids", "expiring_condition"]


def expiring_condition(
    txid_column: str, ts_column: str, max_arrived_txid: int | None, min_live_ts: float | None
) -> tuple[str, list[Any]]:
    """The condition on rows that expire at a batch, and its parameters.

    A row expires when its ``txid_column`` is at most ``max_arrived_txid`` or its
    ``ts_column`` is before ``min_live_ts`` (a None bound expires nothing).
    """
    parts, params = [], []
    if max_arrived_txid is not None:
        parts.append(f"{txid_column} <= ?")
        params.append(max_arrived_txid)
    if min_live_ts is not None:
        parts.append(f"{ts_column} < ?")
        params.append(min_live_ts)
    return ("(" + " OR ".join(parts) + ")" if parts else "FALSE"), params


def due_txids(
    store: Any,
    table: str,
    txid: int,
    max_arrived_txid: int | None,
    min_live_ts: float | None,
) -> tuple[list[int], list[int]]:
    """``(expiring, dropped)``: the arrival txids expiring at ``txid``, and those to drop.

    ``dropped`` are the txids that expired at a committed batch before ``txid``: their arrival
    index on the servers is no longer read.
    """
    if not store.has_table(KV_JOIN_CLOCK_TABLE):
        return [], []
    cond, params = expiring_condition("txid", "ts", max_arrived_txid, min_live_ts)
    expiring = store.fetch_rows(
        f"SELECT txid FROM {KV_JOIN_CLOCK_TABLE} WHERE table_name = ? AND expired_at IS NULL "
        f"AND {cond} ORDER BY txid",
        [table, *params],
    )
    dropped = store.fetch_rows(
        f"SELECT txid FROM {KV_JOIN_CLOCK_TABLE} WHERE table_name = ? AND expired_at < ? "
        "ORDER BY txid",
        [table, txid],
    )
    return [int(r[0]) for r in expiring], [int(r[0]) for r in dropped]


def advance_clock(
    store: Any,
    table: str,
    txid: int,
    ts: float | None,
    expiring: list[int],
    pending: int,
    *,
    expires: bool = True,
) -> None:
    """Record batch ``txid`` (at event time ``ts``) inside the open commit transaction.

    Drops the txids expired before it, marks ``expiring`` expired at it, adds its own row and
    sets the meta row (last txid, watermark ``ts``, ``pending`` entries). ``expires`` False:
    the entries arriving at ``txid`` never expire (a join without timeouts, or with
    ``timeout_s`` only and a batch without event time), so its row counts as expired at once
    (the next batch drops its index).
    """
    double = store.dialect.column_type("DOUBLE")
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {KV_JOIN_CLOCK_TABLE} (table_name VARCHAR NOT NULL, "
        f"txid BIGINT NOT NULL, ts {double}, expired_at BIGINT, PRIMARY KEY (table_name, txid))"
    )
    store.execute(
        f"DELETE FROM {KV_JOIN_CLOCK_TABLE} WHERE table_name = ? AND expired_at < ?", [table, txid]
    )
    if expiring:
        marks = ", ".join("?" for _ in expiring)
        store.execute(
            f"UPDATE {KV_JOIN_CLOCK_TABLE} SET expired_at = ? WHERE table_name = ? "
            f"AND txid IN ({marks})",
            [txid, table, *expiring],
        )
    store.execute(
        f"INSERT INTO {KV_JOIN_CLOCK_TABLE} VALUES (?, ?, ?, ?)",
        [table, txid, ts, None if expires else txid],
    )
    write_meta(store, table, txid, ts, pending)

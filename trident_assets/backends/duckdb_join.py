"""The single join's pending halves as a DuckDB table, applied one batch at a time in bulk SQL.

This is the set-based twin of :func:`trident_assets.core.join.apply_join_batch`: the same
semantics (expiry first, then the rows side by side in input order, each side's rows in
order; a side that arrives twice is an error or replaces the pending one; an entry keeps the
age of its first half), computed with a handful of statements per batch whatever the number
of keys, instead of a per-key read-modify-write. The tests check both give identical results.

**Layout.** The pending table (named by the caller, e.g. ``<topology>__<join>``) has one row
per pending join key::

    "key_<f>" ...        one column per join field (the key; NULLs compare equal)
    "side_<s>" STRUCT    one column per side: that side's row, NULL while it has not arrived
    arrived_txid BIGINT  the txid of the batch that created the entry
    arrived_ts DOUBLE    that batch's event time (NULL without one)

and :data:`JOIN_META_TABLE` holds, per pending table, the last applied txid, the event-time
watermark and the number of pending entries.

**One batch** (:func:`apply_join_batch_sql`), inside one store transaction (joining the
caller's, e.g. the executor's commit transaction):

1. the expired entries (``arrived_txid <= cutoff OR arrived_ts < cutoff``, see
   :func:`~trident_assets.core.join.expiry_cutoff`) are copied out and deleted (2 statements);
2. one statement computes, per key of the batch, the result of applying its rows: the
   batch is aggregated per (key, side) (count, 1st, 2nd, 3rd and last row), joined to the
   stored entry, and then folded side by side through a fixed chain of projections generated
   from the declaration (a per-key state machine unrolled over the sides, no per-key loop);
3. the first duplicate side (in batch order) is raised as
   :class:`~trident_assets.core.join.DuplicateJoinSideError` before anything else is written;
4. the joined rows are selected; the batch's stored keys are deleted and the surviving
   entries inserted (2 statements); the meta row is updated.

A raised error rolls the transaction back, so a failed batch leaves nothing. A txid at or
before the last applied one raises :class:`~trident_assets.errors.StaleTxidError`.

Rows of a side are ordered by their position in the batch table (for Spark input: the
DataFrame's partition order, i.e. log partition and offset for a log spout).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.join_batch_columns import (
    TS_COLUMN,
    quoted,
    with_ord,
)
from trident_assets.backends.join_fold_sql import expired_sql, fold_sql, joined_sql
from trident_assets.backends.join_pending_table import (
    ensure_meta_table,
    ensure_pending_table,
    key_column,
    read_meta,
    side_column,
    write_meta,
)
from trident_assets.core.join import (
    DuplicateJoinSideError,
    SingleJoin,
    check_event_time,
    check_txid,
    expiry_cutoff,
)
from trident_assets.names import validate_identifier

__all__ = ["BulkJoinResult", "apply_join_batch_sql", "batch_event_time"]


@dataclass(frozen=True, slots=True)
class BulkJoinResult:
    """What one batch of :func:`apply_join_batch_sql` did.

    Attributes:
        joined: The joined rows (columns ``out_fields``), in the order they completed.
        expired: One row per side of each expired entry: the join fields, then
            :data:`EXPIRED_FIELDS` (``values_json`` is that side's row as a JSON object),
            ordered by ``arrived_txid``, key, side.
        pending_after: The number of pending entries after the batch.
        keys_in: The number of distinct join keys in the batch.
        batch_ts: The event time the batch was applied at.
    """

    joined: pa.Table
    expired: pa.Table
    pending_after: int
    keys_in: int
    batch_ts: float | None


def batch_event_time(store: DuckDBStore, table: str, batch: pa.Table) -> float | None:
    """Return the event time to apply ``batch`` at: the watermark advanced to its latest row.

    The watermark is the largest event time of any batch applied to ``table`` so far, so the
    event-time clock never goes backwards. None when no row ever had an event time.
    """
    _, watermark, _ = read_meta(store, table)
    latest = None
    if TS_COLUMN in batch.column_names and batch.num_rows:
        latest = pc.max(batch.column(TS_COLUMN)).as_py()
    if latest is None:
        return watermark
    return latest if watermark is None else max(watermark, latest)


def apply_join_batch_sql(
    store: DuckDBStore,
    spec: SingleJoin,
    table: str,
    txid: int,
    batch: pa.Table,
    *,
    batch_ts: float | None = None,
) -> BulkJoinResult:
    """Apply one batch of the join to its pending table, in one store transaction.

    Same results as :func:`~trident_assets.core.join.apply_join_batch` with every expired
    entry as a candidate. Unlike it, ``batch_ts`` may be None with ``timeout_s``: no entry then
    expires by event time and new entries get no ``arrived_ts`` (a stream without event time
    yet, e.g. the executor's first empty batches).

    Args:
        store: The state store; joins an open transaction (the executor's commit).
        spec: The join declaration.
        table: The pending table's name (created from the batch's types on first use).
        txid: The batch's txid (>= 1), after the last one applied to ``table``.
        batch: The combined batch (:func:`combine_sides`, or the executor's Spark union):
            ``__side`` (int), ``__v<i>`` (the struct of side i's fields, NULL on other
            sides' rows), optionally ``__ts`` and ``__ord``.
        batch_ts: The batch's event time.

    Raises:
        JoinInputError: a bad txid or batch_ts.
        DuplicateJoinSideError: a side arrived twice for a pending key
            (``on_duplicate="error"``); nothing is written.
        StaleTxidError: ``txid`` is not after the last txid applied to ``table``.
        StateLayoutError: ``table`` exists with another layout.
    """
    check_txid(txid)
    ts = check_event_time(batch_ts)
    validate_identifier(table, "join state table")
    batch = with_ord(batch)
    cutoff = expiry_cutoff(spec, txid, ts if ts is not None else 0.0)
    min_ts = cutoff.min_live_ts if ts is not None else None
    conn = store.conn
    with store.transaction(), store.registered(batch) as view:
        read_meta(store, table, txid)
        ensure_meta_table(store)
        ensure_pending_table(store, spec, table, view)
        pending = quoted(table)
        params = {"max_txid": cutoff.max_arrived_txid, "min_ts": min_ts}
        where = "arrived_txid <= $max_txid OR arrived_ts < $min_ts"
        conn.execute(
            "CREATE OR REPLACE TEMP TABLE _trident_join_exp AS SELECT *, CASE WHEN "
            "arrived_txid <= $max_txid THEN 'timeout_batches' ELSE 'timeout_s' END AS reason "
            f"FROM {pending} WHERE {where}",
            params,
        )
        if cutoff.max_arrived_txid is not None or min_ts is not None:
            conn.execute(f"DELETE FROM {pending} WHERE {where}", params)
        expired = conn.sql(expired_sql(spec)).to_arrow_table()

        conn.execute(
            "CREATE OR REPLACE TEMP TABLE _trident_join_res AS " + fold_sql(spec, table, view),
            {"txid": txid, "ts": ts},
        )
        _raise_first_duplicate(store, spec, txid)
        joined = conn.sql(joined_sql(spec)).to_arrow_table()
        on_key = " AND ".join(
            f"p.{key_column(f)} IS NOT DISTINCT FROM r.k{j}"
            for j, f in enumerate(spec.join_fields or ())
        )
        conn.execute(
            f"DELETE FROM {pending} p USING _trident_join_res r WHERE r.__had AND {on_key}"
        )
        cols = [f"k{j} AS {key_column(f)}" for j, f in enumerate(spec.join_fields or ())]
        cols += [f"w{i} AS {side_column(s)}" for i, s in enumerate(spec.sides)]
        conn.execute(
            f"INSERT INTO {pending} BY NAME SELECT {', '.join(cols)}, a_txid AS arrived_txid, "
            "a_ts AS arrived_ts FROM _trident_join_res WHERE a_txid IS NOT NULL"
        )
        keys_in = conn.execute("SELECT count(*) FROM _trident_join_res").fetchall()[0][0]
        pending_after = conn.execute(f"SELECT count(*) FROM {pending}").fetchall()[0][0]
        write_meta(store, table, txid, ts, pending_after)
        conn.execute("DROP TABLE _trident_join_exp")
        conn.execute("DROP TABLE _trident_join_res")
    return BulkJoinResult(joined, expired, int(pending_after), int(keys_in), ts)


def _raise_first_duplicate(store: DuckDBStore, spec: SingleJoin, txid: int) -> None:
    if spec.on_duplicate != "error":
        return
    keys = ", ".join(f"k{j}" for j in range(len(spec.join_fields or ())))
    rows = store.conn.execute(
        f"SELECT e_side, e_at, {keys} FROM _trident_join_res WHERE e_side IS NOT NULL "
        "ORDER BY e_side, e_ord LIMIT 1"
    ).fetchall()
    if rows:
        side, arrived, *key = rows[0]
        raise DuplicateJoinSideError(tuple(key), spec.sides[side], arrived, txid)

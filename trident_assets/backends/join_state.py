"""The single join's pending state on any store: DuckDB or PostgreSQL, the same semantics.

In a DuckDB store :func:`apply_join_batch` is
:func:`~trident_assets.backends.duckdb_join.apply_join_batch_sql` (the set-based fold). In a
PostgreSQL store it applies the same fold to the batch's keys: the pending table has the
DuckDB layout except that each side's row is its JSON text (PostgreSQL has no struct columns to
ingest Arrow structs into). One batch, inside one store transaction:

1. the batch's distinct join keys are staged in PostgreSQL, and the pending entries of those
   keys plus the entries that expire at this batch are read out (one query, Arrow);
2. they are loaded into a private in-memory DuckDB store with the join's meta row, and
   :func:`~trident_assets.backends.duckdb_join.apply_join_batch_sql` applies the batch there
   (the same statements, so the same semantics and errors);
3. the entries of the batch's keys and the expired entries are deleted from PostgreSQL and the
   surviving entries of the batch's keys inserted (bulk), and the meta row is updated.

So the work follows the batch (its keys and the expiring entries), not the pending table; a
failure rolls the PostgreSQL transaction back and changes nothing.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from trident_assets.backends.duckdb_join import BulkJoinResult, apply_join_batch_sql
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.join_batch_columns import key_expressions, quoted
from trident_assets.backends.join_pending_table import (
    create_pending_table,
    read_meta,
    stored_columns,
    write_meta,
)
from trident_assets.backends.kv_join_clock import expiring_condition
from trident_assets.core.join import ARRIVED_TS, ARRIVED_TXID, SingleJoin, expiry_cutoff
from trident_assets.names import validate_identifier

__all__ = ["apply_join_batch"]


def apply_join_batch(
    store: Any,
    spec: SingleJoin,
    table: str,
    txid: int,
    batch: pa.Table,
    *,
    batch_ts: float | None = None,
) -> BulkJoinResult:
    """Apply one combined batch to the join's pending table, in one store transaction.

    Arguments, results and errors are those of
    :func:`~trident_assets.backends.duckdb_join.apply_join_batch_sql`, which applies it in a
    DuckDB store; in a PostgreSQL store it runs on the batch's keys (see the module).
    """
    if not store.dialect.is_postgres:
        return apply_join_batch_sql(store, spec, table, txid, batch, batch_ts=batch_ts)
    validate_identifier(table, "join state table")
    pending = quoted(table)
    fields = list(spec.join_fields or ())
    keys = [f"key_{f}" for f in fields]
    with DuckDBStore(":memory:") as local, store.transaction():
        last_txid, watermark, _ = read_meta(store, table, txid)
        stored_cols = stored_columns(store, spec, table)
        with local.registered(batch) as view:
            exprs = key_expressions(spec)
            batch_keys = local.fetch_arrow(
                "SELECT DISTINCT "
                + ", ".join(f"{e} AS {quoted(k)}" for e, k in zip(exprs, keys, strict=True))
                + f" FROM {view}"
            )
        if last_txid is not None:
            write_meta(local, table, last_txid, watermark, 0)
        ts_for_cutoff = batch_ts if batch_ts is not None else 0.0
        valid = isinstance(txid, int) and not isinstance(txid, bool) and txid >= 1
        cutoff = expiry_cutoff(spec, txid, ts_for_cutoff) if valid else None
        expire, params = (
            ("FALSE", [])
            if cutoff is None
            else expiring_condition(
                ARRIVED_TXID,
                ARRIVED_TS,
                cutoff.max_arrived_txid,
                cutoff.min_live_ts if batch_ts is not None else None,
            )
        )
        on_key = " AND ".join(f"p.{quoted(k)} IS NOT DISTINCT FROM b.{quoted(k)}" for k in keys)
        loaded = None
        if stored_cols is not None:
            with store.staged(batch_keys) as staged:
                loaded = store.fetch_arrow(
                    f'SELECT * FROM {pending} p WHERE EXISTS (SELECT 1 FROM "{staged}" b '
                    f"WHERE {on_key}) OR {expire}",
                    params,
                )
        result = _apply_locally(local, spec, table, txid, batch, batch_ts, loaded)
        survivors = local.fetch_arrow(
            "SELECT "
            + ", ".join(
                [quoted(k) for k in keys]
                + [
                    f"CAST(to_json({quoted(f'side_{s}')}) AS VARCHAR) AS {quoted(f'side_{s}')}"
                    for s in spec.sides
                ]
                + [ARRIVED_TXID, ARRIVED_TS]
            )
            + f" FROM {pending}"
        )
        with store.staged(survivors) as staged:
            if stored_cols is None:
                store.execute(f'CREATE TABLE {pending} AS SELECT * FROM "{staged}" LIMIT 0')
            else:
                with store.staged(batch_keys) as batch_staged:
                    store.execute(
                        f"DELETE FROM {pending} p WHERE EXISTS (SELECT 1 FROM "
                        f'"{batch_staged}" b WHERE {on_key}) OR {expire}',
                        params,
                    )
            store.execute(f'INSERT INTO {pending} SELECT * FROM "{staged}"')
        after = int(store.fetch_rows(f"SELECT count(*) FROM {pending}")[0][0])
        write_meta(store, table, txid, result.batch_ts, after)
    return BulkJoinResult(result.joined, result.expired, after, result.keys_in, result.batch_ts)


def _apply_locally(
    local: DuckDBStore,
    spec: SingleJoin,
    table: str,
    txid: int,
    batch: pa.Table,
    batch_ts: float | None,
    loaded: pa.Table | None,
) -> BulkJoinResult:
    """Load the relevant entries into ``local`` (sides parsed from JSON) and apply the batch."""
    if loaded is not None:
        create_pending_table(local, spec, table, batch)
        types = dict(
            local.fetch_rows(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = ?",
                [table],
            )
        )
        cols = [quoted(f"key_{f}") for f in spec.join_fields or ()]
        for side in spec.sides:
            col = quoted(f"side_{side}")
            cols.append(f"CAST(CAST({col} AS JSON) AS {types[f'side_{side}']}) AS {col}")
        cols += [ARRIVED_TXID, ARRIVED_TS]
        with local.registered(loaded) as src:
            local.execute(f"INSERT INTO {quoted(table)} SELECT {', '.join(cols)} FROM {src}")
    return apply_join_batch_sql(local, spec, table, txid, batch, batch_ts=batch_ts)

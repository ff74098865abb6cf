"""The single join's pending state on any store: DuckDB or PostgreSQL, the same semantics.

Dispatches to :mod:`~trident_assets.backends.duckdb_join` (the set-based fold in the DuckDB
store) or :mod:`~trident_assets.backends.postgres_join` (the same fold applied to the batch's
keys, with the pending halves kept in PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from trident_assets.backends import duckdb_join, postgres_join
from trident_assets.backends.duckdb_join import BulkJoinResult
from trident_assets.backends.join_batch_columns import combine_sides
from trident_assets.core.join import SingleJoin

__all__ = ["apply_join_batch", "apply_join_sides"]


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
    :func:`~trident_assets.backends.duckdb_join.apply_join_batch_sql`.
    """
    if store.dialect.is_postgres:
        return postgres_join.apply_join_batch_pg(store, spec, table, txid, batch, batch_ts=batch_ts)
    return duckdb_join.apply_join_batch_sql(store, spec, table, txid, batch, batch_ts=batch_ts)


def apply_join_sides(
    store: Any,
    spec: SingleJoin,
    table: str,
    txid: int,
    rows_by_side: Mapping[str, pa.Table],
    *,
    batch_ts: float | None = None,
) -> BulkJoinResult:
    """Apply batch ``txid`` given one Arrow table per side."""
    return apply_join_batch(
        store, spec, table, txid, combine_sides(spec, rows_by_side), batch_ts=batch_ts
    )

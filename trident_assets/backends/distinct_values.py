"""The values a distinct-count state has seen per key, each with the txid that first saw it.

A ``DistinctCount`` state ``T__S`` is a map of keys to counts (merged like a ``Count``'s
partials) and, beside it, ``T__S__seen``: one row per (key..., value) with the txid that
first saw the value. :func:`add_values` runs inside the txid's commit transaction, in three
set-based statements, and returns each key's partial: how many of the batch's values the
key had never seen. A txid applied again (a replay after a crash between the write and the
commit) first forgets the values it recorded, so it counts exactly what it counted the
first time (the map's opaque or transactional rule then applies the partials once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trident_assets.backends.map_layout import quote_ident

if TYPE_CHECKING:
    import pyarrow as pa

    from trident_assets.backends.state_store import StateStore

__all__ = ["SEEN_VALUE", "add_values", "seen_table"]

SEEN_VALUE = "_trident_value"
"""The value column of a seen table (a key field may not be named like it)."""


def seen_table(table: str) -> str:
    """The seen-values table of distinct-count state ``table``."""
    return f"{table}__seen"


def add_values(
    store: StateStore, table: str, pairs: pa.Table, keys: list[str], value: str, out: str, txid: int
) -> pa.Table:
    """Record ``pairs`` (distinct ``keys`` + ``value`` rows, no null value) as seen at ``txid``.

    Returns one row per key of ``pairs``: its key columns and ``out``, the number of its
    values first seen at ``txid`` (0 for a key that saw only known values).
    """
    seen = quote_ident(seen_table(table), "state table")
    key_cols = [quote_ident(k, "key field") for k in keys]
    val = quote_ident(value, "value field")
    same_key = " AND ".join(f"s.{k} IS NOT DISTINCT FROM b.{k}" for k in key_cols)
    with store.staged(pairs) as staged:
        batch = quote_ident(staged)
        b_cols = ", ".join(f"b.{k}" for k in key_cols)
        store.execute(
            f"CREATE TABLE IF NOT EXISTS {seen} AS SELECT {b_cols}, b.{val} AS {SEEN_VALUE}, "
            f"CAST(0 AS BIGINT) AS txid FROM {batch} AS b LIMIT 0"
        )
        if store.dialect.is_postgres:  # DuckDB prunes by txid without one (appended in order)
            index = quote_ident(f"{seen_table(table)}_txid")
            store.execute(f"CREATE INDEX IF NOT EXISTS {index} ON {seen} (txid)")
        store.execute(f"DELETE FROM {seen} WHERE txid = ?", [txid])
        store.execute(
            f"INSERT INTO {seen} SELECT {b_cols}, b.{val}, ? FROM {batch} AS b WHERE NOT EXISTS "
            f"(SELECT 1 FROM {seen} AS s WHERE {same_key} AND s.{SEEN_VALUE} = b.{val})",
            [txid],
        )
        return store.fetch_arrow(
            f"SELECT {b_cols}, CAST(count(s.txid) AS BIGINT) AS {quote_ident(out)} "
            f"FROM (SELECT DISTINCT {', '.join(key_cols)} FROM {batch}) AS b "
            f"LEFT JOIN (SELECT * FROM {seen} WHERE txid = ?) AS s ON {same_key} "
            f"GROUP BY {b_cols} ORDER BY {b_cols}",
            [txid],
        )

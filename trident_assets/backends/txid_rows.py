"""Per-txid row tables: outputs, new values, partials and dead letters.

Each holds the rows of recent txids (column ``txid``); a txid's rows are replaced in its
commit transaction (a replay rewrites the same rows), never written row by row. Outputs, new
values and partials keep their last ``keep`` txids and come as Arrow (:func:`store_rows`) or
as a relation of the store (:func:`store_relation`: a staged query, files, a staging table);
the dead letters of every topology share one table (:func:`store_dead_letters`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident
from trident_assets.backends.replica import NEW_VALUES_KEPT
from trident_assets.names import DEAD_LETTERS_TABLE as DEAD_LETTERS

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore

__all__ = [
    "ensure_dead_letters_table",
    "prepare_rows_table",
    "store_dead_letters",
    "store_relation",
    "store_rows",
]


def store_rows(
    store: StateStore, table: str, txid: int, rows: pa.Table, keep: int = NEW_VALUES_KEPT
) -> None:
    """Replace the rows of ``txid`` in a per-txid table, keeping the last ``keep`` txids.

    One statement each; the delete scans what the table keeps, so keep it short where the
    read replica serves the history. A column that was NULL in every row so far takes the
    type of the first batch with values. A field of the rows named ``txid`` is stored as
    ``txid_1`` (the table's ``txid`` is the batch's).
    """
    rows = rows.rename_columns(_free_names(rows.column_names, {"txid"}))
    if store.dialect.is_postgres and store.has_table(table):
        rows = _nulls_typed_like(store, table, rows)
    with store.staged(rows) as name:
        store_relation(store, table, txid, name, rows.column_names, keep)


def store_relation(
    store: StateStore,
    table: str,
    txid: int,
    relation: str,
    columns: list[str],
    keep: int = NEW_VALUES_KEPT,
) -> None:
    """:func:`store_rows` for rows a query of the store yields: ``columns`` of ``relation``.

    A staged relation (Arrow, files or a query); ``columns`` must not include ``txid``.
    """
    prepare_rows_table(store, table, txid, relation, columns, keep)
    cols = ", ".join(quote_ident(c) for c in ["txid", *columns])
    picked = ", ".join(quote_ident(c) for c in columns)
    store.execute(
        f'INSERT INTO "{table}" ({cols}) SELECT CAST(? AS BIGINT), {picked} FROM "{relation}"',
        [txid],
    )


def prepare_rows_table(
    store: StateStore,
    table: str,
    txid: int,
    relation: str,
    columns: list[str],
    keep: int = NEW_VALUES_KEPT,
) -> None:
    """Make per-txid ``table`` ready for ``txid``'s rows.

    Created (typed like ``columns`` of ``relation``) if missing; ``txid``'s rows and those
    older than ``keep`` txids deleted.
    """
    picked = ", ".join(quote_ident(c) for c in columns)
    store.execute(
        f'CREATE TABLE IF NOT EXISTS "{table}" AS SELECT CAST(0 AS BIGINT) AS txid, {picked} '
        f'FROM "{relation}" LIMIT 0'
    )
    _type_null_columns(store, table, relation)
    store.execute(f'DELETE FROM "{table}" WHERE txid = ? OR txid <= ?', [txid, txid - keep])


def _free_names(names: list[str], taken: set[str]) -> list[str]:
    """``names`` with each one already in ``taken`` (or repeated) suffixed ``_1``, ``_2``..."""
    used = set(taken)
    out = []
    for name in names:
        new, k = name, 0
        while new in used or (new != name and new in names):
            k += 1
            new = f"{name}_{k}"
        used.add(new)
        out.append(new)
    return out


def _nulls_typed_like(store: StateStore, table: str, rows: pa.Table) -> pa.Table:
    """PostgreSQL: ``rows`` with its all-NULL (Arrow ``null``) columns cast to ``table``'s types.

    (A staged ``null`` column would otherwise arrive as ``text``.)
    """
    stored = store.fetch_arrow(f'SELECT * FROM "{table}" LIMIT 0').schema
    for i, field in enumerate(rows.schema):
        if pa.types.is_null(field.type) and field.name in stored.names:
            target = stored.field(field.name).type
            rows = rows.set_column(i, field.name, rows.column(i).cast(target))
    return rows


def _type_null_columns(store: StateStore, table: str, staged: str) -> None:
    """Give a column created untyped (all NULL in its first batch) the type it now has.

    A query or output column that was NULL in every row of the batch that created the table
    has DuckDB type ``NULL`` (PostgreSQL: ``text``); without this, the first batch with
    values could not be stored (or would be stored as text).
    """
    stored = _column_types(store, table)
    if store.dialect.is_postgres:
        untyped = [c for c, t in stored.items() if t == "text"]
    else:
        untyped = [c for c, t in stored.items() if t.strip('"').upper() == "NULL"]
    if not untyped:
        return
    incoming = _column_types(store, staged)
    for col in untyped:
        typ = incoming.get(col)
        if typ is None or typ == stored[col] or typ.strip('"').upper() == "NULL":
            continue
        q = quote_ident(col)
        if store.dialect.is_postgres:
            if store.fetch_rows(f'SELECT count({q}) FROM "{table}"')[0][0]:
                continue  # a text column that holds text: not untyped
            store.execute(f'ALTER TABLE "{table}" ALTER COLUMN {q} TYPE {typ} USING NULL')
        else:
            store.execute(f'ALTER TABLE "{table}" ALTER COLUMN {q} SET DATA TYPE {typ}')


def _column_types(store: StateStore, relation: str) -> dict[str, str]:
    """Column name -> SQL type of table or staged relation ``relation``."""
    if store.dialect.is_postgres:
        rows = store.fetch_rows(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = CAST(? AS regclass) AND attnum > 0 AND NOT attisdropped "
            "ORDER BY attnum",
            [quote_ident(relation)],
        )
    else:
        rows = store.fetch_rows(f'DESCRIBE SELECT * FROM "{relation}"')
    return {str(r[0]): str(r[1]) for r in rows}


def ensure_dead_letters_table(store: StateStore) -> None:
    """Create the dead letters table if the store (DuckDB or PostgreSQL) has none."""
    blob = store.dialect.column_type("BLOB")
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {DEAD_LETTERS} (topology VARCHAR NOT NULL, "
        "spout VARCHAR NOT NULL, txid BIGINT NOT NULL, topic VARCHAR, partition INTEGER, "
        f'"offset" BIGINT, reason VARCHAR NOT NULL, value {blob})'
    )


def store_dead_letters(
    store: StateStore, topology: str, txid: int, dead: dict[str, pa.Table]
) -> int:
    """Replace ``txid``'s dead letters of ``topology`` by ``dead`` (per spout); return how many.

    One bulk insert per spout (the rows are staged as Arrow, never inserted one by one).
    """
    store.execute(f"DELETE FROM {DEAD_LETTERS} WHERE topology = ? AND txid = ?", [topology, txid])
    total = 0
    for spout_id, table in dead.items():
        if table.num_rows == 0:
            continue
        total += table.num_rows
        with store.staged(table) as name:
            store.execute(
                f'INSERT INTO {DEAD_LETTERS} SELECT ?, ?, ?, topic, partition, "offset", reason, '
                f'value FROM "{name}"',
                [topology, spout_id, txid],
            )
    return total

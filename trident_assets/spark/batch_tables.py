"""The per-txid tables a commit writes besides the states: outputs, new values, dead letters.

Each is replaced per txid inside the batch's commit transaction (a replay rewrites the
same rows); outputs and new values keep the last :data:`NEW_VALUES_KEPT` txids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

if TYPE_CHECKING:
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.backends.state_store import StateStore

__all__ = [
    "DEAD_LETTERS",
    "NEW_VALUES_KEPT",
    "ensure_dead_letters_table",
    "store_dead_letters",
    "store_rows",
]

DEAD_LETTERS = "_trident_dead_letters"
"""The store table of records a spout's scheme could not decode (all topologies)."""
NEW_VALUES_KEPT = 50
"""How many recent txids of new values and outputs each table keeps."""


def ensure_dead_letters_table(store: StateStore) -> None:
    """Create the dead letters table if the store (DuckDB or PostgreSQL) has none."""
    blob = store.dialect.column_type("BLOB")
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {DEAD_LETTERS} (topology VARCHAR NOT NULL, "
        "spout VARCHAR NOT NULL, txid BIGINT NOT NULL, topic VARCHAR, partition INTEGER, "
        f'"offset" BIGINT, reason VARCHAR NOT NULL, value {blob})'
    )


def store_rows(
    store: DuckDBStore, table: str, txid: int, rows: pa.Table, keep: int = NEW_VALUES_KEPT
) -> None:
    """Replace the rows of ``txid`` in a per-txid table, keeping the last ``keep`` txids.

    One statement each; the delete scans what the table keeps, so keep it short where the
    read replica serves the history.
    """
    conn = store.conn
    with_txid = rows.add_column(0, "txid", pa.array([txid] * rows.num_rows, pa.int64()))
    with store.registered(with_txid) as name:
        conn.execute(f'CREATE TABLE IF NOT EXISTS "{table}" AS SELECT * FROM {name} LIMIT 0')
        _type_null_columns(store, table, name)
        conn.execute(f'DELETE FROM "{table}" WHERE txid = ? OR txid <= ?', [txid, txid - keep])
        conn.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM {name}')


def _type_null_columns(store: DuckDBStore, table: str, view: str) -> None:
    """Give a column created untyped (all NULL in its first batch) the type it now has.

    A query or output column that was NULL in every row of the batch that created the table
    has DuckDB type ``NULL``; without this, the first batch with values could not be stored.
    """
    conn = store.conn
    stored = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?",
        [table],
    ).fetchall()
    untyped = [col for col, typ in stored if typ.strip('"').upper() == "NULL"]
    if not untyped:
        return
    incoming = {row[0]: row[1] for row in conn.execute(f"DESCRIBE SELECT * FROM {view}").fetchall()}
    for col in untyped:
        typ = incoming.get(col)
        if typ is not None and typ.strip('"').upper() != "NULL":
            conn.execute(f'ALTER TABLE "{table}" ALTER COLUMN "{col}" SET DATA TYPE {typ}')


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

"""The single join's pending table in a store: its layout, creation and checks, and reads of it.

One row per pending join key: ``"key_<f>"`` per join field (:func:`key_column`),
``"side_<s>"`` per side (:func:`side_column`: that side's row as a struct, NULL while it has not
arrived), ``arrived_txid`` and ``arrived_ts``. :data:`JOIN_META_TABLE` holds, per pending table, the
last applied txid, the event-time watermark and the number of pending entries.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.join_batch_columns import key_expressions, quoted, value_column
from trident_assets.core.join_spec import ARRIVED_TS, ARRIVED_TXID, SingleJoin
from trident_assets.errors import StaleTxidError, StateLayoutError
from trident_assets.names import JOIN_META_TABLE, validate_identifier

__all__ = [
    "create_pending_table",
    "ensure_meta_table",
    "ensure_pending_table",
    "key_column",
    "pending_count",
    "read_meta",
    "side_column",
    "stored_columns",
    "write_meta",
]


def key_column(field: str) -> str:
    """The quoted pending-table column of join field ``field``."""
    return quoted(f"key_{field}")


def side_column(side: str) -> str:
    """The quoted pending-table column of side ``side``."""
    return quoted(f"side_{side}")


def ensure_meta_table(store: Any) -> None:
    """Create :data:`JOIN_META_TABLE` if it is missing (any store)."""
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {JOIN_META_TABLE} (table_name VARCHAR PRIMARY KEY, "
        f"last_txid BIGINT NOT NULL, watermark {store.dialect.column_type('DOUBLE')}, "
        "pending BIGINT NOT NULL)"
    )


def write_meta(store: Any, table: str, txid: int, watermark: float | None, pending: int) -> None:
    """Set join ``table``'s meta row (creating :data:`JOIN_META_TABLE` if missing)."""
    ensure_meta_table(store)
    store.execute(
        f"INSERT INTO {JOIN_META_TABLE} VALUES (?, ?, ?, ?) ON CONFLICT (table_name) DO UPDATE "
        "SET last_txid = excluded.last_txid, watermark = excluded.watermark, "
        "pending = excluded.pending",
        [table, txid, watermark, pending],
    )


def read_meta(
    store: Any, table: str, txid: int | None = None
) -> tuple[int | None, float | None, int]:
    """``(last txid applied, watermark, pending entries)`` of join ``table`` (any store).

    ``(None, None, 0)`` before its first batch.

    Raises:
        StaleTxidError: join batch ``txid`` (when given) is not after the last txid applied.
    """
    if not store.has_table(JOIN_META_TABLE):
        return None, None, 0
    rows = store.fetch_rows(
        f"SELECT last_txid, watermark, pending FROM {JOIN_META_TABLE} WHERE table_name = ?",
        [table],
    )
    if not rows:
        return None, None, 0
    last, watermark, pending = rows[0]
    if isinstance(txid, int) and txid <= last:  # (a bad txid is refused by the apply)
        msg = (
            f"join batch {txid} is not after the last batch applied to {table!r} "
            f"({last}): it was applied already"
        )
        raise StaleTxidError(msg)
    return int(last), None if watermark is None else float(watermark), int(pending)


def _columns(store: Any, table: str) -> list[str] | None:
    rows = store.fetch_rows(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
        "AND table_schema = current_schema() ORDER BY ordinal_position",
        [validate_identifier(table, "join state table")],
    )
    return [r[0] for r in rows] or None


def stored_columns(store: Any, spec: SingleJoin, table: str) -> list[str] | None:
    """The columns of pending table ``table`` (None: no such table), on any store.

    Raises:
        StateLayoutError: ``table`` exists with another layout.
    """
    stored = _columns(store, table)
    expected = [
        *(f"key_{f}" for f in spec.join_fields or ()),
        *(f"side_{s}" for s in spec.sides),
        ARRIVED_TXID,
        ARRIVED_TS,
    ]
    if stored is not None and stored != expected:
        msg = (
            f"table {table!r} has columns {stored}, not the pending layout {expected} of "
            f"this join (sides {list(spec.sides)}, join fields {list(spec.join_fields or ())})."
            " Is the name shared with another state or join?"
        )
        raise StateLayoutError(msg)
    return stored


def ensure_pending_table(store: DuckDBStore, spec: SingleJoin, table: str, view: str) -> None:
    """Create ``table`` typed from the registered batch ``view``, or check its layout.

    Raises:
        StateLayoutError: ``table`` exists with another layout.
    """
    if stored_columns(store, spec, table) is not None:
        return
    fields = spec.join_fields or ()
    keys = [f"{e} AS {key_column(f)}" for e, f in zip(key_expressions(spec), fields, strict=True)]
    sides = [f"{value_column(i)} AS {side_column(s)}" for i, s in enumerate(spec.sides)]
    store.conn.execute(
        f"CREATE TABLE {quoted(table)} AS SELECT {', '.join([*keys, *sides])}, "
        f"CAST(NULL AS BIGINT) AS {ARRIVED_TXID}, CAST(NULL AS DOUBLE) AS {ARRIVED_TS} "
        f"FROM {view} LIMIT 0"
    )


def create_pending_table(store: DuckDBStore, spec: SingleJoin, table: str, batch: pa.Table) -> None:
    """Create ``table`` with the pending layout, typed from the combined ``batch`` (if missing).

    Raises:
        StateLayoutError: ``table`` exists with another layout.
    """
    with store.registered(batch) as view:
        ensure_pending_table(store, spec, table, view)


def pending_count(store: Any, table: str) -> int:
    """Return the number of pending entries of ``table`` (0 before its first batch)."""
    if _columns(store, table) is None:
        return 0
    return int(store.fetch_rows(f"SELECT count(*) FROM {quoted(table)}")[0][0])

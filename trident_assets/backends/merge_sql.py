"""The one SQL statement that merges a staged batch of partials into a map table.

``INSERT INTO <log> SELECT ... FROM (batch) LEFT JOIN (current rows)``, with the txid rules
:mod:`~trident_assets.backends.duckdb_merge` states in its CASE expressions; the same
statement on DuckDB and PostgreSQL (spelled by the store's
:class:`~trident_assets.backends.sql_dialect.Dialect`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends.map_layout import MapLayout, log_table, quote_ident, seq_name
from trident_assets.backends.merge_checks import Combine
from trident_assets.backends.sql_store import StateStore
from trident_assets.errors import StaleTxidError, StateLayoutError
from trident_assets.names import SEQ_COLUMN, validate_identifier

__all__ = ["merge_sql", "read_back", "run_merge", "sorted_by_keys"]

_BEHIND = "is behind state's batch"
_BEHIND_SQL = _BEHIND.replace("'", "''")


def _combine_sql(combine: Combine, stored: str, partial: str) -> str:
    if combine == "sum":
        merged = f"{stored} + {partial}"
    elif combine == "min":
        merged = f"LEAST({stored}, {partial})"
    else:
        merged = f"GREATEST({stored}, {partial})"
    return f"CASE WHEN {stored} IS NULL THEN {partial} ELSE {merged} END"


def merge_sql(
    store: StateStore,
    layout: MapLayout,
    view: str,
    value_column: str,
    combine: Combine,
    returning: bool,
    *,
    distinct_keys: bool = False,
    in_key_order: bool | None = None,
) -> str:
    """Return the batch's ONE statement: ``INSERT INTO <log> SELECT ... RETURNING``.

    The batch's combined partials, joined to the batch keys' current rows, are appended as
    each key's new version. ``distinct_keys``: the staged batch holds each key once, so its
    rows are the partials as they are (no ``GROUP BY``). PostgreSQL looks each batch key's
    current row up by index (``LEFT JOIN LATERAL``) and appends in key order (``ORDER BY``,
    unless ``in_key_order``: the staged rows are sorted already; default ``distinct_keys``);
    DuckDB hash-joins the log.
    """
    d = store.dialect
    vtype = d.column_type(layout.value_type)
    key_q = [quote_ident(c) for c in layout.key_columns]
    keys = ", ".join(key_q)
    key_select = ", ".join(
        f"CAST({k} AS {d.column_type(kt)}) AS {k}"
        for k, kt in zip(key_q, layout.key_types, strict=True)
    )
    txid_expr = "NULL" if layout.kind == "plain" else "CAST(? AS BIGINT)"
    value = quote_ident(value_column)
    if distinct_keys:
        partial, group = value, ""
    else:
        agg = {"sum": "SUM", "min": "MIN", "max": "MAX"}[combine]
        partial, group = f"{agg}({value})", f" GROUP BY {keys}"
    source = (
        f"SELECT {key_select}, {txid_expr} AS txid, CAST({partial} AS {vtype}) AS p "
        f"FROM {quote_ident(view)}{group}"
    )
    new = "b.p"
    where = ""
    # An absent key reads as s.* NULL: it rolls forward (opaque) / applies (transactional)
    # with combine(NULL, p) = p and prev NULL, exactly as the INSERT branch of an upsert.
    if layout.kind == "opaque":
        rolls = "s.txid IS NULL OR b.txid IS NULL OR s.txid < b.txid"
        key_text = " || ', ' || ".join(f"CAST(b.{k} AS VARCHAR)" for k in key_q)
        behind = d.raise_error(
            f"'Current batch (' || b.txid || ') {_BEHIND_SQL} (' || s.txid || "
            f"') at key (' || {key_text} || ') of map {layout.table}'",
            vtype,
        )
        values = (
            "b.txid, "
            f"CASE WHEN {rolls} THEN {_combine_sql(combine, 's.curr', new)} "
            f"WHEN s.txid = b.txid THEN {_combine_sql(combine, 's.prev', new)} "
            f"ELSE {behind} END, "
            f"CASE WHEN {rolls} THEN s.curr ELSE s.prev END"
        )
    elif layout.kind == "transactional":
        values = f"b.txid, {_combine_sql(combine, 's.curr', new)}, CAST(NULL AS {vtype})"
        where = " WHERE b.txid IS NULL OR s.txid IS DISTINCT FROM b.txid"
    else:
        values = f"NULL, {_combine_sql(combine, 's.curr', new)}, CAST(NULL AS {vtype})"
    log = log_table(layout.table)
    if d.is_postgres:
        current = d.latest_join(log, key_q, "b", SEQ_COLUMN)
        # Appending in key order keeps the (keys, seq) index pages a batch touches together:
        # a staged batch of distinct keys is already in key order (see apply_partials).
        sorted_ = distinct_keys if in_key_order is None else in_key_order
        order = "" if sorted_ else f" ORDER BY {', '.join(f'b.{k}' for k in key_q)}"
    else:
        on = " AND ".join(f"b.{k} = s.{k}" for k in key_q)
        current = f"LEFT JOIN ({store.latest_sql(layout, quote_ident(view))}) s ON {on}"
        order = ""
    seq = d.nextval(seq_name(layout.table))
    tail = f" RETURNING {keys}, curr" if returning else ""
    return (
        f"INSERT INTO {log} ({keys}, {SEQ_COLUMN}, txid, curr, prev) "
        f"SELECT {', '.join(f'b.{k}' for k in key_q)}, {seq}, {values} FROM ({source}) b "
        f"{current}{where}{order}{tail}"
    )


def _stale_message(exc: Exception) -> str:
    text = str(exc)
    text = text[text.index("Current batch") :].splitlines()[0] if "Current batch" in text else text
    return (
        f"{text}. The state was written by a later txid; point this topology at a fresh state "
        "table or replay from that txid. Nothing was changed."
    )


def run_merge(
    store: StateStore,
    layout: MapLayout,
    view: str,
    value_column: str,
    combine: Combine,
    txid: int | None,
    distinct_keys: bool,
    *,
    returning: bool,
    in_key_order: bool | None = None,
    into: tuple[str, Sequence[str]] | None = None,
) -> pa.Table | int:
    """Run the batch's one statement over staged relation ``view``, inside a transaction.

    ``distinct_keys``, ``in_key_order``: what the staged rows are (see :func:`merge_sql`).
    ``into`` (PostgreSQL): ``(table, columns)``: the same statement also appends each key
    written, with its new value, to per-txid ``table`` (``txid`` and ``columns``: the key
    columns and the value's name), and counts them.

    Returns the rows written (``returning``: their key columns and ``curr``) or how many.

    Raises:
        StaleTxidError: opaque state, and a key's stored txid is ahead of ``txid``.
        StateLayoutError: a combined value does not fit the table's value type.
    """
    sql = merge_sql(
        store,
        layout,
        view,
        value_column,
        combine,
        returning or into is not None,
        distinct_keys=distinct_keys,
        in_key_order=in_key_order,
    )
    params = [] if layout.kind == "plain" else [txid]
    if into is not None:
        table, columns = into
        cols = ", ".join(quote_ident(c) for c in ["txid", *columns])
        keys = ", ".join(quote_ident(c) for c in layout.key_columns)
        sql = (
            f'WITH m AS ({sql}), n AS (INSERT INTO "{validate_identifier(table, "table")}" '
            f"({cols}) SELECT CAST(? AS BIGINT), {keys}, curr FROM m RETURNING 1) "
            "SELECT count(*) FROM n"
        )
        params = [*params, txid]
    try:
        if into is not None:
            return int(store.fetch_rows(sql, params)[0][0])
        return store.fetch_arrow(sql, params) if returning else store.execute(sql, params)
    except Exception as exc:
        if _BEHIND in str(exc):
            raise StaleTxidError(_stale_message(exc)) from exc
        if isinstance(exc, store.value_errors):
            msg = (
                f"apply to {layout.table!r}: a combined value does not fit "
                f"{layout.value_type}: {exc}"
            )
            raise StateLayoutError(msg) from exc
        raise


def sorted_by_keys(batch: pa.Table, keys: list[str], key_types: list[str]) -> tuple[pa.Table, bool]:
    """Return ``batch`` sorted by its keys, and True if no key appears twice in it.

    PostgreSQL stages a batch in key order, so its index lookups and appends follow the
    ``(keys, seq)`` index; a batch of distinct keys (partials already combined per key, the
    usual case) needs no ``GROUP BY``. Floating-point keys always get one: SQL groups 0.0
    with -0.0, a bytewise comparison does not.
    """
    fields = [
        pa.field(f.name, f.type.value_type) if pa.types.is_dictionary(f.type) else f
        for f in batch.schema
    ]
    decoded = batch.cast(pa.schema(fields)) if fields != list(batch.schema) else batch
    ordered = decoded.sort_by([(k, "ascending") for k in keys])
    if "DOUBLE" in key_types:
        return ordered, False
    n = ordered.num_rows
    same: Any = None
    for k in keys:
        col = ordered.column(k)
        eq = pc.equal(col.slice(1), col.slice(0, n - 1))
        same = eq if same is None else pc.and_(same, eq)
    return ordered, n < 2 or not pc.any(same).as_py()


def read_back(store: StateStore, layout: MapLayout, view: str) -> pa.Table:
    """The key columns and ``curr`` of the stored keys that ``view`` holds."""
    cols = ", ".join(quote_ident(c) for c in layout.key_columns)
    latest = store.latest_sql(layout, quote_ident(view))
    return store.fetch_arrow(f"SELECT {cols}, curr FROM ({latest}) AS l")

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

and :data:`META_TABLE` holds, per pending table, the last applied txid, the event-time
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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.core.join import (
    ARRIVED_TS,
    ARRIVED_TXID,
    EXPIRED_FIELDS,
    DuplicateJoinSideError,
    JoinInputError,
    SingleJoin,
    check_event_time,
    expired_fields,
    expiry_cutoff,
)
from trident_assets.core.protocols import Key
from trident_assets.errors import StaleTxidError, StateLayoutError
from trident_assets.names import JOIN_META_TABLE, validate_identifier

__all__ = [
    "EXPIRED_FIELDS",
    "META_TABLE",
    "SIDE_COLUMN",
    "TS_COLUMN",
    "BulkJoinResult",
    "apply_join_batch_sql",
    "apply_join_sides",
    "batch_event_time",
    "combine_sides",
    "create_pending_table",
    "key_expressions",
    "pending_count",
    "read_pending",
    "value_column",
]

META_TABLE = JOIN_META_TABLE
"""Per pending table: ``last_txid``, event-time ``watermark`` and ``pending`` count."""

SIDE_COLUMN = "__side"
"""Combined batch table: the index of the row's side in the join's inputs."""
ORD_COLUMN = "__ord"
"""Combined batch table: the row's position (orders the rows of a side)."""
TS_COLUMN = "__ts"
"""Combined batch table: the row's event time in seconds (NULL if none)."""


def value_column(i: int) -> str:
    """Combined batch table: the column of side ``i``'s rows (a struct of its fields)."""
    return f"__v{i}"


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


def _q(name: str) -> str:
    return f'"{validate_identifier(name, "column")}"'


def _key_col(field: str) -> str:
    return _q(f"key_{field}")


def _side_col(side: str) -> str:
    return _q(f"side_{side}")


# -- batch input ---------------------------------------------------------------------------


def combine_sides(spec: SingleJoin, rows_by_side: Mapping[str, pa.Table]) -> pa.Table:
    """Build the combined batch table from one Arrow table per side.

    Each table must have (at least) the side's declared fields; every side must be given
    (an empty table for a side without rows), since its column types define the state's.

    Raises:
        JoinInputError: an unknown or missing side, or a table without a declared field.
    """
    unknown = [s for s in rows_by_side if s not in spec.sides]
    missing = [s for s in spec.sides if s not in rows_by_side]
    if unknown or missing:
        msg = (
            f"rows_by_side must hold one Arrow table for each side {list(spec.sides)}; "
            f"unknown: {unknown}, missing: {missing}"
        )
        raise JoinInputError(msg)
    parts = []
    for i, (side, fields) in enumerate(spec.inputs):
        table = rows_by_side[side]
        absent = [f for f in fields if f not in table.column_names]
        if absent:
            msg = f"the table of side {side!r} lacks its field(s) {absent}; it has {table.schema}"
            raise JoinInputError(msg)
        struct = pa.StructArray.from_arrays(
            [table.column(f).combine_chunks() for f in fields], names=list(fields)
        )
        parts.append(
            pa.table(
                {
                    SIDE_COLUMN: pa.array(np.full(table.num_rows, i, dtype=np.int32)),
                    value_column(i): struct,
                    TS_COLUMN: pa.nulls(table.num_rows, pa.float64()),
                }
            )
        )
    return pa.concat_tables(parts, promote_options="default")


def _with_ord(batch: pa.Table) -> pa.Table:
    if ORD_COLUMN in batch.column_names:
        return batch
    return batch.append_column(ORD_COLUMN, pa.array(np.arange(batch.num_rows, dtype=np.int64)))


# -- the state table -----------------------------------------------------------------------


def _ensure_meta(store: DuckDBStore) -> None:
    store.conn.execute(
        f"CREATE TABLE IF NOT EXISTS {META_TABLE} (table_name VARCHAR PRIMARY KEY, "
        "last_txid BIGINT NOT NULL, watermark DOUBLE, pending BIGINT NOT NULL)"
    )


def join_meta(store: Any, table: str) -> tuple[int | None, float | None]:
    """The last txid applied to join table ``table`` and its watermark (any store)."""
    if not store.has_table(META_TABLE):
        return None, None
    rows = store.fetch_rows(
        f"SELECT last_txid, watermark FROM {META_TABLE} WHERE table_name = ?", [table]
    )
    return (None, None) if not rows else (rows[0][0], rows[0][1])


def _expected_columns(spec: SingleJoin) -> list[str]:
    return [
        *(f"key_{f}" for f in spec.join_fields or ()),
        *(f"side_{s}" for s in spec.sides),
        ARRIVED_TXID,
        ARRIVED_TS,
    ]


def _stored_columns(store: DuckDBStore, table: str) -> list[str] | None:
    rows = store.conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
        "AND table_schema = 'main' ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return [r[0] for r in rows] or None


def _key_exprs(spec: SingleJoin) -> list[str]:
    """Per join field: its value in a combined batch row (only the row's side is non-NULL)."""
    out = []
    for field in spec.join_fields or ():
        parts = [f"{value_column(i)}.{_q(field)}" for i in range(len(spec.inputs))]
        out.append(f"COALESCE({', '.join(parts)})")
    return out


def _ensure_pending(store: DuckDBStore, spec: SingleJoin, table: str, view: str) -> None:
    expected = _expected_columns(spec)
    stored = _stored_columns(store, table)
    if stored is not None:
        if stored != expected:
            msg = (
                f"table {table!r} has columns {stored}, not the pending layout {expected} of "
                f"this join (sides {list(spec.sides)}, join fields {list(spec.join_fields or ())})."
                " Is the name shared with another state or join?"
            )
            raise StateLayoutError(msg)
        return
    fields = spec.join_fields or ()
    keys = [f"{e} AS {_key_col(f)}" for e, f in zip(_key_exprs(spec), fields, strict=True)]
    sides = [f"{value_column(i)} AS {_side_col(s)}" for i, s in enumerate(spec.sides)]
    store.conn.execute(
        f"CREATE TABLE {_q(table)} AS SELECT {', '.join([*keys, *sides])}, "
        f"CAST(NULL AS BIGINT) AS {ARRIVED_TXID}, CAST(NULL AS DOUBLE) AS {ARRIVED_TS} "
        f"FROM {view} LIMIT 0"
    )


def key_expressions(spec: SingleJoin) -> list[str]:
    """Per join field, its value in a combined batch row (SQL over the ``__v<i>`` structs)."""
    return _key_exprs(spec)


def create_pending_table(store: DuckDBStore, spec: SingleJoin, table: str, batch: pa.Table) -> None:
    """Create ``table`` with the pending layout, typed from the combined ``batch`` (if missing).

    Raises:
        StateLayoutError: ``table`` exists with another layout.
    """
    with store.registered(batch) as view:
        _ensure_pending(store, spec, table, view)


# -- the per-key fold ------------------------------------------------------------------------


_STORED, _FIRST, _SECOND, _LAST = 1, 2, 3, 4
"""Source codes of a side's value in the fold (0: absent): the stored entry or a batch row."""


def _fold_sql(spec: SingleJoin, table: str, view: str) -> str:
    """The query giving, per key of the batch, the entry and joins after applying its rows.

    Parameters ``$txid`` and ``$ts``. Columns: ``k<j>``, ``__had`` (a stored entry existed),
    ``w<i>`` (side values), ``a_txid``/``a_ts`` (arrival; NULL when no entry remains),
    ``e_side``/``e_ord``/``e_at`` (first duplicate), ``j<n>_side``/``j<n>_ord``/``j<n>_o<m>``
    for the (at most two) joins the key completed.

    The fold over the sides carries small integer codes (which value each side holds: none,
    the stored one, or the batch's 1st/2nd/last row) and resolves them to values once, at the
    end, so the per-side steps stay cheap.
    """
    n = len(spec.inputs)
    nk = len(spec.join_fields or ())
    ks = [f"k{j}" for j in range(nk)]
    keys_csv = ", ".join(ks)
    key_sel = ", ".join(f"{e} AS k{j}" for j, e in enumerate(_key_exprs(spec)))
    vals = ", ".join(value_column(i) for i in range(n))
    part = f"PARTITION BY {keys_csv}, {SIDE_COLUMN}"
    aggs = []
    for i in range(n):
        on = f"{SIDE_COLUMN} = {i}"
        v = value_column(i)
        aggs += [
            f"count(*) FILTER (WHERE {on}) AS c{i}",
            f"any_value({v}) FILTER (WHERE {on} AND __rn = 1) AS f{i}",
            f"any_value({v}) FILTER (WHERE {on} AND __rn = 2) AS s{i}",
            f"any_value({v}) FILTER (WHERE {on} AND __rn = __cnt) AS l{i}",
            f"any_value({ORD_COLUMN}) FILTER (WHERE {on} AND __rn = 1) AS o1_{i}",
            f"any_value({ORD_COLUMN}) FILTER (WHERE {on} AND __rn = 2) AS o2_{i}",
            f"any_value({ORD_COLUMN}) FILTER (WHERE {on} AND __rn = 3) AS o3_{i}",
        ]
    on_key = " AND ".join(
        f"a.k{j} IS NOT DISTINCT FROM p.{_key_col(f)}" for j, f in enumerate(spec.join_fields or ())
    )
    st0 = (
        "SELECT a.*, p.arrived_txid IS NOT NULL AS __had, "
        "p.arrived_txid AS a_txid, p.arrived_ts AS a_ts, "
        + ", ".join(f"p.{_side_col(s)} AS p{i}" for i, s in enumerate(spec.sides))
        + ", "
        + ", ".join(
            f"CASE WHEN p.{_side_col(s)} IS NULL THEN 0 ELSE {_STORED} END AS w{i}"
            for i, s in enumerate(spec.sides)
        )
        + ", CAST(NULL AS INTEGER) AS e_side, CAST(NULL AS BIGINT) AS e_ord, "
        "CAST(NULL AS BIGINT) AS e_at, "
        + ", ".join(
            f"CAST(NULL AS INTEGER) AS j{j}_side, CAST(NULL AS BIGINT) AS j{j}_ord, "
            + ", ".join(f"0 AS j{j}_c{i}" for i in range(n))
            for j in (1, 2)
        )
        + f" FROM a LEFT JOIN {_q(table)} p ON {on_key}"
    )
    ctes = [
        f"b AS (SELECT {SIDE_COLUMN}, {ORD_COLUMN}, {key_sel}, {vals} FROM {view})",
        f"r AS (SELECT *, row_number() OVER ({part} ORDER BY {ORD_COLUMN}) AS __rn, "
        f"count(*) OVER ({part}) AS __cnt FROM b)",
        f"a AS (SELECT {keys_csv}, {', '.join(aggs)} FROM r GROUP BY {keys_csv})",
        f"st0 AS ({st0})",
    ]
    keep_latest = spec.on_duplicate == "keep_latest"
    for i in range(n):
        others = " AND ".join(f"w{j} <> 0" for j in range(n) if j != i)
        has = f"c{i} >= 1"
        cond_a = f"({has} AND w{i} <> 0)"
        cond_b = f"({has} AND w{i} = 0 AND {others})"
        cond_c = f"({has} AND w{i} = 0 AND NOT ({others}))"
        repl = []
        if keep_latest:
            repl.append(
                f"CASE WHEN {cond_b} THEN (CASE WHEN c{i} >= 2 THEN {_LAST} ELSE 0 END) "
                f"WHEN {cond_a} OR {cond_c} THEN {_LAST} ELSE w{i} END AS w{i}"
            )
        else:
            repl.append(
                f"CASE WHEN {cond_b} THEN (CASE WHEN c{i} >= 2 THEN {_SECOND} ELSE 0 END) "
                f"WHEN {cond_c} THEN {_FIRST} ELSE w{i} END AS w{i}"
            )
        repl += [f"CASE WHEN {cond_b} THEN 0 ELSE w{j} END AS w{j}" for j in range(n) if j != i]
        for col, param in (("a_txid", "$txid"), ("a_ts", "$ts")):
            repl.append(
                f"CASE WHEN {cond_b} THEN (CASE WHEN c{i} >= 2 THEN {param} END) "
                f"WHEN {cond_c} AND a_txid IS NULL THEN {param} ELSE {col} END AS {col}"
            )
        if not keep_latest:
            dup_a, dup_b, dup_c = cond_a, f"({cond_b} AND c{i} >= 3)", f"({cond_c} AND c{i} >= 2)"
            repl += [
                f"COALESCE(e_side, CASE WHEN {dup_a} OR {dup_b} OR {dup_c} THEN {i} END) AS e_side",
                f"CASE WHEN e_side IS NOT NULL THEN e_ord WHEN {dup_a} THEN o1_{i} "
                f"WHEN {dup_b} THEN o3_{i} WHEN {dup_c} THEN o2_{i} END AS e_ord",
                f"CASE WHEN e_side IS NOT NULL THEN e_at WHEN {dup_a} THEN a_txid "
                f"WHEN {dup_b} THEN $txid WHEN {dup_c} THEN COALESCE(a_txid, $txid) END AS e_at",
            ]
        for j, first in ((1, "j1_side IS NULL"), (2, "j1_side IS NOT NULL")):
            when = f"{cond_b} AND {first}"
            repl.append(f"CASE WHEN {when} THEN {i} ELSE j{j}_side END AS j{j}_side")
            repl.append(f"CASE WHEN {when} THEN o1_{i} ELSE j{j}_ord END AS j{j}_ord")
            for s in range(n):
                code = str(_FIRST) if s == i else f"w{s}"
                repl.append(f"CASE WHEN {when} THEN {code} ELSE j{j}_c{s} END AS j{j}_c{s}")
        ctes.append(f"st{i + 1} AS (SELECT * REPLACE ({', '.join(repl)}) FROM st{i})")

    def value(code: str, s: int) -> str:
        return (
            f"CASE {code} WHEN {_STORED} THEN p{s} WHEN {_FIRST} THEN f{s} "
            f"WHEN {_SECOND} THEN s{s} WHEN {_LAST} THEN l{s} END"
        )

    final = [*ks, "__had", "a_txid", "a_ts", "e_side", "e_ord", "e_at"]
    final += [value(f"w{i}", i) + f" AS w{i}" for i in range(n)]
    for j in (1, 2):
        final += [f"j{j}_side", f"j{j}_ord"]
        for m, (field, (side, _)) in enumerate(spec.locations.items()):
            s = spec.sides.index(side)
            final.append(f"({value(f'j{j}_c{s}', s)}).{_q(field)} AS j{j}_o{m}")
    return "WITH " + ",\n".join(ctes) + f"\nSELECT {', '.join(final)} FROM st{n}"


# -- one batch -------------------------------------------------------------------------------


def batch_event_time(store: DuckDBStore, table: str, batch: pa.Table) -> float | None:
    """Return the event time to apply ``batch`` at: the watermark advanced to its latest row.

    The watermark is the largest event time of any batch applied to ``table`` so far, so the
    event-time clock never goes backwards. None when no row ever had an event time.
    """
    _, watermark = join_meta(store, table)
    latest = None
    if TS_COLUMN in batch.column_names and batch.num_rows:
        latest = pc.max(batch.column(TS_COLUMN)).as_py()
    if latest is None:
        return watermark
    return latest if watermark is None else max(watermark, latest)


def apply_join_sides(
    store: DuckDBStore,
    spec: SingleJoin,
    table: str,
    txid: int,
    rows_by_side: Mapping[str, pa.Table],
    *,
    batch_ts: float | None = None,
) -> BulkJoinResult:
    """Apply batch ``txid`` given one Arrow table per side (see :func:`combine_sides`)."""
    return apply_join_batch_sql(
        store, spec, table, txid, combine_sides(spec, rows_by_side), batch_ts=batch_ts
    )


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
    if isinstance(txid, bool) or not isinstance(txid, int) or txid < 1:
        msg = f"a join batch needs an integer txid >= 1, got {txid!r}"
        raise JoinInputError(msg)
    ts = check_event_time(batch_ts)
    validate_identifier(table, "join state table")
    batch = _with_ord(batch)
    cutoff = expiry_cutoff(spec, txid, ts if ts is not None else 0.0)
    min_ts = cutoff.min_live_ts if ts is not None else None
    conn = store.conn
    with store.transaction(), store.registered(batch) as view:
        last_txid, _ = join_meta(store, table)
        if last_txid is not None and txid <= last_txid:
            msg = (
                f"join batch {txid} is not after the last batch applied to {table!r} "
                f"({last_txid}): it was applied already"
            )
            raise StaleTxidError(msg)
        _ensure_meta(store)
        _ensure_pending(store, spec, table, view)
        pending = _q(table)
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
        expired = conn.sql(_expired_sql(spec)).to_arrow_table()

        conn.execute(
            "CREATE OR REPLACE TEMP TABLE _trident_join_res AS " + _fold_sql(spec, table, view),
            {"txid": txid, "ts": ts},
        )
        _raise_first_duplicate(store, spec, txid)
        joined = conn.sql(_joined_sql(spec)).to_arrow_table()
        on_key = " AND ".join(
            f"p.{_key_col(f)} IS NOT DISTINCT FROM r.k{j}"
            for j, f in enumerate(spec.join_fields or ())
        )
        conn.execute(
            f"DELETE FROM {pending} p USING _trident_join_res r WHERE r.__had AND {on_key}"
        )
        cols = [f"k{j} AS {_key_col(f)}" for j, f in enumerate(spec.join_fields or ())]
        cols += [f"w{i} AS {_side_col(s)}" for i, s in enumerate(spec.sides)]
        conn.execute(
            f"INSERT INTO {pending} BY NAME SELECT {', '.join(cols)}, a_txid AS arrived_txid, "
            "a_ts AS arrived_ts FROM _trident_join_res WHERE a_txid IS NOT NULL"
        )
        keys_in = conn.execute("SELECT count(*) FROM _trident_join_res").fetchall()[0][0]
        pending_after = conn.execute(f"SELECT count(*) FROM {pending}").fetchall()[0][0]
        conn.execute(
            f"INSERT INTO {META_TABLE} VALUES (?, ?, ?, ?) ON CONFLICT (table_name) DO UPDATE "
            "SET last_txid = excluded.last_txid, watermark = excluded.watermark, "
            "pending = excluded.pending",
            [table, txid, ts, pending_after],
        )
        conn.execute("DROP TABLE _trident_join_exp")
        conn.execute("DROP TABLE _trident_join_res")
    return BulkJoinResult(joined, expired, int(pending_after), int(keys_in), ts)


def _expired_sql(spec: SingleJoin) -> str:
    keys = ", ".join(f"{_key_col(f)} AS {_q(f)}" for f in spec.join_fields or ())
    parts = [
        f"SELECT {keys}, '{side}' AS side, arrived_txid, arrived_ts, reason, "
        f"CAST(to_json({_side_col(side)}) AS VARCHAR) AS values_json, {i} AS __i "
        f"FROM _trident_join_exp WHERE {_side_col(side)} IS NOT NULL"
        for i, side in enumerate(spec.sides)
    ]
    order = ", ".join(_q(f) for f in spec.join_fields or ())
    cols = ", ".join(_q(f) for f in expired_fields(spec))
    return f"SELECT {cols} FROM ({' UNION ALL '.join(parts)}) ORDER BY arrived_txid, {order}, __i"


def _joined_sql(spec: SingleJoin) -> str:
    parts = []
    for j in (1, 2):
        outs = ", ".join(f"j{j}_o{m} AS {_q(f)}" for m, f in enumerate(spec.out_fields))
        parts.append(
            f"SELECT {outs}, j{j}_side AS __s, j{j}_ord AS __o FROM _trident_join_res "
            f"WHERE j{j}_side IS NOT NULL"
        )
    cols = ", ".join(_q(f) for f in spec.out_fields)
    return f"SELECT {cols} FROM ({' UNION ALL '.join(parts)}) ORDER BY __s, __o"


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


# -- reading the state ---------------------------------------------------------------------


def pending_count(store: DuckDBStore, table: str) -> int:
    """Return the number of pending entries of ``table`` (0 before its first batch)."""
    if _stored_columns(store, table) is None:
        return 0
    return int(store.conn.execute(f"SELECT count(*) FROM {_q(table)}").fetchall()[0][0])


def read_pending(store: DuckDBStore, spec: SingleJoin, table: str) -> dict[Key, dict[str, Any]]:
    """Return the pending entries in the core's layout (key -> entry dict), for inspection.

    Reads the whole table: meant for tests, debugging and small states, not the batch path.
    """
    if _stored_columns(store, table) is None:
        return {}
    rows = store.conn.sql(f"SELECT * FROM {_q(table)}").to_arrow_table().to_pylist()
    out: dict[Key, dict[str, Any]] = {}
    for row in rows:
        key = tuple(row[f"key_{f}"] for f in spec.join_fields or ())
        entry: dict[str, Any] = {ARRIVED_TXID: row[ARRIVED_TXID], ARRIVED_TS: row[ARRIVED_TS]}
        for side, fields in spec.inputs:
            value = row[f"side_{side}"]
            if value is not None:
                entry[side] = [value[f] for f in fields]
        out[key] = entry
    return out

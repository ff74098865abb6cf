"""The SQL of one batch of a single join, generated from the declaration.

:func:`fold_sql` computes, per key of the batch, the result of applying its rows to the stored
entry: the batch is aggregated per (key, side) (count, 1st, 2nd, 3rd and last row), joined to
the stored entry, and then folded side by side through a fixed chain of projections (a per-key
state machine unrolled over the sides, no per-key loop).
"""

from __future__ import annotations

from trident_assets.backends.join_batch_columns import (
    ORD_COLUMN,
    SIDE_COLUMN,
    key_expressions,
    quoted,
    value_column,
)
from trident_assets.backends.join_pending_table import key_column, side_column
from trident_assets.core.join import SingleJoin, expired_fields

__all__ = ["expired_sql", "fold_sql", "joined_sql"]

_STORED, _FIRST, _SECOND, _LAST = 1, 2, 3, 4
"""Source codes of a side's value in the fold (0: absent): the stored entry or a batch row."""


def fold_sql(spec: SingleJoin, table: str, view: str) -> str:
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
    key_sel = ", ".join(f"{e} AS k{j}" for j, e in enumerate(key_expressions(spec)))
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
        f"a.k{j} IS NOT DISTINCT FROM p.{key_column(f)}"
        for j, f in enumerate(spec.join_fields or ())
    )
    st0 = (
        "SELECT a.*, p.arrived_txid IS NOT NULL AS __had, "
        "p.arrived_txid AS a_txid, p.arrived_ts AS a_ts, "
        + ", ".join(f"p.{side_column(s)} AS p{i}" for i, s in enumerate(spec.sides))
        + ", "
        + ", ".join(
            f"CASE WHEN p.{side_column(s)} IS NULL THEN 0 ELSE {_STORED} END AS w{i}"
            for i, s in enumerate(spec.sides)
        )
        + ", CAST(NULL AS INTEGER) AS e_side, CAST(NULL AS BIGINT) AS e_ord, "
        "CAST(NULL AS BIGINT) AS e_at, "
        + ", ".join(
            f"CAST(NULL AS INTEGER) AS j{j}_side, CAST(NULL AS BIGINT) AS j{j}_ord, "
            + ", ".join(f"0 AS j{j}_c{i}" for i in range(n))
            for j in (1, 2)
        )
        + f" FROM a LEFT JOIN {quoted(table)} p ON {on_key}"
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
            final.append(f"({value(f'j{j}_c{s}', s)}).{quoted(field)} AS j{j}_o{m}")
    return "WITH " + ",\n".join(ctes) + f"\nSELECT {', '.join(final)} FROM st{n}"


def expired_sql(spec: SingleJoin) -> str:
    """The query of the expired halves in ``_trident_join_exp``: one row per present side."""
    keys = ", ".join(f"{key_column(f)} AS {quoted(f)}" for f in spec.join_fields or ())
    parts = [
        f"SELECT {keys}, '{side}' AS side, arrived_txid, arrived_ts, reason, "
        f"CAST(to_json({side_column(side)}) AS VARCHAR) AS values_json, {i} AS __i "
        f"FROM _trident_join_exp WHERE {side_column(side)} IS NOT NULL"
        for i, side in enumerate(spec.sides)
    ]
    order = ", ".join(quoted(f) for f in spec.join_fields or ())
    cols = ", ".join(quoted(f) for f in expired_fields(spec))
    return f"SELECT {cols} FROM ({' UNION ALL '.join(parts)}) ORDER BY arrived_txid, {order}, __i"


def joined_sql(spec: SingleJoin) -> str:
    """The query of the joined rows in ``_trident_join_res``, in the order they completed."""
    parts = []
    for j in (1, 2):
        outs = ", ".join(f"j{j}_o{m} AS {quoted(f)}" for m, f in enumerate(spec.out_fields))
        parts.append(
            f"SELECT {outs}, j{j}_side AS __s, j{j}_ord AS __o FROM _trident_join_res "
            f"WHERE j{j}_side IS NOT NULL"
        )
    cols = ", ".join(quoted(f) for f in spec.out_fields)
    return f"SELECT {cols} FROM ({' UNION ALL '.join(parts)}) ORDER BY __s, __o"

"""The fast path: apply one batch of per-key partials to a map table in ONE statement.

The same statement runs on DuckDB and PostgreSQL (their differences are spelled by the
store's :class:`~trident_assets.backends.sql_dialect.Dialect`).

:func:`apply_partials` does what ``persistent_aggregate`` with a ``sum``/``min``/``max``
combiner does through ``OpaqueMap`` / ``TransactionalMap`` / ``NonTransactionalMap``
(``core/maps.py``) and ``OpaqueValue.update``/``get`` (``core/values.py``), but as a single
``INSERT INTO <log> SELECT ... FROM (batch GROUP BY keys) LEFT JOIN (current rows of the batch
keys)`` whose CASE expressions carry the txid logic: each key written gets a new version
appended to the map's log table (see ``duckdb_store``), so no row is updated in place. On
PostgreSQL the batch is staged sorted by key, a batch of distinct keys skips the ``GROUP
BY``, and each key's current row is one ``(keys, seq)`` index probe (``LEFT JOIN LATERAL``),
so a batch's cost follows the batch, not the state (``docs/postgres.md``). With N the batch
txid and p the batch's partial for a key (duplicates in the batch are combined first):

* opaque: absent -> ``(N, p, NULL)``; stored txid NULL or < N -> ``(N, combine(curr, p), curr)``;
  == N (a replay) -> ``(N, combine(prev, p), prev)``; > N -> the statement fails ("behind") and
  :class:`~trident_assets.errors.StaleTxidError` is raised; nothing is written.
* transactional: absent -> ``(N, p)``; stored txid == N -> skipped (already applied);
  otherwise ``(N, combine(val, p))``.
* non-transactional: ``combine(curr, p)``; a replay counts twice.

``combine(NULL, p) = p`` (Trident's ``CombinerValueUpdater``). ``txid=None`` (an ad-hoc batch):
opaque rolls forward and stores a NULL txid; transactional always applies.

:func:`apply_partials_python` is the same operation for any Python ``CombinerAggregator``:
one bulk read and one bulk write through the core map wrappers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends.map_layout import (
    SEQ_COLUMN,
    MapLayout,
    kind_for_state_type,
    log_table,
    quote_ident,
    seq_name,
)
from trident_assets.backends.sql_store import SqlStateStore
from trident_assets.core.aggregators import CombinerAggregator, apply_combiner
from trident_assets.core.maps import NonTransactionalMap, OpaqueMap, TransactionalMap
from trident_assets.core.protocols import Key
from trident_assets.core.values import StateType
from trident_assets.errors import AggregationError, ConfigError, StaleTxidError, StateLayoutError
from trident_assets.names import validate_identifier

__all__ = [
    "Combine",
    "MergeResult",
    "apply_partials",
    "apply_partials_python",
    "arrow_to_sql_type",
    "check_schema",
    "read_back",
    "refuse_null_keys",
    "refuse_null_sum",
    "resolve_layout",
    "run_merge",
    "value_fits",
    "value_sql_type",
]

Combine = Literal["sum", "min", "max"]
"""How two partials combine in SQL."""

_COMBINES: tuple[Combine, ...] = ("sum", "min", "max")
_BEHIND = "is behind state's batch"
_BEHIND_SQL = _BEHIND.replace("'", "''")


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What applying one batch did.

    ``keys_in`` counts the distinct keys of the batch; ``keys_updated`` the keys written
    (inserted or changed); ``keys_skipped`` the transactional keys already at the batch's txid
    (``keys_updated + keys_skipped == keys_in``). ``new_values`` (when asked for) holds the key
    columns and the value column: each batch key's value after the batch, as Trident's new
    values stream (skipped transactional keys included with their stored value), in no
    particular row order.
    """

    keys_in: int
    keys_updated: int
    keys_skipped: int
    new_values: pa.Table | None = None


def arrow_to_sql_type(arrow_type: pa.DataType, *, for_key: bool) -> str | None:
    """Return the column type that stores ``arrow_type``, or None if it has none.

    Integers -> BIGINT, floats -> DOUBLE, strings -> VARCHAR, booleans -> BOOLEAN, decimals
    -> DECIMAL(38, scale) (values only), binary -> BLOB (keys only).
    """
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_boolean(arrow_type):
        return "BOOLEAN"
    if pa.types.is_integer(arrow_type):
        return "BIGINT"
    if pa.types.is_floating(arrow_type):
        return "DOUBLE"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "VARCHAR"
    if pa.types.is_string_view(arrow_type):
        return "VARCHAR"
    if for_key and (pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)):
        return "BLOB"
    if not for_key and pa.types.is_decimal(arrow_type):
        return f"DECIMAL(38,{arrow_type.scale})"
    return None


def _is_numeric(sql_type: str) -> bool:
    return sql_type in ("BIGINT", "DOUBLE") or sql_type.startswith("DECIMAL")


def value_fits(batch_type: str, stored_type: str) -> bool:
    """True when a value column of ``stored_type`` can take values of ``batch_type``.

    The same type, or integers into a DOUBLE or DECIMAL column.
    """
    if batch_type == stored_type:
        return True
    if batch_type == "BIGINT":
        return stored_type == "DOUBLE" or stored_type.startswith("DECIMAL")
    return False


def _check_txid(txid: int | None) -> None:
    if txid is None:
        return
    if isinstance(txid, bool) or not isinstance(txid, int) or not 0 <= txid < 2**63:
        msg = f"txid must be a non-negative 64-bit integer or None, got {txid!r}"
        raise ConfigError(msg)


def _check_batch(
    table: str, batch: pa.Table, key_columns: Sequence[str], value_column: str
) -> tuple[list[str], list[str]]:
    """Validate names and nulls; return the key columns and their SQL types."""
    if not isinstance(batch, pa.Table):
        msg = f"apply to {table!r}: batch must be a pyarrow.Table, got {type(batch).__name__}"
        raise ConfigError(msg)
    keys, key_types = check_schema(table, batch.schema, key_columns, value_column)
    for col in keys:
        refuse_null_keys(table, col, batch.column(col).null_count)
    return keys, key_types


def check_schema(
    table: str, schema: pa.Schema, key_columns: Sequence[str], value_column: str
) -> tuple[list[str], list[str]]:
    """Validate a batch's names and key types; return the key columns and their SQL types.

    Raises:
        ConfigError: a name is invalid or missing from ``schema``.
        StateLayoutError: a key column's type cannot be a key.
    """
    keys = [validate_identifier(c, "key column") for c in key_columns]
    if not keys:
        msg = f"apply to {table!r}: key_columns must name at least one column"
        raise ConfigError(msg)
    validate_identifier(value_column, "value column")
    if value_column in keys:
        msg = f"apply to {table!r}: value column {value_column!r} is also a key column"
        raise ConfigError(msg)
    missing = [c for c in (*keys, value_column) if c not in schema.names]
    if missing:
        msg = f"apply to {table!r}: batch has no column(s) {missing}; it has {schema.names}"
        raise ConfigError(msg)
    key_types: list[str] = []
    for col in keys:
        sql_type = arrow_to_sql_type(schema.field(col).type, for_key=True)
        if sql_type is None:
            msg = (
                f"apply to {table!r}: key column {col!r} has Arrow type "
                f"{schema.field(col).type}, which cannot be a key (use integers, floats, "
                "strings, booleans or binary)"
            )
            raise StateLayoutError(msg)
        key_types.append(sql_type)
    return keys, key_types


def refuse_null_keys(table: str, column: str, nulls: int) -> None:
    """Raise StateLayoutError when key ``column`` of a batch holds ``nulls`` > 0 nulls."""
    if nulls:
        msg = (
            f"apply to {table!r}: key column {column!r} has {nulls} null value(s); key "
            "columns cannot be NULL (filter or fill them before applying the batch)"
        )
        raise StateLayoutError(msg)


def refuse_null_sum(table: str, value_column: str, nulls: int) -> None:
    """Raise AggregationError when a Sum batch's ``value_column`` holds ``nulls`` > 0 nulls."""
    if nulls:
        msg = (
            f"apply to {table!r}: Sum got a null value in {value_column!r}; filter nulls first "
            "(e.g. stream.filter(FilterNull()))"
        )
        raise AggregationError(msg)


def value_sql_type(table: str, schema: pa.Schema, value_column: str, combine: Combine) -> str:
    """The SQL type of a batch's value column, checked against ``combine``.

    Raises:
        ConfigError: ``combine`` is unknown, or is ``sum`` over a non-numeric column.
        StateLayoutError: no value column can hold the column's Arrow type.
    """
    if combine not in _COMBINES:
        msg = f"combine must be one of {', '.join(_COMBINES)}, got {combine!r}"
        raise ConfigError(msg)
    value_type = arrow_to_sql_type(schema.field(value_column).type, for_key=False)
    if value_type is None:
        msg = (
            f"apply to {table!r}: value column {value_column!r} has Arrow type "
            f"{schema.field(value_column).type}, which no value column can hold"
        )
        raise StateLayoutError(msg)
    if combine == "sum" and not _is_numeric(value_type):
        msg = f"combine='sum' needs a numeric value column; {value_column!r} is {value_type}"
        raise ConfigError(msg)
    return value_type


def resolve_layout(
    store: SqlStateStore,
    table: str,
    keys: list[str],
    key_types: list[str],
    value_type: str,
    state_type: StateType,
) -> tuple[MapLayout | None, MapLayout]:
    """Return (stored layout or None, the layout this batch wants)."""
    wanted = MapLayout(
        table, kind_for_state_type(state_type), tuple(keys), tuple(key_types), value_type
    )
    stored = store.layout(table)
    if stored is None:
        return None, wanted
    problems: list[str] = []
    if stored.kind != wanted.kind:
        problems.append(f"it holds {stored.kind} values, the batch is {wanted.kind}")
    if stored.key_columns != wanted.key_columns:
        problems.append(f"its key columns are {list(stored.key_columns)}, the batch's {keys}")
    elif stored.key_types != wanted.key_types:
        problems.append(f"its key types are {list(stored.key_types)}, the batch's {key_types}")
    if not value_fits(value_type, stored.value_type):
        problems.append(f"its values are {stored.value_type}, the batch's {value_type}")
    if problems:
        msg = f"cannot apply batch to map table {table!r}: " + "; ".join(problems)
        raise StateLayoutError(msg)
    return stored, wanted


def _combine_sql(combine: Combine, stored: str, partial: str) -> str:
    if combine == "sum":
        merged = f"{stored} + {partial}"
    elif combine == "min":
        merged = f"LEAST({stored}, {partial})"
    else:
        merged = f"GREATEST({stored}, {partial})"
    return f"CASE WHEN {stored} IS NULL THEN {partial} ELSE {merged} END"


def _merge_sql(
    store: SqlStateStore,
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


def apply_partials(
    store: SqlStateStore,
    table: str,
    batch: pa.Table,
    *,
    key_columns: Sequence[str],
    value_column: str,
    combine: Combine,
    state_type: StateType,
    txid: int | None,
    return_new_values: bool = False,
) -> MergeResult:
    """Apply one batch of partials to map ``table`` with ONE SQL statement.

    Duplicate keys in ``batch`` are combined first (GROUP BY in the statement). The statement
    runs inside the store's open transaction if there is one (so it commits with the batch's
    commit marker), else in its own. The table is created on first use: key columns named and
    typed after ``key_columns``, the value type taken from the Arrow type of ``value_column``.

    Args:
        store: the DuckDB store.
        table: the map table.
        batch: one row per (key, partial); may hold other columns, which are ignored.
        key_columns: the batch's key columns (also the table's key column names).
        value_column: the batch column holding the partials.
        combine: ``sum``, ``min`` or ``max``.
        state_type: opaque, transactional or non-transactional.
        txid: the batch's txid; None for an ad-hoc batch.
        return_new_values: also return each batch key's new value. A transactional replay
            (some keys skipped) then costs one extra read to fetch the skipped keys' values.

    Returns:
        The counts, and the new values if asked for.

    Raises:
        ConfigError: a name, ``combine``, ``state_type`` or ``txid`` is invalid.
        StateLayoutError: a key column holds nulls (checked before any write), or the batch
            does not fit the stored table (kind, key columns, types), or a sum overflows.
        AggregationError: ``combine='sum'`` and the value column holds nulls.
        StaleTxidError: opaque state, and a key's stored txid is ahead of ``txid``; nothing
            was changed by this statement (an enclosing transaction must be rolled back).
    """
    if not isinstance(state_type, StateType):
        msg = f"state_type must be a StateType, got {state_type!r}"
        raise ConfigError(msg)
    _check_txid(txid)
    if combine not in _COMBINES:
        msg = f"combine must be one of {', '.join(_COMBINES)}, got {combine!r}"
        raise ConfigError(msg)
    keys, key_types = _check_batch(table, batch, key_columns, value_column)
    value_type = value_sql_type(table, batch.schema, value_column, combine)
    if combine == "sum":
        refuse_null_sum(table, value_column, batch.column(value_column).null_count)
    stored, wanted = resolve_layout(store, table, keys, key_types, value_type, state_type)
    kind = wanted.kind
    narrow = batch.select([*keys, value_column])
    distinct = False
    if store.dialect.is_postgres and narrow.num_rows:
        narrow, distinct = _in_key_order(narrow, keys, key_types)
    # A batch of distinct keys has one plan (a lookup per staged row): no statistics needed.
    with store.transaction(), store.staged(narrow, analyze=not distinct) as view:
        layout = stored or store.ensure_map(wanted)
        found = run_merge(
            store, layout, view, value_column, combine, txid, distinct, returning=return_new_values
        )
        updated = found.num_rows if isinstance(found, pa.Table) else found
        keys_in = updated
        if kind == "transactional" and not distinct:
            keys_in = (
                narrow.group_by(keys, use_threads=False).aggregate([]).num_rows
                if narrow.num_rows
                else 0
            )
        elif kind == "transactional":
            keys_in = narrow.num_rows
        new_values = None
        if isinstance(found, pa.Table):
            returned = found if updated == keys_in else read_back(store, layout, view)
            new_values = returned.rename_columns([*keys, value_column])
    return MergeResult(keys_in, updated, keys_in - updated, new_values)


def run_merge(
    store: SqlStateStore,
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

    ``distinct_keys``, ``in_key_order``: what the staged rows are (see :func:`_merge_sql`).
    ``into`` (PostgreSQL): ``(table, columns)``: the same statement also appends each key
    written, with its new value, to per-txid ``table`` (``txid`` and ``columns``: the key
    columns and the value's name), and counts them.

    Returns the rows written (``returning``: their key columns and ``curr``) or how many.

    Raises:
        StaleTxidError: opaque state, and a key's stored txid is ahead of ``txid``.
        StateLayoutError: a combined value does not fit the table's value type.
    """
    sql = _merge_sql(
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


def _in_key_order(batch: pa.Table, keys: list[str], key_types: list[str]) -> tuple[pa.Table, bool]:
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


def read_back(store: SqlStateStore, layout: MapLayout, view: str) -> pa.Table:
    """The key columns and ``curr`` of the stored keys that ``view`` holds."""
    cols = ", ".join(quote_ident(c) for c in layout.key_columns)
    latest = store.latest_sql(layout, quote_ident(view))
    return store.fetch_arrow(f"SELECT {cols}, curr FROM ({latest}) AS l")


class _CountingMap:
    """Delegates to a backing map and counts the distinct keys written."""

    def __init__(self, delegate: Any) -> None:
        self.delegate = delegate
        self.written: set[Key] = set()

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        return self.delegate.multi_get(keys)

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        self.delegate.multi_put(keys, values)
        self.written.update(keys)


_WRAPPERS: dict[StateType, Callable[[Any], Any]] = {
    StateType.OPAQUE: OpaqueMap,
    StateType.TRANSACTIONAL: TransactionalMap,
    StateType.NON_TRANSACTIONAL: NonTransactionalMap,
}


def apply_partials_python(
    store: SqlStateStore,
    table: str,
    batch: pa.Table,
    *,
    key_columns: Sequence[str],
    value_column: str,
    agg: CombinerAggregator[Any],
    state_type: StateType,
    txid: int | None,
    return_new_values: bool = False,
) -> MergeResult:
    """Apply one batch of partials with a Python combiner: one bulk read, one bulk write.

    Duplicate keys in ``batch`` are combined with ``agg.combine`` in row order; then ONE
    ``multi_update`` through ``OpaqueMap`` / ``TransactionalMap`` / ``NonTransactionalMap``
    over a :class:`DuckDBBackingMap` (one ``multi_get`` query and at most one ``multi_put``
    statement), inside the store's transaction (its own if none is open). A new table gets
    its key and value types from the batch's Arrow types.

    Raises:
        ConfigError: a name, ``state_type`` or ``txid`` is invalid.
        StateLayoutError: a key column holds nulls, or the batch does not fit the table.
        StaleTxidError: opaque state, and a key's stored txid is ahead of ``txid``.
    """
    if not isinstance(state_type, StateType):
        msg = f"state_type must be a StateType, got {state_type!r}"
        raise ConfigError(msg)
    _check_txid(txid)
    keys, key_types = _check_batch(table, batch, key_columns, value_column)
    combined: dict[Key, Any] = {}
    columns = [batch.column(c).to_pylist() for c in keys]
    for key, partial in zip(
        zip(*columns, strict=True), batch.column(value_column).to_pylist(), strict=True
    ):
        combined[key] = agg.combine(combined[key], partial) if key in combined else partial
    layout = store.layout(table)
    declared: dict[str, Any] = {"key_columns": keys, "kind": state_type}
    if layout is None:
        value_type = arrow_to_sql_type(batch.schema.field(value_column).type, for_key=False)
        declared.update(key_types=key_types, value_type=value_type or "JSON")
    unique = list(combined)
    with store.transaction():
        backing = _CountingMap(store.map(table, **declared))
        state = _WRAPPERS[state_type](backing)
        state.begin_commit(txid)
        new = apply_combiner(state, agg, unique, [combined[k] for k in unique])
        state.commit(txid)
    new_values = None
    if return_new_values:
        arrays = {
            c: pa.array([k[i] for k in unique], type=batch.schema.field(c).type)
            for i, c in enumerate(keys)
        }
        arrays[value_column] = pa.array(new)
        new_values = pa.table(arrays)
    updated = len(backing.written)
    return MergeResult(len(unique), updated, len(unique) - updated, new_values)

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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from trident_assets.backends.merge_checks import (
    COMBINES,
    Combine,
    arrow_to_sql_type,
    check_batch,
    check_txid,
    refuse_null_sum,
    resolve_layout,
    value_sql_type,
)
from trident_assets.backends.merge_sql import read_back, run_merge, sorted_by_keys
from trident_assets.backends.sql_store import StateStore
from trident_assets.core.aggregators import CombinerAggregator, apply_combiner
from trident_assets.core.maps import NonTransactionalMap, OpaqueMap, TransactionalMap
from trident_assets.core.protocols import Key
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError

__all__ = ["MergeResult", "apply_partials", "apply_partials_python"]


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


def apply_partials(
    store: StateStore,
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

    ``batch`` holds one row per (key, partial) (other columns are ignored); ``key_columns``
    are also the table's key column names; ``txid`` None is an ad-hoc batch.
    ``return_new_values``: also return each batch key's new value (a transactional replay,
    some keys skipped, then costs one extra read to fetch the skipped keys' values).

    Raises:
        ConfigError: a name, ``combine``, ``state_type`` or ``txid`` is invalid.
        StateLayoutError: a key column holds nulls (checked before any write), or the batch
            does not fit the stored table (kind, key columns, types), or a sum overflows.
        AggregationError: ``combine='sum'`` and the value column holds nulls.
        StaleTxidError: opaque state, and a key's stored txid is ahead of ``txid``; nothing
            was changed by this statement (an enclosing transaction must be rolled back).
    """
    check_txid(txid, state_type)
    if combine not in COMBINES:
        msg = f"combine must be one of {', '.join(COMBINES)}, got {combine!r}"
        raise ConfigError(msg)
    keys, key_types = check_batch(table, batch, key_columns, value_column)
    value_type = value_sql_type(table, batch.schema, value_column, combine)
    if combine == "sum":
        refuse_null_sum(table, value_column, batch.column(value_column).null_count)
    stored, wanted = resolve_layout(store, table, keys, key_types, value_type, state_type)
    kind = wanted.kind
    narrow = batch.select([*keys, value_column])
    distinct = False
    if store.dialect.is_postgres and narrow.num_rows:
        narrow, distinct = sorted_by_keys(narrow, keys, key_types)
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
    store: StateStore,
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
    check_txid(txid, state_type)
    keys, key_types = check_batch(table, batch, key_columns, value_column)
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

"""Applying one batch of per-key partials to a named state: the one code path for every state.

A topology's ``persistent_aggregate`` states and a user's own Dagster state assets
(through :class:`~trident_assets.dagster.io_manager.TridentIOManager`) both land here,
inside their txid's commit transaction: SQL combiners (Count, Sum, Min, Max) as ONE
set-based statement, Python combiners as one bulk read and one bulk write; partials Spark's
executors wrote where the store reads them (:func:`apply_state_files`) never come into this
process. The txid rules (opaque, transactional, non-transactional) are those of
:mod:`trident_assets.backends.duckdb_merge`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends.duckdb_merge import MergeResult, apply_partials, apply_partials_python
from trident_assets.backends.map_layout import quote_ident
from trident_assets.backends.merge_checks import value_sql_type
from trident_assets.backends.replica import PARTIALS_KEPT
from trident_assets.backends.spilled_partials import (
    SpilledPartials,
    apply_spilled_partials,
    staged_partials,
)
from trident_assets.backends.state_store import StateStore
from trident_assets.backends.txid_rows import prepare_rows_table, store_relation
from trident_assets.core.aggregators import CombinerAggregator, Count, Max, Min, Sum
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError
from trident_assets.names import TOTALS_TABLE, validate_identifier

__all__ = [
    "COMBINERS",
    "TOTALS_TABLE",
    "StateTarget",
    "apply_state_batch",
    "apply_state_files",
    "combiner",
    "state_total",
]

COMBINERS: dict[str, type[CombinerAggregator[Any]]] = {
    c.__name__.lower(): c for c in (Count, Sum, Min, Max)
}
"""Combiners by name; any other is a ``module:Class`` import path of a CombinerAggregator."""


def combiner(spec: str | CombinerAggregator[Any]) -> CombinerAggregator[Any]:
    """The combiner named by ``spec``: ``count``/``sum``/``min``/``max`` or ``module:Class``.

    Raises:
        ConfigError: an unknown name, an import path that does not resolve, or a class that
            is not a CombinerAggregator.
    """
    if isinstance(spec, CombinerAggregator):
        return spec
    if spec in COMBINERS:
        return COMBINERS[spec]()
    module_name, _, class_name = str(spec).partition(":")
    if not module_name or not class_name:
        msg = (
            f"combiner {spec!r} is neither one of {sorted(COMBINERS)} nor an import path "
            "'module:Class' of a CombinerAggregator"
        )
        raise ConfigError(msg)
    try:
        found = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        msg = f"combiner {spec!r} could not be imported: {exc}"
        raise ConfigError(msg) from exc
    agg = found() if isinstance(found, type) else found
    if not isinstance(agg, CombinerAggregator):
        msg = f"combiner {spec!r} is a {type(agg).__name__}, not a CombinerAggregator"
        raise ConfigError(msg)
    return agg


@dataclass(frozen=True, slots=True)
class StateTarget:
    """Where a batch of partials lands and how it combines with the stored values."""

    table: str
    """The map table (``<scope>__<state>`` for a topology's states)."""
    key_columns: tuple[str, ...]
    value_column: str
    state_type: StateType
    agg: CombinerAggregator[Any]

    def __post_init__(self) -> None:
        """Validate names (they become SQL identifiers)."""
        validate_identifier(self.table, "state table")
        if not self.key_columns:
            msg = f"state {self.table!r} needs at least one key column"
            raise ConfigError(msg)
        for name in (*self.key_columns, self.value_column):
            validate_identifier(name, f"column of state {self.table!r}")

    @property
    def partials_table(self) -> str:
        """The table of its per-key partials of each recent txid."""
        return f"{self.table}__partials"

    @property
    def new_values_table(self) -> str:
        """The table of its new values of each recent txid."""
        return f"{self.table}__new_values"


def apply_state_batch(
    store: StateStore, target: StateTarget, partials: pa.Table, txid: int | None
) -> MergeResult:
    """Apply ``partials`` (key columns + value column) to ``target`` under ``txid``.

    Runs inside the store's open transaction if there is one. Returns the counts and the new
    value of every key of the batch.
    """
    agg = target.agg
    if isinstance(agg, Count | Sum):
        _update_total(store, target, pc.sum(partials.column(target.value_column)).as_py(), txid)
    common: dict[str, Any] = {
        "key_columns": list(target.key_columns),
        "value_column": target.value_column,
        "state_type": target.state_type,
        "txid": txid,
        "return_new_values": True,
    }
    if isinstance(agg, Count | Sum | Min | Max) and agg.sql_combine is not None:
        return apply_partials(store, target.table, partials, combine=agg.sql_combine, **common)
    return apply_partials_python(store, target.table, partials, agg=agg, **common)


def _update_total(store: StateStore, target: StateTarget, added: Any, txid: Any) -> None:
    """Keep the state's total: the previous total plus ``added``, the batch's partials summed.

    Every committed txid is applied exactly once (the commit marker), and a Count/Sum key's
    new value is its old value plus its partial, so the total grows by the partials' sum. A
    state without a total yet (one that predates it) is summed once.
    """
    double = store.dialect.column_type("DOUBLE")
    store.execute(
        f'CREATE TABLE IF NOT EXISTS "{TOTALS_TABLE}" (table_name VARCHAR PRIMARY KEY, '
        f"txid BIGINT, total {double})"
    )
    found = store.fetch_rows(
        f'SELECT total FROM "{TOTALS_TABLE}" WHERE table_name = ?', [target.table]
    )
    if found:
        before = found[0][0]
    elif store.layout(target.table) is None:
        before = 0
    else:
        view = validate_identifier(target.table, "state table")
        before = store.fetch_rows(f'SELECT coalesce(sum(curr), 0) FROM "{view}"')[0][0]
    store.execute(
        f'INSERT INTO "{TOTALS_TABLE}" VALUES (?, ?, ?) ON CONFLICT (table_name) DO UPDATE '
        "SET txid = excluded.txid, total = excluded.total",
        [target.table, txid, float(before) + float(added or 0)],
    )


def apply_state_files(
    store: StateStore,
    target: StateTarget,
    parts: SpilledPartials,
    txid: int,
) -> tuple[MergeResult, int]:
    """Apply the partials the executors wrote (see :mod:`.spilled_partials`) to ``target``.

    Inside ``txid``'s open transaction, all in SQL: one scan checks and counts the partials,
    one statement merges them, and they and the keys' new values replace ``txid``'s rows of
    the state's partials and new values tables; the rows never come into this process. For
    the built-in SQL combiners only (Count, Sum, Min, Max). Returns the merge's counts (no
    new values) and the null input values skipped.

    Raises:
        ConfigError: another combiner, or the partials are not all where this process reads.
        StateLayoutError: a key column holds nulls.
    """
    agg = target.agg
    if not isinstance(agg, Count | Sum | Min | Max) or agg.sql_combine is None:
        msg = f"state {target.table!r}: only Count, Sum, Min and Max merge partials from files"
        raise ConfigError(msg)
    keys, out = list(target.key_columns), target.value_column
    columns, new_values_table = [*keys, out], target.new_values_table
    key_q, out_q = ", ".join(quote_ident(k) for k in keys), quote_ident(out)
    with staged_partials(store, target.table, parts, keys, out) as (view, stats):
        into = None
        if store.dialect.is_postgres:  # the merge appends the new values as it writes them
            layout = store.layout(target.table)  # typed like the state's values
            value_type = store.dialect.column_type(
                layout.value_type
                if layout is not None
                else value_sql_type(target.table, parts.schema, out, agg.sql_combine)
            )
            cast = f"CAST({out_q} AS {value_type}) AS {out_q}"
            typed = f"SELECT {key_q}, {cast} FROM {quote_ident(view)} LIMIT 0"
            with store.staged_query(typed) as empty:
                prepare_rows_table(store, new_values_table, txid, empty, columns)
            into = (new_values_table, columns)
        if isinstance(agg, Count | Sum):
            _update_total(store, target, stats.total, txid)
        result = apply_spilled_partials(
            store,
            target.table,
            view,
            stats,
            parts,
            key_columns=keys,
            value_column=out,
            combine=agg.sql_combine,
            state_type=target.state_type,
            txid=txid,
            new_values=into,
        )
        store_relation(store, target.partials_table, txid, view, columns, PARTIALS_KEPT)
        if into is None or result.keys_skipped:  # (a transactional replay skipped keys)
            latest = store.latest_sql(store.layout(target.table), quote_ident(view))
            select = f"SELECT {key_q}, curr AS {out_q} FROM ({latest}) AS l"
            with store.staged_query(select) as rows:
                store_relation(store, new_values_table, txid, rows, columns)
    return result, stats.nulls


def state_total(store: StateStore, table: str) -> float | None:
    """The total of a Count/Sum state's values after its last commit (None: not tracked)."""
    if not store.has_table(TOTALS_TABLE):
        return None
    found = store.fetch_rows(f'SELECT total FROM "{TOTALS_TABLE}" WHERE table_name = ?', [table])
    return float(found[0][0]) if found else None

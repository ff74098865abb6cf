"""Applying one batch to each kind of state, inside the batch's commit transaction.

* combiners: the batch's per-key partials applied by
  :func:`~trident_assets.backends.state_batches.apply_state_batch`, the one code path the
  TridentIOManager also uses for a user's state asset (one SQL statement for Count, Sum,
  Min, Max; one bulk read and write for Python combiners); a grouped state's partials are
  also kept per txid (``TridentState.partials_table``);
* reducers: every tuple of a key folded through the state's MapState (Trident's
  ``MapReducerAggregator`` over an opaque, transactional or non-transactional map);
* distinct counts: each key's values first seen at the txid, recorded in the state's seen
  table (:func:`~trident_assets.backends.distinct_values.add_values`) and counted into the
  map like a ``Count``'s partials (kept per txid when grouped, as a combiner's), from the
  batch's distinct (key..., value) pairs with a non-null value (:func:`distinct_pairs`);
* ``partition_persist``: the user's ``StateUpdater.update_state`` over the whole batch;
* single joins: :func:`~trident_assets.spark.single_join.apply_join_state`;
* Trident windows: :func:`~trident_assets.spark.trident_windows.apply_window_state`;
* event-time windows: :func:`~trident_assets.spark.event_windows.apply_window_state`.

:func:`state_previews` keeps a few rows of what a batch did to a state (for the UI), from the
batch's own tables: never a scan of the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.distinct_values import add_values
from trident_assets.backends.duckdb_merge import MergeResult
from trident_assets.backends.map_layout import quote_ident
from trident_assets.backends.spilled_partials import SpilledPartials
from trident_assets.backends.state_batches import (
    StateTarget,
    apply_state_batch,
    apply_state_files,
    state_total,
)
from trident_assets.core.aggregators import Count, apply_reducer
from trident_assets.core.caching import GLOBAL_KEY
from trident_assets.core.maps import map_state_of
from trident_assets.core.user_code import call_batch, guard
from trident_assets.runtime.outcomes import (
    GLOBAL_COLUMN,
    PREVIEW_ROWS,
    Applied,
    StateInput,
    StateOutcome,
    head_rows,
    top_rows,
)
from trident_assets.spark.frame_schemas import empty_arrow
from trident_assets.spark.kv_state import kv_map
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.streams import TridentState


__all__ = [
    "apply_distinct_count",
    "apply_map_state",
    "apply_reducer_map",
    "apply_updater_state",
    "distinct_pairs",
    "map_applied",
    "reducer_input",
    "updater_input",
    "spilled_previews",
    "map_state",
    "read_state",
    "state_previews",
    "state_size",
]


def updater_input(run: BatchContext, state: TridentState) -> StateInput:
    """A ``partition_persist``'s batch input: the rows of its input fields."""
    parent = run.frame(state.node.parents[0])
    return StateInput(parent.select(*state.node.args["inputs"]).toArrow())


def reducer_input(run: BatchContext, state: TridentState) -> StateInput:
    """A reducer's batch input: each key's tuples, in order, as ``__tuples``."""
    from pyspark.sql import functions as F

    a = state.node.args
    group = a["group"]
    parent = run.frame(state.node.parents[0])
    cols = F.struct(*[F.col(c) for c in a["inputs"]])
    grouped = parent.groupBy(*group).agg(F.collect_list(cols).alias("__tuples"))
    return StateInput(grouped.toArrow())


def apply_updater_state(run: BatchContext, state: TridentState, batch: pa.Table) -> Applied:
    """A ``partition_persist``: the user's ``update_state`` over the batch's rows."""
    store = run.runner.store
    updater = state.node.args["updater"]
    new = call_batch(
        state.node.label, updater.update_state, batch, store, state.table, batch, run.txid
    )
    rows = batch.num_rows
    size = state_size(store, state.table)
    outcome = StateOutcome(state.spec.name, state.table, rows, rows, 0, size)
    return Applied(outcome, new_values=new)


def apply_map_state(
    run: BatchContext, state: TridentState, batch: pa.Table | SpilledPartials
) -> Applied:
    """A combiner's ``persistent_aggregate``: the batch's partials.

    One set-based statement for a SQL combiner, the state's map for Python combiners;
    partials the executors wrote (:class:`SpilledPartials`) are merged by the store, which
    also keeps them and the new values per txid (their previews: :func:`spilled_previews`).
    A grouped state's partials are kept per txid and previewed.
    """
    store = run.runner.store
    a = state.node.args
    keys = list(a["group"]) or [GLOBAL_COLUMN]
    out = a["output"]
    agg = guard(a["agg"], state.node.label)
    target = StateTarget(state.table, tuple(keys), out, state.spec.state_type, agg)
    if isinstance(batch, SpilledPartials):
        merged, nulls = apply_state_files(store, target, batch, run.txid)
        return Applied(_outcome(store, state, merged, nulls))
    result = apply_state_batch(store, target, batch, run.txid)
    if not state.group:
        return map_applied(store, state, result)
    parts = batch.select([*keys, out])  # the grouped-aggregation asset: partials per key
    return map_applied(store, state, result, parts, top_rows(parts, out, keys))


def apply_reducer_map(run: BatchContext, state: TridentState, batch: pa.Table) -> Applied:
    """A reducer's ``persistent_aggregate``: each key's tuples folded through its MapState."""
    keys = list(state.node.args["group"]) or [GLOBAL_COLUMN]
    result = apply_reducer_state(run.runner.store, state, batch, keys, run.txid)
    return map_applied(run.runner.store, state, result)


def map_applied(
    store: StateStore,
    state: TridentState,
    result: MergeResult,
    partials: pa.Table | None = None,
    top: pa.Table | None = None,
) -> Applied:
    """What merging a batch into map state ``state`` did, its new values as declared.

    ``partials``: a grouped state's partials this batch, ``top`` their preview.
    """
    new_values = None
    if result.new_values is not None:
        # the declared fields: group + [output] (a global state's key column is internal)
        new_values = result.new_values.select(list(state.node.fields))
    previews = {} if top is None else {f"partials:{state.spec.name}": top}
    outcome = _outcome(store, state, result)
    return Applied(outcome, new_values=new_values, partials=partials, previews=previews)


def spilled_previews(store: StateStore, state: TridentState, txid: int) -> dict[str, pa.Table]:
    """:func:`state_previews` of a spilled state, read from the tables its commit wrote."""
    keys, out, name = list(state.node.args["group"]), state.node.args["output"], state.spec.name
    top = _top_stored(store, state.new_values_table, txid, out, keys)
    return {
        f"state:{name}": top,
        f"new_values:{name}": top,
        f"partials:{name}": _top_stored(store, state.partials_table, txid, out, keys),
    }


def _outcome(
    store: StateStore, state: TridentState, result: MergeResult, nulls: int = 0
) -> StateOutcome:
    """What applying ``result`` did to a map state, with its size and total after it."""
    return StateOutcome(
        state.spec.name,
        state.table,
        result.keys_in,
        result.keys_updated,
        result.keys_skipped,
        state_size(store, state.table),
        state_total(store, state.table),
        nulls,
    )


def _top_stored(store: StateStore, table: str, txid: int, value: str, keys: list[str]) -> pa.Table:
    """:func:`~.outcomes.top_rows` of ``txid``'s rows of a per-txid table, in SQL."""
    cols = [quote_ident(c) for c in (*keys, value)]
    order = [f"{quote_ident(value)} DESC", *(f"{quote_ident(k)} ASC" for k in keys)]
    return store.fetch_arrow(
        f'SELECT {", ".join(cols)} FROM "{table}" WHERE txid = ? '
        f"ORDER BY {', '.join(order)} LIMIT ?",
        [txid, PREVIEW_ROWS],
    )


def state_previews(
    state: TridentState, batch: pa.Table, new_values: pa.Table | None
) -> dict[str, pa.Table]:
    """A few rows of what one batch did to ``state``, keyed like ``BatchOutcome.previews``.

    For a map state (``persistent_aggregate``): ``state:<name>`` and ``new_values:<name>``,
    the keys the batch touched with their new values, highest first (a grouped state's
    ``partials:<name>`` come from its engine's apply). For other states, the first rows of
    their new values. Linear in the batch.
    """
    name = state.spec.name
    if new_values is None:
        return {}
    if not state_kind(state.node).map_state:
        return {f"new_values:{name}": head_rows(new_values)}
    top = top_rows(new_values, str(state.value_field), list(state.node.args["group"]))
    return {f"state:{name}": top, f"new_values:{name}": top}


def state_size(store: StateStore, table: str) -> int:
    """How many keys state ``table`` holds (0 before its first batch)."""
    return store.size(table) if store.layout(table) is not None else 0


def map_state(store: StateStore, state: TridentState, **layout: Any) -> Any:
    """The state's MapState (opaque, transactional or not) over its store table."""
    return map_state_of(state.spec.state_type, store.map(state.table, **layout))


def read_state(store: StateStore, state: TridentState) -> Any:
    """The state as committed (read outside any batch: ``curr`` of each value).

    A state kept in a Redis Cluster or memcached is read from its servers (bulk reads of
    the keys asked for; see :func:`~trident_assets.spark.kv_state.kv_map`).
    """
    if state_kind(state.node).in_key_value_store:
        return kv_map(state)
    return map_state(store, state)


def apply_reducer_state(
    store: StateStore, state: TridentState, batch: pa.Table, keys: list[str], txid: int
) -> MergeResult:
    """Fold each key's tuples (``__tuples``) into a reducer state through its MapState."""
    agg = guard(state.node.args["agg"], state.node.label)
    rows = batch.to_pylist()
    key_tuples = (
        [tuple(r[k] for k in keys) for r in rows] if state.group else [GLOBAL_KEY] * len(rows)
    )
    groups = [[tuple(t.values()) for t in r["__tuples"]] for r in rows]
    flat_keys = [k for k, g in zip(key_tuples, groups, strict=True) for _ in g]
    flat_tuples = [t for g in groups for t in g]
    mstate = map_state(store, state, key_columns=tuple(keys))
    mstate.begin_commit(txid)
    unique, new = apply_reducer(mstate, agg, flat_keys, flat_tuples)
    mstate.commit(txid)
    new_values = pa.table(
        {**{k: [u[i] for u in unique] for i, k in enumerate(keys)}, state.value_field: new}
    )
    return MergeResult(len(unique), len(unique), 0, new_values)


def _distinct_keys(state: TridentState) -> list[str]:
    return list(state.group) or [GLOBAL_COLUMN]


def distinct_pairs(run: BatchContext, state: TridentState) -> StateInput:
    """The batch's distinct (key..., value) pairs with a non-null value, as Arrow."""
    from pyspark.sql import functions as F

    parent_node = state.node.parents[0]
    value = state.node.args["inputs"][0]
    parent = run.frame(parent_node)
    if not state.group:
        parent = parent.withColumn(GLOBAL_COLUMN, F.lit(GLOBAL_KEY[0]))
    pairs = parent.select(*_distinct_keys(state), value).where(F.col(value).isNotNull()).distinct()
    table = empty_arrow(pairs) if run.is_empty(parent_node) else pairs.toArrow()
    return StateInput(table, pa.int64())


def apply_distinct_count(run: BatchContext, state: TridentState, pairs: pa.Table) -> Applied:
    """Count each key's values first seen at this txid into the state (exactly once)."""
    store, txid, keys = run.runner.store, run.txid, _distinct_keys(state)
    out, value = state.node.args["output"], state.node.args["inputs"][0]
    parts = add_values(store, state.table, pairs, keys, value, out, txid)
    target = StateTarget(state.table, tuple(keys), out, state.spec.state_type, Count())
    result = apply_state_batch(store, target, parts, txid)
    if not state.group:
        return map_applied(store, state, result)
    return map_applied(store, state, result, parts, top_rows(parts, out, keys))  # partials asset

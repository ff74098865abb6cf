"""The engine of a ``DistinctCount`` state: distinct (key, value) pairs on Spark, counted once.

The batch input is the batch's distinct (key..., value) pairs, null values dropped (one
Spark job, or none for an empty input). The apply, inside the commit transaction, records
them in the state's seen table and merges each key's count of values never seen before
into the map like a ``Count``'s partials
(:func:`~trident_assets.backends.distinct_values.add_values`); a grouped state keeps those
partials per txid, as a combiner does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from trident_assets.backends.distinct_values import add_values
from trident_assets.backends.state_batches import StateTarget, apply_state_batch
from trident_assets.core.aggregators import Count
from trident_assets.core.caching import GLOBAL_KEY
from trident_assets.runtime.outcomes import GLOBAL_COLUMN, Applied, StateInput, top_rows
from trident_assets.spark.frame_schemas import empty_arrow
from trident_assets.spark.state_apply import map_applied

if TYPE_CHECKING:
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.streams import TridentState

__all__ = ["apply_distinct_count", "distinct_pairs"]


def _keys(state: TridentState) -> list[str]:
    return list(state.group) or [GLOBAL_COLUMN]


def distinct_pairs(run: BatchContext, state: TridentState) -> StateInput:
    """The batch's distinct (key..., value) pairs with a non-null value, as Arrow."""
    from pyspark.sql import functions as F

    parent_node = state.node.parents[0]
    value = state.node.args["inputs"][0]
    parent = run.frame(parent_node)
    if not state.group:
        parent = parent.withColumn(GLOBAL_COLUMN, F.lit(GLOBAL_KEY[0]))
    pairs = parent.select(*_keys(state), value).where(F.col(value).isNotNull()).distinct()
    table = empty_arrow(pairs) if run.is_empty(parent_node) else pairs.toArrow()
    return StateInput(table, pa.int64())


def apply_distinct_count(run: BatchContext, state: TridentState, pairs: pa.Table) -> Applied:
    """Count each key's values first seen at this txid into the state (exactly once)."""
    store, txid, keys = run.runner.store, run.txid, _keys(state)
    out, value = state.node.args["output"], state.node.args["inputs"][0]
    parts = add_values(store, state.table, pairs, keys, value, out, txid)
    target = StateTarget(state.table, tuple(keys), out, state.spec.state_type, Count())
    result = apply_state_batch(store, target, parts, txid)
    if not state.group:
        return map_applied(store, state, result)
    return map_applied(store, state, result, parts, top_rows(parts, out, keys))  # partials asset

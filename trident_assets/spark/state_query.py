"""Running ``state_query`` for one batch: bulk lookups, QueryFunctions, static states.

Trident's batch phase reads each state as committed before the batch. Every query reads
it ONCE per batch, for the batch's distinct inputs, and the result is broadcast-joined back
in Spark (:func:`query_frame`). ``TupleCollectionGet`` (every tuple of a state) is in
:mod:`~trident_assets.spark.tuple_collection`, static states in
:func:`~trident_assets.spark.stream_ops.static_query`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.map_layout import sql_to_arrow
from trident_assets.core.caching import GLOBAL_KEY
from trident_assets.core.user_code import retrieve_batch
from trident_assets.spark.arrow_transfer import to_spark
from trident_assets.spark.kv_state import close_kv_map
from trident_assets.spark.state_apply import read_state
from trident_assets.spark.stream_ops import static_query
from trident_assets.spark.tuple_collection import all_tuples_query
from trident_assets.stream.graph import PersistedState
from trident_assets.stream.queries import MapGet, SnapshotGet, TupleCollectionGet
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.streams import TridentState

__all__ = ["query_frame", "value_type"]


def query_frame(run: BatchContext, parent: Any, a: dict[str, Any]) -> Any:
    """``parent`` with the query's output column(s): one bulk lookup for the whole batch.

    ``a`` holds the query node's args plus ``parent`` (its parent node) and ``label``.
    The state is read as committed before this batch: a ``MapGet`` is one SQL join of the
    batch's distinct keys, a ``SnapshotGet`` one read of the global value, a custom
    ``QueryFunction`` one ``batch_retrieve`` call, a ``TupleCollectionGet`` every tuple.
    """
    from pyspark.sql import functions as F

    state: TridentState = a["state"]
    store = run.runner.store
    if isinstance(a["query"], TupleCollectionGet):  # several outputs per input tuple
        feed = None if state_kind(state.node).static else state.node.parents[0]
        return all_tuples_query(
            run.spark,
            store,
            parent,
            a,
            empty=run.is_empty(a["parent"]),
            feed=None if feed is None else run.frame(feed),
            value_type=value_type(run, state),
        )
    out = a["output"]
    if state_kind(state.node).static:
        return static_query(run.spark, store, parent, a)
    if isinstance(a["query"], SnapshotGet):
        value = read_global(store, state)
        return parent.withColumn(out, F.lit(value))
    if run.is_empty(a["parent"]):
        return parent.withColumn(out, null_column(run, state))
    keys = parent.select(*a["inputs"]).distinct().toArrow()
    if isinstance(a["query"], MapGet) and store.layout(state.table) is not None:
        found = bulk_lookup(store, state, keys, a["inputs"], out)
    else:
        read = (
            PersistedState(store, state.table)
            if state_kind(state.node).queried_as_table
            else read_state(store, state)
        )
        args = [tuple(row.values()) for row in keys.to_pylist()]
        try:
            results = retrieve_batch(a["label"], a["query"], read, args)
        finally:
            close_kv_map(read)
        column = pa.array(results)
        known = value_type(run, state)
        if pa.types.is_null(column.type) and known is not None:
            column = column.cast(known)
        found = keys.append_column(out, column)
    if found.num_rows == 0:
        return parent.withColumn(out, null_column(run, state))
    lookup = to_spark(run.spark, found)
    return parent.join(F.broadcast(lookup), on=list(a["inputs"]), how="left")


def value_type(run: BatchContext, state: TridentState) -> pa.DataType | None:
    """The Arrow type of the state's values: stored layout, else this batch's partials."""
    layout = run.runner.store.layout(state.table)
    if layout is not None:
        return sql_to_arrow(layout.value_type)
    return run.value_types.get(state.spec.name)


def null_column(run: BatchContext, state: TridentState) -> Any:
    """A NULL query result typed as the state's values (so outputs keep one type)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    known = value_type(run, state)
    return F.lit(None) if known is None else F.lit(None).cast(from_arrow_type(known))


def read_global(store: StateStore, state: TridentState) -> Any:
    """The committed value of a global (ungrouped) state, None before its first batch."""
    if not state_kind(state.node).in_key_value_store and store.layout(state.table) is None:
        return None
    read = read_state(store, state)
    try:
        return read.multi_get([GLOBAL_KEY])[0]
    finally:
        close_kv_map(read)


def bulk_lookup(
    store: StateStore, state: TridentState, keys: pa.Table, inputs: tuple[str, ...], out: str
) -> pa.Table:
    """ONE SQL join of the batch's distinct keys against the state table."""
    layout = store.layout(state.table)
    assert layout is not None
    value = "t.curr"
    conds = " AND ".join(
        f'k."{i}" IS NOT DISTINCT FROM t."{c}"'
        for i, c in zip(inputs, layout.key_columns, strict=True)
    )
    select = ", ".join(f'k."{i}"' for i in inputs)
    with store.staged(keys) as name:
        # the current rows of just these keys (not the whole map view)
        latest = store.latest_sql(layout, f'"{name}"', inputs)
        return store.fetch_arrow(
            f'SELECT {select}, {value} AS "{out}" FROM "{name}" AS k '
            f"LEFT JOIN ({latest}) AS t ON {conds}"
        )

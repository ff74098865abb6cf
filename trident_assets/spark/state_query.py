"""Running ``state_query`` for one batch: bulk lookups, QueryFunctions, static states.

Trident's batch phase reads each state as committed before the batch. Every query reads
it ONCE per batch, for the batch's distinct inputs, and the result is broadcast-joined back
in Spark (:func:`query_frame`). ``TupleCollectionGet`` reads every tuple of the state with
ONE SQL statement per batch and cross joins it with the stream (:func:`all_tuples_query`);
static states are read by :func:`~trident_assets.spark.stream_ops.static_query`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident, sql_to_arrow
from trident_assets.core.caching import GLOBAL_KEY
from trident_assets.core.user_code import retrieve_batch
from trident_assets.spark.arrow_transfer import to_spark
from trident_assets.spark.kv_state import close_kv_map
from trident_assets.spark.state_apply import read_state
from trident_assets.spark.stream_ops import static_query
from trident_assets.stream.graph import PersistedState
from trident_assets.stream.queries import MapGet, SnapshotGet, TupleCollectionGet
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.streams import TridentState

__all__ = ["all_tuples_query", "query_frame", "read_all_tuples", "value_type"]


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


def read_all_tuples(store: Any, state: Any, outputs: Sequence[str]) -> pa.Table | None:
    """Every (key..., value) tuple of ``state`` named ``outputs``; None if it has no table yet.

    A map state yields its keys and current value (a global state: its value only); a static
    state its key columns and value column.
    """
    if state_kind(state.node).static:
        source = state.source
        source.ensure(store, state.table)
        columns = [*source.key_columns, source.value_column]
    else:
        layout = store.layout(state.table)
        if layout is None:
            return None
        keys = list(layout.key_columns) if state.group else []
        columns = [*keys, "curr"]
    select = ", ".join(
        f"{quote_ident(c)} AS {quote_ident(o)}" for c, o in zip(columns, outputs, strict=True)
    )
    return store.fetch_arrow(f"SELECT {select} FROM {quote_ident(state.table)}")


def all_tuples_query(
    spark: Any,
    store: Any,
    parent: Any,
    a: dict[str, Any],
    *,
    empty: bool,
    feed: Any,
    value_type: pa.DataType | None,
) -> Any:
    """``parent`` + ``a["outputs"]``: one row per (input tuple, state tuple) pair.

    ``empty``: the stream has no tuples this batch (the state is not read). ``feed`` (the
    DataFrame that writes the state, None for a static state) and ``value_type`` type the
    output columns when the state has no table yet.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    state, outputs = a["state"], list(a["outputs"])
    found = None if empty else read_all_tuples(store, state, outputs)
    if found is None:
        types = [feed.schema[g].dataType if feed is not None else None for g in state.group]
        types.append(None if value_type is None else from_arrow_type(value_type))
        typed = [
            (F.lit(None) if t is None else F.lit(None).cast(t)).alias(o)
            for t, o in zip(types, outputs, strict=True)
        ]
        return parent.where(F.lit(False)).select(*parent.columns, *typed)
    tuples = to_spark(spark, found) if found.num_rows else None
    if tuples is None:
        schema = found.schema
        typed = [F.lit(None).cast(from_arrow_type(schema.field(o).type)).alias(o) for o in outputs]
        return parent.where(F.lit(False)).select(*parent.columns, *typed)
    return parent.crossJoin(F.broadcast(tuples))

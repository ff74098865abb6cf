"""``TupleCollectionGet`` on Spark: every tuple of a state, crossed with each input tuple.

The state's tuples are read with ONE SQL statement per batch (as committed before the batch:
queries run before the commit transaction) and cross joined with the stream in Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident
from trident_assets.spark.arrow_transfer import to_spark
from trident_assets.stream.state_kinds import state_kind

__all__ = ["all_tuples_query", "read_all_tuples"]


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

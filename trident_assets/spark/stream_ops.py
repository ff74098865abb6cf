"""The Spark side of map, flat_map, partition_aggregate, merge, join, FirstN, min/max, queries.

:class:`~trident_assets.spark.batch_run.BatchRun` builds these node kinds through
:func:`build`. Everything runs as DataFrame transforms (column expressions, joins, windows)
or as Python over Arrow batches on the executors (``mapInArrow``/``mapInPandas``); a static
state is read with one SQL statement per batch and the result joined back in Spark.
Repartitioning and ``chained_agg`` are dispatched here to
:mod:`~trident_assets.spark.partitioning` and :mod:`~trident_assets.spark.chained`;
``min_by``/``max_by``/``min``/``max`` (:mod:`trident_assets.stream.comparison`) keep one
winning tuple per Spark partition (:func:`comparison_frame`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import reduce
from typing import Any

import pyarrow as pa

from trident_assets.core.aggregators import CombinerAggregator, is_sql_combiner
from trident_assets.core.user_code import call, guard, retrieve_batch, with_step
from trident_assets.errors import ConfigError, StateLayoutError
from trident_assets.spark.aggregation import sql_expr
from trident_assets.spark.arrow_transfer import to_spark
from trident_assets.spark.chained import chained_frame
from trident_assets.spark.partitioning import repartition_frame
from trident_assets.stream.assemblies import first_n_frame
from trident_assets.stream.batch_join import JoinPlan, JoinType
from trident_assets.stream.chained import CHAINED_AGG
from trident_assets.stream.comparison import COMPARISON, Comparator
from trident_assets.stream.graph import Node, PersistedState
from trident_assets.stream.partitioning import REPARTITION
from trident_assets.stream.queries import MapGet, SnapshotGet

__all__ = [
    "NODE_KINDS",
    "build",
    "comparison_frame",
    "join_frames",
    "partition_aggregate_frame",
    "static_query",
]

NODE_KINDS = frozenset(
    {
        "map",
        "flat_map",
        "partition_aggregate",
        "merge",
        "join",
        "first_n",
        REPARTITION,
        COMPARISON,
        CHAINED_AGG,
    }
)
"""The node kinds :func:`build` runs."""


def build(node: Node, parents: Sequence[Any]) -> Any:
    """The DataFrame of ``node`` from its parents' DataFrames (in ``node.parents`` order)."""
    # a parent's columns are its fields, but not always in declared order (query joins)
    frames = [df.select(*p.fields) for df, p in zip(parents, node.parents, strict=True)]
    a = node.args
    if node.kind in ("map", "flat_map"):
        return with_step(a["function"].apply, frames[0], node.fields, step=node.label)
    if node.kind == "partition_aggregate":
        agg = guard(a["agg"], node.label)
        return partition_aggregate_frame(frames[0], a["group"], a["inputs"], agg, a["output"])
    if node.kind == "first_n":
        return first_n_frame(frames[0], a["n"], a["sort_field"], a["reverse"], a["group"])
    if node.kind == "merge":
        return merge_frames(frames, a["selections"], node.fields)
    if node.kind == "join":
        return join_frames(frames, a["plan"])
    if node.kind == REPARTITION:
        return repartition_frame(frames[0], a["how"], a["keys"], a["parallelism"])
    if node.kind == COMPARISON:
        args = (a["field"], a["comparator"], a["largest"], node.label)
        return comparison_frame(frames[0], *args)
    if node.kind == CHAINED_AGG:
        return chained_frame(frames[0], a["group"], a["steps"], a["full"], node.label)
    msg = f"stream_ops cannot run node kind {node.kind!r}"
    raise AssertionError(msg)


# -- partition_aggregate ---------------------------------------------------------------------------


def partition_aggregate_frame(
    df: Any, group: Sequence[str], inputs: Sequence[str], agg: Any, output: str
) -> Any:
    """One tuple per (Spark partition, group) holding that partition's aggregate.

    Partitions are the batch DataFrame's Spark partitions; an empty partition emits nothing.
    Built-in combiners run as a SQL aggregate keyed by ``spark_partition_id()``; Python
    combiners and reducers fold each partition's Arrow batches in ``mapInArrow``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    if is_sql_combiner(agg):
        tagged = df.withColumn(_PID, F.spark_partition_id())
        expr = sql_expr(agg, inputs[0]).alias(output)
        return tagged.groupBy(_PID, *group).agg(expr).select(*group, output)
    key_types = [df.schema[g].dataType.simpleString() for g in group]
    ddl = ", ".join(
        [
            *(f"`{g}` {t}" for g, t in zip(group, key_types, strict=True)),
            f"`{output}` {agg.output_type}",
        ]
    )
    schema = to_arrow_schema(StructType.fromDDL(ddl))
    width = len(group)
    combiner = isinstance(agg, CombinerAggregator)

    def fold(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        acc: dict[tuple[Any, ...], Any] = {}
        for batch in batches:
            columns = [batch.column(name).to_pylist() for name in (*group, *inputs)]
            for row in zip(*columns, strict=True):
                key, values = row[:width], row[width:]
                if combiner:
                    part = agg.init(values)
                    acc[key] = agg.combine(acc[key], part) if key in acc else part
                else:
                    acc[key] = agg.reduce(acc[key] if key in acc else agg.init(), values)
        if acc:
            keys = list(acc)
            arrays = [
                pa.array([k[i] for k in keys], type=schema.field(i).type) for i in range(width)
            ]
            arrays.append(pa.array(list(acc.values()), type=schema.field(width).type))
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return df.select(*dict.fromkeys((*group, *inputs))).mapInArrow(fold, ddl)


# -- min_by, max_by, min, max ----------------------------------------------------------------------

_PID = "__trident_pid"
_SEQ = "__trident_seq"
_BEST = "__trident_best"


def comparison_frame(
    df: Any, field: str | None, comparator: Comparator | None, largest: bool, step: str
) -> Any:
    """The best tuple of each partition of ``df`` (same columns).

    Without a comparator: ``max_by``/``min_by`` over ``(field, ±arrival ordinal)`` grouped by
    ``spark_partition_id()``, so the later of equal tuples wins. With one: a fold of each
    partition's Arrow batches in ``mapInArrow``.
    """
    if comparator is None:
        assert field is not None
        return _by_expression(df, field, largest)
    return _by_comparator(df, field, comparator, largest, step)


def _by_expression(df: Any, field: str, largest: bool) -> Any:
    from pyspark.sql import functions as F

    columns = list(df.columns)
    tagged = (
        df.where(F.col(field).isNotNull())
        .withColumn(_PID, F.spark_partition_id())
        .withColumn(_SEQ, F.monotonically_increasing_id())
    )
    # ties: the larger ordinal (later tuple) wins; for min, order by -ordinal
    seq = F.col(_SEQ) if largest else -F.col(_SEQ)
    pick = F.max_by if largest else F.min_by
    row = F.struct(*[F.col(c) for c in columns])
    best = tagged.groupBy(_PID).agg(pick(row, F.struct(F.col(field), seq)).alias(_BEST))
    return best.select(*[F.col(_BEST)[c].alias(c) for c in columns])


def _by_comparator(
    df: Any, field: str | None, comparator: Comparator, largest: bool, step: str
) -> Any:
    names = list(df.columns)

    def fold(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        best: pa.RecordBatch | None = None
        best_key: Any = None
        for batch in batches:
            if field is not None:
                keys: Iterable[Any] = batch.column(field).to_pylist()
            else:
                keys = zip(*[batch.column(n).to_pylist() for n in names], strict=True)
            for i, key in enumerate(keys):
                if field is not None and key is None:
                    continue
                if best is not None:
                    order = call(step, comparator, (best_key, key))
                    # Trident keeps the previous one only when it is strictly better
                    if (order > 0) if largest else (order < 0):
                        continue
                best, best_key = batch.slice(i, 1), key
        if best is not None:
            yield best

    return df.mapInArrow(fold, df.schema)


# -- merge and join --------------------------------------------------------------------------------


def merge_frames(
    frames: Sequence[Any], selections: Sequence[Sequence[str]], fields: Sequence[str]
) -> Any:
    """The union of ``frames``, each selecting ``selections[i]`` renamed to ``fields``.

    Trident's tuples are untyped, so a merge never fails on types: where the streams give a
    field different types it gets their common type (see :func:`common_type`).
    """
    from pyspark.sql import functions as F

    types = [
        [df.schema[c].dataType for c in sel] for df, sel in zip(frames, selections, strict=True)
    ]
    target = [common_type([t[i] for t in types]) for i in range(len(fields))]
    aligned = [
        df.select(
            *[
                F.col(c).cast(want).alias(f) if have != want else F.col(c).alias(f)
                for c, f, have, want in zip(sel, fields, kinds, target, strict=True)
            ]
        )
        for df, sel, kinds in zip(frames, selections, types, strict=True)
    ]
    return reduce(lambda a, b: a.unionByName(b), aligned)


def common_type(types: Sequence[Any]) -> Any:
    """The type a merged field takes from the types its streams give it.

    The one type they agree on; else, ignoring nulls, ``bigint`` for integers of several
    widths, ``double`` for numbers with a fraction; else ``string`` (a string and a number
    merged by position, say).
    """
    from pyspark.sql.types import (
        DoubleType,
        FractionalType,
        IntegralType,
        LongType,
        NullType,
        StringType,
    )

    known = [t for t in types if not isinstance(t, NullType)]
    if not known:
        return types[0]
    if all(t == known[0] for t in known):
        return known[0]
    if all(isinstance(t, IntegralType) for t in known):
        return LongType()
    if all(isinstance(t, IntegralType | FractionalType) for t in known):
        return DoubleType()
    return StringType()


def join_frames(frames: Sequence[Any], plan: JoinPlan) -> Any:
    """Trident's join within a batch, as Spark joins.

    The keys that take part are those present in every INNER side (every side's keys when
    all are OUTER); each key then yields the cross product of its tuples on each side, an
    OUTER side without tuples contributing one all-null tuple. Keys compare null-safely
    (a null key joins a null key, as Trident groups them).
    """
    from pyspark.sql import functions as F

    width = len(plan.keys[0])
    sides = [
        df.select(
            *[F.col(c).alias(f"__k{i}_{j}") for j, c in enumerate(keys)],
            *[F.col(c).alias(f"__v{i}_{j}") for j, c in enumerate(kept)],
        )
        for i, (df, keys, kept) in enumerate(zip(frames, plan.keys, plan.kept, strict=True))
    ]

    def key_set(i: int) -> Any:
        return sides[i].select(*[F.col(f"__k{i}_{j}").alias(f"__k_{j}") for j in range(width)])

    inner = [i for i, t in enumerate(plan.types) if t is JoinType.INNER]
    if inner:
        result = reduce(lambda a, b: a.intersect(b), [key_set(i) for i in inner]).distinct()
    else:
        result = reduce(lambda a, b: a.union(b), [key_set(i) for i in range(len(sides))]).distinct()
    for i, side in enumerate(sides):
        cond = reduce(
            lambda a, b: a & b,
            [F.col(f"__k_{j}").eqNullSafe(F.col(f"__k{i}_{j}")) for j in range(width)],
        )
        how = "inner" if plan.types[i] is JoinType.INNER else "left"
        result = result.join(side, cond, how).drop(*[f"__k{i}_{j}" for j in range(width)])
    columns = [f"__k_{j}" for j in range(width)] + [
        f"__v{i}_{j}" for i, kept in enumerate(plan.kept) for j in range(len(kept))
    ]
    return result.select(
        *[F.col(c).alias(o) for c, o in zip(columns, plan.out_fields, strict=True)]
    )


# -- static states -------------------------------------------------------------------------------


def static_query(spark: Any, store: Any, parent: Any, a: dict[str, Any]) -> Any:
    """``state_query`` against a static state: one lookup per batch, joined back in Spark.

    ``MapGet`` is one SQL join of the batch's distinct keys with the table; a custom
    QueryFunction gets the store and table in one ``batch_retrieve`` call.

    Raises:
        StateLayoutError: the table is missing, lacks a column, or holds a key twice.
        ConfigError: ``SnapshotGet`` (a static state has keys, not one global value), or a
            QueryFunction that does not return one result per input.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    state = a["state"]
    source = state.source
    table = state.table
    out, inputs, query = a["output"], list(a["inputs"]), a["query"]
    if isinstance(query, SnapshotGet):
        msg = f"SnapshotGet reads a global value; static state {state.spec.name!r} is keyed"
        raise ConfigError(msg)
    if len(inputs) != len(source.key_columns) and isinstance(query, MapGet):
        msg = (
            f"MapGet over static state {state.spec.name!r} needs {len(source.key_columns)} "
            f"input fields (its keys {list(source.key_columns)}), got {inputs}"
        )
        raise ConfigError(msg)
    source.ensure(store, table)
    value_type = (
        store.fetch_arrow(f'SELECT "{source.value_column}" FROM "{table}" LIMIT 0')
        .schema.field(0)
        .type
    )
    keys = parent.select(*inputs).distinct().toArrow()
    if keys.num_rows == 0:  # as Trident: no batch_retrieve for a batch without tuples
        found = keys
    elif isinstance(query, MapGet):
        found = _static_lookup(store, table, source, keys, inputs, out)
    else:
        args = [tuple(row.values()) for row in keys.to_pylist()]
        results = retrieve_batch(a["label"], query, PersistedState(store, table), args)
        found = keys.append_column(out, pa.array(results))
    if found.num_rows == 0:
        return parent.withColumn(out, F.lit(None).cast(from_arrow_type(value_type)))
    if pa.types.is_null(found.schema.field(out).type):
        found = found.set_column(
            found.schema.get_field_index(out), out, found.column(out).cast(value_type)
        )
    return parent.join(F.broadcast(to_spark(spark, found)), on=inputs, how="left")


def _static_lookup(
    store: Any, table: str, source: Any, keys: pa.Table, inputs: Sequence[str], out: str
) -> pa.Table:
    """ONE statement: the value of each key (null if absent); a key held twice is an error."""
    on = " AND ".join(
        f'k."{i}" IS NOT DISTINCT FROM t."{c}"'
        for i, c in zip(inputs, source.key_columns, strict=True)
    )
    select = ", ".join(f'k."{i}"' for i in inputs)
    value = store.dialect.any_value(f't."{source.value_column}"')
    with store.staged(keys) as name:
        found = store.fetch_arrow(
            f'SELECT {select}, {value} AS "{out}", '
            f'count(t.__present) AS __matches FROM "{name}" AS k '
            f'LEFT JOIN (SELECT *, 1 AS __present FROM "{table}") AS t ON {on} '
            f"GROUP BY {select}"
        )
    matches = found.column("__matches").to_pylist()
    if found.num_rows and max(matches) > 1:
        dup = found.slice(matches.index(max(matches)), 1).select(list(inputs)).to_pylist()[0]
        msg = (
            f"static state table {table!r} holds key {dup} {max(matches)} times; "
            f"keys {list(source.key_columns)} must be unique"
        )
        raise StateLayoutError(msg)
    return found.drop_columns(["__matches"])

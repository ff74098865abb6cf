"""``chained_agg`` on Spark: every aggregator of a chain in one pass over the tuples.

Built-in combiners (Count, Sum, Min, Max) become one SQL aggregate with one expression per
aggregator. Any Python aggregator in the chain makes the whole chain a fold of each partition's
Arrow batches in ``mapInArrow`` (after ``repartition(group)`` for a grouped ``aggregate``, or
``repartition(1)`` for a global one, so each fold sees all tuples of its groups).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from trident_assets.core.aggregators import CombinerAggregator, is_sql_combiner
from trident_assets.core.user_code import call
from trident_assets.spark.aggregation import first_or_zero, sql_expr
from trident_assets.stream.chained import ChainedStep

__all__ = ["chained_frame"]

_PID = "__trident_pid"


def chained_frame(
    df: Any, group: Sequence[str], steps: Sequence[ChainedStep], full: bool, step: str
) -> Any:
    """``group`` + each step's output, per group of the batch (``full``) or per partition.

    A global ``full`` chain has exactly one row, even for an empty batch.
    """
    from pyspark.sql import functions as F

    outs = [s.output for s in steps]
    if all(is_sql_combiner(s.agg) for s in steps):
        exprs = [sql_expr(s.agg, s.inputs[0]) for s in steps]
        if full and group:
            return df.groupBy(*group).agg(*[e.alias(o) for e, o in zip(exprs, outs, strict=True)])
        if full:
            zeros = [s.agg.zero() for s in steps]
            return df.agg(
                *[
                    (e if z is None else F.coalesce(e, F.lit(z))).alias(o)
                    for e, z, o in zip(exprs, zeros, outs, strict=True)
                ]
            )
        tagged = df.withColumn(_PID, F.spark_partition_id())
        aggs = [e.alias(o) for e, o in zip(exprs, outs, strict=True)]
        return tagged.groupBy(_PID, *group).agg(*aggs).select(*group, *outs)
    if full and group:
        df = df.repartition(*group)
    elif full:
        df = df.repartition(1)
    out, ddl = _fold(df, tuple(group), steps, step)
    if full and not group:
        # an empty batch may have no partition to fold (Spark prunes empty shuffles): zeros
        zeros = tuple(
            s.agg.zero() if isinstance(s.agg, CombinerAggregator) else s.agg.init() for s in steps
        )
        return first_or_zero(out, df.sparkSession.createDataFrame([zeros], ddl))
    return out


def _fold(
    df: Any, group: tuple[str, ...], steps: Sequence[ChainedStep], step: str
) -> tuple[Any, str]:
    """Fold each partition per group: the frame and its DDL schema."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    types = [f"`{g}` {df.schema[g].dataType.simpleString()}" for g in group]
    for s in steps:
        if is_sql_combiner(s.agg):  # the SQL aggregate's type, from the plan (no Spark job)
            kind = df.select(sql_expr(s.agg, s.inputs[0])).schema[0].dataType.simpleString()
        else:
            kind = s.agg.output_type
        types.append(f"`{s.output}` {kind}")
    ddl = ", ".join(types)
    schema = to_arrow_schema(StructType.fromDDL(ddl))
    width = len(group)
    needed = list(dict.fromkeys((*group, *(i for s in steps for i in s.inputs))))
    combiner = [isinstance(s.agg, CombinerAggregator) for s in steps]

    def fold(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        acc: dict[tuple[Any, ...], list[Any]] = {}
        for batch in batches:
            columns = {n: batch.column(n).to_pylist() for n in needed}
            for r in range(batch.num_rows):
                key = tuple(columns[g][r] for g in group)
                state = acc.get(key)
                first = state is None
                if first:
                    state = acc[key] = [None] * len(steps)
                for i, s in enumerate(steps):
                    values = tuple(columns[n][r] for n in s.inputs)
                    if combiner[i]:
                        part = call(step, s.agg.init, (values,))
                        state[i] = part if first else call(step, s.agg.combine, (state[i], part))
                    else:
                        before = call(step, s.agg.init, ()) if first else state[i]
                        state[i] = call(step, s.agg.reduce, (before, values))
        if acc:
            keys = list(acc)
            arrays = [
                pa.array([k[j] for k in keys], type=schema.field(j).type) for j in range(width)
            ]
            arrays += [
                pa.array([acc[k][i] for k in keys], type=schema.field(width + i).type)
                for i in range(len(steps))
            ]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return df.select(*needed).mapInArrow(fold, ddl), ddl

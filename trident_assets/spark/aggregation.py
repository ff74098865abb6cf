"""Per-batch aggregation on Spark: built-ins as SQL expressions, Python ones as pandas UDFs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.core.aggregators import (
    CombinerAggregator,
    Count,
    Max,
    Min,
    Sum,
    is_sql_combiner,
)
from trident_assets.errors import ConfigError

__all__ = [
    "NULLS_COLUMN",
    "VALUES_COLUMN",
    "combine_partials",
    "first_or_zero",
    "reduce_groups",
    "skips_nulls",
    "split_nulls",
    "sql_expr",
    "state_partials",
]

NULLS_COLUMN = "__trident_nulls"
"""Column of :func:`state_partials`: a group's null values skipped."""
VALUES_COLUMN = "__trident_values"
"""Column of :func:`state_partials`: a group's non-null values combined."""


def sql_expr(agg: CombinerAggregator[Any], column: str) -> Any:
    """The Spark aggregate expression of a built-in combiner (see :func:`is_sql_combiner`)."""
    from pyspark.sql import functions as F

    if isinstance(agg, Count):
        return F.count(F.lit(1))
    if isinstance(agg, Sum):  # nulls are skipped; a group of only nulls sums to 0 (Sum.init)
        return F.coalesce(F.sum(F.col(column)), F.lit(0))
    if isinstance(agg, Min):
        return F.min(F.col(column))
    if isinstance(agg, Max):
        return F.max(F.col(column))
    msg = f"{type(agg).__name__} is not a built-in SQL combiner (Count, Sum, Min, Max)"
    raise ConfigError(msg)


def skips_nulls(agg: Any) -> bool:
    """True for the built-ins that skip (and count) null values: Sum, Min, Max."""
    return isinstance(agg, Sum | Min | Max)


def state_partials(
    df: Any, group: Sequence[str], column: str, agg: CombinerAggregator[Any], output: str
) -> Any:
    """A state's partials: :func:`combine_partials`, plus for Sum/Min/Max two count columns.

    :data:`NULLS_COLUMN` holds a group's null values (skipped) and :data:`VALUES_COLUMN` its
    non-null ones, computed in the same Spark job; :func:`split_nulls` turns the collected
    table into the partials a state applies and the number of nulls skipped.
    """
    from pyspark.sql import functions as F

    if not skips_nulls(agg):
        return combine_partials(df, group, column, agg, output)
    counts = [
        F.count(F.when(F.col(column).isNull(), F.lit(1))).alias(NULLS_COLUMN),
        F.count(F.col(column)).alias(VALUES_COLUMN),
    ]
    return _sql_groups(df, group, column, agg, output, *counts)


def split_nulls(table: pa.Table, grouped: bool) -> tuple[pa.Table, int]:
    """``(partials, null values skipped)`` from a collected :func:`state_partials` table.

    A grouped state's group whose values were all null has no partial: the key is not
    updated (as if it were absent from the batch); its nulls are counted. A global state
    keeps its one row per batch (a batch of only nulls is an empty batch: ``agg.zero()``).
    A table without the count columns (Count, Python combiners) skipped nothing.
    """
    if NULLS_COLUMN not in table.column_names:
        return table, 0
    nulls = int(pc.sum(table.column(NULLS_COLUMN)).as_py() or 0)
    if grouped and table.num_rows:
        table = table.filter(pc.greater(table.column(VALUES_COLUMN), 0))
    return table.drop_columns([NULLS_COLUMN, VALUES_COLUMN]), nulls


def combine_partials(
    df: Any, group: Sequence[str], column: str, agg: CombinerAggregator[Any], output: str
) -> Any:
    """One row per group (exactly one row when ``group`` is empty) with the batch's partial.

    An empty batch's global aggregate is ``agg.zero()``, as Trident's SingleEmitAggregator.

    Raises:
        ConfigError: a Python combiner declares no ``output_type``.
    """
    if is_sql_combiner(agg):
        return _sql_groups(df, group, column, agg, output)
    if not agg.output_type:
        msg = (
            f"{type(agg).__name__} is a Python combiner: set its class attribute output_type to "
            "the SQL type of its partials (e.g. output_type = 'double')"
        )
        raise ConfigError(msg)
    return _python_partials(df, tuple(group), column, agg, output)


def _sql_groups(
    df: Any, group: Sequence[str], column: str, agg: CombinerAggregator[Any], out: str, *more: Any
) -> Any:
    """A built-in combiner's partial per group (with ``more``); a global one's zero if empty."""
    from pyspark.sql import functions as F

    value = sql_expr(agg, column)
    zero = None if group else agg.zero()
    if zero is not None:
        value = F.coalesce(value, F.lit(zero))
    return df.groupBy(*group).agg(value.alias(out), *more)


def _python_partials(
    df: Any, group: tuple[str, ...], column: str, agg: CombinerAggregator[Any], output: str
) -> Any:
    """Fold ``init``/``combine`` per group inside a grouped pandas UDF (Arrow batches)."""

    def fold(columns: list[list[Any]]) -> Any:
        total = agg.zero()
        for i, value in enumerate(columns[0]):
            partial = agg.init((value,))
            total = partial if i == 0 else agg.combine(total, partial)
        return total

    return _fold_groups(df, group, [column], fold, output, agg.output_type, agg.zero())


def reduce_groups(
    df: Any, group: Sequence[str], inputs: Sequence[str], agg: Any, output: str
) -> Any:
    """A ReducerAggregator per group: ``init()`` folded with ``reduce`` over the group's tuples.

    Runs in a grouped pandas UDF on the workers. Without ``group`` the whole batch is one
    group, and an empty batch emits ``init()`` (exactly one tuple, as Trident's
    SingleEmitAggregator).

    Raises:
        ConfigError: the reducer declares no ``output_type``.
    """
    if not getattr(agg, "output_type", None):
        msg = (
            f"{type(agg).__name__} is a Python reducer: set its class attribute output_type to "
            "the SQL type of its result (e.g. output_type = 'bigint')"
        )
        raise ConfigError(msg)

    def fold(columns: list[list[Any]]) -> Any:
        acc = agg.init()
        for values in zip(*columns, strict=True):
            acc = agg.reduce(acc, values)
        return acc

    return _fold_groups(df, tuple(group), list(inputs), fold, output, agg.output_type, agg.init())


def _fold_groups(
    df: Any,
    group: tuple[str, ...],
    inputs: list[str],
    fold: Any,
    output: str,
    output_type: str,
    empty: Any,
) -> Any:
    """``group + [output]`` per group, ``output`` = ``fold(input columns as lists)``.

    A grouped pandas UDF on the workers; without ``group`` the batch is one group and an
    empty batch gives one row of ``empty`` (exactly one tuple per batch, as Trident).
    """
    import pandas as pd
    from pyspark.sql import functions as F

    key_types = {f.name: f.dataType.simpleString() for f in df.schema.fields if f.name in group}
    schema = ", ".join([*(f"`{k}` {key_types[k]}" for k in group), f"`{output}` {output_type}"])

    def per_group(pdf: pd.DataFrame) -> pd.DataFrame:
        row = {k: [pdf[k].iloc[0]] for k in group} if len(pdf) else {k: [None] for k in group}
        row[output] = [fold([pdf[c].tolist() for c in inputs])]
        return pd.DataFrame(row)

    if group:
        return df.groupBy(*group).applyInPandas(per_group, schema)
    one = df.withColumn("__g", F.lit(0)).groupBy("__g")
    out = one.applyInPandas(lambda pdf: per_group(pdf.drop(columns="__g")), schema)
    zero = df.sparkSession.createDataFrame([(empty,)], f"`{output}` {output_type}")
    return first_or_zero(out, zero)


def first_or_zero(out: Any, zero: Any) -> Any:
    """``out`` if it has a row, else ``zero`` (evaluated by Spark, not on the driver)."""
    from pyspark.sql import functions as F

    tagged = out.withColumn("__rank", F.lit(0)).unionByName(zero.withColumn("__rank", F.lit(1)))
    best = tagged.agg(F.min("__rank").alias("__best"))
    return tagged.join(best, tagged["__rank"] == best["__best"]).drop("__rank", "__best")

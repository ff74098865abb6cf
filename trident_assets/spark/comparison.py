"""``min_by``/``max_by``/``min``/``max`` on Spark: one winning tuple per Spark partition.

See :mod:`trident_assets.stream.comparison` for the semantics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from trident_assets.core.user_code import call
from trident_assets.stream.comparison import Comparator

__all__ = ["comparison_frame"]

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

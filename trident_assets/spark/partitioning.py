"""Repartitioning and ``peek`` on Spark (see :mod:`trident_assets.stream.partitioning`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from trident_assets.core.user_code import call
from trident_assets.stream.partitioning import Partitioning

__all__ = ["peek_frame", "repartition_frame"]


def repartition_frame(
    df: Any, how: Partitioning, fields: Sequence[str], parallelism: int | None
) -> Any:
    """``df`` moved into the partitions ``how`` asks for (``parallelism`` partitions if set).

    ``partition_by`` hashes ``fields`` (each key in exactly one partition); ``global``,
    ``batch_global`` and ``broadcast`` make one partition (``repartition(1)``, so the work
    before stays parallel); ``shuffle`` is round robin; ``local_or_shuffle`` and
    ``identity_partition`` keep the partitions (``local_or_shuffle`` shuffles to a hint).
    """
    if how.single:
        return df.repartition(1)
    if how is Partitioning.PARTITION_BY:
        return df.repartition(parallelism, *fields) if parallelism else df.repartition(*fields)
    if how is Partitioning.SHUFFLE:
        n = parallelism or int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
        return df.repartition(n)
    if how is Partitioning.LOCAL_OR_SHUFFLE and parallelism:
        return df.repartition(parallelism)
    return df


def peek_frame(df: Any, fields: Sequence[str], fn: Any, step: str) -> Any:
    """``df`` unchanged, after calling ``fn(*values)`` for each tuple on the executors.

    ``fields`` are the values passed (the stream's fields; ``df`` may carry more columns,
    e.g. a pipelined chunk's txid tag). ``fn`` runs each time Spark computes the stream: at
    least once per tuple, again when a batch is replayed (as Trident's ``peek``).

    Raises:
        UserCodeError: ``fn`` raised (naming the step and the tuple), failing the batch.
    """
    names = list(fields)

    def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        for batch in batches:
            columns = [batch.column(name).to_pylist() for name in names]
            rows = zip(*columns, strict=True) if columns else [()] * batch.num_rows
            for values in rows:
                call(step, fn, tuple(values))
            yield batch

    return df.mapInArrow(run, df.schema)

"""Driver-side Arrow tables into Spark, in slices a Spark Connect server can hold.

Under Spark Connect, ``createDataFrame(arrow_table)`` uploads the table (in artifact chunks)
and the server turns ALL of it into local rows in its driver heap, then copies them again
into tasks: a 5M-row table (100 MB of Arrow) exhausted a 2 GB server heap
(``OutOfMemoryError``; the client's own chunked upload, ``spark.sql.session.localRelation*``,
does not change that). :func:`to_spark` sends a big table in slices instead,
each materialized on the executors' disks (``localCheckpoint``, ``DISK_ONLY``) before the
next is sent, and returns their union; the server never holds more than one
slice as local rows. Classic sessions send any size in one piece (PySpark writes the Arrow
data to a file the JVM reads), unless a limit is configured.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

import pyarrow as pa

__all__ = ["MAX_ROWS_CONF", "is_connect", "max_rows_for", "to_spark"]

MAX_ROWS_CONF = "trident.transfer.maxRows"
"""Spark conf key: rows per slice (``0``: never slice). Default: :data:`CONNECT_MAX_ROWS`
under Spark Connect, no slicing on a classic session."""

CONNECT_MAX_ROWS = 500_000
"""Rows per slice under Spark Connect (about 10 MB of Arrow for a short key and a bigint)."""


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def max_rows_for(spark: Any) -> int:
    """Rows per slice for ``spark``: :data:`MAX_ROWS_CONF` if set, else the mode's default.

    0 means one piece, however large.
    """
    configured = spark.conf.get(MAX_ROWS_CONF, None)
    if configured:
        return max(0, int(configured))
    return CONNECT_MAX_ROWS if is_connect(spark) else 0


def to_spark(spark: Any, table: pa.Table, *, max_rows: int | None = None) -> Any:
    """``table`` as a Spark DataFrame with the same columns, types and rows (order not kept).

    ``max_rows`` (default :func:`max_rows_for`; 0: one piece): a table with more rows is sent
    in slices of at most ``max_rows``, each checkpointed on the executors' disks before the
    next is sent. An empty table keeps its schema (Spark Connect cannot infer one from no rows).
    """
    from pyspark import StorageLevel
    from pyspark.sql.pandas.types import from_arrow_schema

    if table.num_rows == 0:
        return spark.createDataFrame(table, schema=from_arrow_schema(table.schema))
    limit = max_rows_for(spark) if max_rows is None else max_rows
    if limit <= 0 or table.num_rows <= limit:
        return spark.createDataFrame(table)
    on_disk = StorageLevel.DISK_ONLY  # the heap stays free for the joins that read them
    parts = [
        spark.createDataFrame(table.slice(start, limit)).localCheckpoint(True, on_disk)
        for start in range(0, table.num_rows, limit)
    ]
    return reduce(lambda a, b: a.unionByName(b), parts)

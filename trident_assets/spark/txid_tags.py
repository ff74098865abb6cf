"""The batch tag of a chunk of txids: a column of positions, the reads that tag it, the split.

See :mod:`trident_assets.spark.batch_run`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from trident_assets.spouts.ranges import BatchPlan

__all__ = ["TXID_COLUMN", "split_by_txid", "tag_first", "tagged_read"]

TXID_COLUMN = "__trident_txid"
"""The column that tags every tuple of a pipelined chunk with its batch: the position of its
txid in the chunk (0, 1, ...), never the txid itself, so a chunk's Spark code is the same
from one chunk to the next (a literal txid would be compiled anew for every chunk)."""


def tag_first(frame: Any) -> Any:
    """``frame`` with the tag of a chunk's first txid (0: the same generated code every time)."""
    from pyspark.sql import functions as F

    return frame.withColumn(TXID_COLUMN, F.lit(0).cast("bigint"))


def tagged_read(
    spout: Any, spark: Any, log: Any, plans: Sequence[BatchPlan]
) -> tuple[Any, dict[str, str]]:
    """The spout's records of ``plans`` tagged by position, and the Spark settings of the scan."""
    from pyspark.sql import functions as F

    nonempty = [(tag, plan) for tag, plan in enumerate(plans) if plan.record_count > 0]
    if hasattr(spout, "read_many"):
        conf = spout.split_conf(log, nonempty) if hasattr(spout, "split_conf") else {}
        return spout.read_many(spark, log, nonempty, TXID_COLUMN), conf
    reads = [
        spout.read(spark, log, plan).withColumn(TXID_COLUMN, F.lit(tag).cast("bigint"))
        for tag, plan in nonempty
    ]
    conf = spout.read_conf(log, nonempty) if hasattr(spout, "read_conf") else {}
    return reduce(lambda x, y: x.unionByName(y), reads), conf


def split_by_txid(table: pa.Table, txids: Sequence[int]) -> dict[int, pa.Table]:
    """``table`` split on :data:`TXID_COLUMN` (dropped): tag ``i`` is ``txids[i]``'s.

    Every txid gets a table, maybe empty.
    """
    ordered = table.sort_by(TXID_COLUMN) if table.num_rows else table
    tags = ordered.column(TXID_COLUMN).to_numpy() if ordered.num_rows else np.array([], np.int64)
    body = ordered.drop_columns([TXID_COLUMN])
    out: dict[int, pa.Table] = {}
    for position, txid in enumerate(txids):
        lo, hi = np.searchsorted(tags, [position, position + 1])
        out[txid] = body.slice(int(lo), int(hi - lo))
    return out

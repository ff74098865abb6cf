"""A spout's dead letters collected by a state's own Spark job (a chunk of one).

A chunk of one whose state job reads a spout could fetch the spout's dead letters with a
Spark job of their own (:mod:`~trident_assets.spark.dead_letter_jobs`). On a small batch that
job costs about as much as the state's (a round trip, planning, scheduling), so the state's
job carries them instead: :func:`with_spout_dead` appends them to the job's rows, marked
``__kind = SPOUT_DEAD``, and :func:`take_spout_dead` splits the collected table again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.spark.column_cache import reuse
from trident_assets.spark.window_columns import KIND, REASON, SPOUT_DEAD, SPOUT_DEAD_COLUMNS, VALUE

__all__ = ["take_spout_dead", "with_spout_dead"]


def with_spout_dead(df: Any, dead: Any, owner: Any) -> Any:
    """``df``'s rows, then the spout's ``dead`` letters as rows of the same job.

    Columns of one missing from the other are null there (``unionByName``). ``owner`` (the
    state) keeps the select list's expressions from one txid to the next.
    """
    rows = dead.select(*reuse(owner, "spout_dead", None, dead, _spout_dead_rows))
    return df.unionByName(rows, allowMissingColumns=True)


def _spout_dead_rows() -> list[Any]:
    """Select list of a spout dead letter's row in the job's table."""
    from pyspark.sql import functions as F

    return [
        F.lit(SPOUT_DEAD).alias(KIND),
        *[F.col(name).alias(alias) for name, alias in SPOUT_DEAD_COLUMNS.items()],
        F.col("reason").alias(REASON),
        F.col("value").alias(VALUE),
    ]


def take_spout_dead(
    schema: pa.Schema, table: pa.Table, drop: Sequence[str] = ()
) -> tuple[pa.Table, pa.Table]:
    """``(the job's own rows, the spout's dead letters)`` of a folded job's ``table``.

    ``schema``: the dead letters' Arrow schema (what their own job's ``toArrow`` gives).
    The own rows lose the spout dead letters' columns and ``drop``.
    """
    mine = pc.fill_null(pc.equal(table.column(KIND), SPOUT_DEAD), False)
    rows = table.filter(mine)
    source = {**SPOUT_DEAD_COLUMNS, "reason": REASON, "value": VALUE}
    columns = [rows.column(source[f.name]).cast(f.type) for f in schema]
    dead = pa.Table.from_arrays(columns, schema=schema)
    gone = [*SPOUT_DEAD_COLUMNS.values(), *drop]
    return table.filter(pc.invert(mine)).drop_columns(gone), dead

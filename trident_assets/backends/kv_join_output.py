"""What a key-value join's job returned, as the join kept in DuckDB gives it.

The job's rows (:data:`~trident_assets.backends.kv_join_records.OUTPUT_COLUMNS` and the
sides' structs ``__v<i>``) are read with DuckDB on the driver, with the statements of
:mod:`~trident_assets.backends.duckdb_join`: the joined tuples ordered by completing side and
batch position, the expired halves by arrival txid, key and side (``values_json`` from
DuckDB's ``to_json``, key columns typed as the sides' common type), and the first duplicate
side raised as :class:`~trident_assets.core.join.DuplicateJoinSideError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa

from trident_assets.backends.join_batch_columns import quoted, value_column
from trident_assets.core.join import DuplicateJoinSideError, SingleJoin, expired_fields

__all__ = ["JoinJobResult", "read_job_rows"]


@dataclass(frozen=True, slots=True)
class JoinJobResult:
    """The batch's joined tuples, expired halves, distinct keys and pending-count change."""

    joined: pa.Table
    expired: pa.Table
    keys_in: int
    delta: int


def _joined_sql(spec: SingleJoin) -> str:
    cols = []
    for field, (side, _) in spec.locations.items():
        cols.append(f"{value_column(spec.sides.index(side))}.{quoted(field)} AS {quoted(field)}")
    return f"SELECT {', '.join(cols)} FROM r WHERE __kind = 'j' ORDER BY __s, __o"


def _expired_sql(spec: SingleJoin) -> str:
    parts = []
    for i, side in enumerate(spec.sides):
        v = value_column(i)
        keys = ", ".join(f"{v}.{quoted(f)} AS {quoted(f)}" for f in spec.join_fields or ())
        parts.append(
            f"SELECT {keys}, '{side}' AS side, __arrived AS arrived_txid, __arrived_ts AS "
            f"arrived_ts, __reason AS reason, CAST(to_json({v}) AS VARCHAR) AS values_json, "
            f"{i} AS __i FROM r WHERE __kind = 'x' AND __s = {i}"
        )
    order = ", ".join(quoted(f) for f in spec.join_fields or ())
    cols = ", ".join(quoted(f) for f in expired_fields(spec))
    return f"SELECT {cols} FROM ({' UNION ALL '.join(parts)}) ORDER BY arrived_txid, {order}, __i"


def read_job_rows(spec: SingleJoin, rows: pa.Table, txid: int) -> JoinJobResult:
    """The job's ``rows`` as the batch's result.

    Raises:
        DuplicateJoinSideError: a partition found a side arriving twice for a pending key
            (the first in side and batch order over all partitions).
    """
    con = duckdb.connect()
    try:
        con.register("r", rows)
        dup = con.execute(
            "SELECT __s, __o, __arrived FROM r WHERE __kind = 'd' ORDER BY __s, __o LIMIT 1"
        ).fetchall()
        if dup:
            side, ord_, arrived = dup[0]
            v = value_column(side)
            fields = ", ".join(f"{v}.{quoted(f)}" for f in spec.join_fields or ())
            key = con.execute(
                f"SELECT {fields} FROM r WHERE __kind = 'd' AND __s = ? AND __o = ?", [side, ord_]
            ).fetchall()[0]
            raise DuplicateJoinSideError(tuple(key), spec.sides[side], arrived, txid)
        joined = con.sql(_joined_sql(spec)).to_arrow_table()
        expired = con.sql(_expired_sql(spec)).to_arrow_table()
        keys_in, delta = con.execute(
            "SELECT COALESCE(sum(__keys_in), 0), COALESCE(sum(__delta), 0) FROM r "
            "WHERE __kind = 'n'"
        ).fetchall()[0]
    finally:
        con.close()
    return JoinJobResult(joined, expired, int(keys_in), int(delta))

"""The engine of a single join whose pending halves live in a Redis Cluster or memcached.

The batch input (:func:`kv_join_input`) is the batch's rows of every side as a Spark
DataFrame, each row with its position in the batch and its join key's shard, never
collected (only its latest event time is, when the join has ``event_time``). The apply
(:func:`apply_kv_join`, inside the txid's commit transaction of the topology's store):

1. reads the join's meta row and clock from the store: the last txid applied, the
   watermark (the batch's event time is the watermark advanced to its latest row), the
   arrival txids expiring now (:mod:`~trident_assets.backends.kv_join_clock`);
2. runs one Spark job: the rows are repartitioned by shard (plus one marker row per shard,
   so every shard has an owner) and each partition applies the join's rules to its keys on
   the servers (:class:`~trident_assets.backends.kv_join_records.JoinPartition`: batched
   reads and writes, Redis writes acknowledged by replicas), returning the joined tuples,
   the expired halves and its counts;
3. reads those rows as the DuckDB join gives them (same order, types and duplicate error:
   :func:`~trident_assets.backends.kv_join_records.read_job_rows`), records the txid in the
   clock and meta row, and returns the joined tuples as the join's new values and the expired
   halves as its ``<join>_expired`` output, both written in the same transaction.

The commit marker moves after every partition succeeded; a txid that failed after some
partitions wrote runs again and recomputes from each record's ``prev``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trident_assets.backends.join_batch_columns import (
    ORD_COLUMN,
    SIDE_COLUMN,
    TS_COLUMN,
    value_column,
)
from trident_assets.backends.join_pending_table import read_meta
from trident_assets.backends.kv_join_clock import advance_clock, due_txids
from trident_assets.backends.kv_join_records import (
    OUTPUT_COLUMNS,
    SHARD_COLUMN,
    SHARDS,
    JoinPartition,
    join_targets,
    read_job_rows,
)
from trident_assets.backends.kv_target import MEMCACHED
from trident_assets.backends.memcached_map import check_sentinels
from trident_assets.core.join import SingleJoin, expiry_cutoff
from trident_assets.runtime.outcomes import Applied, StateInput, StateOutcome
from trident_assets.spark.single_join import join_batch_frame
from trident_assets.spark.user_errors import worker_errors
from trident_assets.stream.state_kinds import SINGLE_JOIN

if TYPE_CHECKING:
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.streams import TridentState

__all__ = ["KeyValueJoinBatch", "apply_kv_join", "kv_join_input"]


@dataclass(frozen=True)
class KeyValueJoinBatch:
    """A key-value join's batch: its rows (a Spark DataFrame) and their latest event time."""

    frame: Any
    latest_ts: float | None


def kv_join_input(run: BatchContext, state: TridentState) -> StateInput:
    """The batch's rows with their position (``__ord``) and key shard (``__shard``).

    A join with ``event_time`` reads the batch's latest event time by one small Spark job
    (None without). The
    shard is a hash of the join key's values (typed as the sides' common type), so a
    key keeps its shard from batch to batch.
    """
    from pyspark.sql import functions as F

    spec: SingleJoin = state.node.args[SINGLE_JOIN]
    union = join_batch_frame(run, state)
    latest = None if state.node.args["event_time"] is None else _latest_ts(union)
    keys = [
        F.coalesce(*[F.col(value_column(i)).getField(f) for i in range(len(spec.sides))])
        for f in spec.join_fields or ()
    ]
    frame = union.select(
        SIDE_COLUMN,
        *[value_column(i) for i in range(len(spec.sides))],
        F.monotonically_increasing_id().alias(ORD_COLUMN),
        F.pmod(F.xxhash64(*keys), F.lit(SHARDS)).cast("int").alias(SHARD_COLUMN),
    )
    return StateInput(KeyValueJoinBatch(frame, latest))


def _latest_ts(union: Any) -> float | None:
    """The batch's latest event time (None: none), by one small Spark job."""
    from pyspark.sql import functions as F

    latest = union.agg(F.max(TS_COLUMN).alias("latest")).toArrow().column(0)[0].as_py()
    return None if latest is None else float(latest)


def _schema(frame: Any, sides: int) -> Any:
    """The job's output schema: :data:`OUTPUT_COLUMNS` and the sides' structs."""
    from pyspark.sql import types as T

    spark_types = {
        "string": T.StringType(),
        "int32": T.IntegerType(),
        "int64": T.LongType(),
        "double": T.DoubleType(),
    }
    fields = [T.StructField(n, spark_types[str(t)]) for n, t in OUTPUT_COLUMNS]
    structs = [frame.schema[value_column(i)] for i in range(sides)]
    return T.StructType([*fields[:3], *structs, *fields[3:]])


def apply_kv_join(run: BatchContext, state: TridentState, batch: KeyValueJoinBatch) -> Applied:
    """Apply the batch to the join's records on the servers; return its joined and expired rows.

    Raises:
        StaleTxidError: the join already applied this txid or a later one.
        DuplicateJoinSideError: a side arrived twice for a pending key
            (``on_duplicate="error"``); the txid is not committed.
        KeyValueStoreError: a server is unreachable, lost the join's records (memcached) or
            did not replicate the writes (Redis); the txid is not committed.
        StateLayoutError: a pending half holds a value JSON cannot store (refused before its
            partition writes), or a record is not this join's.
    """
    from pyspark.sql import functions as F

    store = run.runner.store
    spec: SingleJoin = state.node.args[SINGLE_JOIN]
    txid, table = run.txid, state.table
    last, watermark, pending = read_meta(store, table, txid)
    ts = batch.latest_ts if watermark is None else watermark
    if batch.latest_ts is not None and ts is not None:
        ts = max(ts, batch.latest_ts)
    targets = join_targets(state)
    if targets.records.store == MEMCACHED:
        check_sentinels(targets.records, last is None)
    cutoff = expiry_cutoff(spec, txid, ts if ts is not None else 0.0)
    min_ts = cutoff.min_live_ts if ts is not None else None
    expiring, dropped = due_txids(store, table, txid, cutoff.max_arrived_txid, min_ts)
    job = JoinPartition(targets, spec, txid, ts, last, tuple(expiring), tuple(dropped))
    frame = batch.frame
    spark = frame.sparkSession
    markers = spark.range(SHARDS).select(F.col("id").cast("int").alias(SHARD_COLUMN))
    parts = max(1, min(SHARDS, int(spark.conf.get("spark.sql.shuffle.partitions"))))
    marked = frame.unionByName(markers, allowMissingColumns=True).repartition(parts, SHARD_COLUMN)
    rows = marked.mapInArrow(job, _schema(frame, len(spec.sides)))
    with worker_errors():
        collected = rows.toArrow()
    result = read_job_rows(spec, collected, txid)
    after = pending + result.delta
    expires = spec.batch_expiry is not None or (spec.time_expiry is not None and ts is not None)
    advance_clock(store, table, txid, ts, expiring, after, expires=expires)
    outcome = StateOutcome(state.spec.name, table, result.keys_in, result.keys_in, 0, after)
    return Applied(outcome, new_values=result.joined, expired=result.expired)

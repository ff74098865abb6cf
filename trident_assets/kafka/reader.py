"""Parallel Spark reads of Kafka offset ranges: each Spark task consumes its partitions' ranges.

A DataFrame of task indices (``spark.range(n, numPartitions=n)``) is mapped with
``mapInArrow``: task ``i`` takes the partitions :func:`~trident_assets.spouts.source.
assign_round_robin` gives task ``i`` of ``n`` (Storm's task-index partitioner), opens its own
consumer, ``assign()``s each partition at the range's first offset and consumes to the range's
end, emitting Arrow record batches with the embedded log's schema
(:func:`~trident_assets.log.records.log_spark_schema`). Only the ranges pass through
the driver.

Missing offsets inside a range (log compaction, transaction markers, retention between
planning and reading, a broker that does not deliver in time) are not hidden: the task emits
one *gap row* per run of missing offsets: ``offset`` = first missing offset, ``value`` and
``key`` null, one header ``trident.gap`` = ``b"<first>..<last>: <reason>"``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from trident_assets.log.records import SPARK_ARROW_SCHEMA, log_spark_schema
from trident_assets.spouts.source import assign_round_robin

__all__ = [
    "GAP_HEADER",
    "iter_partition",
    "read_assigned",
    "read_kafka_ranges",
]

GAP_HEADER = "trident.gap"
"""Header key marking a gap row."""

KafkaRange = tuple[str, int, int, int]
"""``(topic, partition, first_offset, next_offset)``: offsets ``[first, next)``."""

_ROWS_PER_BATCH = 8192


def _consumer(config: Mapping[str, Any], eof: bool) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "isolation.level": "read_committed",
            **config,
            "group.id": config.get("group.id", "trident-assets-reader"),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": eof,
            "auto.offset.reset": "error",
            "allow.auto.create.topics": False,
        }
    )


class _Rows:
    """Column buffers flushed as Arrow record batches."""

    def __init__(self) -> None:
        self.schema = SPARK_ARROW_SCHEMA
        self.cols: list[list[Any]] = [[] for _ in self.schema]

    def __len__(self) -> int:
        return len(self.cols[0])

    def add(
        self,
        topic: str,
        partition: int,
        offset: int,
        ts_ms: int | None,
        key: Any,
        value: Any,
        headers: Any,
    ) -> None:
        row = (
            topic,
            partition,
            offset,
            None if ts_ms is None else ts_ms * 1000,
            key,
            value,
            None if headers is None else [{"key": k, "value": v} for k, v in headers],
        )
        for col, item in zip(self.cols, row, strict=True):
            col.append(item)

    def gap(self, topic: str, partition: int, first: int, last: int, reason: str) -> None:
        note = f"{first}..{last}: {reason}".encode()
        self.add(topic, partition, first, None, None, None, [(GAP_HEADER, note)])

    def flush(self) -> pa.RecordBatch:
        arrays = [
            pa.array(col, type=field.type)
            for col, field in zip(self.cols, self.schema, strict=True)
        ]
        self.cols = [[] for _ in self.schema]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def read_assigned(
    config: Mapping[str, Any], ranges: Sequence[KafkaRange], timeout_s: float
) -> Iterator[pa.RecordBatch]:
    """Consume ``ranges`` with one consumer; yield their records (and gap rows) as Arrow.

    A range is done when a record at or past its last offset arrives, or the partition's end
    (high watermark / last stable offset) reaches its end. Missing offsets become gap rows; a
    range not complete after ``timeout_s`` without progress ends with a gap row for the rest.
    """
    from confluent_kafka import KafkaError, TopicPartition

    todo = {(t, p): [first, nxt, first] for t, p, first, nxt in ranges if nxt > first}
    rows = _Rows()
    if not todo:
        return
    consumer = _consumer(config, eof=True)
    try:
        consumer.assign([TopicPartition(t, p, v[0]) for (t, p), v in todo.items()])

        def finish(key: tuple[str, int], reason: str) -> None:
            _first, nxt, expected = todo.pop(key)
            if expected < nxt:
                rows.gap(key[0], key[1], expected, nxt - 1, reason)
            consumer.pause([TopicPartition(*key)])

        deadline = time.monotonic() + timeout_s
        while todo:
            if time.monotonic() > deadline:
                for key in list(todo):
                    finish(key, f"not delivered by the broker within {timeout_s}s")
                break
            for msg in consumer.consume(num_messages=10_000, timeout=0.05):
                key = (msg.topic(), msg.partition())
                if key not in todo:
                    continue
                err = msg.error()
                _first, nxt, expected = todo[key]
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if msg.offset() >= nxt:
                            finish(key, "missing (compaction or transaction markers)")
                        continue
                    finish(key, f"unreadable: {err.str()} (retention deleted them?)")
                    continue
                offset = msg.offset()
                deadline = time.monotonic() + timeout_s
                if offset >= nxt:
                    finish(key, "missing (compaction or transaction markers)")
                    continue
                if offset > expected:
                    rows.gap(
                        key[0],
                        key[1],
                        expected,
                        offset - 1,
                        "missing (compaction, transaction markers or retention)",
                    )
                ts_type, ts = msg.timestamp()
                rows.add(
                    key[0],
                    key[1],
                    offset,
                    ts if ts_type else None,
                    msg.key(),
                    msg.value(),
                    msg.headers(),
                )
                todo[key][2] = offset + 1
                if offset + 1 >= nxt:
                    finish(key, "")
            if len(rows) >= _ROWS_PER_BATCH:
                yield rows.flush()
    finally:
        consumer.close()
    if len(rows):
        yield rows.flush()


def iter_partition(
    config: Mapping[str, Any],
    topic: str,
    partition: int,
    first: int,
    nxt: int,
    timeout_s: float,
) -> Iterator[tuple[int, int]]:
    """Yield ``(offset, timestamp_ms)`` of the records in ``[first, nxt)`` of one partition."""
    for batch in read_assigned(config, [(topic, partition, first, nxt)], timeout_s):
        offsets = batch.column("offset").to_pylist()
        micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
        for offset, ts in zip(offsets, micros, strict=True):
            if ts is not None:  # gap rows carry no timestamp
                yield offset, ts // 1000


def default_parallelism(spark: Any) -> int:
    """The session's default parallelism, also under Spark Connect (no SparkContext there).

    Connect refuses ``sparkContext`` (``JVM_ATTRIBUTE_NOT_SUPPORTED``): read the setting, else
    the shuffle partitions, else 2.
    """
    if not type(spark).__module__.startswith("pyspark.sql.connect"):
        return int(spark.sparkContext.defaultParallelism)
    for key in ("spark.default.parallelism", "spark.sql.shuffle.partitions"):
        value = spark.conf.get(key, None)
        if value:
            return int(value)
    return 2


def read_kafka_ranges(
    spark: Any,
    config: Mapping[str, Any],
    ranges: Sequence[KafkaRange],
    *,
    tasks: int | None = None,
    timeout_s: float = 60.0,
) -> Any:
    """Return a DataFrame (``log_spark_schema()``, unordered) of the records of ``ranges``.

    Gap rows included. ``config``: librdkafka consumer settings (``bootstrap.servers``,
    security, fetch sizes); empty ranges are skipped; ``tasks``: Spark tasks (consumers),
    default the session's parallelism, never more than the partitions with data;
    ``timeout_s``: how long a task waits for the broker without progress.
    """
    schema = log_spark_schema()
    todo = [(str(t), int(p), int(f), int(n)) for t, p, f, n in ranges if int(n) > int(f)]
    if not todo:
        return spark.createDataFrame([], schema)
    if tasks is None:
        tasks = default_parallelism(spark)
    n = max(1, min(int(tasks), len(todo)))
    by_id = {f"{t}@{p}": (t, p, f, nx) for t, p, f, nx in todo}
    conf = dict(config)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column("id").to_pylist():
                mine = [by_id[pid] for pid in assign_round_robin(list(by_id), task, n)]
                yield from read_assigned(conf, mine, timeout_s)

    return spark.range(n, numPartitions=n).mapInArrow(run, schema)

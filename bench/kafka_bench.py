"""Benchmark: Kafka read throughput into Spark (records/s) with the KafkaSpout's reader.

Run with ``python -m bench.kafka_bench`` (``--help`` for sizes). It starts the test broker
(librdkafka's mock cluster, in a child process on 127.0.0.1; see
``trident_assets_tests/kafka_broker.py``), produces ``--records`` (default 1M) records of
about 60 bytes round robin over 4 partitions (not timed), then reads all of them as one batch:

1. ``spark``: ``read_kafka_ranges`` (one consumer per Spark task, ``mapInArrow``) followed by
   a Spark aggregation ``count(*), sum(length(value))`` (no collect), for each ``--tasks``
   value, best and median of ``--repeat`` runs after one warm-up;
2. ``direct``: the same ranges read by one in-process consumer (``read_assigned``) into Arrow,
   for comparison (no Spark).

The mock broker is in-memory and single-threaded, so these are client + Spark figures on
loopback, not a statement about a real Kafka cluster. Results go to
``bench/results/kafka_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
PARTITIONS = 4


def _produce(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10_000}
    )
    for i in range(records):
        value = f"sentence {i:09d} the cow jumped over the moon".encode()
        while True:
            try:
                producer.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        msg = "records were not delivered to the benchmark broker"
        raise RuntimeError(msg)


def _timed(fn: Any, repeat: int) -> tuple[list[float], Any]:
    fn()  # warm-up
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark and write the JSON results; return them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--tasks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    from trident_assets.kafka.reader import read_assigned, read_kafka_ranges
    from trident_assets.kafka.source import KafkaSource
    from trident_assets.spark.session import build_spark_session
    from trident_assets_tests.kafka_broker import MockKafkaBroker

    broker = MockKafkaBroker()
    spark = build_spark_session()
    try:
        topic = "bench"
        broker.create_topic(topic)
        t0 = time.perf_counter()
        _produce(broker.bootstrap_servers, topic, args.records)
        produce_s = time.perf_counter() - t0
        conf = {"bootstrap.servers": broker.bootstrap_servers}
        source = KafkaSource([topic], conf)
        ranges = [
            (topic, p, source.earliest(f"{topic}@{p}"), source.latest(f"{topic}@{p}"))
            for p in range(PARTITIONS)
        ]
        source.close()
        total = sum(n - f for _, _, f, n in ranges)
        results: dict[str, Any] = {
            "records": total,
            "partitions": PARTITIONS,
            "produce_s": round(produce_s, 3),
            "spark": {},
        }
        for tasks in args.tasks:

            def run(tasks: int = tasks) -> tuple[int, int]:
                df = read_kafka_ranges(spark, conf, ranges, tasks=tasks)
                row = df.agg(F.count("*"), F.sum(F.length("value"))).collect()[0]
                return int(row[0]), int(row[1])

            times, (count, _bytes) = _timed(run, args.repeat)
            assert count == total, (count, total)
            results["spark"][str(tasks)] = {
                "best_s": round(min(times), 3),
                "median_s": round(statistics.median(times), 3),
                "records_per_s_best": round(total / min(times)),
                "records_per_s_median": round(total / statistics.median(times)),
            }

        def direct() -> int:
            return sum(b.num_rows for b in read_assigned(conf, ranges, 60.0))

        times, count = _timed(direct, args.repeat)
        assert count == total
        results["direct"] = {
            "best_s": round(min(times), 3),
            "records_per_s_best": round(total / min(times)),
        }
        results["machine"] = {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
            "spark_master": spark.conf.get("spark.master"),
        }
    finally:
        spark.stop()
        broker.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kafka_bench.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()

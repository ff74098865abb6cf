"""Benchmark of the embedded log: producing and reading.

Run with ``python -m bench.log_bench`` (defaults as below; ``--help`` for sizes). Measures:

1. Append throughput: ``--records`` (10M) short records appended in Arrow batches of
   ``--batch`` (100k), batch ``i`` to partition ``i % 4`` (round robin over 4 partitions),
   each batch one durable (fsynced) segment. Record generation is not timed.
2. Key-hash producer throughput: ``--keyed`` (1M) records sent one by one through
   ``Producer.send(value, key=...)`` with 10,000 distinct keys (murmur2 partitioning),
   auto-flushed every 100k records, plus the final flush.
3. Spark read throughput of one batch of ``--read`` (5M) records spread over the 4
   partitions (``read_ranges`` + a Spark aggregation ``count(*), sum(length(value))``; no
   collect), best of ``--repeat`` runs after one warm-up, with the number of Spark tasks. A
   direct pyarrow ``PartitionedLog.read`` of the same ranges is timed for comparison.

Results go to ``bench/results/log_bench.json`` and ``bench/results/log_bench.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.log import PartitionedLog

RESULTS = Path(__file__).resolve().parent / "results"
PARTITIONS = 4


def _values(start: int, n: int) -> pa.Array:
    ids = pa.array(np.arange(start, start + n, dtype=np.int64)).cast(pa.string())
    return pc.binary_join_element_wise("rec-", ids, "").cast(pa.binary())


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.parquet"))


def bench_append(log: PartitionedLog, records: int, batch: int) -> dict[str, Any]:
    log.create_topic("bench", PARTITIONS)
    ts = pa.array(np.full(batch, 1_700_000_000_000, dtype=np.int64))
    elapsed = 0.0
    done = 0
    i = 0
    while done < records:
        n = min(batch, records - done)
        table = pa.table({"value": _values(done, n), "timestamp": ts.slice(0, n)})
        t0 = time.perf_counter()
        log.append("bench", i % PARTITIONS, table)
        elapsed += time.perf_counter() - t0
        done += n
        i += 1
    return {
        "records": records,
        "batch_records": batch,
        "segments": i,
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed),
        "bytes_on_disk": _dir_bytes(log.root / "bench"),
        "avg_value_bytes": round(float(pc.mean(pc.binary_length(_values(0, batch))).as_py()), 1),
    }


def bench_keyed_producer(log: PartitionedLog, records: int) -> dict[str, Any]:
    log.create_topic("keyed", PARTITIONS)
    keys = [f"user-{i % 10_000}".encode() for i in range(records)]
    values = [f"click-{i}".encode() for i in range(records)]
    producer = log.producer("keyed", "hash")
    t0 = time.perf_counter()
    for key, value in zip(keys, values, strict=True):
        producer.send(value, key=key)
    producer.flush()
    elapsed = time.perf_counter() - t0
    counts = [info.latest for info in log.partition_offsets("keyed")]
    assert sum(counts) == records
    return {
        "records": records,
        "distinct_keys": 10_000,
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed),
        "records_per_partition": counts,
    }


def bench_spark_read(log: PartitionedLog, records: int, repeat: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from trident_assets.spark.log_reader import read_ranges
    from trident_assets.spark.session import DEFAULT_SPARK_CONF, build_spark_session

    per = records // PARTITIONS
    ranges = [("bench", p, 0, per - 1) for p in range(PARTITIONS)]
    files = sum(len(log.segment_files(*r)) for r in ranges)
    spark = build_spark_session()
    try:

        def run() -> tuple[float, int, int, int]:
            t0 = time.perf_counter()
            df = read_ranges(spark, log, ranges)
            row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).first()
            elapsed = time.perf_counter() - t0
            return elapsed, int(row["n"]), int(row["b"]), df.rdd.getNumPartitions()

        run()  # warm-up: JVM start-up, JIT, file listing caches
        runs = [run() for _ in range(repeat)]
        times = [r[0] for r in runs]
        n, value_bytes, tasks = runs[0][1], runs[0][2], runs[0][3]
        assert n == per * PARTITIONS, n
        t0 = time.perf_counter()
        direct = sum(log.read(*r).num_rows for r in ranges)
        direct_s = time.perf_counter() - t0
        assert direct == n
        return {
            "records": n,
            "partitions": PARTITIONS,
            "segment_files": files,
            "spark_tasks": tasks,
            "spark_master": spark.sparkContext.master,
            "default_parallelism": spark.sparkContext.defaultParallelism,
            "max_partition_bytes": spark.conf.get("spark.sql.files.maxPartitionBytes"),
            "value_bytes": value_bytes,
            "seconds_best": round(min(times), 3),
            "seconds_median": round(statistics.median(times), 3),
            "records_per_s_best": round(n / min(times)),
            "records_per_s_median": round(n / statistics.median(times)),
            "pyarrow_direct_seconds": round(direct_s, 3),
            "pyarrow_direct_records_per_s": round(n / direct_s),
            "spark_conf": {k: v for k, v in DEFAULT_SPARK_CONF.items() if "memory" in k},
        }
    finally:
        spark.stop()


def _markdown(result: dict[str, Any]) -> str:
    a, k, r = result["append"], result["keyed_producer"], result["spark_read"]
    return "\n".join(
        [
            "# Embedded log benchmark",
            "",
            f"Machine: {result['machine']['cpus']} CPUs, Python {result['machine']['python']}, "
            f"{result['machine']['platform']}. Date: {result['date']}.",
            "",
            "| measurement | records | seconds | records/s |",
            "|---|---:|---:|---:|",
            f"| append, Arrow batches of {a['batch_records']:,}, round robin over 4 partitions "
            f"(fsync per segment) | {a['records']:,} | {a['seconds']} | {a['records_per_s']:,} |",
            f"| key-hash producer, `send()` per record, {k['distinct_keys']:,} keys | "
            f"{k['records']:,} | {k['seconds']} | {k['records_per_s']:,} |",
            f"| Spark read of one batch over 4 partitions, `count` + `sum(length(value))`, best "
            f"of runs | {r['records']:,} | {r['seconds_best']} | {r['records_per_s_best']:,} |",
            f"| same, median | {r['records']:,} | {r['seconds_median']} | "
            f"{r['records_per_s_median']:,} |",
            f"| direct pyarrow `PartitionedLog.read` of the same ranges | {r['records']:,} | "
            f"{r['pyarrow_direct_seconds']} | {r['pyarrow_direct_records_per_s']:,} |",
            "",
            f"Append: {a['segments']} segments, {a['bytes_on_disk']:,} bytes on disk "
            f"(zstd Parquet), average value {a['avg_value_bytes']} bytes.",
            f"Spark read: {r['segment_files']} segment files, **{r['spark_tasks']} Spark tasks** "
            f"(master {r['spark_master']}, default parallelism {r['default_parallelism']}, "
            f"maxPartitionBytes {r['max_partition_bytes']}).",
            f"Keyed producer records per partition: {k['records_per_partition']}.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--keyed", type=int, default=1_000_000)
    parser.add_argument("--read", type=int, default=5_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="log directory (default: temp)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.read > args.records:
        parser.error("--read must not exceed --records")

    work = Path(tempfile.mkdtemp(prefix="log_bench_", dir=args.dir))
    try:
        log = PartitionedLog(work / "log")
        result: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
                "pyarrow": pa.__version__,
            },
        }
        print(f"append {args.records:,} records ...", flush=True)
        result["append"] = bench_append(log, args.records, args.batch)
        print(json.dumps(result["append"]), flush=True)
        print(f"key-hash producer {args.keyed:,} records ...", flush=True)
        result["keyed_producer"] = bench_keyed_producer(log, args.keyed)
        print(json.dumps(result["keyed_producer"]), flush=True)
        print(f"Spark read of {args.read:,} records ...", flush=True)
        result["spark_read"] = bench_spark_read(log, args.read, args.repeat)
        print(json.dumps(result["spark_read"]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "log_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "log_bench.md").write_text(_markdown(result))
    print(_markdown(result))
    return result


if __name__ == "__main__":
    main()

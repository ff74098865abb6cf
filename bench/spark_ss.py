"""The baseline: Spark Structured Streaming's stateful word count on the same corpus files.

Each configuration runs in its own process (``python -m bench.spark_ss ...``, called through
:func:`run_in_subprocess`), with a fresh checkpoint directory and the same ``local[2]`` master
and driver memory as our pipeline:

    spark.readStream.schema("value string").option("maxFilesPerTrigger", 1).parquet(files)
      .select(explode(split(value, " ")) AS word).groupBy("word").count()
      .writeStream.outputMode("update").trigger(availableNow=True)
      .foreachBatch(append the batch's updated (word, count) rows to Parquet)

so every corpus file is one micro-batch, and the output is what update mode emits (like our
``new_values``). The clock runs from ``query.start()`` to the end of ``awaitTermination()``;
the SparkSession (JVM start) is created before and reported separately. Per-batch latency is
``durationMs.triggerExecution`` of ``query.recentProgress``. The final counts are the latest
emitted count of each word (``arg_max(count, batch)`` over the sink, in DuckDB).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.machine import run_json_child

PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}


def _session(shuffle: int, provider: str, local_dir: Path) -> Any:
    from pyspark.sql import SparkSession

    conf = {
        "spark.master": "local[2]",
        "spark.driver.memory": "2g",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle),
        "spark.sql.streaming.stateStore.providerClass": PROVIDERS[provider],
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        "spark.sql.session.timeZone": "UTC",
        "spark.local.dir": str(local_dir),
        "spark.pyspark.python": sys.executable,
    }
    builder = SparkSession.builder.appName(f"spark_ss_wordcount_{provider}_{shuffle}")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_available_now(
    counts: Any, mode: str, checkpoint: Path, write: Callable[[Any, int], None]
) -> tuple[Any, float]:
    """Run streaming ``counts`` over every available file (``Trigger.AvailableNow``).

    Each micro-batch goes to ``write``; returns the finished query and its wall seconds
    (from ``start()`` to the end of ``awaitTermination()``).

    Raises:
        RuntimeError: the query failed.
    """
    start = time.perf_counter()
    query = (
        counts.writeStream.outputMode(mode)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .foreachBatch(write)
        .start()
    )
    query.awaitTermination()
    wall_s = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    return query, wall_s


def run_query(args: argparse.Namespace) -> dict[str, Any]:
    """Run the streaming word count over every file of ``args.files``; its measurements."""
    from pyspark.sql import functions as F

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    sink = work / "sink"
    t0 = time.perf_counter()
    spark = _session(args.shuffle, args.provider, work / "spark-local")
    startup_s = time.perf_counter() - t0

    def write(batch: Any, batch_id: int) -> None:
        batch.withColumn("batch", F.lit(batch_id)).write.mode("append").parquet(str(sink))

    lines = (
        spark.readStream.schema("value string")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(Path(args.files)))
    )
    counts = lines.select(F.explode(F.split("value", " ")).alias("word")).groupBy("word").count()
    query, wall_s = run_available_now(counts, "update", work / "checkpoint", write)
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    latencies = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    state_rows = progress[-1]["stateOperators"][0]["numRowsTotal"] if progress else 0
    spark.stop()
    result: dict[str, Any] = {
        "provider": args.provider,
        "shuffle_partitions": args.shuffle,
        "spark_startup_s": round(startup_s, 3),
        "wall_s": round(wall_s, 4),
        "micro_batches": len(progress),
        "sentences": sum(int(p["numInputRows"]) for p in progress),
        "batch_s": [round(t, 4) for t in latencies],
        "state_rows": state_rows,
    }
    if args.counts:
        result["state_keys"] = export_counts(sink, Path(args.counts))
    return result


def export_counts(sink: Path, out: Path) -> int:
    """The latest emitted count of every word, written as Parquet ``(word, count)``."""
    import duckdb
    import pyarrow.parquet as pq

    conn = duckdb.connect()
    try:
        table = conn.sql(
            "SELECT word, arg_max(count, batch) AS count FROM read_parquet(?) GROUP BY word",
            params=[str(sink / "*.parquet")],
        ).to_arrow_table()
    finally:
        conn.close()
    pq.write_table(table, out)
    return table.num_rows


def summarize(result: dict[str, Any], words_per_sentence: int) -> dict[str, Any]:
    """Add words/s and the median micro-batch latency."""
    out = dict(result)
    words = result["sentences"] * words_per_sentence
    out["words"] = words
    out["words_per_s"] = round(words / result["wall_s"])
    out["batch_median_s"] = round(statistics.median(result["batch_s"]), 4)
    out["per_batch_s"] = round(result["wall_s"] / max(1, result["micro_batches"]), 4)
    return out


def run_in_subprocess(
    files: Path,
    work: Path,
    *,
    provider: str,
    shuffle: int,
    counts: Path | None = None,
    timeout_s: float = 3600,
) -> dict[str, Any]:
    """Run one configuration in a new process; its JSON result."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / "result.json"
    cmd = [
        sys.executable, "-m", "bench.spark_ss",
        "--files", str(files),
        "--work", str(work),
        "--provider", provider,
        "--shuffle", str(shuffle),
        "--out", str(out),
    ]  # fmt: skip
    if counts is not None:
        cmd += ["--counts", str(counts)]
    return run_json_child(cmd, out, f"bench.spark_ss {provider}/{shuffle}", timeout_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", required=True, help="directory of one Parquet file per batch")
    parser.add_argument("--work", required=True, help="checkpoint, sink and result directory")
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="hdfs")
    parser.add_argument("--shuffle", type=int, default=2, help="spark.sql.shuffle.partitions")
    parser.add_argument("--counts", default=None, help="write the final counts here (Parquet)")
    parser.add_argument("--out", required=True, help="result JSON")
    args = parser.parse_args(argv)
    result = run_query(args)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

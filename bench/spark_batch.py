"""The limit while our pipeline runs on Spark: a plain Spark batch job over the same log files.

No state, no Dagster, no txid tags: the corpus is read from the embedded log's segment files
(the very files our spout reads), in jobs of ``chunk`` consecutive corpus batches (our
``max_spout_pending``, so each job is as big as one of our chunks), each job

    spark.read.parquet(the chunk's segment files).select(value)
      .select(explode(split(cast(value as string), " ")) AS word)
      .groupBy("word").count().toArrow()

and the per-chunk counts are added up in Arrow at the end (outside the clock) for the exact
comparison with the ground truth. Same ``local[2]`` master, driver memory and shuffle
partitions as our pipeline. Runs in its own process (:func:`run_in_subprocess`); the
SparkSession (JVM start) is created before the clock and reported separately.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import run_json_child

__all__ = ["batch_files", "run_in_subprocess", "run_jobs", "summarize"]


def batch_files(
    log_root: Path, topic: str, sentences: int, partitions: int, batch: int
) -> list[str]:
    """The segment files holding corpus ``batch`` (as :mod:`bench.corpus` split it)."""
    from trident_assets.log.store import PartitionedLog

    log = PartitionedLog(log_root)
    sizes = [len(a) for a in np.array_split(np.arange(sentences), partitions)]
    files: list[str] = []
    for p, n in enumerate(sizes):
        if n:
            files += log.segment_files(topic, p, batch * n, (batch + 1) * n - 1)
    return files


def _session(shuffle: int, local_dir: Path) -> Any:
    from trident_assets.spark.session import build_spark_session

    return build_spark_session(
        {
            "spark.app.name": "spark_batch_wordcount",
            "spark.sql.shuffle.partitions": str(shuffle),
            "spark.local.dir": str(local_dir),
        }
    )


def count_job(spark: Any, files: list[str]) -> Any:
    """The DataFrame of one job: decode, split, count per word."""
    from pyspark.sql import functions as F

    raw = spark.read.schema("value binary").parquet(*["file://" + f for f in files])
    words = raw.select(F.explode(F.split(F.col("value").cast("string"), " ")).alias("word"))
    return words.groupBy("word").count()


def run_jobs(args: argparse.Namespace) -> dict[str, Any]:
    """Run the word count over every corpus batch, ``args.chunk`` batches per job."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.corpus import TOPIC

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    spark = _session(args.shuffle, work / "spark-local")
    startup_s = time.perf_counter() - t0
    chunks = [
        list(range(first, min(first + args.chunk, args.batches)))
        for first in range(0, args.batches, args.chunk)
    ]
    tables: list[pa.Table] = []
    job_s: list[float] = []
    start = time.perf_counter()
    for chunk in chunks:
        t = time.perf_counter()
        files = [
            f
            for b in chunk
            for f in batch_files(Path(args.log), TOPIC, args.sentences, args.partitions, b)
        ]
        tables.append(count_job(spark, files).toArrow())
        job_s.append(time.perf_counter() - t)
    wall_s = time.perf_counter() - start
    spark.stop()
    result: dict[str, Any] = {
        "chunk": args.chunk,
        "shuffle_partitions": args.shuffle,
        "spark_startup_s": round(startup_s, 3),
        "wall_s": round(wall_s, 4),
        "jobs": len(chunks),
        "batches": args.batches,
        "sentences": args.sentences * args.batches,
        "job_s": [round(s, 4) for s in job_s],
    }
    if args.counts:
        total = pa.concat_tables(tables).group_by("word").aggregate([("count", "sum")])
        counts = total.rename_columns(["word", "count"])
        pq.write_table(counts, args.counts)
        result["state_keys"] = counts.num_rows
    return result


def summarize(result: dict[str, Any], words_per_sentence: int) -> dict[str, Any]:
    """Add words/s and seconds per corpus batch (a job's time / its batches, median)."""
    out = dict(result)
    words = result["sentences"] * words_per_sentence
    out["words"] = words
    out["words_per_s"] = round(words / result["wall_s"])
    out["per_batch_s"] = round(result["wall_s"] / result["batches"], 4)
    out["batch_median_s"] = round(statistics.median(result["job_s"]) / result["chunk"], 4)
    return out


def run_in_subprocess(
    log_root: Path,
    work: Path,
    *,
    sentences: int,
    batches: int,
    partitions: int,
    chunk: int = 10,
    shuffle: int = 4,
    counts: Path | None = None,
    timeout_s: float = 3600,
) -> dict[str, Any]:
    """Run :func:`run_jobs` in a new process; its JSON result."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / "result.json"
    cmd = [
        sys.executable, "-m", "bench.spark_batch",
        "--log", str(log_root),
        "--work", str(work),
        "--sentences", str(sentences),
        "--batches", str(batches),
        "--partitions", str(partitions),
        "--chunk", str(chunk),
        "--shuffle", str(shuffle),
        "--out", str(out),
    ]  # fmt: skip
    if counts is not None:
        cmd += ["--counts", str(counts)]
    return run_json_child(cmd, out, "bench.spark_batch", timeout_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", required=True, help="the corpus log root (holds the topic)")
    parser.add_argument("--work", required=True, help="Spark local dir and result")
    parser.add_argument("--sentences", type=int, required=True, help="sentences per batch")
    parser.add_argument("--batches", type=int, required=True)
    parser.add_argument("--partitions", type=int, required=True, help="log partitions")
    parser.add_argument("--chunk", type=int, default=10, help="corpus batches per Spark job")
    parser.add_argument("--shuffle", type=int, default=4, help="spark.sql.shuffle.partitions")
    parser.add_argument("--counts", default=None, help="write the final counts here (Parquet)")
    parser.add_argument("--out", required=True, help="result JSON")
    args = parser.parse_args(argv)
    result = run_jobs(args)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

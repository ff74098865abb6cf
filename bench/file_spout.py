"""Catch-up from a folder of files: our FileSpout against Spark Structured Streaming's file source.

The same corpus (:mod:`bench.corpus`: ``--files`` files of ``--sentences`` sentences) is
written twice, as JSON lines (``{"text": "w1 w2 ..."}`` per line) and as Parquet (column
``value``), with distinct increasing modification times. For each format, side by side in
one run, each in its own process with a fresh JVM (``local[2]``, 2 GiB driver, 2 shuffle
partitions for both):

* ours: ``FileSpout(folder, JsonScheme | ParquetScheme, max_files=K)`` -> ``Split`` ->
  ``group_by(word).persistent_aggregate(Count)`` (opaque DuckDB state), every txid run by
  ``TopologyRunner.run_batches`` until no file waits. JSON lines are decoded by the lenient
  ``JsonScheme(strict=False)``, which reads as Spark's JSON reader does (``--strict``: the
  RFC 8259 checks of the default scheme, which Spark SS does not make);
* Spark SS: ``readStream.option("maxFilesPerTrigger", K).json | .parquet(folder)`` ->
  ``explode(split)`` -> ``groupBy(word).count()``, update mode, ``Trigger.AvailableNow``,
  each micro-batch's rows appended to Parquet (as :mod:`bench.spark_ss`).

The clock runs from the first txid (``query.start()``) to the last commit (the end of
``awaitTermination()``); JVM start is excluded from both. Both final counts are compared
exactly with the ground truth; the report gives words/s and ours/SS per format.

Run (the full run; ``--files 8 --sentences 20000`` proves the counts in a minute)::

    python -m bench.file_spout --work /tmp/bench_file_spout --files 40 --sentences 250000 \\
        --max-files 4
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.corpus import CorpusSpec, truth_table, word_ids, zipf_cdf
from bench.corpus import sentences as sentence_array
from bench.machine import describe, one_line, run_json_child

FORMATS = ("json", "parquet")
SHUFFLE = 2


def write_folders(spec: CorpusSpec, root: Path) -> tuple[dict[str, Path], pa.Table]:
    """The corpus as ``root/json/*.jsonl`` and ``root/parquet/*.parquet``; its truth."""
    import numpy as np

    folders = {fmt: root / fmt for fmt in FORMATS}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    cdf = zipf_cdf(spec)
    counts = np.zeros(spec.vocab, dtype=np.int64)
    mtime0 = int(time.time()) - spec.batches - 60
    for i in range(spec.batches):
        ids = word_ids(spec, i, cdf)
        counts += np.bincount(ids.ravel(), minlength=spec.vocab)
        text = sentence_array(ids)
        lines = pc.binary_join_element_wise('{"text": "', text, '"}', "")
        jsonl = folders["json"] / f"batch-{i:05d}.jsonl"
        jsonl.write_bytes(("\n".join(lines.to_pylist()) + "\n").encode())
        parquet = folders["parquet"] / f"batch-{i:05d}.parquet"
        pq.write_table(pa.table({"value": text}), parquet, compression="zstd")
        for path in (jsonl, parquet):
            os.utime(path, (mtime0 + i, mtime0 + i))
    return folders, truth_table(counts)


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    """Our catch-up over ``args.folder``; its measurements (child process)."""
    from trident_assets import Count
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.spark.file_schemes import ParquetScheme
    from trident_assets.spark.schemes import JsonScheme
    from trident_assets.spark.session import build_spark_session
    from trident_assets.spouts.file_spout import FileSpout
    from trident_assets.stream.operations import Split
    from trident_assets.stream.topology import StateSpec, TridentTopology

    work = Path(args.work)
    t0 = time.perf_counter()
    spark = build_spark_session({"spark.sql.shuffle.partitions": str(SHUFFLE)})
    startup_s = time.perf_counter() - t0
    field = "text" if args.format == "json" else "value"
    if args.format == "parquet":
        scheme: Any = ParquetScheme({field: "string"})
    else:  # lenient unless --strict: what Spark's JSON reader does (see the module docstring)
        scheme = JsonScheme({field: "string"}, strict=args.strict)
    spout = FileSpout(args.folder, scheme, max_files=args.max_files, stable_after=0)
    topo = TridentTopology("files_wc")
    counts = (
        topo.new_stream("files", spout)
        .each(field, Split(), "word")
        .group_by("word")
        .persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "count")
    )
    store = DuckDBStore(work / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, PartitionedLog(work / "log"))
    files = len(list(Path(args.folder).iterdir()))
    txids = math.ceil(files / args.max_files)
    start = time.perf_counter()
    batch_s = []
    last = start
    dead = 0
    for outcome in runner.run_batches(range(1, txids + 1)):
        now = time.perf_counter()
        batch_s.append(round(now - last, 4))
        last = now
        dead += outcome.dead_letters
    wall_s = time.perf_counter() - start
    waiting = runner.backlog()
    table = store.scan(counts.table).rename_columns(["word", "count"])
    pq.write_table(table, args.counts)
    store.close()
    spark.stop()
    return {
        "spark_startup_s": round(startup_s, 3),
        "wall_s": round(wall_s, 4),
        "txids": txids,
        "batch_s": batch_s,
        "files_waiting_after": waiting,
        "dead_letters": dead,
    }


def run_ss(args: argparse.Namespace) -> dict[str, Any]:
    """Spark SS's file source over ``args.folder``; its measurements (child process)."""
    from pyspark.sql import functions as F

    from bench.spark_ss import _session, export_counts, run_available_now

    work = Path(args.work)
    sink = work / "sink"
    t0 = time.perf_counter()
    spark = _session(SHUFFLE, "hdfs", work / "spark-local")
    startup_s = time.perf_counter() - t0

    def write(batch: Any, batch_id: int) -> None:
        batch.withColumn("batch", F.lit(batch_id)).write.mode("append").parquet(str(sink))

    reader = spark.readStream.option("maxFilesPerTrigger", args.max_files)
    if args.format == "json":
        lines = reader.schema("text string").json(args.folder).select(F.col("text").alias("v"))
    else:
        lines = reader.schema("value string").parquet(args.folder).select(F.col("value").alias("v"))
    counts = lines.select(F.explode(F.split("v", " ")).alias("word")).groupBy("word").count()
    query, wall_s = run_available_now(counts, "update", work / "checkpoint", write)
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    spark.stop()
    export_counts(sink, Path(args.counts))
    return {
        "spark_startup_s": round(startup_s, 3),
        "wall_s": round(wall_s, 4),
        "micro_batches": len(progress),
        "batch_s": [round(p["durationMs"]["triggerExecution"] / 1000, 4) for p in progress],
    }


def _child(
    engine: str, fmt: str, folder: Path, work: Path, max_files: int, strict: bool
) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    out = work / "result.json"
    cmd = [
        sys.executable, "-m", "bench.file_spout", "child",
        "--engine", engine, "--format", fmt, "--folder", str(folder),
        "--work", str(work), "--max-files", str(max_files),
        "--counts", str(work / "counts.parquet"), "--out", str(out),
    ]  # fmt: skip
    if strict:
        cmd.append("--strict")
    result = run_json_child(cmd, out, f"bench.file_spout {engine}/{fmt}", 3600)
    result["counts"] = str(work / "counts.parquet")
    return result


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Write the corpus, run both engines per format, compare counts; the report."""
    from bench.run_all import ratio, verify

    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    spec = CorpusSpec(batches=args.files, sentences=args.sentences)
    folders, truth = write_folders(spec, work / "corpus")
    report: dict[str, Any] = {
        "machine": describe(),
        "corpus": {**spec.as_dict(), "files": args.files, "max_files": args.max_files},
        "json_scheme": "strict" if args.strict else "lenient",
        "formats": {},
    }
    for fmt in FORMATS:
        row: dict[str, Any] = {}
        for engine in ("ours", "spark_ss"):
            result = _child(
                engine, fmt, folders[fmt], work / f"{engine}-{fmt}", args.max_files, args.strict
            )
            result["exact"] = verify(truth, pq.read_table(result.pop("counts")))
            result["words_per_s"] = round(spec.total_words / result["wall_s"])
            row[engine] = result
        row["ours_over_ss"] = ratio(row["ours"]["words_per_s"], row["spark_ss"]["words_per_s"])
        report["formats"][fmt] = row
    return report


def render(report: dict[str, Any]) -> str:
    """The report as a short Markdown table."""
    lines = [
        one_line(report["machine"]),
        f"corpus: {report['corpus']['total_words']:,} words in {report['corpus']['files']} "
        f"files, max_files = maxFilesPerTrigger = {report['corpus']['max_files']}",
        "",
        "| format | ours words/s | Spark SS words/s | ours/SS | ours exact | SS exact |",
        "|---|---|---|---|---|---|",
    ]
    for fmt, row in report["formats"].items():
        ours, ss = row["ours"], row["spark_ss"]
        lines.append(
            f"| {fmt} | {ours['words_per_s']:,} | {ss['words_per_s']:,} | "
            f"{row['ours_over_ss']}x | {ours['exact']['identical']} | {ss['exact']['identical']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    child = sub.add_parser("child", help="one engine over one folder (internal)")
    child.add_argument("--engine", choices=("ours", "spark_ss"), required=True)
    child.add_argument("--format", choices=FORMATS, required=True)
    child.add_argument("--folder", required=True)
    child.add_argument("--work", required=True)
    child.add_argument("--max-files", type=int, required=True)
    child.add_argument("--counts", required=True)
    child.add_argument("--strict", action="store_true")
    child.add_argument("--out", required=True)
    parser.add_argument("--work", default="/tmp/bench_file_spout")
    parser.add_argument("--files", type=int, default=40, help="corpus files per format")
    parser.add_argument("--sentences", type=int, default=250_000, help="sentences per file")
    parser.add_argument("--max-files", type=int, default=4, help="files per txid / trigger")
    parser.add_argument("--out", default=None, help="write the report JSON here")
    parser.add_argument(
        "--strict", action="store_true", help="our JSON lines decoded by the strict JsonScheme"
    )
    args = parser.parse_args(argv)
    if args.command == "child":
        result = run_ours(args) if args.engine == "ours" else run_ss(args)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        return
    report = run(args)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(render(report))


if __name__ == "__main__":
    main()

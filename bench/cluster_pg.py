"""End to end: word count on a standalone Spark cluster with PostgreSQL state vs local + DuckDB.

Run: ``python -m bench.cluster_pg [--batches 6] [--sentences 200000] [--vocab 100000]
[--root DIR]``.

One corpus (``bench.corpus``, the embedded log) is read by the example word count
(:func:`bench.pipeline.build_topology`, one corpus batch per txid) twice, each run in a
process of its own, one after the other:

* **local + DuckDB**: ``local[2]`` Spark, state in ``<root>/state.duckdb`` (the default);
* **cluster + PostgreSQL**: a standalone master and one worker on 127.0.0.1 (2 cores, 2 GB,
  started from the pip distribution by :func:`~trident_assets.spark.local_servers
  .start_standalone`), the driver a client of it; state in a PostgreSQL server started for
  the run (``initdb``/``pg_ctl``, fsync on, default settings).

Both runs commit every txid through :meth:`TopologyRunner.run_batches` (pipelined, as a
catch-up run does); the clock starts after the SparkSession and the store are open. Both final
states are compared key by key with the corpus's ground truth. On one 2-core machine the
cluster's executors, the driver and PostgreSQL share the cores, so the ratio is the cost of the
deployment's moving parts (network shuffle to a separate executor JVM, the server database),
not a scale-out figure. Results: ``bench/results/cluster_pg.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    """One configuration: run every txid, export the state, return the timings (JSON)."""
    import pyarrow.parquet as pq

    from bench.pipeline import build_topology
    from trident_assets.backends.state_store import open_state_store
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.spark.session import build_spark_session

    root = Path(args.root)
    conf = {"spark.local.dir": str(root / f"spark-{args.mode}")}
    if args.master:
        conf |= {"spark.master": args.master, "spark.executor.memory": "1g"}
    started = time.perf_counter()
    spark = build_spark_session(conf)
    store = open_state_store(args.location)
    ready_s = time.perf_counter() - started
    runner = TopologyRunner(
        build_topology("example", args.sentences), spark, store, PartitionedLog(root / "log")
    )
    clock = time.perf_counter()
    per_txid = []
    for outcome in runner.run_batches(range(1, args.batches + 1)):
        assert outcome.applied, outcome.txid
        per_txid.append({"txid": outcome.txid, **outcome.timings_s})
    elapsed = time.perf_counter() - clock
    state = store.scan("word_count__word_counts", "count")
    pq.write_table(state, root / f"counts-{args.mode}.parquet")
    store.close()
    spark.stop()
    return {"mode": args.mode, "ready_s": ready_s, "elapsed_s": elapsed, "per_txid": per_txid}


def _child(root: Path, mode: str, location: str, args: argparse.Namespace, master: str) -> Any:
    argv = [
        sys.executable, "-m", "bench.cluster_pg", "child", "--root", str(root), "--mode", mode,
        "--location", location, "--batches", str(args.batches),
        "--sentences", str(args.sentences), "--master", master,
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        argv, capture_output=True, text=True, check=False, env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"{mode} run failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _exact(truth: Any, counts_path: Path) -> bool:
    import pyarrow.parquet as pq

    from bench.run_all import verify

    return bool(verify(truth, pq.read_table(counts_path))["identical"])


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Run both configurations on one corpus and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", nargs="?", default="driver", choices=("driver", "child"))
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--sentences", type=int, default=200_000, help="sentences per batch")
    parser.add_argument("--vocab", type=int, default=100_000)
    parser.add_argument("--root", type=Path, help="working directory (default: a temp dir)")
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--location", help=argparse.SUPPRESS)
    parser.add_argument("--master", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role == "child":
        print(json.dumps(run_child(args)))
        return None

    from bench.corpus import CorpusSpec, write_corpus
    from trident_assets.backends.postgres_server import local_postgres
    from trident_assets.spark.local_servers import start_standalone

    root = args.root or Path(tempfile.mkdtemp(prefix="cluster-pg-"))
    root.mkdir(parents=True, exist_ok=True)
    spec = CorpusSpec(batches=args.batches, sentences=args.sentences, vocab=args.vocab)
    corpus = write_corpus(spec, root, parquet_files=False)
    truth = corpus.truth
    load = os.getloadavg()[0]
    local = _child(root, "local", str(root / "state.duckdb"), args, "")
    cluster_run: dict[str, Any]
    with local_postgres(durable=True) as pg:
        cluster = start_standalone(root / "cluster")
        try:
            cluster_run = _child(root, "cluster", pg.dsn, args, cluster.url)
        finally:
            cluster.stop()
    words = spec.total_words
    rows = []
    for run, label in ((local, "local[2] + DuckDB"), (cluster_run, "standalone + PostgreSQL")):
        commit = sorted(t.get("commit", 0.0) for t in run["per_txid"])
        rows.append(
            {
                "configuration": label,
                "words_per_s": words / run["elapsed_s"],
                "elapsed_s": round(run["elapsed_s"], 2),
                "commit_s_median": round(commit[len(commit) // 2], 3),
                "exact": _exact(truth, root / f"counts-{run['mode']}.parquet"),
            }
        )
    report = {
        "corpus": spec.as_dict(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_avg_before": load,
        "load_avg_after": os.getloadavg()[0],
        "rows": rows,
        "cluster_vs_local": rows[1]["words_per_s"] / rows[0]["words_per_s"],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cluster_pg.json").write_text(json.dumps(report, indent=2))
    lines = [
        f"# End to end: cluster + PostgreSQL vs local + DuckDB ({words:,} words, "
        f"{args.batches} txids)",
        "",
        "| configuration | words/s | elapsed s | commit s (median) | exact |",
        "|---|---:|---:|---:|---|",
        *(
            f"| {r['configuration']} | {r['words_per_s'] / 1e6:.2f}M | {r['elapsed_s']} | "
            f"{r['commit_s_median']} | {r['exact']} |"
            for r in rows
        ),
        "",
        f"cluster + PostgreSQL / local + DuckDB: {report['cluster_vs_local']:.2f}x; load "
        f"average {load:.1f} before, {report['load_avg_after']:.1f} after",
    ]
    (RESULTS / "cluster_pg.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    if not all(r["exact"] for r in rows):
        raise SystemExit(1)
    return report


if __name__ == "__main__":
    main()

"""Our side of the benchmark: the example word count (opaque DuckDB state) driven through Dagster.

Every measurement runs in its own process (``python -m bench.pipeline run ...``) so that no
other JVM or DuckDB file competes with it; :func:`run_in_subprocess` is how ``bench.run_all``
calls it. The topology is :func:`trident_assets.examples.word_count.build_word_count` with
``max_batch_size`` = one corpus batch, so txid ``i`` is exactly corpus batch ``i - 1``.

Modes:

* ``catchup``: ONE Dagster run over all txids (a partition range; the asset commits every txid
  separately and in order, one materialization per txid);
* ``per_run``: one Dagster run per txid, in this process (the SparkSession is reused);
* ``fresh`` (:func:`run_fresh`): one Dagster run per txid, each in a NEW Python process, as a
  run launcher started by ``dagster dev`` would; Spark is a Spark Connect server started once,
  reached through ``TridentResource.spark_remote``.

The SparkSession (JVM start) is created before the clock starts and reported separately, as
for Spark Structured Streaming. Per-txid stage timings (emit, spark, commit, total) come from
the materialization metadata that ``TopologyRunner.run_batch`` timings feed. The final state is
exported as Parquet ``(word, count)`` for the exact comparison with the ground truth.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.machine import run_json_child

STATE_TABLE = "word_count__word_counts"
SPOUT_ASSET = ("word_count", "sentences_batch")


def _instance(path: Path) -> Any:
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    path.mkdir(parents=True, exist_ok=True)
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(path)))


def _trident(
    home: Path,
    state_db: Path,
    spark_remote: str | None,
    shuffle: int | None,
    arrow_kernel: bool = True,
    spill: bool = False,
    state_dsn: str | None = None,
) -> Any:
    from trident_assets.dagster.resources import TridentResource
    from trident_assets.spark.kernel_plan import ARROW_KERNEL_CONF
    from trident_assets.spark.spilled import SPILL_CONF

    conf = {} if shuffle is None or spark_remote else {"spark.sql.shuffle.partitions": str(shuffle)}
    if not arrow_kernel:
        conf[ARROW_KERNEL_CONF] = "false"
    if spill:
        conf[SPILL_CONF] = "true"
    return TridentResource(
        home=str(home),
        state_database=str(state_db),
        state_dsn=state_dsn,
        spark_remote=spark_remote,
        spark_conf=conf,
    )


def drive(
    topo: Any,
    trident: Any,
    instance: Any,
    txids: Sequence[int],
    *,
    catch_up: bool,
    exactly_once_check: bool = False,
    full_every: int | None = None,
) -> list[float]:
    """Materialize ``txids`` (one run, or one run per txid); wall seconds of each run.

    Runs go through :func:`trident_assets.dagster.runs.materialize_batches`, the job resolved
    once. The ``exactly_once`` asset check is off unless ``exactly_once_check`` (a full
    evaluation recomputes the whole state from the log; ``full_every`` is its
    ``CheckSettings.full_every``, default the shipped one); the other checks run.

    Raises:
        RuntimeError: a run failed.
    """
    from trident_assets.dagster.checks import CheckSettings
    from trident_assets.dagster.factory import trident_definitions
    from trident_assets.dagster.runs import materialize_batches

    checks = (
        CheckSettings(exactly_once=exactly_once_check)
        if full_every is None
        else CheckSettings(exactly_once=exactly_once_check, full_every=full_every)
    )
    defs = trident_definitions([topo], trident, checks=checks)
    job = defs.resolve_implicit_global_asset_job_def()
    walls: list[float] = []
    groups = [list(txids)] if catch_up else [[t] for t in txids]
    for group in groups:
        start = time.perf_counter()
        results = materialize_batches(
            topo, trident, instance, group, catch_up=catch_up, checks=checks, job=job
        )
        walls.append(time.perf_counter() - start)
        if not all(r.success for r in results):
            raise RuntimeError(f"Dagster run for txids {group[0]}..{group[-1]} failed")
    return walls


def batch_timings(instance: Any, limit: int) -> dict[int, dict[str, float]]:
    """Stage timings of each committed txid, from the spout asset's materializations."""
    import dagster as dg

    records = instance.fetch_materializations(dg.AssetKey(list(SPOUT_ASSET)), limit=limit).records
    out: dict[int, dict[str, float]] = {}
    for record in records:
        mat = record.asset_materialization
        if mat is None or "txid" not in mat.metadata or mat.metadata["already_committed"].value:
            continue
        meta = mat.metadata
        txid = int(meta["txid"].value)
        out[txid] = {
            k[:-2]: float(meta[k].value)
            for k in ("emit_s", "spark_s", "commit_s", "total_s")
            if k in meta
        }
        out[txid]["tuples_in"] = float(meta["tuples_in"].value)
        out[txid]["at"] = float(record.timestamp)
    return out


def export_counts(state_db: Path, out: Path, state_dsn: str | None = None) -> int:
    """Write the committed state as Parquet ``(word, count)``; return its size.

    ``state_dsn``: the state is in this PostgreSQL database, not in ``state_db``.
    """
    import pyarrow.parquet as pq

    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.backends.state_store import open_state_store

    with open_state_store(state_dsn) if state_dsn else DuckDBStore(state_db) as store:
        table = store.scan(STATE_TABLE, value_name="count")
    pq.write_table(table.select(["word", "count"]), out)
    return table.num_rows


def build_topology(kind: str, sentences: int, state: Any = None) -> Any:
    """``example``: the example word count (with its DRPC query stream); ``count_only``: the
    same sentences -> split -> group_by(word) -> opaque Count state, without the query stream
    (what Spark Structured Streaming's ``groupBy(word).count()`` computes).

    ``state``: the counts' ``StateSpec`` (default: opaque ``word_counts`` in the store).
    """
    from trident_assets.core.aggregators import Count
    from trident_assets.examples.word_count import build_word_count
    from trident_assets.spark.schemes import StringScheme
    from trident_assets.spouts.config import SpoutConfig
    from trident_assets.spouts.log_spout import LogSpout
    from trident_assets.stream.operations import Split
    from trident_assets.stream.topology import StateSpec, TridentTopology

    if kind == "example":
        return build_word_count(max_batch_size=sentences, state=state)
    if kind != "count_only":
        raise ValueError(f"unknown topology {kind!r}")
    topo = TridentTopology("word_count")
    spout = LogSpout("sentences", StringScheme("sentence"), SpoutConfig(max_batch_size=sentences))
    (
        topo.new_stream("sentences", spout)
        .each("sentence", Split(), "word")
        .group_by("word")
        .persistent_aggregate(state or StateSpec.opaque("word_counts"), "word", Count(), "count")
    )
    return topo


def _summary(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def run_mode(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement in this process: catch-up, per-run or a single txid (fresh mode)."""
    work = Path(args.work)
    trident = _trident(
        Path(args.corpus),
        work / "state.duckdb",
        args.spark_remote,
        args.shuffle_partitions,
        arrow_kernel=not args.no_arrow_kernel,
        spill=args.spill,
        state_dsn=args.state_dsn,
    )
    spec = None
    if args.kv_store:
        from bench.kv_bench import state_spec

        spec = state_spec(args.kv_store, args.kv_servers.split(","))
    topo = build_topology(args.topology, args.sentences, spec)
    instance = _instance(work / "dagster")
    t0 = time.perf_counter()
    spark = trident.spark()
    startup_s = time.perf_counter() - t0
    txids = list(range(args.first_txid, args.first_txid + args.batches))
    start = time.perf_counter()
    walls = drive(
        topo,
        trident,
        instance,
        txids,
        catch_up=args.mode == "catchup",
        exactly_once_check=args.exactly_once_check,
        full_every=args.full_every,
    )
    wall_s = time.perf_counter() - start
    stages = batch_timings(instance, limit=len(txids) + 10)
    result: dict[str, Any] = {
        "mode": args.mode,
        "topology": args.topology,
        "exactly_once_check": args.exactly_once_check,
        "txids": [txids[0], txids[-1]],
        "spark": "connect " + args.spark_remote
        if args.spark_remote
        else spark.conf.get("spark.master"),
        "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
        "arrow_kernel": not args.no_arrow_kernel,
        "spill": args.spill,
        "state": args.kv_store or ("postgres" if args.state_dsn else "duckdb"),
        "spark_startup_s": round(startup_s, 3),
        "wall_s": round(wall_s, 4),
        "run_walls_s": [round(w, 4) for w in walls],
        "batches": {
            str(t): {k: v if k == "at" else round(v, 4) for k, v in stages[t].items()}
            for t in txids
            if t in stages
        },
    }
    missing = [t for t in txids if t not in stages]
    if missing:
        raise RuntimeError(f"no committed materialization for txids {missing}")
    tuples = sum(stages[t]["tuples_in"] for t in txids)
    if tuples != args.sentences * args.batches:
        raise RuntimeError(f"read {tuples} sentences, expected {args.sentences * args.batches}")
    if args.counts and not args.kv_store:  # a key-value state is read by the caller
        result["state_keys"] = export_counts(
            work / "state.duckdb", Path(args.counts), args.state_dsn
        )
    return result


def summarize(result: dict[str, Any], words_per_batch: int) -> dict[str, Any]:
    """Add words/s and median latencies to a :func:`run_mode` result."""
    per = result["batches"].values()
    n = len(result["batches"])
    totals = [b["total"] for b in per]
    out = dict(result)
    out["words"] = n * words_per_batch
    out["words_per_s"] = round(n * words_per_batch / result["wall_s"])
    out["batch_total_s"] = _summary(totals)
    out["stage_median_s"] = {
        k: round(statistics.median(b[k] for b in per), 4) for k in ("emit", "spark", "commit")
    }
    # seconds per batch as seen from outside: the run wall / batches (catch-up) or run walls
    if result["mode"] == "catchup":
        out["per_batch_s"] = round(result["wall_s"] / n, 4)
        # inside one run: the time between consecutive txids' materializations
        at = [result["batches"][k]["at"] for k in sorted(result["batches"], key=int)]
        gaps = [b - a for a, b in itertools.pairwise(at)]
        out["in_run_batch_s"] = _summary(gaps) if gaps else None
        # txids share Spark jobs that overlap earlier commits (max spout pending): the wall
        # no longer splits into per-txid parts, so there is no "outside" figure
        out["outside_batches_s"] = None
    else:
        out["per_batch_s"] = round(statistics.median(result["run_walls_s"]), 4)
        out["outside_batches_s"] = round(
            statistics.median(
                w - b["total"] for w, b in zip(result["run_walls_s"], per, strict=True)
            ),
            4,
        )
    return out


def run_in_subprocess(
    corpus_root: Path,
    work: Path,
    *,
    mode: str,
    sentences: int,
    batches: int,
    first_txid: int = 1,
    counts: Path | None = None,
    spark_remote: str | None = None,
    shuffle_partitions: int | None = None,
    topology: str = "example",
    timeout_s: float = 3600,
    arrow_kernel: bool = True,
    spill: bool = False,
    state_dsn: str | None = None,
    kv_store: str | None = None,
    kv_servers: Sequence[str] = (),
) -> dict[str, Any]:
    """Run :func:`run_mode` in a new Python process; its JSON result.

    ``state_dsn``: the state in this PostgreSQL database; ``kv_store``/``kv_servers``: the
    counts in this key-value store (:mod:`bench.kv_bench`), the marker in the DuckDB file.
    """
    work.mkdir(parents=True, exist_ok=True)
    out = work / f"result-{mode}-{first_txid}.json"
    cmd = [
        sys.executable, "-m", "bench.pipeline", "run",
        "--mode", mode,
        "--corpus", str(corpus_root),
        "--work", str(work),
        "--sentences", str(sentences),
        "--batches", str(batches),
        "--first-txid", str(first_txid),
        "--topology", topology,
        "--out", str(out),
    ]  # fmt: skip
    if counts is not None:
        cmd += ["--counts", str(counts)]
    if spark_remote:
        cmd += ["--spark-remote", spark_remote]
    if shuffle_partitions:
        cmd += ["--shuffle-partitions", str(shuffle_partitions)]
    if not arrow_kernel:
        cmd += ["--no-arrow-kernel"]
    if spill:
        cmd += ["--spill"]
    if state_dsn:
        cmd += ["--state-dsn", state_dsn]
    if kv_store:
        cmd += ["--kv-store", kv_store, "--kv-servers", ",".join(kv_servers)]
    return run_json_child(cmd, out, f"bench.pipeline {mode}", timeout_s)


# -- fresh process per run, Spark through a Spark Connect server --------------------------------


def run_fresh(
    corpus_root: Path, work: Path, *, sentences: int, batches: int, words_per_batch: int
) -> dict[str, Any]:
    """One Dagster run per txid, each in a new process, against one Spark Connect server."""
    work.mkdir(parents=True, exist_ok=True)
    from trident_assets.spark.local_servers import start_connect_server

    server = start_connect_server(
        work / "connect-server.log",
        conf={"spark.sql.shuffle.partitions": "2", "spark.sql.adaptive.enabled": "true"},
    )
    url, up_s = server.url, server.started_s
    try:
        walls: list[float] = []
        results: list[dict[str, Any]] = []
        for txid in range(1, batches + 1):
            start = time.perf_counter()
            results.append(
                run_in_subprocess(
                    corpus_root,
                    work,
                    mode="fresh",
                    sentences=sentences,
                    batches=1,
                    first_txid=txid,
                    spark_remote=url,
                )
            )
            walls.append(time.perf_counter() - start)
    finally:
        server.stop()
    totals = [r["batches"][str(i + 1)]["total"] for i, r in enumerate(results)]
    return {
        "mode": "fresh",
        "spark": f"Spark Connect server (local[2]) at {url}",
        "connect_server_start_s": round(up_s, 2),
        "process_walls_s": [round(w, 3) for w in walls],
        "per_batch_s": round(statistics.median(walls), 4),
        "connect_session_s": _summary([r["spark_startup_s"] for r in results]),
        "run_wall_s": _summary([r["run_walls_s"][0] for r in results]),
        "batch_total_s": _summary(totals),
        "words": batches * words_per_batch,
        "words_per_s": round(batches * words_per_batch / sum(walls)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="one measurement in this process")
    run.add_argument("--mode", choices=["catchup", "per_run", "fresh"], required=True)
    run.add_argument("--corpus", required=True, help="corpus root (holds log/)")
    run.add_argument("--work", required=True, help="state, Dagster instance, result")
    run.add_argument("--sentences", type=int, required=True, help="sentences per batch")
    run.add_argument("--batches", type=int, required=True)
    run.add_argument("--first-txid", type=int, default=1)
    run.add_argument("--topology", choices=["example", "count_only"], default="example")
    run.add_argument("--counts", default=None, help="write the final state here (Parquet)")
    run.add_argument("--spark-remote", default=None)
    run.add_argument("--shuffle-partitions", type=int, default=None)
    run.add_argument(
        "--exactly-once-check", action="store_true", help="also run the exactly_once asset check"
    )
    run.add_argument(
        "--full-every",
        type=int,
        default=None,
        help="CheckSettings.full_every of the exactly_once check (1: always full)",
    )
    run.add_argument(
        "--no-arrow-kernel",
        action="store_true",
        help="Spark's own operators for the partials (trident.partials.arrowKernel=false)",
    )
    run.add_argument(
        "--spill",
        action="store_true",
        help="the executors write the partials for the store (trident.partials.spill=true)",
    )
    run.add_argument("--state-dsn", default=None, help="keep the state in this PostgreSQL db")
    run.add_argument(
        "--kv-store",
        choices=["redis-cluster", "memcached"],
        default=None,
        help="keep the counts in this key-value store (with --kv-servers host:port,...)",
    )
    run.add_argument("--kv-servers", default="", help="the key-value servers, comma-separated")
    run.add_argument("--out", required=True, help="result JSON")
    args = parser.parse_args(argv)
    result = run_mode(args)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

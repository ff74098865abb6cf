"""The side-by-side word-count benchmark: trident_assets vs Spark Structured Streaming vs DuckDB.

Run: ``python -m bench.run_all`` (``make bench``); ``--quick`` for a 1-2 minute smoke run;
``--help`` for sizes and ``--skip-*`` switches. In ONE run, on the same corpus and machine:

1. generates the seeded corpus (:mod:`bench.corpus`: ``--batches`` x ``--sentences`` sentences
   of 8 Zipf-distributed words over ``--vocab`` words) into the embedded log and one Parquet
   file per batch, and a tiny corpus (``--tiny-batches`` x ``--tiny-sentences``) for the fixed
   per-batch overhead;
2. trident_assets word count, opaque DuckDB state, through Dagster (:mod:`bench.pipeline`):
   catch-up (one run for all txids) and one run per txid, on both corpora; on the tiny one
   also one run per txid in a fresh process against a Spark Connect server;
2b. with ``--store redis-cluster`` (and/or ``--store memcached``): the same catch-up with its
   state in PostgreSQL (a server started for the run) and in the key-value store at each
   ``--kv-shards`` count (default ``1,3``: masters of a Redis Cluster with a replica each, or
   memcached servers), servers started and stopped by the benchmark (:mod:`bench.kv_bench`);
3. Spark Structured Streaming's stateful word count (:mod:`bench.spark_ss`), every
   ``--ss-configs`` (state store provider x shuffle partitions); the best is compared; the
   best configuration also runs the tiny corpus;
3b. the Spark batch job alone (:mod:`bench.spark_batch`): the same log files, no state;
4. a single-process DuckDB ``GROUP BY`` over the whole corpus (this machine's practical limit);
5. checks that every system's final counts equal the ground truth exactly (DuckDB ``EXCEPT
   ALL`` both ways over Arrow tables);
6. the state-merge scaling of :mod:`bench.state_merge` at ``--state-sizes``;
7. the optional peers (:mod:`bench.peers`), each in its own venv (``python -m bench.peer_env
   install flink pathway``): PyFlink's word count (Flink SQL, exactly-once checkpoints, the
   ``hashmap`` and ``rocksdb`` state backends) and Pathway's (persistence on), counts checked
   exactly; ``--flink``/``--skip-flink``, ``--pathway``/``--skip-pathway`` (default: run a
   peer if installed, else report it skipped).

Every Spark measurement runs in its own process (one JVM at a time). Results:
``<out>/bench.json`` and ``<out>/bench.md`` (``<out>`` = ``bench/results``, or
``bench/results/quick`` with ``--quick``), plus the state-merge files beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench import kv_bench, peers, pipeline, spark_batch, spark_ss, state_merge
from bench.corpus import CorpusSpec, write_corpus
from bench.machine import describe, one_line

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_SPEEDUP = 2.0
"""Catch-up words/s over the best Spark SS configuration (issue 16)."""
TARGET_VS_SPARK_BATCH = 0.75
"""Catch-up words/s over the plain Spark batch job on the same log files."""
TARGET_BIG_VOCAB_SPEEDUP = 2.0
"""With a 10M-word vocabulary: catch-up over EVERY Spark SS configuration."""
BIG_VOCAB = 10_000_000
TARGET_PER_RUN_VS_SS = 1.0
"""One Dagster run per txid (in-process) over the best Spark SS configuration."""
TARGET_IN_RUN_OVERHEAD_S = 0.3
TARGET_STATE_MERGE_GROWTH = 2.0
"""State merge: ms/batch at the largest state over ms/batch at the smallest."""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def verify(truth: pa.Table, counts: pa.Table) -> dict[str, Any]:
    """Compare ``(word, count)`` tables exactly: rows missing or different, rows unexpected."""
    conn = duckdb.connect()
    try:
        conn.register("truth", truth.select(["word", "count"]))
        conn.register("got", counts.select(["word", "count"]))
        missing, extra = conn.sql(
            "SELECT "
            "(SELECT count(*) FROM (SELECT word::VARCHAR, count::BIGINT FROM truth EXCEPT ALL "
            " SELECT word::VARCHAR, count::BIGINT FROM got)), "
            "(SELECT count(*) FROM (SELECT word::VARCHAR, count::BIGINT FROM got EXCEPT ALL "
            " SELECT word::VARCHAR, count::BIGINT FROM truth))"
        ).fetchall()[0]
    finally:
        conn.close()
    return {
        "identical": missing == 0 and extra == 0,
        "keys": counts.num_rows,
        "truth_keys": truth.num_rows,
        "missing_or_different": int(missing),
        "unexpected": int(extra),
    }


def duckdb_baseline(files: list[Path]) -> tuple[dict[str, Any], pa.Table]:
    """One DuckDB ``GROUP BY`` over every corpus file: its timing and counts."""
    conn = duckdb.connect()
    try:
        threads = conn.sql("SELECT current_setting('threads')").fetchall()[0][0]
        start = time.perf_counter()
        counts = conn.sql(
            "SELECT word, count(*) AS count FROM (SELECT unnest(string_split(value, ' ')) AS "
            "word FROM read_parquet(?)) GROUP BY word",
            params=[[str(f) for f in files]],
        ).to_arrow_table()
        wall = time.perf_counter() - start
    finally:
        conn.close()
    words = int(pc.sum(counts.column("count")).as_py())
    return {
        "wall_s": round(wall, 4),
        "words": words,
        "words_per_s": round(words / wall),
        "threads": threads,
    }, counts


def fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e6:.2f}M"


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else float(f"{a / b:.3g}")


def render(report: dict[str, Any]) -> str:
    """The Markdown report."""
    c = report["corpus"]
    r = report["results"]
    ss = r.get("spark_ss_best")
    duck = r.get("duckdb")
    lines = [
        "# Word count: trident_assets vs Spark Structured Streaming vs DuckDB",
        "",
        f"Corpus: {c['batches']} batches x {c['sentences']:,} sentences x "
        f"{c['words_per_sentence']} words = {c['total_words']:,} words; vocabulary "
        f"{c['vocab']:,} (Zipf s={c['zipf_s']}, seed {c['seed']}), {report['distinct_words']:,} "
        f"distinct words; log partitions {c['partitions']}. Tiny corpus: "
        f"{report['tiny']['batches']} batches x {report['tiny']['sentences']} sentences.",
        "",
        f"Machine: {one_line(report['machine'])} Load average at end {report['load_average_end']}.",
        "",
        f"{report['label']}",
        "",
        "| system | mode | words/s | median batch s | s / batch (wall) | tiny batch s "
        "| vs ours (catch-up) | vs Spark SS | vs Spark batch alone | vs DuckDB | counts exact |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    ours_rate = (r.get("catchup") or {}).get("words_per_s")
    ss_rate = ss["words_per_s"] if ss else None
    alone = r.get("spark_batch")
    alone_rate = alone["words_per_s"] if alone else None
    duck_rate = duck["words_per_s"] if duck else None
    for row in report["table"]:
        lines.append(
            f"| {row['system']} | {row['mode']} | {fmt_rate(row.get('words_per_s'))} | "
            f"{fmt_s(row.get('median_batch_s'))} | {fmt_s(row.get('per_batch_s'))} | "
            f"{fmt_s(row.get('tiny_batch_s'))} | "
            f"{ratio(row.get('words_per_s'), ours_rate) or '-'} | "
            f"{ratio(row.get('words_per_s'), ss_rate) or '-'} | "
            f"{ratio(row.get('words_per_s'), alone_rate) or '-'} | "
            f"{ratio(row.get('words_per_s'), duck_rate) or '-'} | {row.get('exact', '-')} |"
        )
    lines += [
        "",
        "words/s = corpus words / wall time of the whole processing (from the first run or "
        "query start to the last commit; JVM start excluded, reported below). median batch s = "
        "median per-batch latency (ours: the txid's `run_batch` stages: its share of the "
        "Spark job its chunk of txids ran as, plus its own commit; Spark SS: "
        "`triggerExecution`; PyFlink: the median checkpoint duration). vs ours = words/s over "
        "our catch-up's. s / batch (wall) = wall / batches (catch-up, Spark SS) or the "
        "median wall of one Dagster run (per-run modes). tiny batch s = the fixed per-batch "
        "overhead, on the tiny corpus: catch-up, the median time between consecutive "
        "materializations in the run; per-run modes, the median wall of one run (fresh: of "
        "one process); Spark SS, the median `triggerExecution`. Spark batch job alone "
        "(`bench.spark_batch`): the same log segment files, jobs of `--chunk` corpus batches "
        "(our `max_spout_pending`), decode, split, count per word, `toArrow`; no state, no "
        "txid tags, no Dagster: the limit while our pipeline runs on Spark.",
        "",
    ]
    if report.get("targets"):
        lines += ["| target | measured | met |", "|---|---:|---|"]
        for t in report["targets"]:
            lines.append(f"| {t['target']} | {t['measured']} | {t['met']} |")
        lines.append("")
    stages = report.get("stages")
    if stages:
        lines += [
            "Stage medians of our batches (seconds; `BatchOutcome.timings_s`):",
            "",
            "| run | emit | spark | commit | run_batch total | between materializations "
            "| outside run_batch, per run |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, s in stages.items():
            lines.append(
                f"| {name} | {s['emit']:.3f} | {s['spark']:.3f} | {s['commit']:.3f} | "
                f"{s['total']:.3f} | {fmt_s(s['in_run_batch_s'])} | "
                f"{fmt_s(s['outside_batches_s'])} |"
            )
        lines += [
            "",
            "between materializations = median time between consecutive txids' "
            "materializations inside one catch-up run (the per-batch cost inside a run, "
            "Dagster events included). outside run_batch = run wall minus the batches' "
            "`run_batch` time: Dagster run start/finish, event writes and asset checks, "
            "median per run (per-run modes only: in a catch-up run up to `max_spout_pending` "
            "txids share one Spark job, which overlaps the previous chunk's commits, so the "
            "wall does not split into per-txid parts; a txid's spark figure is its share of "
            "its chunk's job).",
            "",
        ]
    if r.get("spark_ss"):
        lines += [
            "Spark Structured Streaming configurations (each its own process, fresh checkpoint):",
            "",
            "| state store | shuffle partitions | words/s | median batch s | wall s | "
            "state rows | counts exact |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for s in r["spark_ss"]:
            lines.append(
                f"| {s['provider']} | {s['shuffle_partitions']} | {fmt_rate(s['words_per_s'])} | "
                f"{s['batch_median_s']:.3f} | {s['wall_s']:.1f} | {s['state_rows']:,} | "
                f"{s['verify']['identical']} |"
            )
        lines.append("")
    lines += peers.render(r)
    starts = report.get("startup_s")
    if starts:
        lines += [
            "Start-up outside the clocks (seconds): "
            + ", ".join(f"{k} {v}" for k, v in starts.items())
            + ".",
            "",
        ]
    sm = r.get("state_merge")
    if sm:
        lines += [
            "State merge (`bench.state_merge`: one batch of 100k keys, half new, into an opaque "
            "DuckDB state):",
            "",
            "| state keys | ms / batch | ms / batch, checkpoint deferred |",
            "|---:|---:|---:|",
        ]
        for row in sm["fast_path"]:
            lines.append(
                f"| {row['state_keys']:,} | {row['median_ms']:.1f} | "
                f"{row['median_ms_deferred_checkpoint']:.1f} |"
            )
        lines.append("")
    if report.get("notes"):
        lines += [f"- {n}" for n in report["notes"]]
        lines.append("")
    return "\n".join(lines)


def _target(target: str, measured: str, met: bool | None) -> dict[str, Any]:
    return {"target": target, "measured": measured, "met": "met" if met else "NOT met"}


def targets_met(results: dict[str, Any], vocab: int) -> list[dict[str, Any]]:
    """Issue 16's targets with what this run measured (only those this run can judge)."""
    out: list[dict[str, Any]] = []
    ss_runs = results.get("spark_ss") or []
    best = results.get("spark_ss_best")
    catchup = results.get("catchup")
    if catchup and best:
        x = ratio(catchup["words_per_s"], best["words_per_s"])
        out.append(
            _target(
                f"catch-up >= {TARGET_SPEEDUP}x best Spark SS",
                f"{x}x",
                bool(x and x >= TARGET_SPEEDUP),
            )
        )
    alone = results.get("spark_batch")
    if catchup and alone:
        x = ratio(catchup["words_per_s"], alone["words_per_s"])
        out.append(
            _target(
                f"catch-up >= {TARGET_VS_SPARK_BATCH}x Spark batch job alone",
                f"{x}x",
                bool(x and x >= TARGET_VS_SPARK_BATCH),
            )
        )
    if vocab >= BIG_VOCAB and ss_runs:
        worst = min(r["words_per_s"] for r in ss_runs)
        best_rate = max(r["words_per_s"] for r in ss_runs)
        for key, label in (("catchup", "catch-up"), ("per_run", "one run per txid")):
            if key in results:
                x = ratio(results[key]["words_per_s"], best_rate)
                out.append(
                    _target(
                        f"{vocab:,}-word vocabulary: {label} >= {TARGET_BIG_VOCAB_SPEEDUP}x "
                        f"every Spark SS configuration ({len(ss_runs)} run)",
                        f"{x}x the best, {ratio(results[key]['words_per_s'], worst)}x the worst",
                        bool(x and x >= TARGET_BIG_VOCAB_SPEEDUP),
                    )
                )
    if "per_run" in results and best:
        x = ratio(results["per_run"]["words_per_s"], best["words_per_s"])
        out.append(
            _target(
                f"one Dagster run per txid (in-process) >= {TARGET_PER_RUN_VS_SS}x Spark SS",
                f"{x}x",
                bool(x and x >= TARGET_PER_RUN_VS_SS),
            )
        )
    tiny = results.get("catchup_tiny")
    if tiny and tiny.get("in_run_batch_s"):
        inside = tiny["in_run_batch_s"]["median"]
        out.append(
            _target(
                f"fixed cost per batch inside a run <= {TARGET_IN_RUN_OVERHEAD_S} s (tiny "
                "batches, catch-up: median time between materializations)",
                f"{inside:.3f} s",
                inside <= TARGET_IN_RUN_OVERHEAD_S,
            )
        )
    merge = (results.get("state_merge") or {}).get("fast_path") or []
    if len(merge) >= 2:
        small, big = merge[0], merge[-1]
        growth = big["median_ms"] / small["median_ms"]
        out.append(
            _target(
                f"state merge: {big['state_keys']:,}-key state <= {TARGET_STATE_MERGE_GROWTH}x "
                f"the {small['state_keys']:,}-key figure",
                f"{growth:.2f}x ({big['median_ms']:.1f} / {small['median_ms']:.1f} ms)",
                growth <= TARGET_STATE_MERGE_GROWTH,
            )
        )
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=None, help="corpus batches (default 20)")
    p.add_argument("--sentences", type=int, default=None, help="sentences/batch (500,000)")
    p.add_argument("--vocab", type=int, default=None, help="vocabulary (100,000; try 10000000)")
    p.add_argument("--zipf-s", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--partitions", type=int, default=2, help="log partitions")
    p.add_argument("--tiny-batches", type=int, default=None, help="tiny batches (default 20)")
    p.add_argument("--tiny-sentences", type=int, default=10)
    p.add_argument("--fresh-batches", type=int, default=5, help="tiny txids run in fresh processes")
    p.add_argument(
        "--ss-configs",
        default=None,
        help="Spark SS provider:shuffle list (default hdfs:2,hdfs:4,rocksdb:2,rocksdb:4)",
    )
    p.add_argument("--shuffle-partitions", type=int, default=None, help="ours (default 4)")
    p.add_argument(
        "--chunk", type=int, default=10, help="Spark batch job alone: corpus batches per job"
    )
    p.add_argument(
        "--state-sizes", default=None, help="state-merge sizes (default 100000,1000000,10000000)"
    )
    p.add_argument("--quick", action="store_true", help="a small run (~1-2 min) for smoke tests")
    p.add_argument(
        "--store",
        action="append",
        choices=kv_bench.KV_STORES,
        default=[],
        help="also run the catch-up with its state in PostgreSQL and in this key-value store "
        "(repeatable)",
    )
    p.add_argument(
        "--kv-shards",
        default="1,3",
        help="--store: Redis masters (1 replica each) or memcached servers per run (1,3)",
    )
    p.add_argument("--skip-postgres", action="store_true", help="--store: no PostgreSQL run")
    for what in (
        "catchup",
        "per-run",
        "count-only",
        "spark-ops",
        "spilled",
        "fresh",
        "spark-ss",
        "spark-batch",
        "duckdb",
        "state-merge",
        "tiny",
    ):
        p.add_argument(f"--skip-{what}", action="store_true")
    peers.add_args(p)
    p.add_argument(
        "--work", type=Path, default=None, help="work directory, created if missing (default: temp)"
    )
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    peers.check_args(args)
    try:
        args.kv_shards = sorted({int(n) for n in str(args.kv_shards).split(",")})
    except ValueError:
        p.error(f"--kv-shards: {args.kv_shards!r} is not a comma-separated list of integers")
    if args.kv_shards[0] < 1:
        p.error(f"--kv-shards: {args.kv_shards} has a count below 1")
    quick = args.quick
    defaults = {
        "batches": 3 if quick else 20,
        "sentences": 50_000 if quick else 500_000,
        "vocab": 100_000,
        "tiny_batches": 4 if quick else 20,
        "ss_configs": "hdfs:2" if quick else "hdfs:2,hdfs:4,rocksdb:2,rocksdb:4",
        "state_sizes": "100000,1000000" if quick else "100000,1000000,10000000",
        "out": RESULTS / "quick" if quick else RESULTS,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    spec = CorpusSpec(
        batches=args.batches,
        sentences=args.sentences,
        vocab=args.vocab,
        zipf_s=args.zipf_s,
        seed=args.seed,
        partitions=args.partitions,
    )
    tiny = CorpusSpec(
        batches=args.tiny_batches,
        sentences=args.tiny_sentences,
        vocab=args.vocab,
        zipf_s=args.zipf_s,
        seed=args.seed + 1,
        partitions=args.partitions,
    )
    machine = describe()
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="trident-bench-", dir=args.work))
    log(f"work directory {work}; machine: {one_line(machine)}")
    results: dict[str, Any] = {}
    table: list[dict[str, Any]] = []
    stages: dict[str, Any] = {}
    startup: dict[str, Any] = {}
    notes: list[str] = []
    try:
        log(f"corpus: {spec.batches} x {spec.sentences:,} sentences, vocab {spec.vocab:,}")
        corpus = write_corpus(spec, work / "corpus")
        truth = corpus.truth
        log(
            f"corpus written in {corpus.seconds:.1f}s: {spec.total_words:,} words, "
            f"{corpus.distinct_words:,} distinct"
        )
        tiny_corpus = None
        if not args.skip_tiny:
            tiny_corpus = write_corpus(tiny, work / "tiny")

        def ours(
            name: str,
            mode: str,
            root: Path,
            s: CorpusSpec,
            check: bool,
            topology: str = "example",
            arrow_kernel: bool = True,
            spill: bool = False,
            state_dsn: str | None = None,
            kv_store: str | None = None,
            kv_servers: tuple[str, ...] | list[str] = (),
        ) -> dict[str, Any]:
            counts = work / f"{name}-counts.parquet" if check else None
            raw = pipeline.run_in_subprocess(
                root,
                work / name,
                mode=mode,
                sentences=s.sentences,
                batches=s.batches,
                counts=counts,
                shuffle_partitions=args.shuffle_partitions,
                topology=topology,
                arrow_kernel=arrow_kernel,
                spill=spill,
                state_dsn=state_dsn,
                kv_store=kv_store,
                kv_servers=kv_servers,
            )
            res = pipeline.summarize(raw, s.words_per_batch)
            if counts is not None:
                res["verify"] = verify(truth, pq.read_table(counts))
            startup[f"{name} JVM"] = raw["spark_startup_s"]
            stages[name] = {
                **res["stage_median_s"],
                "total": res["batch_total_s"]["median"],
                "in_run_batch_s": (res.get("in_run_batch_s") or {}).get("median"),
                "outside_batches_s": res["outside_batches_s"],
            }
            log(
                f"{name}: {res['words_per_s']:,} words/s, median batch "
                f"{res['batch_total_s']['median']:.3f}s, s/batch {res['per_batch_s']:.3f}"
                + (f", exact={res['verify']['identical']}" if counts else "")
            )
            return res

        for key, mode, topology, skip, label in (
            ("catchup", "catchup", "example", args.skip_catchup, "catch-up: 1 Dagster run"),
            (
                "catchup_spark_ops",
                "catchup",
                "example",
                args.skip_catchup or args.skip_spark_ops,
                "catch-up: 1 Dagster run; Spark's operators (Arrow kernel off)",
            ),
            (
                "catchup_spilled",
                "catchup",
                "example",
                args.skip_catchup or args.skip_spilled,
                "catch-up: 1 Dagster run; partials written by the executors (spill)",
            ),
            (
                "per_run",
                "per_run",
                "example",
                args.skip_per_run,
                "1 Dagster run / txid, in-process",
            ),
            (
                "catchup_count_only",
                "catchup",
                "count_only",
                args.skip_catchup or args.skip_count_only,
                "catch-up: 1 Dagster run; count-only topology (no query stream)",
            ),
        ):
            if skip:
                continue
            kernel = key != "catchup_spark_ops"
            spill = key == "catchup_spilled"
            res = ours(key, mode, work / "corpus", spec, True, topology, kernel, spill)
            row = {
                "system": "trident_assets"
                if topology == "example"
                else "trident_assets (count only)",
                "mode": label,
                "words_per_s": res["words_per_s"],
                "median_batch_s": res["batch_total_s"]["median"],
                "per_batch_s": res["per_batch_s"],
                "exact": res["verify"]["identical"],
            }
            results[key] = res
            if tiny_corpus is not None:
                t = ours(f"{key}_tiny", mode, work / "tiny", tiny, False, topology, kernel, spill)
                results[f"{key}_tiny"] = t
                inside = t.get("in_run_batch_s")
                row["tiny_batch_s"] = inside["median"] if inside else t["per_batch_s"]
                row["tiny_batch_total_s"] = t["batch_total_s"]["median"]
            table.append(row)
        if args.store:
            log(f"state stores: PostgreSQL, {', '.join(args.store)} at {args.kv_shards} shards")
            found, rows = kv_bench.run_stores(
                args,
                lambda name, **kw: ours(
                    name, "catchup", work / "corpus", spec, not kw.get("kv_store"), **kw
                ),
                work,
                truth,
                verify,
                log,
            )
            results |= found
            table += rows
            for store in args.store:
                sc = found[f"{store}_scaling"]
                notes.append(
                    f"{store}: catch-up words/s at {sc['shards']} shards: "
                    + ", ".join(fmt_rate(r) for r in sc["words_per_s"])
                    + f" ({sc['largest_over_smallest']}x from the fewest to the most shards)"
                )
        if not args.skip_fresh and tiny_corpus is not None:
            log("fresh process per run, Spark Connect server (tiny corpus)")
            try:
                fresh = pipeline.run_fresh(
                    work / "tiny",
                    work / "fresh",
                    sentences=tiny.sentences,
                    batches=min(args.fresh_batches, tiny.batches),
                    words_per_batch=tiny.words_per_batch,
                )
                results["fresh_tiny"] = fresh
                startup["Spark Connect server"] = fresh["connect_server_start_s"]
                table.append(
                    {
                        "system": "trident_assets",
                        "mode": "1 Dagster run / txid, fresh process, Spark Connect",
                        "tiny_batch_s": fresh["per_batch_s"],
                    }
                )
                log(f"fresh: {fresh['per_batch_s']:.2f}s per run (process wall, median)")
            except RuntimeError as exc:
                results["fresh_tiny"] = {"error": str(exc)[-2000:]}
                notes.append(f"fresh-process mode failed: {str(exc).splitlines()[0]}")
                log(f"fresh mode failed: {exc}")

        if not args.skip_spark_ss:
            runs = []
            for item in args.ss_configs.split(","):
                provider, shuffle = item.split(":")
                name = f"ss_{provider}_{shuffle}"
                counts = work / f"{name}-counts.parquet"
                raw = spark_ss.run_in_subprocess(
                    corpus.files_dir,
                    work / name,
                    provider=provider,
                    shuffle=int(shuffle),
                    counts=counts,
                )
                res = spark_ss.summarize(raw, spec.words_per_sentence)
                res["verify"] = verify(truth, pq.read_table(counts))
                startup[f"{name} JVM"] = raw["spark_startup_s"]
                runs.append(res)
                log(
                    f"Spark SS {provider}/{shuffle}: {res['words_per_s']:,} words/s, median "
                    f"batch {res['batch_median_s']:.3f}s, exact={res['verify']['identical']}"
                )
            results["spark_ss"] = runs
            best = max(runs, key=lambda r: r["words_per_s"])
            results["spark_ss_best"] = best
            row = {
                "system": "Spark Structured Streaming",
                "mode": f"{best['provider']}, {best['shuffle_partitions']} shuffle partitions",
                "words_per_s": best["words_per_s"],
                "median_batch_s": best["batch_median_s"],
                "per_batch_s": best["per_batch_s"],
                "exact": all(r["verify"]["identical"] for r in runs),
            }
            if tiny_corpus is not None:
                raw = spark_ss.run_in_subprocess(
                    tiny_corpus.files_dir,
                    work / "ss_tiny",
                    provider=best["provider"],
                    shuffle=best["shuffle_partitions"],
                )
                t = spark_ss.summarize(raw, tiny.words_per_sentence)
                results["spark_ss_tiny"] = t
                row["tiny_batch_s"] = t["batch_median_s"]
                log(f"Spark SS tiny: median batch {t['batch_median_s']:.3f}s")
            table.append(row)

        if not args.skip_spark_batch:
            counts = work / "spark_batch-counts.parquet"
            raw = spark_batch.run_in_subprocess(
                corpus.log_root,
                work / "spark_batch",
                sentences=spec.sentences,
                batches=spec.batches,
                partitions=spec.partitions,
                chunk=args.chunk,
                shuffle=args.shuffle_partitions or 4,
                counts=counts,
            )
            res = spark_batch.summarize(raw, spec.words_per_sentence)
            res["verify"] = verify(truth, pq.read_table(counts))
            startup["spark_batch JVM"] = raw["spark_startup_s"]
            results["spark_batch"] = res
            table.append(
                {
                    "system": "Spark batch job alone",
                    "mode": f"same log files, {args.chunk} batches per job, no state",
                    "words_per_s": res["words_per_s"],
                    "median_batch_s": res["batch_median_s"],
                    "per_batch_s": res["per_batch_s"],
                    "exact": res["verify"]["identical"],
                }
            )
            log(f"Spark batch job alone: {res['words_per_s']:,} words/s")

        if not args.skip_duckdb:
            res, counts = duckdb_baseline(list(corpus.files))
            res["verify"] = verify(truth, counts)
            results["duckdb"] = res
            table.append(
                {
                    "system": "DuckDB",
                    "mode": "one GROUP BY over the whole corpus",
                    "words_per_s": res["words_per_s"],
                    "per_batch_s": None,
                    "exact": res["verify"]["identical"],
                }
            )
            log(f"DuckDB GROUP BY: {res['words_per_s']:,} words/s")

        peers.run(
            args,
            corpus.files_dir,
            truth,
            spec.words_per_sentence,
            work,
            results,
            table,
            startup,
            notes,
            log,
        )

        if not args.skip_state_merge:
            log(f"state merge at sizes {args.state_sizes}")
            results["state_merge"] = state_merge.main(
                [
                    "--sizes",
                    args.state_sizes,
                    "--runs",
                    "3" if args.quick else "5",
                    "--python-state",
                    "100000" if args.quick else "1000000",
                    "--out",
                    str(args.out),
                ]
            )
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    targets = targets_met(results, args.vocab)
    all_exact = all(r.get("exact") in (True, None) for r in table)
    report = {
        "benchmark": "word_count_side_by_side",
        "command": " ".join([sys.executable, "-m", "bench.run_all", *(argv or sys.argv[1:])]),
        "label": (
            "QUICK smoke run: sizes far below the issue's defaults; do not quote."
            if args.quick
            else "Figures from one run; the machine may be shared (see the load averages)."
        ),
        "machine": machine,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "corpus": spec.as_dict(),
        "tiny": tiny.as_dict(),
        "distinct_words": truth.num_rows,
        "table": table,
        "targets": targets,
        "stages": stages,
        "startup_s": startup,
        "all_counts_exact": all_exact,
        "results": results,
        "notes": notes,
    }
    md = render(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "bench.md").write_text(md)
    print(md)
    if not all_exact:
        log("COUNTS DIFFER FROM THE GROUND TRUTH")
    return report


if __name__ == "__main__":
    report = main()
    sys.exit(0 if report["all_counts_exact"] else 1)

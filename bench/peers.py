"""The optional peers of :mod:`bench.run_all`: PyFlink and Pathway word counts.

Each peer runs in its own venv (:mod:`bench.peer_env`) as a child process, on the corpus's
Parquet files, and its final counts are checked against the ground truth
(:func:`bench.peer_check.check_counts`). Flags: ``--flink``/``--skip-flink`` and
``--pathway``/``--skip-pathway``; by default a peer runs if it is installed and is reported
as skipped otherwise.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench import flink_wordcount, pathway_wordcount
from bench.flink_wordcount import BACKENDS
from bench.peer_check import CountsDiffer, check_counts
from bench.peer_env import missing_message, peer_python, skip_message

__all__ = ["add_args", "render", "run"]


def add_args(p: argparse.ArgumentParser) -> None:
    """The peers' flags on ``bench.run_all``'s parser."""
    for peer, label in (("flink", "PyFlink"), ("pathway", "Pathway")):
        group = p.add_mutually_exclusive_group()
        group.add_argument(
            f"--{peer}",
            dest=peer,
            action="store_const",
            const=True,
            default=None,
            help=f"run the {label} peer (fail if it is not installed; default: run it if "
            "installed)",
        )
        group.add_argument(f"--skip-{peer}", dest=peer, action="store_const", const=False)
    p.add_argument(
        "--flink-backends", default="hashmap,rocksdb", help="Flink state backends to run"
    )
    p.add_argument("--flink-checkpoint-interval-ms", type=int, default=1000)
    p.add_argument(
        "--flink-mini-batch-ms", type=int, default=1000, help="Flink SQL mini-batch; 0: off"
    )


def check_args(args: argparse.Namespace) -> None:
    """Refuse unknown Flink backends before anything runs."""
    for backend in args.flink_backends.split(","):
        if backend not in BACKENDS:
            raise SystemExit(
                f"--flink-backends: unknown state backend {backend!r}; use {', '.join(BACKENDS)}"
            )


def _python(args: argparse.Namespace, peer: str, notes: list[str], log: Any) -> Path | None:
    wanted = getattr(args, peer)
    if wanted is False:
        return None
    python = peer_python(peer)
    if python is None:
        if wanted:
            raise SystemExit(missing_message(peer, f"--{peer}"))
        log(skip_message(peer))
        notes.append(skip_message(peer))
    return python


def _check(truth: pa.Table, counts: Path, system: str, log: Any) -> dict[str, Any]:
    """The exactness check; a wrong count is logged loudly and marks the run failed."""
    try:
        return check_counts(truth, pq.read_table(counts), system)
    except CountsDiffer as exc:
        log(f"COUNTS DIFFER FROM THE GROUND TRUTH: {exc}")
        return {"identical": False, "error": str(exc)}


def run(
    args: argparse.Namespace,
    files: Path,
    truth: pa.Table,
    words_per_sentence: int,
    work: Path,
    results: dict[str, Any],
    table: list[dict[str, Any]],
    startup: dict[str, Any],
    notes: list[str],
    log: Any,
) -> None:
    """Run the installed (or required) peers over ``files``; rows into ``table``."""
    python = _python(args, "flink", notes, log)
    if python is not None:
        runs = []
        for backend in args.flink_backends.split(","):
            counts = work / f"flink_{backend}-counts.parquet"
            raw = flink_wordcount.run_in_subprocess(
                python,
                files,
                work / f"flink_{backend}",
                backend=backend,
                counts=counts,
                checkpoint_interval_ms=args.flink_checkpoint_interval_ms,
                mini_batch_ms=args.flink_mini_batch_ms,
            )
            res = flink_wordcount.summarize(raw, words_per_sentence)
            res["verify"] = _check(truth, counts, f"PyFlink {backend}", log)
            startup[f"flink_{backend} (gateway JVM)"] = raw["flink_startup_s"]
            runs.append(res)
            log(
                f"PyFlink {backend}: {res['words_per_s']:,} words/s, checkpoints "
                f"{res['checkpoints']['completed']} (median {res['checkpoint_median_s']} s), "
                f"exact={res['verify']['identical']}"
            )
            table.append(
                {
                    "system": "PyFlink (Flink SQL)",
                    "mode": f"{backend} state, parallelism 2, exactly-once checkpoints every "
                    f"{args.flink_checkpoint_interval_ms} ms",
                    "words_per_s": res["words_per_s"],
                    "median_batch_s": res["checkpoint_median_s"],
                    "per_batch_s": None,
                    "exact": res["verify"]["identical"],
                }
            )
        results["flink"] = runs
    python = _python(args, "pathway", notes, log)
    if python is not None:
        counts = work / "pathway-counts.parquet"
        raw = pathway_wordcount.run_in_subprocess(python, files, work / "pathway", counts=counts)
        res = pathway_wordcount.summarize(raw, words_per_sentence)
        res["verify"] = _check(truth, counts, "Pathway", log)
        startup["pathway (import, graph)"] = raw["pathway_startup_s"]
        results["pathway"] = res
        log(f"Pathway: {res['words_per_s']:,} words/s, exact={res['verify']['identical']}")
        table.append(
            {
                "system": "Pathway",
                "mode": f"persistence on (filesystem), {res['threads']} threads, one commit "
                "per corpus file",
                "words_per_s": res["words_per_s"],
                "median_batch_s": None,
                "per_batch_s": None,
                "exact": res["verify"]["identical"],
            }
        )


def render(results: dict[str, Any]) -> list[str]:
    """Markdown lines: the peers' configurations and checkpoint figures."""
    lines: list[str] = []
    if results.get("flink"):
        version = results["flink"][0].get("versions", {}).get("apache-flink", "?")
        lines += [
            f"PyFlink {version} configurations (each its own process; Flink SQL split + `COUNT(*)` "
            "`GROUP BY word`, streaming, parallelism 2, checkpointing EXACTLY_ONCE, FileSink "
            "committed on checkpoints):",
            "",
            "| state backend | words/s | net runtime s | execute() s | checkpoints "
            "(failed/declined) | checkpoint median s | checkpoint max s | counts exact |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in results["flink"]:
            c = r["checkpoints"]
            lines.append(
                f"| {r['backend']} | {r['words_per_s'] / 1e6:.2f}M | {r['wall_s']:.2f} | "
                f"{r['execute_s']:.2f} | {c['completed']} ({c['failed_or_declined']}) | "
                f"{_s(r['checkpoint_median_s'])} | {_s(r['checkpoint_max_s'])} | "
                f"{r['verify']['identical']} |"
            )
        lines += [
            "",
            "PyFlink words/s = corpus words / the job's net runtime (Flink's MiniCluster and "
            "gateway JVM start excluded; `execute()` is the whole call); its median batch s in "
            "the main table is the median `checkpointDuration` (from the JobManager log). The "
            "corpus Parquet files are rewritten as text before the clock (no Parquet format "
            f"jar in the wheel): {statistics.fmean(r['prepare_s'] for r in results['flink']):.1f}"
            " s.",
            "",
        ]
    pw = results.get("pathway")
    if pw:
        lines += [
            f"Pathway {pw.get('versions', {}).get('pathway', '?')}: "
            f"{pw['words_per_s'] / 1e6:.2f}M words/s, `pw.run` {pw['wall_s']:.2f} s, "
            f"{pw['update_rows']:,} update rows written, {pw['persistence_bytes'] / 2**20:.1f} "
            f"MiB persisted, counts exact {pw['verify']['identical']}.",
            "",
        ]
    return lines


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"

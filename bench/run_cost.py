"""Where a Dagster batch run's fixed cost goes: ``bench.pipeline``'s per-run mode under cProfile.

Runs one Dagster run per txid in this process (the SparkSession created before the clock, as
in ``bench.pipeline``), the whole loop under :mod:`cProfile`, then reports per run the
median wall, the median time inside ``TopologyRunner.run_batches`` (the batch itself) and
the cumulative seconds per run of the named parts outside it (Dagster run start and finish,
event writes, the checks). The first ``--warmup`` runs are driven before the profiler
starts (class loading, first Spark jobs). cProfile slows Python code down: read the parts as
shares of the profiled run wall, not as absolute costs.

    python -m bench.run_cost --corpus DIR --work DIR --sentences 2000 --batches 20
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time
from pathlib import Path
from typing import Any

# (label, file suffix, function name): cumulative seconds of the function, summed over matches
PARTS: list[tuple[str, str, str]] = [
    ("run (execute_in_process)", "job_definition.py", "execute_in_process"),
    ("batches (run_batches)", "runtime/runner.py", "run_batches"),
    ("dagster: create run", "instance/methods/run_methods.py", "create_run_for_job"),
    ("dagster: .. planned events", "instance/runs/run_domain.py", "_log_asset_planned_events"),
    ("dagster: handle_new_event (event writes)", "methods/event_methods.py", "handle_new_event"),
    ("dagster: .. sqlite store_event", "event_log/sqlite/sqlite_event_log.py", "store_event"),
    ("dagster: .. sqlite connect", "event_log/sqlite/sqlite_event_log.py", "_connect"),
    ("dagster: .. sqlite commit", "sqlalchemy/engine/default.py", "do_commit"),
    ("dagster: logging (context.log, engine events)", "dagster/_core/log_manager.py", "emit"),
    ("dagster: store outputs", "execution/plan/execute_step.py", "_store_output"),
    ("dagster: resource init", "execution/resources_init.py", "resource_initialization_manager"),
    ("trident: store open (TridentResource.store)", "dagster/resources.py", "store"),
    ("trident: TopologyRunner init", "spark/executor.py", "__init__"),
    ("trident: backfill (caught_up)", "dagster/batch_steps.py", "caught_up"),
    ("trident: batch_events", "dagster/batch_events.py", "batch_events"),
    ("trident: finals_events", "dagster/window_assets.py", "finals_events"),
    ("checks: evaluate_checks", "dagster/checks.py", "evaluate_checks"),
    ("checks: _spout_history", "dagster/checks.py", "_spout_history"),
    ("checks: txids_contiguous", "dagster/spout_checks.py", "txids_check"),
    ("checks: ranges (_previous_ends)", "dagster/checks.py", "_previous_ends"),
    ("checks: exactly_once (verify_state)", "spark/verify.py", "verify_state"),
    ("checks: exactly_once (incremental)", "spark/verify.py", "verify_increment"),
    (
        "checks: exactly_once plan (checkpoint read)",
        "dagster/exactly_once_plans.py",
        "exactly_once_plans",
    ),
    ("checks: exactly_once ranges since", "dagster/exactly_once_plans.py", "since_ranges"),
    ("checks: exactly_once checkpoint write", "backends/verified.py", "write_checkpoint"),
]


def _cumulative(stats: pstats.Stats, suffix: str, name: str) -> float:
    total = 0.0
    for (filename, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if func == name and filename.endswith(suffix):
            total += ct
    return total


def reuse_sqlite_engines(instance_dir: Path) -> None:
    """Make the Dagster instance in ``instance_dir`` use
    :class:`~trident_assets.dagster.event_log.ReusingSqliteEventLogStorage` (its dagster.yaml)."""
    instance_dir.mkdir(parents=True, exist_ok=True)
    runs = instance_dir / "history" / "runs"
    (instance_dir / "dagster.yaml").write_text(
        "event_log_storage:\n"
        "  module: trident_assets.dagster.event_log\n"
        "  class: ReusingSqliteEventLogStorage\n"
        f"  config:\n    base_dir: {runs}\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="corpus root (holds log/)")
    parser.add_argument("--work", required=True, help="state and Dagster instance (new dir)")
    parser.add_argument("--sentences", type=int, required=True, help="sentences per batch")
    parser.add_argument("--batches", type=int, required=True, help="profiled runs")
    parser.add_argument("--warmup", type=int, default=3, help="runs before the profiler starts")
    parser.add_argument("--exactly-once-check", action="store_true")
    parser.add_argument("--full-every", type=int, default=None, help="CheckSettings field")
    parser.add_argument("--top", type=int, default=0, help="also print the top N by cumtime")
    parser.add_argument(
        "--reuse-sqlite-engines",
        action="store_true",
        help="the instance's event log is trident_assets.dagster.event_log's "
        "ReusingSqliteEventLogStorage (one SQLAlchemy engine per database, not per write)",
    )
    parser.add_argument("--out", default=None, help="result JSON")
    parser.add_argument("--dump", default=None, help="write the raw profile here (pstats)")
    args = parser.parse_args(argv)

    from bench.pipeline import _instance, _trident, batch_timings, build_topology, drive

    if args.reuse_sqlite_engines:
        reuse_sqlite_engines(Path(args.work) / "dagster")

    work = Path(args.work)
    trident = _trident(Path(args.corpus), work / "state.duckdb", None, 2)
    topo = build_topology("example", args.sentences)
    instance = _instance(work / "dagster")
    trident.spark()
    extra: dict[str, Any] = {}
    if args.full_every is not None:
        extra["full_every"] = args.full_every
    drive(
        topo,
        trident,
        instance,
        range(1, args.warmup + 1),
        catch_up=False,
        exactly_once_check=args.exactly_once_check,
        **extra,
    )
    txids = list(range(args.warmup + 1, args.warmup + 1 + args.batches))
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    walls = drive(
        topo,
        trident,
        instance,
        txids,
        catch_up=False,
        exactly_once_check=args.exactly_once_check,
        **extra,
    )
    profiler.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    if args.dump:
        stats.dump_stats(args.dump)
    n = len(txids)
    stages = batch_timings(instance, limit=n + args.warmup + 10)
    outside = [w - stages[t]["total"] for w, t in zip(walls, txids, strict=True)]
    result: dict[str, Any] = {
        "runs": n,
        "exactly_once_check": args.exactly_once_check,
        "run_wall_median_s": round(statistics.median(walls), 4),
        "outside_run_batch_median_s": round(statistics.median(outside), 4),
        "profiled_wall_per_run_s": round(wall / n, 4),
        "parts_per_run_s": {
            label: round(_cumulative(stats, suffix, name) / n, 4) for label, suffix, name in PARTS
        },
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if args.top:
        stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()

"""The ``exactly_once`` check's cost, full against incremental, interleaved in one process.

Reads a work directory ``bench.pipeline`` (``per_run`` with ``--exactly-once-check``) left
behind: the word count's DuckDB state, its verified checkpoint and the Dagster instance.
In ONE Spark session, for ``--rounds`` rounds, it times the full recomputation over the
first ``k`` committed txids for each ``--history`` k, and the incremental comparison of
the last txid (what a run of one txid evaluates), interleaved, and prints the medians. Only
timings are reported: the incremental comparison starts from the checkpoint as it is (through
the last txid), so its mismatch count is not a check result.

    python -m bench.check_cost --corpus DIR --work DIR --sentences 2000 --history 1 10 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--work", required=True, help="a bench.pipeline per_run work directory")
    parser.add_argument("--sentences", type=int, required=True)
    parser.add_argument("--history", type=int, nargs="+", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    from bench.pipeline import _instance, _trident, build_topology
    from trident_assets.dagster import checks
    from trident_assets.dagster.exactly_once_plans import since_ranges
    from trident_assets.dagster.graph import asset_keys
    from trident_assets.dagster.spout_checks import txids_check
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.spark.verify import verify_increment, verify_state

    work = Path(args.work)
    trident = _trident(Path(args.corpus), work / "state.duckdb", None, 2)
    topo = build_topology("example", args.sentences)
    keys = asset_keys(topo)
    instance = _instance(work / "dagster")
    spark = trident.spark()
    times: dict[str, list[float]] = {}
    with trident.store() as store:
        runner = TopologyRunner(topo, spark, store, trident.log())
        last = runner.last_committed() or 0
        history = {
            sid: checks._spout_history(instance, keys[f"spout:{sid}"]) for sid in topo.spouts
        }
        since = since_ranges(instance, topo, keys, [], last, last)
        assert since is not None
        for _ in range(args.rounds):
            for k in args.history:
                ranges = {
                    sid: checks.committed_ranges(
                        {t: o for t, o in history[sid].items() if t <= k}, [], sid
                    )
                    for sid in topo.spouts
                }
                start = time.perf_counter()
                verify_state(runner, "word_counts", ranges)
                times.setdefault(f"full over {k} txids", []).append(time.perf_counter() - start)
            start = time.perf_counter()
            verify_increment(runner, "word_counts", since, last - 1)
            times.setdefault("incremental (1 txid)", []).append(time.perf_counter() - start)
            start = time.perf_counter()
            txids_check(keys["spout:sentences"], instance, runner, [last])
            times.setdefault("txids_contiguous", []).append(time.perf_counter() - start)
    result: dict[str, Any] = {
        "last_txid": last,
        "median_s": {k: round(statistics.median(v), 4) for k, v in times.items()},
        "min_s": {k: round(min(v), 4) for k, v in times.items()},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

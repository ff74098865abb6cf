"""Dagster's own cost of a batch run: a do-nothing multi-asset shaped like ours.

``python -m bench.dagster_floor [--assets 6] [--checks 9] [--runs 15] [--reuse-engines]
[--lineage] [--dynamic]``

One multi-asset with ``--assets`` partitioned asset specs and ``--checks`` check specs (the
example word count has 6 assets and 9 checks: four per spout and ``exactly_once``), one
partition per run through ``execute_in_process`` on a SQLite instance in a temporary
directory. The body only yields a ``MaterializeResult`` per asset and an ``AssetCheckResult``
per check: no Spark, no store, no trident code. The median run wall (after ``--warm`` runs)
is the floor under "outside ``run_batch``" in ``bench.pipeline``'s per-run mode: what Dagster
itself spends on run creation, the planned events, the step and the ~54 event writes.

Two switches give the job the rest of the example word count's shape, which makes Dagster
itself do more per run: ``--lineage`` gives the six assets the example's dependency edges
(``asset2`` on ``asset0``, ``asset3`` on ``asset2``, ``asset4`` on ``asset3``, ``asset5`` on
``asset1`` and ``asset3``), so each materialization records its inputs' data versions, read
back from the instance (Dagster's provenance); ``--dynamic`` partitions them with a
``DynamicPartitionsDefinition`` whose key is added before each run (as
:func:`trident_assets.dagster.runs.materialize_batches` adds the txid's), so Dagster looks the
run's key up in the instance wherever it resolves a partition range.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.run_cost import reuse_sqlite_engines

LINEAGE = {2: (0,), 3: (2,), 4: (3,), 5: (1, 3)}
"""The example word count's edges: ``{asset: its deps}`` (spouts 0, 1; partials 2; state 3;
new values 4; output 5)."""


def measure(
    assets: int,
    checks: int,
    runs: int,
    warm: int,
    reuse_engines: bool,
    lineage: bool = False,
    dynamic: bool = False,
) -> dict[str, Any]:
    """Run the do-nothing job ``runs`` times; its run walls and events per run.

    ``lineage`` needs ``assets`` >= 6 (the example's edges, see the module).
    """
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    partitions: dg.PartitionsDefinition = (
        dg.DynamicPartitionsDefinition(name="floor_txids")
        if dynamic
        else dg.StaticPartitionsDefinition([str(i) for i in range(1, runs + 1)])
    )
    keys = [dg.AssetKey(["floor", f"asset{i}"]) for i in range(assets)]
    specs = [dg.AssetCheckSpec(f"check{j}", asset=keys[j % assets]) for j in range(checks)]
    edges = LINEAGE if lineage else {}

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                k,
                deps=[keys[d] for d in edges.get(i, ())],
                partitions_def=partitions,
                skippable=True,
            )
            for i, k in enumerate(keys)
        ],
        check_specs=specs,
        partitions_def=partitions,
        can_subset=True,
    )
    def batches() -> Any:
        for key in keys:
            yield dg.MaterializeResult(asset_key=key, metadata={"txid": 1, "rows": 5})
        for spec in specs:
            yield dg.AssetCheckResult(asset_key=spec.asset_key, check_name=spec.name, passed=True)

    job = dg.Definitions(
        assets=[batches],
        jobs=[dg.define_asset_job("floor", selection=keys, partitions_def=partitions)],
    ).resolve_job_def("floor")
    with tempfile.TemporaryDirectory() as home:
        if reuse_engines:
            reuse_sqlite_engines(Path(home))
        instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(home))
        walls = []
        for key in range(1, runs + 1):
            if dynamic:
                instance.add_dynamic_partitions("floor_txids", [str(key)])
            start = time.perf_counter()
            result = job.execute_in_process(instance=instance, partition_key=str(key))
            walls.append(time.perf_counter() - start)
            if not result.success:
                raise RuntimeError(f"run {key} failed")
        events = len(instance.all_logs(result.run_id))
        storage = type(instance.event_log_storage).__name__
    return {
        "assets": assets,
        "checks": checks,
        "lineage": lineage,
        "dynamic_partitions": dynamic,
        "event_log_storage": storage,
        "events_per_run": events,
        "run_walls_s": [round(w, 3) for w in walls],
        "median_run_s": round(statistics.median(walls[warm:]), 3),
    }


def main(argv: list[str] | None = None) -> None:
    """Print the floor as one line of JSON."""
    import json
    import logging

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assets", type=int, default=6)
    parser.add_argument("--checks", type=int, default=9)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warm", type=int, default=3, help="first runs left out of the median")
    parser.add_argument("--reuse-engines", action="store_true")
    parser.add_argument("--lineage", action="store_true", help="the example's dependency edges")
    parser.add_argument("--dynamic", action="store_true", help="dynamic partitions, as txids")
    args = parser.parse_args(argv)
    if args.assets < 1 or args.checks < 0 or args.runs <= args.warm or args.warm < 0:
        parser.error("need --assets >= 1, --checks >= 0, 0 <= --warm < --runs")
    if args.lineage and args.assets < 6:
        parser.error("--lineage needs --assets >= 6 (the example word count's six assets)")
    logging.getLogger("dagster").setLevel(logging.WARNING)
    result = measure(
        args.assets,
        args.checks,
        args.runs,
        args.warm,
        args.reuse_engines,
        lineage=args.lineage,
        dynamic=args.dynamic,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()

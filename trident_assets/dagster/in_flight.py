"""Which runs of a topology are in flight, however they were launched.

A run the coordinator sensor launches carries the ``trident/topology`` tag; one launched from
the UI's Materialize button, a backfill or ``execute_in_process`` may not. Every run that
executes a topology's multi-asset needs its concurrency pool (:func:`pool_name`), so a run is
the topology's when it carries the tag, needs the pool, or selects one of its assets.
"""

from __future__ import annotations

from collections.abc import Collection

import dagster as dg

__all__ = [
    "IN_FLIGHT",
    "QUARANTINE_TAG",
    "TOPOLOGY_TAG",
    "in_flight_run",
    "pool_name",
    "touches_topology",
]

TOPOLOGY_TAG = "trident/topology"
"""Run tag naming the topology; dagster.yaml limits it to one run at a time."""

QUARANTINE_TAG = "trident/quarantine"
"""Run tag (its value: the reason): set the run's one txid aside instead of processing it."""

IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
"""Run statuses of a run that may still commit a txid."""

SCANNED_RUNS = 100
"""How many in-flight runs (newest first) the check looks at."""


def pool_name(topology: str) -> str:
    """The concurrency pool of ``topology``'s batch multi-asset (one slot: one run at a time)."""
    return f"trident_{topology}"


def touches_topology(run: dg.DagsterRun, topology: str, keys: Collection[dg.AssetKey]) -> bool:
    """True when ``run`` may commit txids of ``topology`` (its tag, its pool or its assets)."""
    if run.tags.get(TOPOLOGY_TAG) == topology:
        return True
    concurrency = run.run_op_concurrency
    if concurrency is not None and pool_name(topology) in (concurrency.all_pools or ()):
        return True
    selection = run.asset_selection
    if selection is not None:
        return not selection.isdisjoint(keys)
    checks = run.asset_check_selection
    return bool(checks) and any(check.asset_key in keys for check in checks)


def in_flight_run(
    instance: dg.DagsterInstance, topology: str, keys: Collection[dg.AssetKey]
) -> dg.DagsterRun | None:
    """An unfinished run that may commit txids of ``topology``, tagged or not (None: none)."""
    tagged = instance.get_runs(
        filters=dg.RunsFilter(tags={TOPOLOGY_TAG: topology}, statuses=IN_FLIGHT), limit=1
    )
    if tagged:
        return tagged[0]
    wanted = set(keys)
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=SCANNED_RUNS):
        if touches_topology(run, topology, wanted):
            return run
    return None

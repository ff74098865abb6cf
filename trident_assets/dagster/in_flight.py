"""Which runs of a topology are in flight, however they were launched.

A run the coordinator sensor launches carries the ``trident/topology`` tag; one launched from
the UI's Materialize button, a backfill or ``execute_in_process`` may not. Every run that
executes a topology's multi-asset needs its concurrency pool (:func:`batches_pool`), so a run
is the topology's when it carries the tag, needs the pool, or selects one of its assets.

The pool is the state store's writer: one per DuckDB file (a run holds the file's write lock
from its first txid to its checks, so the runs of every topology writing one file take turns
in Dagster's queue instead of failing on the lock), one per topology with PostgreSQL. A run
holding a shared pool counts as in flight for every topology of that file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from pathlib import Path

import dagster as dg

__all__ = [
    "IN_FLIGHT",
    "batches_pool",
    "QUARANTINE_TAG",
    "TOPOLOGY_TAG",
    "TXID_TAG",
    "in_flight_run",
    "pool_name",
    "touches_topology",
]

TOPOLOGY_TAG = "trident/topology"
"""Run tag naming the topology; dagster.yaml limits it to one run at a time."""

TXID_TAG = "trident/txid"
"""Run tag: the first txid a run processes (a live run: the txid it works on); the
coordinator counts a txid's attempts by it."""

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


def batches_pool(topology: str, state_dsn: str | None, database: Path) -> str:
    """The pool of ``topology``'s batch multi-asset: its DuckDB file's, or its own (PostgreSQL).

    ``trident_duckdb_<10 hex digits of the file's absolute path>`` is shared by every
    topology writing that file; :func:`pool_name` is the topology's own.
    """
    if state_dsn:
        return pool_name(topology)
    digest = hashlib.sha256(str(Path(database).absolute()).encode()).hexdigest()[:10]
    return f"trident_duckdb_{digest}"


def touches_topology(
    run: dg.DagsterRun,
    topology: str,
    keys: Collection[dg.AssetKey],
    pool: str,
) -> bool:
    """True when ``run`` may commit txids of ``topology`` (its tag, its pool or its assets).

    ``pool``: the topology's batches pool (:func:`batches_pool`).
    """
    if run.tags.get(TOPOLOGY_TAG) == topology:
        return True
    concurrency = run.run_op_concurrency
    if concurrency is not None and pool in (concurrency.all_pools or ()):
        return True
    selection = run.asset_selection
    if selection is not None:
        return not selection.isdisjoint(keys)
    checks = run.asset_check_selection
    return bool(checks) and any(check.asset_key in keys for check in checks)


def in_flight_run(
    instance: dg.DagsterInstance,
    topology: str,
    keys: Collection[dg.AssetKey],
    pool: str,
) -> dg.DagsterRun | None:
    """An unfinished run that may commit txids of ``topology``, tagged or not (None: none).

    ``pool``: the topology's batches pool (:func:`batches_pool`).
    """
    tagged = instance.get_runs(
        filters=dg.RunsFilter(tags={TOPOLOGY_TAG: topology}, statuses=IN_FLIGHT), limit=1
    )
    if tagged:
        return tagged[0]
    wanted = set(keys)
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=SCANNED_RUNS):
        if touches_topology(run, topology, wanted, pool):
            return run
    return None

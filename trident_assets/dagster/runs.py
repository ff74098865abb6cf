"""Driving batch runs in-process: one run per txid, or one catch-up run over a txid range.

What the coordinator sensor launches through the daemon, callable from Python (benchmarks,
scripts, tests): the txids' partitions are added in order, then the topology's asset job
runs in this process, so the SparkSession is created once and reused by later runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from trident_assets.dagster.checks import CheckSettings
from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.in_flight import TOPOLOGY_TAG, TXID_TAG
from trident_assets.dagster.partitions import range_tags, txid_key, txid_partitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.errors import ConfigError
from trident_assets.stream.topology import TridentTopology

__all__ = ["fail_killed_run", "materialize_batches"]


def materialize_batches(
    topology: TridentTopology,
    trident: TridentResource,
    instance: dg.DagsterInstance,
    txids: Sequence[int],
    *,
    catch_up: bool,
    checks: CheckSettings | None = None,
    job: Any = None,
    tags: Mapping[str, str] | None = None,
) -> list[dg.ExecuteInProcessResult]:
    """Run ``txids`` (contiguous, ascending) of ``topology`` through Dagster in this process.

    ``catch_up``: ONE run over the whole range (each txid committed separately, in order,
    with its own materializations); else one run per txid. Failed runs are returned, not
    raised (``result.success``). ``job`` reuses an already resolved asset job. ``tags``: more
    run tags (e.g. ``{"trident/exactly_once": "full"}``: a full ``exactly_once`` check).

    Raises:
        ConfigError: ``txids`` is empty or not contiguous ascending.
    """
    ordered = list(txids)
    if not ordered or ordered != list(range(ordered[0], ordered[0] + len(ordered))):
        msg = f"txids must be contiguous and ascending, got {ordered[:5]}..."
        raise ConfigError(msg)
    if job is None:
        job = trident_definitions(
            [topology], trident, checks=checks
        ).resolve_implicit_global_asset_job_def()
    instance.add_dynamic_partitions(
        txid_partitions(topology.name).name, [txid_key(t) for t in ordered]
    )
    base = {**(tags or {}), TOPOLOGY_TAG: topology.name, "trident/attempt": "0"}
    if catch_up:
        tags = {**base, TXID_TAG: txid_key(ordered[0]), **range_tags(ordered[0], ordered[-1])}
        return [job.execute_in_process(instance=instance, tags=tags, raise_on_error=False)]
    return [
        job.execute_in_process(
            partition_key=txid_key(t),
            instance=instance,
            tags={**base, TXID_TAG: txid_key(t)},
            raise_on_error=False,
        )
        for t in ordered
    ]


def fail_killed_run(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> list[str]:
    """Record a run whose process was killed as failed, its unfinished steps too.

    A killed process records nothing itself: its supervisor reports the failure. Each step
    that started but never finished gets a STEP_FAILURE event with ``message`` (else the UI
    shows it executing forever), then the run a RUN_FAILURE. Returns the steps marked failed.
    """
    import logging

    from dagster._core.execution.plan.objects import ErrorSource, StepFailureData
    from dagster._utils.error import SerializableErrorInfo

    unfinished = [
        stats.step_key
        for stats in instance.get_run_step_stats(run.run_id)
        if stats.status is not None and stats.status.value == "IN_PROGRESS"
    ]
    for step_key in unfinished:
        error = SerializableErrorInfo(message=message, stack=[], cls_name=None)
        event = dg.DagsterEvent(
            event_type_value=dg.DagsterEventType.STEP_FAILURE.value,
            job_name=run.job_name,
            step_key=step_key,
            step_kind_value="COMPUTE",
            message=f'Execution of step "{step_key}" failed: {message}',
            event_specific_data=StepFailureData(
                error=error, user_failure_data=None, error_source=ErrorSource.UNEXPECTED_ERROR
            ),
        )
        instance.report_dagster_event(event, run_id=run.run_id, log_level=logging.ERROR)
    instance.report_run_failed(run, message=message)
    return unfinished

"""The coordinator sensor: launches the next txid when the last one committed and data is waiting.

It reads Dagster's instance and the log's offset files, never the DuckDB state (a running
batch holds its lock). A failed txid is replayed with a new run key per attempt, after
Storm's exponential backoff; after ``max_attempts`` it stops and says why.
"""

import time
from typing import Any

import dagster as dg

from trident_assets.core.retry import ExponentialBackoff
from trident_assets.dagster.assets import TOPOLOGY_TAG, asset_keys
from trident_assets.dagster.partitions import txid_key, txid_partitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.spouts.ranges import partition_sort_key
from trident_assets.stream.topology import TridentTopology

__all__ = ["coordinator_sensor", "decide_next"]

IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def _committed_txid(instance: dg.DagsterInstance, key: dg.AssetKey) -> tuple[int, dict[str, Any]]:
    """The highest materialized txid of a spout asset and the offsets it read."""
    done = instance.get_materialized_partitions(key)
    last = max((int(k) for k in done), default=0)
    if last == 0:
        return 0, {}
    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[txid_key(last)]), limit=1
    ).records
    offsets: dict[str, Any] = {}
    for record in found:
        materialization = record.asset_materialization
        value = None if materialization is None else materialization.metadata.get("offsets")
        offsets = dict(value.value) if value is not None else {}
    return last, offsets


def decide_next(
    instance: dg.DagsterInstance,
    topology: TridentTopology,
    trident: TridentResource,
    backoff: ExponentialBackoff,
    max_attempts: int,
    now: float | None = None,
) -> dg.SensorResult | dg.SkipReason:
    """Decide what the coordinator does now: run the next txid, replay one, wait, or give up."""
    now = time.time() if now is None else now
    keys = asset_keys(topology)
    running = instance.get_runs(
        filters=dg.RunsFilter(tags={TOPOLOGY_TAG: topology.name}, statuses=IN_FLIGHT), limit=1
    )
    if running:
        return dg.SkipReason(f"{topology.name}: run {running[0].run_id} is in flight")
    last, offsets = 0, {}
    for spout_id in topology.spouts:
        spout_last, spout_offsets = _committed_txid(instance, keys[f"spout:{spout_id}"])
        last = max(last, spout_last)
        offsets |= spout_offsets
    txid = last + 1
    key = txid_key(txid)
    attempts = instance.get_runs(
        filters=dg.RunsFilter(tags={TOPOLOGY_TAG: topology.name, "dagster/partition": key})
    )
    if len(attempts) >= max_attempts:
        return dg.SkipReason(
            f"{topology.name}: txid {txid} failed {len(attempts)} times (max_attempts="
            f"{max_attempts}); giving up. See run {attempts[0].run_id}, fix the cause, then "
            "launch the partition by hand or raise max_attempts."
        )
    if attempts:
        record = instance.get_run_record_by_id(attempts[0].run_id)
        ended = record.end_time if record is not None and record.end_time else now
        due = ended + backoff.delay(len(attempts))
        if now < due:
            return dg.SkipReason(f"{topology.name}: replaying txid {txid} in {due - now:.1f}s")
    elif not _has_new_data(topology, trident, offsets):
        return dg.SkipReason(f"{topology.name}: no new records after txid {last}")
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                partition_key=key,
                run_key=f"{topology.name}-{key}-a{len(attempts)}",
                tags={TOPOLOGY_TAG: topology.name, "trident/attempt": str(len(attempts))},
            )
        ],
        dynamic_partitions_requests=[txid_partitions(topology.name).build_add_request([key])],
    )


def _has_new_data(
    topology: TridentTopology, trident: TridentResource, offsets: dict[str, Any]
) -> bool:
    """True if any spout partition has records past the last committed batch."""
    log = trident.log()
    for node in topology.spouts.values():
        source = node.args["spout"].source(log)
        for partition in sorted(source.partitions(), key=partition_sort_key):
            done = offsets.get(partition)
            start = source.earliest(partition) if done is None else int(done[1]) + 1
            if source.latest(partition) > start:
                return True
    return False


def coordinator_sensor(
    topology: TridentTopology,
    *,
    backoff: ExponentialBackoff | None = None,
    max_attempts: int = 5,
    interval_s: int = 5,
) -> dg.SensorDefinition:
    """The coordinator sensor of ``topology`` (running by default)."""
    policy = backoff or ExponentialBackoff(
        initial_delay_s=1.0, delay_period_s=2.0, max_delay_s=60.0
    )
    keys = list(asset_keys(topology).values())

    @dg.sensor(
        name=f"{topology.name}_coordinator",
        target=keys,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Launches txid N+1 of {topology.name} once N committed and data waits; "
        "replays failed txids with exponential backoff.",
    )
    def _coordinator(context: dg.SensorEvaluationContext, trident: TridentResource) -> Any:
        return decide_next(context.instance, topology, trident, policy, max_attempts)

    return _coordinator

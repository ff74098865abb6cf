"""The coordinator sensor: launches the next txid when the last one committed and data is waiting.

It reads Dagster's instance and the log's offset files, never the DuckDB state (a running
batch holds its lock). A failed txid is replayed with a new run key per attempt, after
Storm's exponential backoff; after ``max_attempts`` (or the retry policy's ``max_retries`` + 1,
if fewer) it stops and says why.

It waits while any run of the topology is in flight, tagged by it or not (a run from the
UI's Materialize button or a backfill: :func:`~.in_flight.in_flight_run`). The last
committed txid is the highest materialized over all the topology's assets, so a run that
selected only some of them still counts.

Every coordinator ticks every 5 s (the daemon's shortest loop), also for a topology whose log
was empty when the definitions loaded: its first records start a run within one tick.

In live mode (:mod:`.live`) the coordinator launches the topology's live run instead of a run
per txid (or range): the same decision (wait while a run is in flight, replay after backoff,
give up or quarantine after ``max_attempts``), another job.
"""

import time
from typing import Any

import dagster as dg

from trident_assets.core.retry import ExponentialBackoff
from trident_assets.dagster.graph import asset_keys
from trident_assets.dagster.in_flight import (
    QUARANTINE_TAG,
    TOPOLOGY_TAG,
    TXID_TAG,
    batches_pool,
    in_flight_run,
)
from trident_assets.dagster.live import LIVE_TAG, batches_needed
from trident_assets.dagster.live_stop import stop_reason
from trident_assets.dagster.partitions import range_tags, txid_key, txid_partitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.errors import ConfigError
from trident_assets.kafka.spout import backoff_for
from trident_assets.log.files import UnknownTopicError
from trident_assets.planner import quarantine_refusal
from trident_assets.spouts.ranges import partition_sort_key
from trident_assets.stream.topology import TridentTopology

__all__ = ["coordinator_name", "coordinator_sensor", "decide_next"]


def coordinator_name(topology: str) -> str:
    """The name of the coordinator sensor of topology ``topology``: ``<topology>_coordinator``.

    Dagster tags each run the sensor requests with it (``dagster/sensor_name``): the UI's Runs
    page shows such a run as launched by the sensor.
    """
    return f"{topology}_coordinator"


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
    max_catch_up: int = 1,
    on_poison: str = "stop",
    live_job: str | None = None,
) -> dg.SensorResult | dg.SkipReason:
    """Decide what the coordinator does now: run the next txid(s), replay one, wait, or give up.

    When more than one batch of records waits (by each spout's ``max_batch_size``), up to
    ``max_catch_up`` txids are requested as ONE range run (catch-up): each txid still
    commits separately and in order. Replays of a failed txid always run it alone. After
    ``max_attempts`` failures (fewer where ``backoff.max_retries`` says so):
    ``on_poison="stop"`` stops and says what to run;
    ``"quarantine"`` launches one run that sets the txid's records aside (where sound).
    ``live_job``: the topology's live job (live mode): every run requested is a run of it,
    which commits from the next txid on as records arrive (a quarantine run sets the txid
    aside first); none is requested while ``trident ui`` is stopping (:mod:`.live_stop`).
    """
    now = time.time() if now is None else now
    keys = asset_keys(topology)
    pool = batches_pool(topology.name, trident.state_dsn, trident.database)
    running = in_flight_run(instance, topology.name, keys.values(), pool)
    if running is not None:
        return dg.SkipReason(f"{topology.name}: run {running.run_id} is in flight")
    stopping = None if live_job is None else stop_reason(instance.root_directory)
    if stopping is not None:
        return dg.SkipReason(f"{topology.name}: no live run is launched: {stopping}")
    last, offsets = 0, {}
    for spout_id in topology.spouts:
        spout_last, spout_offsets = _committed_txid(instance, keys[f"spout:{spout_id}"])
        last = max(last, spout_last)
        offsets |= spout_offsets
    for role, key in keys.items():
        if not role.startswith("spout:"):
            done = instance.get_materialized_partitions(key)
            last = max(last, max((int(k) for k in done), default=0))
    published = trident.replica().latest(topology.name) or 0
    external = published > last  # committed outside Dagster (e.g. `trident quarantine add`)
    last = max(last, published)
    txid = last + 1
    key = txid_key(txid)
    attempts = instance.get_runs(
        filters=dg.RunsFilter(tags={TOPOLOGY_TAG: topology.name, TXID_TAG: key})
    )
    limit, setting = _attempt_limit(backoff, max_attempts)
    if len(attempts) >= limit:
        return _poison(topology, txid, attempts, setting, on_poison, live_job)
    count = 1
    if attempts:
        record = instance.get_run_record_by_id(attempts[0].run_id)
        ended = record.end_time if record is not None and record.end_time else now
        due = ended + backoff.delay(len(attempts))
        if now < due:
            return dg.SkipReason(f"{topology.name}: replaying txid {txid} in {due - now:.1f}s")
    elif not external:  # else one run: Dagster's offsets predate the txid committed outside
        try:
            pending = _pending_batches(topology, trident, offsets)
        except UnknownTopicError as missing:
            if last:  # a topic vanished under committed txids: the tick fails, loudly
                raise
            return dg.SkipReason(f"{topology.name}: waiting for its topic: {missing}")
        if pending == 0 and last == 0:
            return dg.SkipReason(f"{topology.name}: no records in its sources yet")
        if pending == 0:
            return dg.SkipReason(f"{topology.name}: no new records after txid {last}")
        count = max(1, min(pending, max_catch_up))
    new_keys = [txid_key(t) for t in range(txid, txid + count)]
    tags = {TOPOLOGY_TAG: topology.name, "trident/attempt": str(len(attempts)), TXID_TAG: key}
    if live_job is not None or count == 1:
        new_keys = [key]
        request = _txid_request(topology.name, key, f"a{len(attempts)}", tags, live_job)
    else:
        request = dg.RunRequest(
            run_key=f"{topology.name}-{key}-{new_keys[-1]}",
            tags={**tags, **range_tags(txid, txid + count - 1)},
        )
    return dg.SensorResult(
        run_requests=[request],
        dynamic_partitions_requests=[txid_partitions(topology.name).build_add_request(new_keys)],
    )


def _txid_request(
    name: str, key: str, attempt: str, tags: dict[str, str], live_job: str | None
) -> dg.RunRequest:
    """A run of partition ``key`` (run key ``<name>-<key>-<attempt>``), or of ``live_job``."""
    if live_job is not None:
        return dg.RunRequest(
            job_name=live_job,
            run_key=f"{name}-live-{key}-{attempt}",
            tags={**tags, LIVE_TAG: "true"},
        )
    return dg.RunRequest(partition_key=key, run_key=f"{name}-{key}-{attempt}", tags=tags)


def _attempt_limit(backoff: ExponentialBackoff, max_attempts: int) -> tuple[int, str]:
    """How many failed runs of a txid are allowed, and the setting that says so.

    The sensor's ``max_attempts``, or fewer where the retry policy's ``max_retries`` (Storm's:
    failure ``n`` is retried while ``n <= max_retries``) allows fewer.
    """
    retries = backoff.max_retries
    if retries is not None and retries + 1 < max_attempts:
        return retries + 1, f"max_retries={retries} of the retry policy"
    return max_attempts, f"max_attempts={max_attempts}"


def _poison(
    topology: TridentTopology,
    txid: int,
    attempts: list[Any],
    setting: str,
    on_poison: str,
    live_job: str | None = None,
) -> dg.SensorResult | dg.SkipReason:
    """A txid out of attempts (``setting`` names the limit): quarantine it if asked, or stop.

    In live mode (``live_job``) the quarantine run is a live run that sets the txid aside first.
    """
    name, key = topology.name, txid_key(txid)
    refusal = quarantine_refusal(topology)
    tried = [run for run in attempts if QUARANTINE_TAG in run.tags]
    if on_poison == "quarantine" and refusal is None and not tried:
        reason = (
            f"txid {txid} failed {len(attempts)} times ({setting}); last run {attempts[0].run_id}"
        )
        tags = {TOPOLOGY_TAG: name, TXID_TAG: key, QUARANTINE_TAG: reason}
        return dg.SensorResult(
            run_requests=[_txid_request(name, key, "quarantine", tags, live_job)]
        )
    head = (
        f"{name}: txid {txid} failed {len(attempts)} times ({setting}); "
        f"giving up. See run {attempts[0].run_id}. Fix the cause, then launch partition {key} "
        f"by hand or raise {setting.split('=')[0]}"
    )
    if tried:
        return dg.SkipReason(f"{head}. Its quarantine run {tried[0].run_id} failed too.")
    if refusal is not None:
        return dg.SkipReason(f"{head}. It cannot be quarantined: {refusal}.")
    return dg.SkipReason(
        f"{head}. Or set its records aside and move on: `trident quarantine add {name} {txid}` "
        f"(or launch partition {key} with tag {QUARANTINE_TAG}=<reason>; "
        'coordinator_sensor(on_poison="quarantine") does it itself), then '
        f"`trident quarantine replay {name}` once the cause is fixed."
    )


def _pending_batches(
    topology: TridentTopology, trident: TridentResource, offsets: dict[str, Any]
) -> int:
    """How many batches the records past the last committed batch fill (0: nothing new)."""
    log = trident.log()
    waiting: dict[str, int] = {}
    for spout_id, node in topology.spouts.items():
        source = node.args["spout"].source(log)
        waiting[spout_id] = 0
        for partition in sorted(source.partitions(), key=partition_sort_key):
            done = offsets.get(partition)
            start = source.earliest(partition) if done is None else int(done[1]) + 1
            waiting[spout_id] += max(0, source.latest(partition) - start)
    return batches_needed(topology, waiting)


def coordinator_sensor(
    topology: TridentTopology,
    *,
    backoff: ExponentialBackoff | None = None,
    max_attempts: int = 5,
    interval_s: int = 5,
    max_catch_up: int = 10,
    on_poison: str = "stop",
    live: dg.JobDefinition | None = None,
) -> dg.SensorDefinition:
    """The coordinator sensor of ``topology`` (running by default), ticking every ``interval_s``.

    ``max_catch_up`` caps how many pending txids one run may process (1: one run per txid).
    A txid is given up after ``max_attempts`` failed runs, or after ``max_retries + 1`` where
    the retry policy's ``max_retries`` is lower.
    ``on_poison``: what to do with a txid given up: ``"stop"``
    (the skip reason says what to run) or ``"quarantine"`` (set its records aside and move
    on, where :func:`~trident_assets.planner.quarantine_refusal` allows).
    Replays wait ``backoff``, else the ``retry`` policy a spout declares (e.g. a KafkaSpout's),
    else 1 s, 2 s, 4 s ... capped at 60 s. ``live``: the topology's live job
    (:func:`~.live.live_job`): the sensor launches it instead of runs of the txids assets.
    """
    if on_poison not in ("stop", "quarantine"):
        msg = f'on_poison must be "stop" or "quarantine", got {on_poison!r}'
        raise ConfigError(msg)
    policy = (
        backoff
        or backoff_for(topology)
        or ExponentialBackoff(initial_delay_s=1.0, delay_period_s=2.0, max_delay_s=60.0)
    )
    keys = list(asset_keys(topology).values())
    what = (
        f"the live run of {topology.name} (it commits txid after txid as records arrive)"
        if live is not None
        else f"txid N+1 of {topology.name} once N committed and data waits"
    )

    @dg.sensor(
        name=coordinator_name(topology.name),
        target=keys if live is None else live,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Launches {what}; replays failed txids with exponential backoff.",
    )
    def _coordinator(context: dg.SensorEvaluationContext, trident: TridentResource) -> Any:
        return decide_next(
            context.instance,
            topology,
            trident,
            policy,
            max_attempts,
            max_catch_up=max_catch_up,
            on_poison=on_poison,
            live_job=None if live is None else live.name,
        )

    return _coordinator

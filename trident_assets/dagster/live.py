"""The live run of a topology: one bounded run that commits txid after txid as records arrive.

A sensor-launched run per txid pays the sensor's tick and a run's launch for every txid (about
8 s of a record's 10 s under ``trident ui``). The live run pays them once: it polls the
topology's log every ``poll_interval_s`` and, whenever records wait, commits the next txid(s)
through the same runner as every other run (:meth:`TopologyRunner.run_batches`: the one txid
loop and the one commit function), so strict order, replay and exactly-once are unchanged.

Each txid is still one partition of ``<topology>_txids``: the run adds the partition, then
logs the same materializations (:func:`~.batch_events.batch_events`) a per-txid run's step
yields, as soon as the txid committed and was published. The asset checks
(:func:`~.checks.evaluate_checks`) cover every txid the run committed: they are evaluated when
the log is idle and ``check_every_s`` passed since the last evaluation, and when the run ends
(each evaluation replaces the run's previous one on the check's page).

The live job is an op job, not a run of the txids assets: in Dagster 1.13 an op's compute
may yield ``AssetMaterialization`` and ``AssetObservation`` events for any asset and
partition, and ``AssetCheckEvaluation`` events for any check, each stored as it is yielded
(``execute_step``); the event log keeps one check execution per (check, run, partition), so a
later evaluation in the same run updates the earlier one.

One writer per topology: the live run refuses to start while any other run that may commit
the topology's txids is in flight (:func:`other_run_in_flight`), and it carries the topology's
run tag and pool, so no other such run starts while it runs. It ends after ``idle_s`` without
records, after ``max_duration_s``, or after ``max_txids`` txids, and after the txids in hand
once ``trident ui`` is stopping (:mod:`.live_stop`); the coordinator sensor launches the next
one when records wait. A killed live run loses nothing: a txid it had not committed is
replayed (its recorded ranges) by the next live run.
"""

import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from trident_assets.dagster.batch_events import batch_events, summary
from trident_assets.dagster.batch_steps import (
    caught_up,
    failed,
    opened_store,
    quarantine_txid,
    topology_runner,
)
from trident_assets.dagster.check_specs import FULL_CHECK_TAG, CheckSettings
from trident_assets.dagster.checks import evaluate_checks
from trident_assets.dagster.graph import asset_keys
from trident_assets.dagster.in_flight import (
    IN_FLIGHT,
    QUARANTINE_TAG,
    SCANNED_RUNS,
    TOPOLOGY_TAG,
    TXID_TAG,
    touches_topology,
)
from trident_assets.dagster.live_commits import Failed, LiveCommitter
from trident_assets.dagster.live_settings import LIVE_TAG, LiveSettings
from trident_assets.dagster.live_stop import stop_reason
from trident_assets.dagster.overview import overview_event
from trident_assets.dagster.partitions import txid_key, txid_partitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.window_assets import FinalsAsset, finals_events
from trident_assets.errors import ConfigError
from trident_assets.names import LIVE_ENV
from trident_assets.runtime.outcomes import BatchOutcome
from trident_assets.stream.topology import TridentTopology

__all__ = [
    "LIVE_TAG",
    "LiveSettings",
    "batches_needed",
    "live_job",
    "live_topologies",
]


def live_topologies(live: bool | Collection[str] | None, names: Sequence[str]) -> set[str]:
    """The topologies of ``names`` that run live.

    ``live``: True (all), False (none), topology names, or None: as the environment variable
    ``TRIDENT_LIVE`` says (``all``, names separated by commas; unset: none).

    Raises:
        ConfigError: a name is not one of the topologies; nothing was defined.
    """
    import os

    where = "live"
    if live is None:
        text = os.environ.get(LIVE_ENV, "").strip()
        where = f"{LIVE_ENV}={text!r}"
        live = text == "all" or [n.strip() for n in text.split(",") if n.strip()]
    if isinstance(live, bool):
        return set(names) if live else set()
    if isinstance(live, str):
        live = [live]
    unknown = sorted(set(live) - set(names))
    if unknown:
        msg = (
            f"{where} names {', '.join(map(repr, unknown))}, not a topology of these "
            f"definitions ({', '.join(names)}): name one of them, or all"
        )
        raise ConfigError(msg)
    return set(live)


def other_run_in_flight(
    instance: dg.DagsterInstance,
    topology: str,
    keys: Collection[dg.AssetKey],
    pool: str,
    run_id: str,
) -> dg.DagsterRun | None:
    """An unfinished run created before ``run_id`` that may commit txids of ``topology``.

    Any run :func:`~.in_flight.touches_topology` accepts (tagged, needing ``pool`` or
    selecting one of ``keys``), queued ones too. The older run wins: of two live runs
    started together, the newer one is refused, whichever reaches the check first.
    """
    own = instance.get_run_record_by_id(run_id)
    created = None if own is None else own.create_timestamp
    wanted = set(keys)
    records = instance.get_run_records(
        filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=SCANNED_RUNS
    )
    for record in records:
        run = record.dagster_run
        older = created is None or record.create_timestamp <= created
        if run.run_id != run_id and older and touches_topology(run, topology, wanted, pool):
            return run
    return None


def batches_needed(topology: TridentTopology, waiting: Mapping[str, int]) -> int:
    """How many batches the records ``waiting`` per spout fill (0: none wait).

    Per spout: its records divided by its ``max_batch_size`` (rounded up; one batch if
    unlimited); the topology needs as many as its busiest spout.
    """
    batches = 0
    for spout_id, count in waiting.items():
        size = topology.spouts[spout_id].args["spout"].config.max_batch_size
        if count:
            batches = max(batches, 1 if not size else -(-count // size))
    return batches


def _check_evaluation(
    instance: dg.DagsterInstance, result: dg.AssetCheckResult, txid: int
) -> dg.AssetCheckEvaluation:
    """``result`` as the evaluation event a step logs, targeting ``txid``'s materialization."""
    key = result.asset_key
    assert key is not None  # evaluate_checks names the asset and the check
    assert result.check_name is not None
    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[txid_key(txid)]), limit=1
    ).records
    target = None
    if found:
        from dagster._core.definitions.asset_checks.asset_check_evaluation import (
            AssetCheckEvaluationTargetMaterializationData,
        )

        target = AssetCheckEvaluationTargetMaterializationData(
            run_id=found[0].event_log_entry.run_id,
            storage_id=found[0].storage_id,
            timestamp=found[0].timestamp,
        )
    return dg.AssetCheckEvaluation(
        asset_key=key,
        check_name=result.check_name,
        passed=result.passed,
        metadata=result.metadata,
        target_materialization_data=target,
        severity=result.severity,
        description=result.description,
    )


def live_job(
    topology: TridentTopology,
    pool: str,
    checks: CheckSettings | None = None,
    finals: Sequence[FinalsAsset] = (),
    settings: LiveSettings | None = None,
    resources: Mapping[str, object] | None = None,
) -> dg.JobDefinition:
    """The live job of ``topology`` (see the module): one op, in process, holding ``pool``.

    ``resources``: its ``trident`` and ``pyspark`` resources, bound to the job (a sensor's job
    left for ``Definitions`` to bind gets its sensor copied, which warns ``BetaWarning``).
    """
    name = topology.name
    keys = asset_keys(topology)
    live = settings or LiveSettings()
    check_settings = checks or CheckSettings()

    @dg.op(
        name=f"{name}_live_commits",
        out={},
        pool=pool,
        tags={TOPOLOGY_TAG: name},
        description=f"Commits txid after txid of {name} as records arrive (polls its log "
        f"every {live.poll_interval_s:g} s; ends after {live.idle_s:g} s idle or "
        f"{live.max_duration_s:g} s).",
    )
    def _live(
        context: dg.OpExecutionContext,
        trident: TridentResource,
        pyspark: LazyPySparkResource,
    ) -> Iterator[Any]:
        yield from _run_live(context, trident, pyspark, topology, keys, pool, live, check_settings,
                             finals)  # fmt: skip

    @dg.job(
        name=f"{name}_live",
        tags={TOPOLOGY_TAG: name, LIVE_TAG: "true"},
        executor_def=dg.in_process_executor,
        resource_defs=dict(resources or {}),
        description=f"The live run of {name}: txids committed seconds after their records "
        "arrive, each one a partition of its txids assets.",
    )
    def _job() -> None:
        _live()

    return _job


def _run_live(
    context: dg.OpExecutionContext,
    trident: TridentResource,
    pyspark: LazyPySparkResource,
    topology: TridentTopology,
    keys: dict[str, dg.AssetKey],
    pool: str,
    live: LiveSettings,
    check_settings: CheckSettings,
    finals: Sequence[FinalsAsset],
) -> Iterator[Any]:
    """The live op's body: refuse a second writer, then poll and commit until a limit."""
    name = topology.name
    stop_dir = context.instance.root_directory
    why = stop_reason(stop_dir)
    if why is not None:
        context.log.info(f"live run of {name} ends before it began: {why}")
        return
    other = other_run_in_flight(context.instance, name, keys.values(), pool, context.run_id)
    if other is not None:
        msg = (
            f"{name}: run {other.run_id} ({other.job_name}, {other.status.value}) may commit "
            f"txids of {name}; a live run is the topology's only writer, so this one did not "
            "start and nothing was read or written. The coordinator sensor launches a live run "
            "once that run has finished"
        )
        context.log.error(msg)
        raise dg.Failure(description=msg)
    attempt = int(context.run.tags.get("trident/attempt", "0"))
    full = context.run.tags.get(FULL_CHECK_TAG) == "full"
    tagged = context.run.tags.get(TXID_TAG)  # the coordinator's next txid, if it launched us
    first_guess = int(tagged) if tagged else 1
    context.log.info(f"Spark: {trident.spark_target}")
    spark = pyspark.spark_session
    with opened_store(context, trident, topology, first_guess) as store:
        runner = topology_runner(trident, topology, spark, store)
        last = runner.last_committed() or 0
        # txids the store committed but Dagster never heard of (a run killed between its
        # commit and its events) are re-run first: nothing changes, their observations say so
        next_txid = first_guess if tagged and first_guess <= last else last + 1
        next_txid = min(next_txid, _last_reported(context.instance, topology, keys) + 1)
        yield from caught_up(context, trident, topology, runner, keys, next_txid)
        reason = context.run.tags.get(QUARANTINE_TAG)
        partitions = txid_partitions(name).name
        committer = LiveCommitter(
            runner,
            context.instance,
            context.run_id,
            live,
            next_txid,
            # records after each spout's last final ranges; a txid emitted but not committed
            # (a killed run's) counts: it is replayed
            pending=lambda: batches_needed(topology, runner.backlog_by_spout()),
            quarantine=(
                None
                if reason is None
                else lambda txids: quarantine_txid(context, runner, txids, reason)
            ),
        )
        done: list[BatchOutcome] = []  # the run's outcomes, without previews (checks read them)
        unchecked = 0
        started = last_record = last_check = time.monotonic()

        def logged(outcome: BatchOutcome | Failed) -> Iterator[Any]:
            nonlocal unchecked, last_record
            if isinstance(outcome, Failed):
                failed(context, trident, topology, outcome.txid, outcome.error)
            context.instance.add_dynamic_partitions(partitions, [txid_key(outcome.txid)])
            context.log.info(summary(outcome))
            tries = attempt if outcome.txid == next_txid else 0
            yield from batch_events(topology, keys, outcome, tries, True, ())
            if finals:  # they read the store: the committer's between its polls
                with committer.lock:
                    found = list(finals_events(finals, store, outcome, context.instance))
                yield from found
            done.append(replace(outcome, previews={}))
            unchecked += 1
            last_record = time.monotonic()

        def evaluated() -> Iterator[Any]:
            """The checks over the run's txids as evaluation events; the overview if one applied."""
            last = max(o.txid for o in done)
            for result in evaluate_checks(
                topology,
                keys,
                check_settings,
                context.instance,
                runner,
                done,
                full_exactly_once=full,
            ):
                yield _check_evaluation(context.instance, result, last)
            if any(o.applied for o in done):
                yield overview_event(context.instance, trident.home, store, topology)

        committer.start()
        try:
            for item in committer.items_until_done(live.poll_interval_s):
                if item is not ...:
                    yield from logged(item)
                now = time.monotonic()
                if now - started >= live.max_duration_s or now - last_record >= live.idle_s:
                    committer.stopping.set()  # ends after the txids in hand
                if why is None and (why := stop_reason(stop_dir)) is not None:
                    committer.stopping.set()
                if (
                    item is ...
                    and committer.idle.is_set()
                    and unchecked
                    and now - last_check >= live.check_every_s
                ):
                    with committer.lock:  # the store is the committer's between its polls
                        for queued in list(committer.queued()):
                            yield from logged(queued)
                        if committer.idle.is_set():  # records waiting: they go first
                            yield from evaluated()
                            unchecked, last_check = 0, time.monotonic()
        finally:
            committer.stopping.set()
            committer.join()
        if unchecked:
            yield from evaluated()
        ended = "ends" if why is None else f"stopped ({why})"
        context.log.info(
            f"live run of {name} {ended}: {len(done)} txids committed "
            f"({time.monotonic() - started:.1f} s)"
        )


def _last_reported(
    instance: dg.DagsterInstance, topology: TridentTopology, keys: dict[str, dg.AssetKey]
) -> int:
    """The last txid of ``topology`` Dagster recorded (as its spouts' events).

    Materializations and observations both count. The coordinator's next txid may be later:
    it follows the read replica, which a run killed after a commit published to.
    """
    last = 0
    for spout_id in topology.spouts:
        key = keys[f"spout:{spout_id}"]
        done = instance.get_materialized_partitions(key)
        last = max(last, max((int(k) for k in done), default=0))
        seen = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=key), limit=1)
        for record in seen.records:
            observed = record.event_log_entry.asset_observation
            if observed is not None and observed.partition is not None:
                last = max(last, int(observed.partition))
    return last

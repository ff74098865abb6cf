"""Asset checks of a topology, evaluated at the end of every batch run.

On each spout-batch asset:

* ``txids_contiguous``: the materialized txids are exactly 1..N and the store's commit
  marker is N (no gap, nothing committed that Dagster does not show).
* ``ranges_contiguous``: per source partition, each batch starts where the previous
  committed batch ended: no overlap (records counted twice) and no skip (records lost),
  except what retention deleted before an opaque spout read it or a deploy-only reset.
* ``dead_letters_below_threshold``: dead letters / records read by this run's batches at
  most the configured fraction (WARN severity: the records are kept, not lost).
* ``lag_below_threshold``: records waiting in the source (all partitions) after the run's
  last txid at most ``max_lag`` (WARN: the topology falls behind its producers).

On each count/sum state fed only by spouts and functions (``spark.verify.recomputable``):

* ``exactly_once``: the state equals the aggregate of the source records of every committed
  batch from the state's first txid on (its contract's ``first_txid``). A *full*
  evaluation recomputes it from scratch over every committed batch's ranges (from
  Dagster's history). An *incremental* one starts from the state's verified checkpoint in
  the state store (:mod:`trident_assets.backends.verified`: every key's value as verified
  through txid C): it recomputes only the records of the txids committed after C (their
  ranges from this run's batches and those txids' own materializations) and compares,
  exactly, every key those records feed or the state stored a version of after C with its
  checkpoint value plus that aggregate. A passed evaluation records the checkpoint through
  the last committed txid in its own transaction (not when the store committed more txids
  during the check); a failed one deletes it, so the next evaluation is full again. Full
  when there is no checkpoint, when it was taken under other contracts of the topology's
  states (a state added, rebuilt or changed; its first txid) or another set of held
  quarantined txids, when it is ahead of the store (a restored backup), every
  ``CheckSettings.full_every``-th evaluation, and on request (run tag
  ``trident/exactly_once=full``). A key the run did not touch is compared only by a full
  evaluation.
"""

from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from typing import Any

import dagster as dg

from trident_assets.backends.verified import forget_checkpoint, write_checkpoint
from trident_assets.dagster.batch_history import applied_offsets, committed_ranges, latest_applied
from trident_assets.dagster.check_specs import DEAD, EXACTLY_ONCE, LAG, RANGES, TXIDS, CheckSettings
from trident_assets.dagster.exactly_once_plans import (
    ExactlyOncePlan,
    exactly_once_plans,
    since_ranges,
)
from trident_assets.dagster.spout_checks import (
    dead_letters_check,
    lag_check,
    ranges_check,
    txids_check,
)
from trident_assets.errors import BatchUnavailableError
from trident_assets.runtime.outcomes import BatchOutcome
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.verify import StateComparison, verify_increment, verify_state
from trident_assets.stream.topology import TridentTopology

__all__ = ["CheckSettings", "evaluate_checks"]


def _spout_history(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[int, dict[str, Any]]:
    """``{txid: offsets}`` of every applied (not already-committed) batch materialization.

    Reads the asset's whole history (the latest applied materialization of a txid wins).
    """
    history: dict[int, dict[str, Any]] = {}
    cursor = None
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key), limit=1000, cursor=cursor, ascending=True
        )
        for record in page.records:
            applied = applied_offsets(record)
            if applied is not None:
                history[applied[0]] = applied[1]
        if not page.has_more:
            return history
        cursor = page.cursor


def _ends_before(history: dict[int, dict[str, Any]], txid: int) -> dict[str, int]:
    """Per partition, the next offset after the latest batch before ``txid`` that read it."""
    previous: dict[str, int] = {}
    for t in sorted(t for t in history if t < txid):
        for partition, (_first, last) in history[t].items():
            previous[partition] = int(last) + 1
    return previous


def _previous_ends(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    spout_id: str,
    outcomes: Sequence[BatchOutcome],
    history: dict[int, dict[str, Any]] | None,
) -> dict[str, int]:
    """Where the committed batches before this run's first applied txid ended, per partition.

    Equal to :func:`_ends_before` over the whole history for every partition this run's
    batches read. Without ``history`` it reads only txid ``first - 1``'s materializations
    when that batch covered all those partitions (a plan has a range for every partition of
    its source, so this is the usual case), and the whole history otherwise.
    """
    first_txid = min((o.txid for o in outcomes if o.applied), default=None)
    if first_txid is None:
        return {}
    needed: set[str] = set()
    for outcome in outcomes:
        plan = outcome.plans.get(spout_id)
        if outcome.applied and plan is not None:
            needed.update(r.partition for r in plan.ranges)
    if not needed or first_txid == 1:
        return {}
    if history is None:
        latest = latest_applied(instance, key, first_txid - 1)
        if latest is not None and needed <= latest.keys():
            return {partition: int(last) + 1 for partition, (_first, last) in latest.items()}
        history = _spout_history(instance, key)
    return _ends_before(history, first_txid)


def _exactly_once(
    plan: ExactlyOncePlan,
    topology: TridentTopology,
    keys: dict[str, dg.AssetKey],
    instance: dg.DagsterInstance,
    runner: TopologyRunner,
    outcomes: Sequence[BatchOutcome],
    histories: dict[str, dict[int, dict[str, Any]]],
) -> dg.AssetCheckResult:
    """Evaluate one ``exactly_once`` check (see the module); record or drop its checkpoint."""
    first, name = plan.first, plan.name
    last = runner.last_committed() or 0
    since = None
    if plan.full_reason is None:
        since = since_ranges(
            instance, topology, keys, outcomes, plan.checkpoint.through_txid + 1, last
        )
    # the txids verified from: after the checkpoint, or all of them from the state's first
    base = plan.checkpoint.through_txid if since is not None else first - 1
    mode = "incremental" if since is not None else "full"
    try:
        if since is not None:
            result: StateComparison = verify_increment(runner, name, since, base)
        else:
            pending = runner.quarantined()
            history = histories or {
                sid: _spout_history(instance, keys[f"spout:{sid}"]) for sid in topology.spouts
            }
            histories.update(history)
            # a state built from a later txid (backfill="from_retained") covers txids >= first
            ranges = {
                sid: committed_ranges(
                    {t: offsets for t, offsets in history[sid].items() if t >= first},
                    [o for o in outcomes if o.txid >= first],
                    sid,
                    [r for e in pending if e.spout == sid and e.txid >= first for r in e.ranges],
                )
                for sid in topology.spouts
            }
            result = verify_state(runner, name, ranges)
    except BatchUnavailableError as exc:
        forget_checkpoint(runner.store, runner.scope, name)
        return dg.AssetCheckResult(
            asset_key=plan.key,
            check_name=EXACTLY_ONCE,
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"cannot recompute: {exc}",
            metadata={"first_txid": first, "mode": mode},
        )
    moved = (runner.last_committed() or 0) != last
    layout = runner.store.layout(topology.states[name].table)
    recorded = result.passed and not moved and result.verified is not None and layout is not None
    if recorded and layout is not None and result.verified is not None:
        checkpoint = (
            plan.checkpoint if since is not None else replace(plan.checkpoint, incremental_runs=0)
        )
        write_checkpoint(
            runner.store,
            replace(checkpoint, through_txid=last),
            layout,
            result.verified,
            replace=since is None,
        )
    elif not result.passed:
        forget_checkpoint(runner.store, runner.scope, name)
    metadata: dict[str, Any] = {
        "first_txid": first,
        "mode": mode,
        "verified_from_txid": base + 1,
        "verified_through_txid": last,
        "keys_in_state": result.keys_in_state,
        "keys_recomputed": result.keys_expected,
        "mismatches": result.mismatches,
        "sample": dg.MetadataValue.json(result.sample),
        "checkpoint_recorded": recorded,
    }
    if mode == "full":
        metadata["full_because"] = plan.full_reason or "a txid since the checkpoint is unknown"
    return dg.AssetCheckResult(
        asset_key=plan.key,
        check_name=EXACTLY_ONCE,
        passed=result.passed,
        description=None
        if not moved
        else "the store committed txids during the check: no checkpoint recorded",
        metadata=metadata,
    )


def evaluate_checks(
    topology: TridentTopology,
    keys: dict[str, dg.AssetKey],
    settings: CheckSettings,
    instance: dg.DagsterInstance,
    runner: TopologyRunner,
    outcomes: Sequence[BatchOutcome],
    selected: Collection[dg.AssetCheckKey] | None = None,
    *,
    full_exactly_once: bool = False,
) -> Iterator[dg.AssetCheckResult]:
    """Evaluate the checks of :func:`check_specs` after a run's batches (store still open).

    ``selected``: the checks the run selected (None: all); the others are not evaluated.
    ``full_exactly_once``: every ``exactly_once`` evaluation recomputes from scratch.
    """

    def wanted(key: dg.AssetKey, name: str) -> bool:
        return selected is None or dg.AssetCheckKey(key, name) in selected

    run_txids = [o.txid for o in outcomes]
    plans = exactly_once_plans(topology, keys, settings, runner, wanted, full_exactly_once)
    # Only a full exactly_once needs every committed range; the rest read O(recent) records.
    full_history = any(p.full_reason is not None for p in plans)
    histories: dict[str, dict[int, dict[str, Any]]] = {}
    for sid in topology.spouts:
        key = keys[f"spout:{sid}"]
        if full_history:
            histories[sid] = _spout_history(instance, key)
        if wanted(key, TXIDS):
            yield txids_check(key, instance, runner, run_txids)
        if wanted(key, RANGES):
            previous = _previous_ends(instance, key, sid, outcomes, histories.get(sid))
            yield ranges_check(key, sid, previous, outcomes)
        if wanted(key, DEAD):
            yield dead_letters_check(key, sid, outcomes, settings.dead_letter_threshold)
        if wanted(key, LAG):
            yield lag_check(key, sid, outcomes, settings.max_lag)
    for plan in plans:
        yield _exactly_once(plan, topology, keys, instance, runner, outcomes, histories)

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

import json
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import dagster as dg

from trident_assets.backends.state_contracts import stored_contracts
from trident_assets.backends.verified import (
    VerifiedCheckpoint,
    forget_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from trident_assets.dagster.partitions import txid_key
from trident_assets.errors import BatchUnavailableError, ConfigError
from trident_assets.spark.executor import BatchOutcome, TopologyRunner
from trident_assets.spark.verify import (
    StateComparison,
    recomputable,
    verify_increment,
    verify_state,
)
from trident_assets.spouts.ranges import PartitionRange, partition_sort_key
from trident_assets.stream.topology import TridentTopology

__all__ = [
    "FULL_CHECK_TAG",
    "CheckSettings",
    "check_specs",
    "committed_ranges",
    "evaluate_checks",
]

TXIDS = "txids_contiguous"
RANGES = "ranges_contiguous"
DEAD = "dead_letters_below_threshold"
LAG = "lag_below_threshold"
EXACTLY_ONCE = "exactly_once"
FULL_CHECK_TAG = "trident/exactly_once"
"""Run tag: ``full`` makes the run's ``exactly_once`` evaluations full recomputes."""


@dataclass(frozen=True, slots=True)
class CheckSettings:
    """What the checks verify."""

    exactly_once: bool = True
    """Check count/sum states against their source records every run (see the module)."""
    full_every: int = 50
    """Every how many ``exactly_once`` evaluations of a state one is a full recompute (its
    cost grows with history); the others are incremental. 1: every evaluation is full."""
    dead_letter_threshold: float = 0.01
    """Highest tolerated fraction of dead letters among the records of a run's batches."""
    max_lag: int = 100_000
    """Highest tolerated number of records waiting in a spout's source after a run."""

    def __post_init__(self) -> None:
        """Validate the settings.

        Raises:
            ConfigError: a setting has the wrong type or is out of range.
        """
        if not isinstance(self.exactly_once, bool):
            msg = f"CheckSettings.exactly_once must be True or False, got {self.exactly_once!r}"
            raise ConfigError(msg)
        every = self.full_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            msg = (
                "CheckSettings.full_every must be an integer >= 1 (1: every exactly_once "
                f"evaluation recomputes from scratch), got {every!r}"
            )
            raise ConfigError(msg)
        threshold = self.dead_letter_threshold
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not 0 <= threshold <= 1
        ):
            msg = (
                "CheckSettings.dead_letter_threshold must be a fraction between 0 and 1 "
                f"(0.01 = 1%), got {threshold!r}"
            )
            raise ConfigError(msg)
        if isinstance(self.max_lag, bool) or not isinstance(self.max_lag, int) or self.max_lag < 0:
            msg = f"CheckSettings.max_lag must be an integer >= 0 (records), got {self.max_lag!r}"
            raise ConfigError(msg)


def check_specs(
    topology: TridentTopology, keys: dict[str, dg.AssetKey], settings: CheckSettings
) -> list[dg.AssetCheckSpec]:
    """The check specs of ``topology`` (see the module docstring)."""
    specs: list[dg.AssetCheckSpec] = []
    for sid in topology.spouts:
        key = keys[f"spout:{sid}"]
        specs += [
            dg.AssetCheckSpec(TXIDS, asset=key, description="Materialized txids are 1..N."),
            dg.AssetCheckSpec(
                RANGES, asset=key, description="Batches neither overlap nor skip offsets."
            ),
            dg.AssetCheckSpec(
                DEAD,
                asset=key,
                description=f"Dead letters at most {settings.dead_letter_threshold:.2%} of "
                "the records read.",
            ),
            dg.AssetCheckSpec(
                LAG,
                asset=key,
                description=f"At most {settings.max_lag:,} records wait in the source after a run.",
            ),
        ]
    if settings.exactly_once:
        for name, state in topology.states.items():
            if recomputable(state):
                specs.append(
                    dg.AssetCheckSpec(
                        EXACTLY_ONCE,
                        asset=keys[f"state:{name}"],
                        description="State == aggregate recomputed from the committed "
                        "batches' source records.",
                    )
                )
    return specs


def _applied_offsets(record: dg.EventLogRecord) -> tuple[int, dict[str, Any]] | None:
    """``(txid, offsets)`` of an applied batch materialization; None for anything else."""
    mat = record.asset_materialization
    if mat is None or mat.partition is None:
        return None
    offsets = mat.metadata.get("offsets")
    done = mat.metadata.get("already_committed")
    if offsets is None or (done is not None and done.value):
        return None
    return int(mat.partition), dict(offsets.value)


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
            applied = _applied_offsets(record)
            if applied is not None:
                history[applied[0]] = applied[1]
        if not page.has_more:
            return history
        cursor = page.cursor


def _latest_applied(
    instance: dg.DagsterInstance, key: dg.AssetKey, txid: int
) -> dict[str, Any] | None:
    """The offsets of ``txid``'s latest applied materialization (None: there is none).

    Reads only that partition's records, newest first: O(attempts of ``txid``).
    """
    cursor = None
    while True:
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[txid_key(txid)]),
            limit=10,
            cursor=cursor,
            ascending=False,
        )
        for record in page.records:
            applied = _applied_offsets(record)
            if applied is not None and applied[0] == txid:
                return applied[1]
        if not page.has_more:
            return None
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
        latest = _latest_applied(instance, key, first_txid - 1)
        if latest is not None and needed <= latest.keys():
            return {partition: int(last) + 1 for partition, (_first, last) in latest.items()}
        history = _spout_history(instance, key)
    return _ends_before(history, first_txid)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for first, nxt in sorted(spans):
        if first >= nxt:
            continue
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], nxt))
        else:
            merged.append((first, nxt))
    return merged


def _without(spans: list[tuple[int, int]], holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` (merged, sorted) minus the offsets of ``holes``."""
    out: list[tuple[int, int]] = []
    for first, nxt in spans:
        pieces = [(first, nxt)]
        for h_first, h_next in holes:
            pieces = [
                piece
                for a, b in pieces
                for piece in ((a, min(b, h_first)), (max(a, h_next), b))
                if piece[0] < piece[1]
            ]
        out.extend(pieces)
    return out


def committed_ranges(
    history: dict[int, dict[str, Any]],
    outcomes: Sequence[BatchOutcome],
    spout_id: str,
    held: Sequence[PartitionRange] = (),
) -> list[PartitionRange]:
    """The union of the committed ranges of one spout, merged per partition.

    ``held``: ranges in the quarantine, not replayed yet (committed, yet not in the state).
    """
    holes: dict[str, list[tuple[int, int]]] = {}
    for r in held:
        holes.setdefault(r.partition, []).append((r.first_offset, r.next_offset))
    spans: dict[str, list[tuple[int, int]]] = {}
    for offsets in history.values():
        for partition, (first, last) in offsets.items():
            spans.setdefault(partition, []).append((int(first), int(last) + 1))
    for outcome in outcomes:
        plan = outcome.plans.get(spout_id)
        if outcome.applied and plan is not None:
            for r in plan.ranges:
                spans.setdefault(r.partition, []).append((r.first_offset, r.next_offset))
    return [
        PartitionRange(partition, first, nxt, "")
        for partition in sorted(spans, key=partition_sort_key)
        for first, nxt in _without(_merge(spans[partition]), holes.get(partition, []))
    ]


def _txids_check(
    key: dg.AssetKey, instance: dg.DagsterInstance, runner: TopologyRunner, run_txids: list[int]
) -> dg.AssetCheckResult:
    done = {int(k) for k in instance.get_materialized_partitions(key)} | set(run_txids)
    last = max(done, default=0)
    missing = sorted(set(range(1, last + 1)) - done)
    committed = runner.last_committed() or 0
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=TXIDS,
        passed=not missing and committed == last,
        metadata={
            "last_txid": last,
            "store_last_committed": committed,
            "missing": dg.MetadataValue.json([txid_key(t) for t in missing[:20]]),
        },
    )


def _ranges_check(
    key: dg.AssetKey,
    spout_id: str,
    previous: dict[str, int],
    outcomes: Sequence[BatchOutcome],
) -> dg.AssetCheckResult:
    """Each applied batch of this run starts where the previous committed batch ended.

    ``previous``: per partition, where the committed batches before this run ended
    (:func:`_previous_ends`); updated in place as this run's batches are checked.
    """
    problems: list[str] = []
    checked = 0
    for outcome in sorted(outcomes, key=lambda o: o.txid):
        plan = outcome.plans.get(spout_id)
        if not outcome.applied or plan is None:
            continue
        for r in plan.ranges:
            expected = previous.get(r.partition)
            checked += 1
            if expected is not None and r.first_offset < expected:
                problems.append(
                    f"txid {outcome.txid} {r.partition}: starts at {r.first_offset}, overlapping "
                    f"the previous batch (which ended before {expected})"
                )
            elif (
                expected is not None
                and r.first_offset > expected
                and plan.skipped_by_retention == 0
            ):
                problems.append(
                    f"txid {outcome.txid} {r.partition}: starts at {r.first_offset}, skipping "
                    f"offsets {expected}..{r.first_offset - 1}"
                )
            previous[r.partition] = r.next_offset
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=RANGES,
        passed=not problems,
        metadata={
            "ranges_checked": checked,
            "problems": dg.MetadataValue.json(problems[:20]),
        },
    )


def _dead_letters_check(
    key: dg.AssetKey, spout_id: str, outcomes: Sequence[BatchOutcome], threshold: float
) -> dg.AssetCheckResult:
    applied = [o for o in outcomes if o.applied]
    records = sum(o.tuples_in.get(spout_id, 0) for o in applied)
    dead = sum(o.dead_letters_by_spout.get(spout_id, 0) for o in applied)
    rate = dead / records if records else 0.0
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=DEAD,
        passed=rate <= threshold,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "dead_letters": dead,
            "records": records,
            "rate": dg.MetadataValue.float(round(rate, 6)),
            "threshold": dg.MetadataValue.float(threshold),
        },
    )


def _lag_check(
    key: dg.AssetKey, spout_id: str, outcomes: Sequence[BatchOutcome], max_lag: int
) -> dg.AssetCheckResult:
    """The lag after the run's last committed txid (nothing committed: not evaluated, passes)."""
    applied = [o for o in outcomes if o.applied and spout_id in o.lag]
    lag = max(applied, key=lambda o: o.txid).lag[spout_id] if applied else {}
    total = sum(lag.values())
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=LAG,
        passed=total <= max_lag,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "lag": total,
            "max_lag": max_lag,
            "by_partition": dg.MetadataValue.json(lag),
        },
    )


@dataclass(frozen=True, slots=True)
class _Plan:
    """How one state's ``exactly_once`` is evaluated in this run."""

    name: str
    key: dg.AssetKey
    first: int
    checkpoint: VerifiedCheckpoint
    """The checkpoint a pass records (the previous one when incremental)."""
    full_reason: str | None
    """Why it recomputes from scratch (None: incremental from ``checkpoint``)."""


def _held_signature(runner: TopologyRunner) -> str:
    """The pending quarantined (txid, spout) pairs, as stable JSON."""
    return json.dumps(sorted([e.txid, e.spout] for e in runner.quarantined()))


def _contracts_signature(contracts: dict[str, Any]) -> str:
    """The stored contracts of the topology's states (by state), as stable JSON."""
    return json.dumps([contracts[name].to_json() for name in sorted(contracts)])


def _plans(
    topology: TridentTopology,
    keys: dict[str, dg.AssetKey],
    settings: CheckSettings,
    runner: TopologyRunner,
    wanted: Any,
    full_requested: bool,
) -> list[_Plan]:
    """The ``exactly_once`` evaluations of this run, full or incremental."""
    names = [
        name
        for name, state in topology.states.items()
        if settings.exactly_once
        and recomputable(state)
        and wanted(keys[f"state:{name}"], EXACTLY_ONCE)
    ]
    if not names:
        return []
    contracts = {c.state: c for c in stored_contracts(runner.store) if c.topology == runner.scope}
    held = _held_signature(runner)
    # every state's contract: a deploy that adds, rebuilds or changes a state re-verifies all
    text = _contracts_signature(contracts)
    last = runner.last_committed() or 0
    plans: list[_Plan] = []
    for name in names:
        contract = contracts.get(name)
        first = contract.first_txid if contract is not None else 1
        table = topology.states[name].table
        now = VerifiedCheckpoint(runner.scope, name, table, last, text, held, 0)
        old = read_checkpoint(runner.store, runner.scope, name)
        reason: str | None = None
        if full_requested:
            reason = "requested"
        elif old is None:
            reason = "no checkpoint"
        elif contract is None or old.contract != text or old.table != table:
            reason = "the contract changed"
        elif old.held != held:
            reason = "the quarantine changed"
        elif old.through_txid > last:
            reason = "the checkpoint is ahead of the store"
        elif old.incremental_runs + 1 >= settings.full_every:
            reason = f"every {settings.full_every} evaluations"
        if reason is None and old is not None:
            now = replace(old, incremental_runs=old.incremental_runs + 1)
        plans.append(_Plan(name, keys[f"state:{name}"], first, now, reason))
    return plans


def _since_ranges(
    instance: dg.DagsterInstance,
    topology: TridentTopology,
    keys: dict[str, dg.AssetKey],
    outcomes: Sequence[BatchOutcome],
    first: int,
    last: int,
) -> dict[str, list[PartitionRange]] | None:
    """Per spout, the merged ranges of the txids ``first..last`` (None: one is unknown).

    A txid this run applied takes its plan's ranges; another its latest applied
    materialization (read per partition: O(txids since the checkpoint)).
    """
    applied = {o.txid: o for o in outcomes if o.applied}
    out: dict[str, list[PartitionRange]] = {}
    for sid in topology.spouts:
        history: dict[int, dict[str, Any]] = {}
        run: list[BatchOutcome] = []
        for txid in range(first, last + 1):
            if txid in applied:
                run.append(applied[txid])
                continue
            offsets = _latest_applied(instance, keys[f"spout:{sid}"], txid)
            if offsets is None:
                return None
            history[txid] = offsets
        out[sid] = committed_ranges(history, run, sid)
    return out


def _exactly_once(
    plan: _Plan,
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
        since = _since_ranges(
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
            history = (
                histories
                if histories
                else {
                    sid: _spout_history(instance, keys[f"spout:{sid}"]) for sid in topology.spouts
                }
            )
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
    plans = _plans(topology, keys, settings, runner, wanted, full_exactly_once)
    # Only a full exactly_once needs every committed range; the rest read O(recent) records.
    full_history = any(p.full_reason is not None for p in plans)
    histories: dict[str, dict[int, dict[str, Any]]] = {}
    for sid in topology.spouts:
        key = keys[f"spout:{sid}"]
        if full_history:
            histories[sid] = _spout_history(instance, key)
        if wanted(key, TXIDS):
            yield _txids_check(key, instance, runner, run_txids)
        if wanted(key, RANGES):
            previous = _previous_ends(instance, key, sid, outcomes, histories.get(sid))
            yield _ranges_check(key, sid, previous, outcomes)
        if wanted(key, DEAD):
            yield _dead_letters_check(key, sid, outcomes, settings.dead_letter_threshold)
        if wanted(key, LAG):
            yield _lag_check(key, sid, outcomes, settings.max_lag)
    for plan in plans:
        yield _exactly_once(plan, topology, keys, instance, runner, outcomes, histories)

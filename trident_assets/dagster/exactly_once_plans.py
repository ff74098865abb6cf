"""Planning a run's ``exactly_once`` evaluations: full or incremental (see :mod:`.checks`)."""

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import dagster as dg

from trident_assets.backends.state_contracts import stored_contracts
from trident_assets.backends.verified import VerifiedCheckpoint, read_checkpoint
from trident_assets.dagster.batch_history import committed_ranges, latest_applied
from trident_assets.dagster.check_specs import EXACTLY_ONCE, CheckSettings
from trident_assets.planner import recomputable
from trident_assets.runtime.outcomes import BatchOutcome
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spouts.ranges import PartitionRange
from trident_assets.stream.topology import TridentTopology

__all__ = [
    "ExactlyOncePlan",
    "exactly_once_plans",
    "since_ranges",
]


@dataclass(frozen=True, slots=True)
class ExactlyOncePlan:
    """How one state's ``exactly_once`` is evaluated in this run."""

    name: str
    key: dg.AssetKey
    first: int
    checkpoint: VerifiedCheckpoint
    """The checkpoint a pass records (the previous one when incremental)."""
    full_reason: str | None
    """Why it recomputes from scratch (None: incremental from ``checkpoint``)."""


def exactly_once_plans(
    topology: TridentTopology,
    keys: dict[str, dg.AssetKey],
    settings: CheckSettings,
    runner: TopologyRunner,
    wanted: Any,
    full_requested: bool,
) -> list[ExactlyOncePlan]:
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
    # the pending quarantined (txid, spout) pairs and every state's stored contract, as
    # stable JSON: a deploy that adds, rebuilds or changes a state re-verifies all
    held = json.dumps(sorted([e.txid, e.spout] for e in runner.quarantined()))
    text = json.dumps([contracts[name].to_json() for name in sorted(contracts)])
    last = runner.last_committed() or 0
    plans: list[ExactlyOncePlan] = []
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
        plans.append(ExactlyOncePlan(name, keys[f"state:{name}"], first, now, reason))
    return plans


def since_ranges(
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
            offsets = latest_applied(instance, keys[f"spout:{sid}"], txid)
            if offsets is None:
                return None
            history[txid] = offsets
        out[sid] = committed_ranges(history, run, sid)
    return out

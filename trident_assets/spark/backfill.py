"""Catching up a state built from the log: one committed txid at a time, exactly once.

:class:`~trident_assets.spark.executor.TopologyRunner` does it before its first batch (or on
:meth:`~trident_assets.spark.executor.TopologyRunner.backfill`): a state added to a topology
that committed txids ``1..N`` applies txids ``first..N`` (planned by
:mod:`trident_assets.runtime.backfill_plans`) through its own subgraph only, over what each
txid read: the spouts it reads, the operations between them and the state. No other state,
output, dead-letter table or spout position is touched. Each txid commits through the one
commit function (:func:`~trident_assets.runtime.commit.commit`), the state alone as its
target and its progress as its marker (:class:`~trident_assets.runtime.commit.CatchUpMarker`),
so a crash resumes at the next txid exactly; the state joins the topology's batches at
``N+1``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trident_assets.backends.spout_history import read_history, spout_joins
from trident_assets.errors import BatchUnavailableError
from trident_assets.runtime.commit import CatchUpMarker, StateAlone, commit
from trident_assets.runtime.outcomes import Prepared
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spark.execution import SparkTxid
from trident_assets.spouts.ranges import BatchPlan, PartitionRange

if TYPE_CHECKING:
    from trident_assets.spark.batch_context import RunContext
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = ["catch_up_one", "read_plans"]


def _plans(
    topology: TridentTopology, txid: int, history: dict[tuple[str, int], list[PartitionRange]]
) -> dict[str, BatchPlan]:
    plans: dict[str, BatchPlan] = {}
    for (sid, t), ranges in history.items():
        if t == txid:
            kind = topology.spouts[sid].args["spout"].config.kind
            plans[sid] = BatchPlan.of(topology.name, sid, txid, kind, ranges, replay=True)
    return plans


def read_plans(runner: RunContext, state: TridentState, txid: int) -> dict[str, BatchPlan]:
    """The recorded ranges of ``txid`` for ``state``'s spouts, checked readable."""
    topo = runner.topology
    spouts = state.contract().spouts
    plans = _plans(topo, txid, read_history(runner.store, topo.name, spouts, txid, txid))
    unrecorded = [sid for sid in spouts if sid not in plans]
    if unrecorded:  # the rare case: one grouped read of the history, not one per txid
        joins = spout_joins(runner.store, topo.name)
    for sid in unrecorded:
        if joins.absent(sid, txid):  # added to the topology later: it read nothing here
            kind = topo.spouts[sid].args["spout"].config.kind
            plans[sid] = BatchPlan.of(topo.name, sid, txid, kind, [], replay=True)
    for sid in spouts:
        if sid not in plans:
            msg = (
                f"cannot build state {state.spec.name!r} of topology {topo.name!r} from txid "
                f"{txid}: the offset ranges spout {sid!r} read were not recorded"
            )
            raise BatchUnavailableError(msg)
        try:
            runner.coordinator(sid).check_readable(txid, plans[sid].ranges)
        except BatchUnavailableError as exc:
            msg = f"cannot build state {state.spec.name!r} of topology {topo.name!r}: {exc}"
            raise BatchUnavailableError(msg) from None
    return plans


def catch_up_one(runner: RunContext, state: TridentState, txid: int, first: int) -> bool:
    """Apply committed ``txid`` to new ``state`` alone, with its progress, in one transaction.

    The Spark work runs first (the state's subgraph over the txid's recorded ranges); the
    transaction applies it only if the state's progress is ``txid - 1`` (``first - 1`` before
    its first txid, which also writes its contract). Returns False when ``txid`` was applied
    before (by another attempt).
    """
    store, topo, name = runner.store, runner.topology, state.spec.name
    run = BatchRun.alone(runner, txid, read_plans(runner, state, txid))
    prepared = Prepared({name: run.state_input(state)}, {}, {}, {})
    marker = CatchUpMarker(store, topo.name, state.contract(), first)
    what = f"state {name!r} of topology {topo.name!r} (built from the log)"
    scope = f"{topo.name}/{name}"
    alone = StateAlone(store, topo, scope, {name: state}, marker, what, runner.fault, "backfill_")
    if not commit(alone, txid, {}, prepared, SparkTxid(run)).applied:
        return False
    runner.fault("backfill_after_commit")
    return True

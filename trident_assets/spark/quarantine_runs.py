"""The quarantine: a poison batch set aside so the topology moves on, and replayed later.

:func:`quarantine` commits a txid as an empty batch whose offset ranges (and the error) go to
the store's quarantine table; :func:`replay_quarantined` processes those records later as a
new txid. Both commit through the one commit function
(:func:`~trident_assets.runtime.commit.commit`), which writes the quarantine's rows. Allowed
only where the order of records does not matter
(:func:`~trident_assets.planner.quarantine_refusal`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from trident_assets.backends.quarantine import waiting
from trident_assets.errors import BatchUnavailableError
from trident_assets.planner import check_quarantine
from trident_assets.runtime.commit import commit
from trident_assets.runtime.outcomes import Prepared
from trident_assets.runtime.txid_loop import LoopRunner
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spark.execution import SparkRunner, SparkTxid
from trident_assets.spark.user_errors import worker_errors
from trident_assets.spouts.ranges import BatchPlan, PartitionRange

if TYPE_CHECKING:
    from trident_assets.backends.duckdb_spout_meta import DuckDBSpoutMetaStore
    from trident_assets.runtime.outcomes import BatchOutcome

__all__ = ["QuarantineRunner", "quarantine", "replay_quarantined"]


class QuarantineRunner(SparkRunner, LoopRunner, Protocol):
    """What the quarantine needs of a runner (a ``TopologyRunner``)."""

    meta: DuckDBSpoutMetaStore


def quarantine(runner: QuarantineRunner, txid: int, error: str) -> BatchOutcome:
    """Set poison batch ``txid`` aside: commit it with no state change, keep its ranges.

    The txid's offset ranges (as its spouts plan them now; a transactional spout's recorded
    ranges) go to the quarantine with ``error`` in the txid's commit transaction, so the
    topology moves on and nothing is lost; :meth:`replay_quarantined` processes them later.

    Raises:
        QuarantineError: the topology cannot be quarantined soundly
            (:func:`~trident_assets.planner.quarantine_refusal`) or ``txid`` committed.
        OutOfOrderCommitError: an earlier txid has not committed; nothing changed.
    """
    runner.ensure_built()
    check_quarantine(runner.topology, runner.last_committed(), txid)
    plans = {sid: c.emit(txid) for sid, c in runner.coordinators().items()}
    # it changed no state: a state built later from the history reads nothing here
    unread = {
        sid: replace(p, ranges=tuple(replace(r, next_offset=r.first_offset) for r in p.ranges))
        for sid, p in plans.items()
    }
    return commit(runner, txid, unread, Prepared.set_aside(plans, error))


def replay_quarantined(runner: QuarantineRunner, txid: int | None = None) -> BatchOutcome:
    """Process the records of quarantined ``txid`` (default: the oldest) as the next txid.

    The new txid reads the quarantined ranges and records its spouts' positions unchanged,
    so later txids continue where they were; the entry is marked replayed in its commit
    transaction, so the records count exactly once. If it fails again nothing changes.

    Raises:
        QuarantineError: nothing (or not ``txid``) waits in the quarantine.
        BatchUnavailableError: the log no longer holds the quarantined ranges.
    """
    runner.ensure_built()
    pending = waiting(runner.store, runner.scope, txid)
    source = pending[0].txid
    held = {e.spout: e for e in pending if e.txid == source}
    new = (runner.last_committed() or 0) + 1
    read: dict[str, BatchPlan] = {}
    recorded: dict[str, BatchPlan] = {}
    for sid, node in runner.topology.spouts.items():
        kind = node.args["spout"].config.kind
        previous = runner.meta.latest_before(runner.scope, sid, new, True)
        position = [
            PartitionRange(p, r.next_offset, r.next_offset, r.deployment_id, r.topic_id)
            for p, r in previous.items()
        ]
        recorded[sid] = BatchPlan.of(runner.scope, sid, new, kind, position, replay=False)
        read[sid] = recorded[sid]
        if sid in held:
            ranges = held[sid].ranges
            try:
                runner.coordinator(sid).check_readable(new, ranges)
            except BatchUnavailableError as exc:
                msg = f"quarantined txid {source} can no longer be reprocessed: {exc}"
                raise BatchUnavailableError(msg) from None
            read[sid] = BatchPlan.of(runner.scope, sid, new, kind, ranges, replay=True)
    with worker_errors():
        t_spark = time.perf_counter()
        run = BatchRun.alone(runner, new, read)
        prepared = replace(run.prepare(), recorded=recorded, replays=source)
        timings = {"spark": time.perf_counter() - t_spark}
        # the txid's ranges as recorded: its spouts' positions, unchanged (offsets metadata
        # and the ranges check follow them); what it read was the quarantined ranges
        return commit(runner, new, read, prepared, SparkTxid(run), timings)

"""The steps every run that commits txids shares: the store, catch-up, failures, quarantine.

Used by the txids multi-asset's step (:mod:`.assets`) and the live run (:mod:`.live`), so
both open the store, build new states, record a failing txid and set a txid aside the same
way.
"""

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, NoReturn

import dagster as dg

from trident_assets.dagster.batch_events import backfill_events
from trident_assets.dagster.in_flight import QUARANTINE_TAG
from trident_assets.dagster.resources import TridentResource
from trident_assets.errors import (
    CorruptStateError,
    OutOfOrderCommitError,
    QuarantineError,
    UserCodeError,
)
from trident_assets.runtime.outcomes import BatchOutcome
from trident_assets.spark.executor import TopologyRunner
from trident_assets.status import record_failure
from trident_assets.stream.topology import TridentTopology

__all__ = [
    "caught_up",
    "failed",
    "failures_recorded",
    "opened_store",
    "quarantine_txid",
    "topology_runner",
]

StepContext = dg.AssetExecutionContext | dg.OpExecutionContext
"""The context of a step that commits txids: the multi-asset's or the live run's op."""


@contextmanager
def opened_store(
    context: StepContext,
    trident: TridentResource,
    topology: TridentTopology,
    txid: int,
) -> Iterator[Any]:
    """The run's state store; a damaged one (e.g. it lost committed txids) fails the run.

    The failure is recorded against ``txid`` (``trident status``) and fails the step with
    the store's message (which names the file and the way out) before anything runs.
    """
    with ExitStack() as stack:
        try:
            store = stack.enter_context(trident.store())
        except CorruptStateError as exc:
            fail_txid(context, trident, topology, txid, exc)
        yield store


def failures_recorded(
    context: StepContext,
    trident: TridentResource,
    topology: TridentTopology,
    txids: list[int],
    outcomes: Iterator[BatchOutcome],
) -> Iterator[BatchOutcome]:
    """``outcomes``, recording a failing txid for ``trident status`` before re-raising.

    A user function's failure (:class:`UserCodeError`, already without Spark's Java trace)
    fails the step as a ``dagster.Failure`` whose description is the user's error (operation,
    function, input, exception): the run's log and the UI show it first, not Dagster's wrapper.
    """
    done = 0
    try:
        for outcome in outcomes:
            done += 1
            yield outcome
    except Exception as exc:
        failed(context, trident, topology, txids[done], exc)


def failed(
    context: StepContext,
    trident: TridentResource,
    topology: TridentTopology,
    txid: int,
    exc: BaseException,
) -> NoReturn:
    """Re-raise ``exc``, raised while ``txid`` ran.

    As :func:`fail_txid` does, unless it is not the txid's own failure (an out-of-order
    commit, an interrupt): that is raised as it is.
    """
    if isinstance(exc, OutOfOrderCommitError) or not isinstance(exc, Exception):
        raise exc
    fail_txid(context, trident, topology, txid, exc)


def fail_txid(
    context: StepContext,
    trident: TridentResource,
    topology: TridentTopology,
    txid: int,
    exc: Exception,
) -> NoReturn:
    """Record ``exc`` as ``txid``'s failure (``trident status``) and fail the step with it."""
    error = f"{type(exc).__name__}: {exc}".splitlines()[0][:2000]
    record_failure(trident.home, topology.name, txid, error, context.run.run_id)
    if isinstance(exc, UserCodeError | CorruptStateError):
        context.log.error(f"txid {txid} failed, nothing committed: {error}")
        raise dg.Failure(
            description=str(exc), metadata={"txid": txid, "error": type(exc).__name__}
        ) from None
    raise exc


def caught_up(
    context: StepContext,
    trident: TridentResource,
    topology: TridentTopology,
    runner: TopologyRunner,
    keys: dict[str, dg.AssetKey],
    txid: int,
) -> Iterator[dg.AssetMaterialization]:
    """Build the topology's new states from the log before ``txid`` (the run's first).

    Each txid a catch-up applies materializes that partition of the state's asset
    (:func:`~.batch_events.backfill_events`), so the UI shows the new state filling in.
    A failure is recorded against ``txid``; what was applied stays, the next run resumes.
    """
    try:
        built = runner.backfill()
    except Exception as exc:
        fail_txid(context, trident, topology, txid, exc)
    for outcome in built:
        if outcome.applied:
            context.log.info(
                f"state {outcome.state} built from the log of txids {outcome.applied[0]}.."
                f"{outcome.applied[-1]} (it covers txids from {outcome.first_txid})"
            )
        yield from backfill_events(keys, outcome)


def quarantine_txid(
    context: StepContext, runner: TopologyRunner, txids: list[int], reason: str
) -> Iterator[BatchOutcome]:
    """A run tagged ``trident/quarantine``: set its one txid aside instead of processing it.

    Raises:
        dagster.Failure: the run covers several txids, or the topology refuses a quarantine.
    """
    if len(txids) != 1:
        msg = f"a {QUARANTINE_TAG} run sets aside one txid; this run covers {len(txids)}"
        raise dg.Failure(description=msg)
    try:
        outcome = runner.quarantine(txids[0], reason)
    except QuarantineError as exc:
        raise dg.Failure(description=str(exc)) from None
    context.log.warning(
        f"txid {txids[0]} quarantined ({reason}): {outcome.quarantined} records set aside; "
        f"`trident quarantine replay {runner.scope}` processes them once the cause is fixed"
    )
    yield outcome


def topology_runner(
    trident: TridentResource, topology: TridentTopology, spark: Any, store: Any
) -> TopologyRunner:
    """The runner of ``topology``'s txids in a Dagster run, as the resource configures it."""
    return TopologyRunner(
        topology,
        spark,
        store,
        trident.log(),
        fault=trident.fault(),
        max_spout_pending=trident.max_spout_pending,
        replica=trident.replica(),
        keep_txids=trident.keep_txids,
    )

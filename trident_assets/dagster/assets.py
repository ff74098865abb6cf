"""One multi-asset per topology: every asset of txid N (see :mod:`.graph`) in one step.

Every txid is applied in ONE store transaction (all states, outputs, dead letters, spout
ranges and the commit marker). A run for a range of txids (catch-up) commits each txid
separately, in order, with its own materializations, and Dagster calls an IO manager's
``handle_output`` once per output per run; so the step applies each txid's partials itself,
through the same function the :class:`~trident_assets.dagster.io_manager.TridentIOManager`
uses for a user's state asset, inside the txid's open transaction. The state, partials,
new-values and output assets carry the IO manager key, so downstream assets load them
through it (as of their txid).

Every run of the multi-asset, however launched (coordinator sensor, the UI's Materialize
button, a backfill), needs the topology's concurrency pool (:func:`~.in_flight.pool_name`;
the shipped ``dagster.yaml`` gives each pool one slot per run), so runs of one topology
never overlap. The multi-asset can be subset (``can_subset``): a run for some of its assets
still commits the whole txid in one transaction, and outputs and checks it does not yield
(a txid refused because an earlier one has not committed) show as skipped, not failed.
"""

from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from trident_assets.dagster.batch_events import batch_events, refusal_observations, summary
from trident_assets.dagster.batch_steps import (
    caught_up,
    failures_recorded,
    opened_store,
    quarantine_txid,
    topology_runner,
)
from trident_assets.dagster.check_specs import FULL_CHECK_TAG, CheckSettings, check_specs
from trident_assets.dagster.checks import evaluate_checks
from trident_assets.dagster.graph import IO_MANAGER_KEY, asset_keys, topology_graph
from trident_assets.dagster.in_flight import QUARANTINE_TAG, TOPOLOGY_TAG, pool_name
from trident_assets.dagster.lakehouse_assets import table_events
from trident_assets.dagster.overview import overview_event
from trident_assets.dagster.partitions import parse_txid, txid_partitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.window_assets import FinalsAsset, finals_events
from trident_assets.errors import (
    ConfigError,
    OutOfOrderCommitError,
)
from trident_assets.runtime.outcomes import BatchOutcome
from trident_assets.stream.topology import TridentTopology

__all__ = ["topology_assets"]

OWNERS = ["team:streaming"]


def _specs(topology: TridentTopology, partitions: dg.PartitionsDefinition) -> list[dg.AssetSpec]:
    specs = []
    for node in topology_graph(topology).values():
        kinds = {"spark"} if node.role == "spout" else {"spark", "duckdb"}
        spec = dg.AssetSpec(
            node.key,
            deps=node.deps,
            description=node.description,
            kinds=kinds,
            owners=OWNERS,
            group_name=topology.name,
            partitions_def=partitions,
            skippable=True,
            metadata=node.metadata,
        )
        specs.append(spec.with_io_manager_key(IO_MANAGER_KEY) if node.loadable else spec)
    return specs


def topology_assets(
    topology: TridentTopology,
    checks: CheckSettings | None = None,
    finals: Sequence[FinalsAsset] = (),
    pool: str | None = None,
) -> dg.AssetsDefinition:
    """The multi-asset that processes txids of ``topology`` (one partition = one txid).

    A run for one partition key commits that txid; a run for a key range (catch-up, or a
    backfill: ``BackfillPolicy.single_run``) commits each txid of the range in order, each in
    its own transaction with its own materializations, paying the run's start-up once. The
    asset checks (see :mod:`trident_assets.dagster.checks`) run at the end of every run that
    committed or re-ran a txid. ``finals``: the time-partitioned finals assets of its window
    states (:mod:`.window_assets`); each applied txid materializes the time partitions it
    completed. A run that committed a txid or failed one ends with a materialization of the
    topology's overview asset (:mod:`.overview`).
    """
    partitions = txid_partitions(topology.name)
    keys = asset_keys(topology)
    settings = checks or CheckSettings()

    @dg.multi_asset(
        name=f"{topology.name}_batches",
        specs=_specs(topology, partitions),
        check_specs=check_specs(topology, keys, settings),
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        op_tags={TOPOLOGY_TAG: topology.name},
        pool=pool or pool_name(topology.name),
        can_subset=True,
    )
    def _batches(
        context: dg.AssetExecutionContext,
        trident: TridentResource,
        pyspark: LazyPySparkResource,
    ) -> Iterator[Any]:
        txids = _txids(context)
        attempt = int(context.run.tags.get("trident/attempt", "0"))
        selected = set(context.selected_asset_keys)
        context.log.info(f"Spark: {trident.spark_target}")
        spark = pyspark.spark_session
        outcomes: list[BatchOutcome] = []
        with opened_store(context, trident, topology, txids[0]) as store:
            runner = topology_runner(trident, topology, spark, store)
            yield from caught_up(context, trident, topology, runner, keys, txids[0])
            reason = context.run.tags.get(QUARANTINE_TAG)
            batches = (
                runner.run_batches(txids)
                if reason is None
                else quarantine_txid(context, runner, txids, reason)
            )
            try:
                for outcome in failures_recorded(context, trident, topology, txids, batches):
                    outcomes.append(outcome)
                    context.log.info(summary(outcome))
                    yield from batch_events(
                        topology, keys, outcome, attempt, len(txids) > 1, selected
                    )
                    yield from finals_events(finals, store, outcome, context.instance)
                    yield from table_events(topology, runner.tables, outcome.published)
            except OutOfOrderCommitError as exc:
                refused = txids[len(outcomes)]
                run_first = (runner.last_committed() or 0) + 1
                context.log.error(
                    f"txid {refused} refused, nothing written for it: {exc} The asset checks "
                    "of this run are skipped."
                )
                yield from refusal_observations(topology, keys, refused, run_first, str(exc))
            except Exception:  # a txid failed (recorded): the overview shows it, then the run
                failed = _overview_or_none(context, trident, store, topology)
                if failed is not None:
                    yield failed
                raise
            if any(o.applied for o in outcomes):
                yield overview_event(context.instance, trident.home, store, topology)
            if outcomes:
                yield from evaluate_checks(
                    topology,
                    keys,
                    settings,
                    context.instance,
                    runner,
                    outcomes,
                    selected=set(context.selected_asset_check_keys),
                    full_exactly_once=context.run.tags.get(FULL_CHECK_TAG) == "full",
                )

    return _batches


def _txids(context: dg.AssetExecutionContext) -> list[int]:
    """The run's txids, ascending; a partition key that is no txid key fails the run clearly.

    Raises:
        dagster.Failure: a key is not ``%010d`` (e.g. ``"12"`` typed in the UI); nothing ran.
    """
    try:
        return sorted(parse_txid(k) for k in context.partition_keys)
    except ConfigError as exc:
        context.log.error(f"{exc}; nothing was read or written")
        raise dg.Failure(description=f"{exc}; nothing was read or written") from None


def _overview_or_none(
    context: dg.AssetExecutionContext,
    trident: TridentResource,
    store: Any,
    topology: TridentTopology,
) -> dg.AssetMaterialization | None:
    """The overview after a failed txid; None (logged) if it cannot be read.

    The txid's own error, being raised, must never be hidden by the overview's.
    """
    try:
        return overview_event(context.instance, trident.home, store, topology)
    except Exception as exc:  # the failure being raised matters more
        context.log.warning(f"the overview of {topology.name} was not updated: {exc}")
        return None

"""One multi-asset per topology: every asset of txid N (see :mod:`.graph`) in one step.

Every txid is applied in ONE store transaction (all states, outputs, dead letters, spout
ranges and the commit marker). A run for a range of txids (catch-up) commits each txid
separately, in order, with its own materializations, and Dagster calls an IO manager's
``handle_output`` once per output per run; so the step applies each txid's partials itself,
through the same function the :class:`~trident_assets.dagster.io_manager.TridentIOManager`
uses for a user's state asset, inside the txid's open transaction. The state, partials,
new-values and output assets carry the IO manager key, so downstream assets load them
through it (as of their txid).
"""

from collections.abc import Iterator
from typing import Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from trident_assets.dagster.checks import CheckSettings, check_specs, evaluate_checks
from trident_assets.dagster.graph import IO_MANAGER_KEY, asset_keys, topology_graph
from trident_assets.dagster.partitions import parse_txid, txid_key, txid_partitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.spark.executor import BatchOutcome, TopologyRunner
from trident_assets.stream.topology import TridentTopology

__all__ = ["TOPOLOGY_TAG", "asset_keys", "topology_assets"]

TOPOLOGY_TAG = "trident/topology"
"""Run tag naming the topology; dagster.yaml limits it to one run at a time."""
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
    topology: TridentTopology, checks: CheckSettings | None = None
) -> dg.AssetsDefinition:
    """The multi-asset that processes txids of ``topology`` (one partition = one txid).

    A run for one partition key commits that txid; a run for a key range (catch-up, or a
    backfill: ``BackfillPolicy.single_run``) commits each txid of the range in order, each in
    its own transaction with its own materializations, paying the run's start-up once. The
    asset checks (see :mod:`trident_assets.dagster.checks`) run at the end of every run.
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
    )
    def _batches(
        context: dg.AssetExecutionContext,
        trident: TridentResource,
        pyspark: LazyPySparkResource,
    ) -> Iterator[Any]:
        txids = sorted(parse_txid(k) for k in context.partition_keys)
        attempt = int(context.run.tags.get("trident/attempt", "0"))
        spark = pyspark.spark_session
        outcomes: list[BatchOutcome] = []
        with trident.store() as store:
            runner = TopologyRunner(
                topology,
                spark,
                store,
                trident.log(),
                fault=trident.fault(),
                max_spout_pending=trident.max_spout_pending,
                replica=trident.replica(),
                keep_txids=trident.keep_txids,
            )
            for outcome in runner.run_batches(txids):
                outcomes.append(outcome)
                context.log.info(_summary(outcome))
                yield from _materializations(topology, keys, outcome, attempt, len(txids) > 1)
            yield from evaluate_checks(topology, keys, settings, context.instance, runner, outcomes)

    return _batches


def _summary(outcome: BatchOutcome) -> str:
    if not outcome.applied:
        return f"txid {outcome.txid} was already committed: nothing changed"
    counts = ", ".join(f"{n}: {s.keys_updated} keys" for n, s in outcome.states.items())
    return f"txid {outcome.txid} committed ({counts}; {outcome.dead_letters} dead letters)"


def _materializations(
    topology: TridentTopology,
    keys: dict[str, dg.AssetKey],
    outcome: BatchOutcome,
    attempt: int,
    ranged: bool,
) -> Iterator[Any]:
    common: dict[str, Any] = {
        "txid": dg.MetadataValue.int(outcome.txid),
        "attempt": dg.MetadataValue.int(attempt),
        "already_committed": dg.MetadataValue.bool(not outcome.applied),
        "pipelined": dg.MetadataValue.int(outcome.pipelined),
    }
    timings = {f"{k}_s": dg.MetadataValue.float(round(v, 4)) for k, v in outcome.timings_s.items()}
    partition = txid_key(outcome.txid)
    events: dict[str, dict[str, Any]] = {}
    for sid in topology.spouts:
        meta = {**common, **timings}
        plan = outcome.plans.get(sid)
        if plan is not None:
            meta |= {
                "offsets": dg.MetadataValue.json(plan.offsets_metadata()),
                "tuples_in": dg.MetadataValue.int(plan.record_count if outcome.applied else 0),
                "replay": dg.MetadataValue.bool(plan.replay),
                "skipped_by_retention": dg.MetadataValue.int(plan.skipped_by_retention),
            }
        meta["dead_letters"] = dg.MetadataValue.int(outcome.dead_letters)
        events[f"spout:{sid}"] = meta
    for name in topology.states:
        meta = dict(common)
        state = outcome.states.get(name)
        if state is not None:
            meta |= {
                "keys_in": dg.MetadataValue.int(state.keys_in),
                "keys_updated": dg.MetadataValue.int(state.keys_updated),
                "keys_skipped": dg.MetadataValue.int(state.keys_skipped),
                "state_size": dg.MetadataValue.int(state.size),
                "dagster/row_count": dg.MetadataValue.int(state.size),
                **timings,
            }
        events[f"state:{name}"] = meta
        keys_in = {"keys_in": dg.MetadataValue.int(state.keys_in)} if state is not None else {}
        events[f"partials:{name}"] = {**common, **keys_in}
        rows = {"rows": dg.MetadataValue.int(state.keys_in)} if state is not None else {}
        events[f"new_values:{name}"] = {**common, **rows}
    for name in topology.outputs:
        meta = dict(common)
        if name in outcome.outputs:
            meta["rows"] = dg.MetadataValue.int(outcome.outputs[name])
        events[f"output:{name}"] = meta
    for role in _dependency_order(topology):
        key, meta = keys[role], events[role]
        if ranged:
            yield dg.AssetMaterialization(asset_key=key, partition=partition, metadata=meta)
        else:
            yield dg.MaterializeResult(asset_key=key, metadata=meta)


def _dependency_order(topology: TridentTopology) -> list[str]:
    """The topology's assets (``role:name``) with every asset after the assets it depends on.

    Dagster refuses a materialization yielded before one of its dependencies in the step.
    """
    graph = topology_graph(topology)
    role_of = {node.key: role for role, node in graph.items()}
    ordered: list[str] = []
    done: set[str] = set()

    def visit(role: str) -> None:
        if role in done:
            return
        done.add(role)
        for dep in graph[role].deps:
            if dep in role_of:
                visit(role_of[dep])
        ordered.append(role)

    for role in graph:
        visit(role)
    return ordered

"""The Dagster events of a txid: what its assets' pages show.

* An **applied** txid materializes every asset of the topology (the txid committed them all
  in one transaction), with its counts, timings and previews (:mod:`.previews`): the keys
  the txid touched with their new values, the partials, the output rows, the dead letters.
  Assets the run selected get a ``MaterializeResult``; the others (a subset run still
  commits the whole txid) an ``AssetMaterialization`` event.
* A txid **committed before** (a no-op re-run) is recorded as an ``AssetObservation``
  (``already_committed=true``), so the real materialization stays the partition's latest.
* A **refused** txid (an earlier one has not committed) is recorded as an observation on
  the spout-batch assets, with the reason and the txid to run first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from datetime import datetime
from graphlib import TopologicalSorter
from typing import Any

import dagster as dg

from trident_assets.dagster.graph import AssetNode, topology_graph
from trident_assets.dagster.partitions import txid_key
from trident_assets.dagster.previews import markdown_table, preview_metadata
from trident_assets.runtime.backfill_plans import BackfillOutcome
from trident_assets.runtime.outcomes import BatchOutcome
from trident_assets.stream.topology import TridentTopology

__all__ = [
    "backfill_events",
    "batch_events",
    "refusal_observations",
    "summary",
]


def summary(outcome: BatchOutcome) -> str:
    """One log line saying what a txid did."""
    if not outcome.applied:
        return f"txid {outcome.txid} was already committed: nothing changed"
    if outcome.quarantined:
        return (
            f"txid {outcome.txid} quarantined: {outcome.quarantined} records set aside, no "
            "state changed (`trident quarantine list` shows them)"
        )
    counts = ", ".join(f"{n}: {s.keys_updated} keys" for n, s in outcome.states.items())
    nulls = sum(s.null_values_skipped for s in outcome.states.values())
    skipped = f"; {nulls} null values skipped" if nulls else ""
    return f"txid {outcome.txid} committed ({counts}; {outcome.dead_letters} dead letters{skipped})"


def _preview(outcome: BatchOutcome, role: str, rows: int | None) -> dict[str, Any]:
    table = outcome.previews.get(role)
    return {} if table is None else preview_metadata(table, rows)


def _dead_letters(outcome: BatchOutcome, spout_id: str) -> dict[str, Any]:
    table = outcome.previews.get(f"dead_letters:{spout_id}")
    if table is None:
        return {}
    if table.num_rows == 0:
        text = f"_no dead letters in txid {outcome.txid}_"
    else:
        total = outcome.dead_letters_by_spout.get(spout_id, table.num_rows)
        text = markdown_table(table)
        if total > table.num_rows:
            text += f"\n\n{table.num_rows} of {total:,} dead letters"
    return {"dead_letters_preview": dg.MetadataValue.md(text)}


def _table_name(node: AssetNode) -> dict[str, Any]:
    table = node.metadata.get("dagster/table_name")
    return {} if table is None else {"dagster/table_name": dg.MetadataValue.text(str(table))}


def _size(size: int | None) -> dict[str, Any]:
    """A state's size after the txid: ``state_size`` and the row count, or "unknown" (None)."""
    if size is None:  # a memcached state: its servers cannot count its keys
        return {"state_size": dg.MetadataValue.text("unknown")}
    return {
        "state_size": dg.MetadataValue.int(size),
        "dagster/row_count": dg.MetadataValue.int(size),
    }


def _applied_metadata(
    topology: TridentTopology, outcome: BatchOutcome, common: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The materialization metadata of each asset (``role:name``) of an applied txid."""
    graph = topology_graph(topology)
    timings = {f"{k}_s": dg.MetadataValue.float(round(v, 4)) for k, v in outcome.timings_s.items()}
    events: dict[str, dict[str, Any]] = {}

    def counted(role: str, label: str, count: int | None) -> dict[str, Any]:
        """``common``, ``label``: ``count`` (if known), the preview and the table name."""
        extra = {} if count is None else {label: dg.MetadataValue.int(count)}
        return common | extra | _preview(outcome, role, count) | _table_name(graph[role])

    for sid in topology.spouts:
        meta = {**common, **timings}
        plan = outcome.plans.get(sid)
        if plan is not None:
            meta |= {
                "offsets": dg.MetadataValue.json(plan.offsets_metadata()),
                "tuples_in": dg.MetadataValue.int(outcome.tuples_in.get(sid, plan.record_count)),
                # a replay: an earlier attempt of this txid failed (any spout kind); for a
                # transactional spout it re-reads the ranges recorded at first emission
                "replay": dg.MetadataValue.bool(plan.replay or common["attempt"].value > 0),
                "ranges_recorded_before": dg.MetadataValue.bool(plan.replay),
                "skipped_by_retention": dg.MetadataValue.int(plan.skipped_by_retention),
            }
            described = getattr(topology.spouts[sid].args["spout"], "plan_metadata", None)
            if described is not None:  # a file spout: the txid's files and their bytes
                meta |= {
                    k: dg.MetadataValue.int(v) if isinstance(v, int) else dg.MetadataValue.json(v)
                    for k, v in described(plan).items()
                }
        # this spout's own (the txid's total also counts other spouts' and windows' late records)
        dead = outcome.dead_letters_by_spout.get(sid, 0)
        meta["dead_letters"] = dg.MetadataValue.int(dead)
        lag = outcome.lag.get(sid)
        if lag is not None:  # plotted per txid: the total, and each partition
            meta["lag"] = dg.MetadataValue.int(sum(lag.values()))
            meta |= {f"lag {p}": dg.MetadataValue.int(n) for p, n in lag.items()}
        if outcome.quarantined:  # set aside: `trident quarantine replay` processes them
            meta["quarantined"] = dg.MetadataValue.int(plan.record_count if plan else 0)
        if outcome.reprocessed_txid is not None:
            meta["reprocessed_txid"] = dg.MetadataValue.int(outcome.reprocessed_txid)
        events[f"spout:{sid}"] = meta | _dead_letters(outcome, sid)
    for name in topology.states:
        state = outcome.states.get(name)
        keys_in = state.keys_in if state is not None else None
        meta = dict(common)
        if state is not None:
            meta |= {
                "keys_in": dg.MetadataValue.int(state.keys_in),
                "keys_updated": dg.MetadataValue.int(state.keys_updated),
                "keys_skipped": dg.MetadataValue.int(state.keys_skipped),
                # Sum/Min/Max skip null input values: how many this txid held
                "null_values_skipped": dg.MetadataValue.int(state.null_values_skipped),
                **_size(state.size),
                **timings,
            }
            if state.total is not None:  # plotted per txid next to state_size
                meta["total"] = dg.MetadataValue.float(state.total)
            window = outcome.windows.get(name)
            if window is not None:  # an event-window state: its watermark, finals, late records
                meta |= {
                    "watermark": dg.MetadataValue.text(str(window.watermark)),
                    "windows_final": dg.MetadataValue.int(window.windows_final),
                    "open_windows": dg.MetadataValue.int(window.open_windows),
                    "late_records": dg.MetadataValue.int(window.late_records),
                    "unreadable_records": dg.MetadataValue.int(window.unreadable_records),
                    "partly_late_records": dg.MetadataValue.int(window.partly_late_records),
                }
                if window.watermark is not None:  # numeric (naive UTC): the UI plots it per txid
                    epoch_s = (window.watermark - datetime(1970, 1, 1)).total_seconds()
                    meta["watermark_epoch_s"] = dg.MetadataValue.float(epoch_s)
                # the txid's late and unreadable records: dead letters of spout window:<state>
                meta |= _dead_letters(outcome, f"window:{name}")
        role = f"state:{name}"
        events[role] = meta | _preview(outcome, role, keys_in) | _table_name(graph[role])
        if f"partials:{name}" in graph:
            events[f"partials:{name}"] = counted(f"partials:{name}", "keys_in", keys_in)
        events[f"new_values:{name}"] = counted(f"new_values:{name}", "rows", keys_in)
    for name in topology.outputs:
        events[f"output:{name}"] = counted(f"output:{name}", "rows", outcome.outputs.get(name))
    return events


def batch_events(
    topology: TridentTopology,
    keys: dict[str, dg.AssetKey],
    outcome: BatchOutcome,
    attempt: int,
    ranged: bool,
    selected: Collection[dg.AssetKey],
) -> Iterator[Any]:
    """The events of one txid's outcome, every asset after those it depends on.

    ``ranged``: the run covers several txids (each gets ``AssetMaterialization`` events with
    its partition); ``selected``: the assets the run selected (a ``MaterializeResult`` each).
    """
    partition = txid_key(outcome.txid)
    common: dict[str, Any] = {
        "txid": dg.MetadataValue.int(outcome.txid),
        "attempt": dg.MetadataValue.int(attempt),
        "already_committed": dg.MetadataValue.bool(not outcome.applied),
        "pipelined": dg.MetadataValue.int(outcome.pipelined),
    }
    order = dependency_order(topology)
    if not outcome.applied:
        note = dg.MetadataValue.md(
            f"txid {outcome.txid} had committed before this run: nothing changed; the "
            "partition's materialization is still the one that committed it."
        )
        for role in order:
            yield dg.AssetObservation(
                asset_key=keys[role], partition=partition, metadata={**common, "note": note}
            )
        return
    events = _applied_metadata(topology, outcome, common)
    for role in order:
        key, meta = keys[role], events[role]
        if ranged or key not in selected:
            yield dg.AssetMaterialization(asset_key=key, partition=partition, metadata=meta)
        else:
            yield dg.MaterializeResult(asset_key=key, metadata=meta)


def refusal_observations(
    topology: TridentTopology,
    keys: dict[str, dg.AssetKey],
    txid: int,
    run_first: int,
    reason: str,
) -> Iterator[dg.AssetObservation]:
    """Observations on the spout-batch assets: ``txid`` was refused, nothing was written."""
    metadata = {
        "txid": dg.MetadataValue.int(txid),
        "refused": dg.MetadataValue.bool(True),
        "run_first": dg.MetadataValue.text(txid_key(run_first)),
        "reason": dg.MetadataValue.text(reason),
    }
    for sid in topology.spouts:
        yield dg.AssetObservation(
            asset_key=keys[f"spout:{sid}"], partition=txid_key(txid), metadata=metadata
        )


def dependency_order(topology: TridentTopology) -> list[str]:
    """The topology's assets (``role:name``) with every asset after the assets it depends on.

    Dagster refuses a materialization yielded before one of its dependencies in the step.
    """
    graph = topology_graph(topology)
    role_of = {node.key: role for role, node in graph.items()}
    deps = {role: [role_of[d] for d in node.deps if d in role_of] for role, node in graph.items()}
    return list(TopologicalSorter(deps).static_order())


def backfill_events(
    keys: dict[str, dg.AssetKey], built: BackfillOutcome
) -> Iterator[dg.AssetMaterialization]:
    """One materialization of the new state's asset per txid its catch-up applied.

    A state added to a topology is built from the log of the txids committed before it, one
    store transaction per txid; each of those txids' partitions of the state's asset then
    shows as materialized, marked ``backfill=true`` with the state's ``first_txid``. Txids
    before ``first_txid`` (``backfill="from_retained"``) stay unmaterialized: the state does
    not cover them.
    """
    key = keys[f"state:{built.state}"]
    for txid in built.applied:
        yield dg.AssetMaterialization(
            asset_key=key,
            partition=txid_key(txid),
            description=f"built from the log of committed txid {txid} (state catch-up)",
            metadata={
                "txid": dg.MetadataValue.int(txid),
                "backfill": dg.MetadataValue.bool(True),
                "first_txid": dg.MetadataValue.int(built.first_txid),
            },
        )

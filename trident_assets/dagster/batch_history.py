"""What Dagster's materializations record of committed batches, and a spout's committed ranges.

Each applied batch materialization of a spout's asset holds the offsets it read per source
partition; a txid materialized again after it committed says ``already_committed``.
:func:`committed_ranges` merges such offsets (and a run's own batches) into the ranges a
state was built from.
"""

from collections.abc import Sequence
from typing import Any

import dagster as dg

from trident_assets.dagster.partitions import txid_key
from trident_assets.runtime.outcomes import BatchOutcome
from trident_assets.spouts.ranges import PartitionRange, partition_sort_key

__all__ = ["applied_offsets", "committed_ranges", "latest_applied"]


def applied_offsets(record: dg.EventLogRecord) -> tuple[int, dict[str, Any]] | None:
    """``(txid, offsets)`` of an applied batch materialization; None for anything else."""
    mat = record.asset_materialization
    if mat is None or mat.partition is None:
        return None
    offsets = mat.metadata.get("offsets")
    done = mat.metadata.get("already_committed")
    if offsets is None or (done is not None and done.value):
        return None
    return int(mat.partition), dict(offsets.value)


def latest_applied(
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
            applied = applied_offsets(record)
            if applied is not None and applied[0] == txid:
                return applied[1]
        if not page.has_more:
            return None
        cursor = page.cursor


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

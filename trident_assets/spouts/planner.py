"""Pure planning of a new batch: where each partition starts, and how many records it takes."""

from __future__ import annotations

from collections.abc import Mapping

from trident_assets.spouts.config import SpoutConfig, StartPosition
from trident_assets.spouts.ranges import PartitionRange, partition_sort_key
from trident_assets.spouts.source import PartitionedSource

__all__ = ["fair_split", "start_offset"]


def start_offset(
    source: PartitionedSource,
    partition: str,
    previous: PartitionRange | None,
    config: SpoutConfig,
) -> int:
    """Where the next batch of ``partition`` starts, following Storm's seek table.

    * a new deployment (no stored range, or one from another ``deployment_id``) with a
      deploy-only start (EARLIEST, LATEST, TIMESTAMP) seeks to that position;
    * otherwise stored offsets win: the next batch starts where the previous one ended,
      unless ``ignore_stored_offsets`` is set and the stored range is from another deployment;
    * with nothing stored, the UNCOMMITTED_* start position applies.

    The result is never below the log's earliest offset (records deleted by retention
    cannot be read) and never above its latest.
    """
    redeployed = previous is None or previous.deployment_id != config.deployment_id
    if previous is not None and redeployed and config.ignore_stored_offsets:
        previous = None
    position = config.start
    if previous is not None and not (redeployed and position.deploy_only):
        offset = previous.next_offset
    elif position in (StartPosition.EARLIEST, StartPosition.UNCOMMITTED_EARLIEST):
        offset = source.earliest(partition)
    elif position in (StartPosition.LATEST, StartPosition.UNCOMMITTED_LATEST):
        offset = source.latest(partition)
    else:
        assert config.start_timestamp_ms is not None  # validated by SpoutConfig
        found = source.offset_for_timestamp(partition, config.start_timestamp_ms)
        offset = source.latest(partition) if found is None else found
    return min(max(offset, source.earliest(partition)), source.latest(partition))


def fair_split(available: Mapping[str, int], limit: int | None) -> dict[str, int]:
    """Split at most ``limit`` records across partitions as evenly as their backlogs allow.

    Water-filling: every partition gets ``min(backlog, share)``; what a short partition leaves
    is shared by the others. Leftover single records go to partitions in sorted order, so
    the split is deterministic.
    """
    take = dict.fromkeys(available, 0)
    if limit is None:
        return {p: max(n, 0) for p, n in available.items()}
    remaining = limit
    open_parts = sorted((p for p, n in available.items() if n > 0), key=partition_sort_key)
    while remaining > 0 and open_parts:
        share = remaining // len(open_parts)
        if share == 0:
            for p in open_parts[:remaining]:
                take[p] += 1
            break
        still_open = []
        for p in open_parts:
            grant = min(share, available[p] - take[p])
            take[p] += grant
            remaining -= grant
            if take[p] < available[p]:
                still_open.append(p)
        open_parts = still_open
    return take

"""Chunks: consecutive txids whose Spark work runs as one job (Trident's max spout pending).

The txid loop (:mod:`~trident_assets.runtime.txid_loop`) takes up to ``max_spout_pending``
consecutive txids (:func:`chunk_limit`), plans the first, and extends the chunk while the
planner allows (:func:`extend_chunk`, see :func:`~trident_assets.planner.chunk_pipelinable`).
A started :class:`Chunk` runs its engine job in a worker thread while earlier txids commit;
:func:`settle` drops one that will not.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trident_assets.planner import chunk_pipelinable, live_spouts

if TYPE_CHECKING:
    from collections.abc import Callable

    from trident_assets.runtime.outcomes import Prepared
    from trident_assets.spouts.coordinator import BatchCoordinator
    from trident_assets.spouts.ranges import BatchPlan
    from trident_assets.stream.topology import TridentTopology

__all__ = ["Chunk", "chunk_limit", "extend_chunk", "settle"]


@dataclass(frozen=True)
class Chunk:
    """Consecutive txids whose Spark work runs as one job (maybe while earlier ones commit)."""

    batches: list[tuple[int, dict[str, BatchPlan]]]
    emit_s: float
    base: Any
    """What the engine keeps of the chunk until its txids committed (its cleanups too)."""
    future: Future[tuple[float, dict[int, Prepared]]]
    """When the job started in the worker (it may queue behind another), and its result."""
    plan_s: float = 0.0
    """Seconds spent building the chunk's DataFrames on the driver."""
    event_tops: dict[str, int | None] = field(default_factory=dict)
    """Per event-time window: an upper bound of its largest event time after the chunk."""


def chunk_limit(ordered: list[int], i: int, max_spout_pending: int) -> int:
    """How many consecutive txids from ``ordered[i]`` one chunk may take."""
    limit = 1
    while (
        limit < max_spout_pending
        and i + limit < len(ordered)
        and ordered[i + limit] == ordered[i] + limit
    ):
        limit += 1
    return limit


def extend_chunk(
    topology: TridentTopology,
    pipelinable: bool,
    coordinators: dict[str, BatchCoordinator],
    batches: list[tuple[int, dict[str, BatchPlan]]],
    limit: int,
) -> list[tuple[int, dict[str, BatchPlan]]] | None:
    """Add successors to a one-batch chunk while they can share its Spark job.

    A successor's plan continues from its predecessor's (as Trident's emitter keeps the
    last batch's metadata in memory); transactional ranges are recorded as planned.
    Returns None when even the first batch must run alone (``pipelinable``: the
    topology's :func:`~trident_assets.planner.pipelinable`).
    """
    live = live_spouts(batches[0][1])
    if not pipelinable or not chunk_pipelinable(topology, live):
        return None
    while len(batches) < limit:
        txid, previous = batches[-1]
        plans = {sid: c.emit_after(previous[sid]) for sid, c in coordinators.items()}
        live |= live_spouts(plans)
        if not chunk_pipelinable(topology, live):
            break
        batches.append((txid + 1, plans))
    return batches


def settle(chunk: Chunk | None, release: Callable[[Chunk], None]) -> None:
    """Wait for a chunk started ahead that will not commit (its result is dropped).

    ``release`` then drops what its job left behind (e.g. the partials it spilled).
    """
    if chunk is not None:
        with contextlib.suppress(Exception):  # its txids are re-planned and re-run later
            chunk.future.result()
        release(chunk)

"""Each state kind's engine: the batch input it needs from Spark and how a batch is applied.

One engine per kind of :mod:`trident_assets.stream.state_kinds`, registered in
:data:`ENGINES` under the kind's name; a txid's run asks :func:`engine_for` and never tells
kinds apart itself. An engine's ``batch_input`` runs the kind's Spark work before the
commit transaction (or during it, for a state fed by this batch's new values); its
``apply`` runs inside the transaction and returns an
:class:`~trident_assets.runtime.outcomes.Applied`; a kind whose txids share a Spark job
(``StateKind.shares_chunk_job``) has a ``chunk`` job too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trident_assets.backends.window_store import last_committed
from trident_assets.runtime.outcomes import Applied, StateInput
from trident_assets.spark.batch_context import PartialsJob
from trident_assets.spark.event_window_chunks import WindowSlice, window_chunk_job
from trident_assets.spark.event_windows import apply_window_state as apply_event_window
from trident_assets.spark.event_windows import window_input
from trident_assets.spark.kv_join import apply_kv_join, kv_join_input
from trident_assets.spark.kv_state import apply_kv_state, kv_input
from trident_assets.spark.partials import combiner_partials
from trident_assets.spark.single_join import apply_join_state, join_batch_input
from trident_assets.spark.state_apply import (
    apply_distinct_count,
    apply_map_state,
    apply_reducer_map,
    apply_updater_state,
    distinct_pairs,
    reducer_input,
    updater_input,
)
from trident_assets.spark.trident_windows import apply_window_state, window_batch_table
from trident_assets.stream.state_kinds import (
    EVENT_WINDOW,
    KEY_VALUE,
    KEY_VALUE_JOIN,
    SINGLE_JOIN,
    TRIDENT_WINDOW,
    Combiner,
    DistinctCountKind,
    Reducer,
    Updater,
    state_kind,
)

if TYPE_CHECKING:
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.streams import TridentState

__all__ = ["ENGINES", "StateEngine", "engine_for"]


@dataclass(frozen=True)
class StateEngine:
    """How one kind of state runs: its batch input and the apply of a batch."""

    batch_input: Callable[[BatchContext, TridentState], StateInput] | None
    """The state's input this batch (partials, tuples or rows), computed on Spark, with what
    the job found besides (returned, never written into the run). None: its :attr:`chunk`
    job over the txid alone."""
    apply: Callable[[BatchContext, TridentState, Any], Applied]
    """Apply an input to the state inside the txid's commit transaction."""
    chunk: Callable[[BatchContext, TridentState], PartialsJob] | None = None
    """The state's inputs for a chunk of txids, planned now, run by one Spark job (a kind
    that shares one)."""


def _apply_event_window(run: BatchContext, state: TridentState, batch: Any) -> Applied:
    """A chunk's window rows are decided on the watermark committed before the txid."""
    if isinstance(batch, WindowSlice):  # the watermark row read once, in this transaction
        committed = last_committed(run.runner.store, state)  # type: ignore[arg-type]
        table = batch.resolve(committed[1])
        return apply_event_window(run, state, table, committed)  # type: ignore[arg-type]
    return apply_event_window(run, state, batch)  # type: ignore[arg-type]


def _combiner_chunk(run: BatchContext, state: TridentState) -> PartialsJob:
    """A combiner's partials per (key, txid), written by the executors in a spilling run."""
    spill = run.runner.spill if run.spill else None
    return combiner_partials(run, state, run.runner.topology, spill)


def _window_chunk(run: BatchContext, state: TridentState) -> PartialsJob:
    """An event-time window's rows for every txid of the chunk, bounded by record times."""
    inflight = run.inflight_tops.get(state.spec.name)
    window, after = window_chunk_job(run, state, inflight)  # type: ignore[arg-type]
    return PartialsJob(None, window, event_top=after)


ENGINES: dict[str, StateEngine] = {
    Combiner.name: StateEngine(None, apply_map_state, _combiner_chunk),
    Reducer.name: StateEngine(reducer_input, apply_reducer_map),
    DistinctCountKind.name: StateEngine(distinct_pairs, apply_distinct_count),
    Updater.name: StateEngine(updater_input, apply_updater_state),
    SINGLE_JOIN: StateEngine(join_batch_input, apply_join_state),
    TRIDENT_WINDOW: StateEngine(window_batch_table, apply_window_state),
    EVENT_WINDOW: StateEngine(window_input, _apply_event_window, _window_chunk),  # type: ignore[arg-type]
    KEY_VALUE: StateEngine(kv_input, apply_kv_state),
    KEY_VALUE_JOIN: StateEngine(kv_join_input, apply_kv_join),
}
"""The engine of each state kind, by the kind's name."""


def engine_for(state: TridentState) -> StateEngine:
    """The engine of ``state``'s kind."""
    return ENGINES[state_kind(state.node).name]

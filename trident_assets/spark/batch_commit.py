"""A txid's commit phase: inside its store transaction, apply its states and write its tables.

:func:`commit_txid_run` runs inside the transaction the runner's one commit function opens
(:func:`~trident_assets.runtime.commit.commit_txid`): it applies every state (each kind's
engine, :mod:`~trident_assets.spark.state_engines`, returns an
:class:`~trident_assets.runtime.outcomes.Applied`), computes what reads this batch's new
values, writes outputs, new values and dead letters
(:mod:`~trident_assets.runtime.batch_tables`), makes the spout ranges final and records what
the batch read (:mod:`~trident_assets.backends.spout_history`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from trident_assets.backends.spilled_partials import SpilledPartials
from trident_assets.backends.spout_history import record_history
from trident_assets.runtime.batch_tables import store_dead_letters, store_rows
from trident_assets.runtime.context import BatchContext
from trident_assets.runtime.outcomes import BatchOutcome, Prepared, dead_letter_rows, head_rows
from trident_assets.spark.state_apply import spilled_previews, state_previews
from trident_assets.spark.state_engines import engine_for

if TYPE_CHECKING:
    from trident_assets.spouts.ranges import BatchPlan

__all__ = ["CommittingRun", "commit_txid_run"]


class CommittingRun(BatchContext, Protocol):
    """A chunk of one as its commit sees it (:class:`~.batch_run.BatchRun`)."""

    new_values: dict[str, pa.Table]
    """Each state's new values this batch (set here, read by the streams after it)."""
    expired: dict[str, pa.Table]
    """Each single join's expired halves this batch (set here)."""
    recorded: dict[str, BatchPlan]
    """The ranges the commit makes final."""
    on_commit: list[Callable[[], None]]
    """Further writes that belong in the txid's commit transaction."""


def commit_txid_run(run: CommittingRun, prepared: Prepared) -> BatchOutcome:
    """Apply ``run``'s one txid from its ``prepared`` batch, in the open store transaction.

    Returns the txid's outcome; the states' new values and a single join's expired halves
    are left in ``run`` for the streams that read them later in the same commit.
    """
    runner = run.runner
    store = runner.store
    topo = runner.topology
    outcome = BatchOutcome(topo.name, run.txid, True, run.plans, prepared.tuples_in)
    state_dead: dict[str, pa.Table] = {}
    for name, state in topo.states.items():
        batch = prepared.partials.get(name)
        nulls = prepared.nulls.get(name, 0)
        if batch is None:  # reads this batch's new values: computed now
            batch = run.state_input(state)
            nulls = run.nulls.get(name, 0)
        applied = engine_for(state).apply(run, state, batch)
        if applied.new_values is not None:  # read by the states after it (new values)
            run.new_values[name] = applied.new_values
        if applied.expired is not None:
            run.expired[name] = applied.expired
        if applied.window is not None:
            outcome.windows[name] = applied.window
        state_dead |= applied.dead
        if isinstance(batch, SpilledPartials):  # its nulls and previews read from the files
            outcome.states[name] = applied.outcome
            outcome.previews |= spilled_previews(store, state, run.txid)
            continue
        outcome.states[name] = replace(applied.outcome, null_values_skipped=nulls)
        outcome.previews |= state_previews(state, batch, applied.new_values)
        outcome.previews |= applied.previews
    runner.fault("after_state_write")
    outputs = dict(prepared.outputs)
    for name, stream in topo.outputs.items():
        if name not in outputs:
            outputs[name] = run.collect(stream.node)
    for name, table in outputs.items():
        store_rows(store, topo.output_table(name), run.txid, table)
        outcome.outputs[name] = table.num_rows
        outcome.previews[f"output:{name}"] = head_rows(table)
    for name, table in run.new_values.items():
        store_rows(store, topo.states[name].new_values_table, run.txid, table)
        outcome.previews.setdefault(f"new_values:{name}", head_rows(table))
    all_dead = {**prepared.dead, **state_dead}
    outcome.dead_letters = store_dead_letters(store, topo.name, run.txid, all_dead)
    outcome.dead_letters_by_spout = {sid: t.num_rows for sid, t in all_dead.items()}
    for sid, dead in all_dead.items():
        outcome.previews[f"dead_letters:{sid}"] = dead_letter_rows(dead)
    for spout_id, plan in run.recorded.items():
        runner.coordinator(spout_id).commit(plan)
    record_history(store, topo.name, run.txid, {s: p.ranges for s, p in run.plans.items()})
    for write in run.on_commit:
        write()
    runner.fault("before_commit")
    return outcome

"""One batch on Spark: building its DataFrames, the batch phase and the commit phase.

:class:`BatchRun` builds each node's DataFrame once (spouts read their planned ranges, the
scheme splits off dead letters; the node kinds of :mod:`~trident_assets.spark.stream_ops`,
aggregates and queries are built here), then runs the batch in two phases:

1. :meth:`BatchRun.prepare` (Trident's batch phase): every Spark job that does not need this
   batch's new state: each state's input, the outputs, the dead letters.
2. :meth:`BatchRun.commit` (inside the store transaction the runner opens): applies every
   state (:mod:`~trident_assets.spark.state_apply`), computes what reads the new values,
   writes outputs, new values and dead letters (:mod:`~trident_assets.runtime.batch_tables`),
   makes the spout ranges final and records what the batch read
   (:mod:`~trident_assets.backends.spout_history`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.spilled_partials import SpilledPartials
from trident_assets.backends.spout_history import record_history
from trident_assets.core.aggregators import ReducerAggregator, is_sql_combiner
from trident_assets.core.user_code import guard
from trident_assets.planner import depends_on_new_values, is_empty, live_spouts
from trident_assets.runtime.batch_tables import store_dead_letters, store_rows
from trident_assets.runtime.outcomes import BatchOutcome, Prepared, dead_letter_rows, head_rows
from trident_assets.spark.aggregation import (
    combine_partials,
    reduce_groups,
)
from trident_assets.spark.arrow_transfer import to_spark
from trident_assets.spark.node_frames import NodeFrames, empty_arrow
from trident_assets.spark.schemes import DEAD_LETTER_COLUMNS
from trident_assets.spark.spilled import Cleanup
from trident_assets.spark.state_apply import spilled_previews, state_previews
from trident_assets.spark.state_engines import engine_for
from trident_assets.spark.state_query import query_frame
from trident_assets.spark.stream_ops import NODE_KINDS, build
from trident_assets.stream.single_join import SINGLE_JOIN_EXPIRED

if TYPE_CHECKING:
    from trident_assets.runtime.context import RunContext
    from trident_assets.spouts.ranges import BatchPlan
    from trident_assets.stream.graph import Node
    from trident_assets.stream.streams import TridentState

__all__ = ["BatchRun"]


class BatchRun(NodeFrames):
    """The Spark side of one batch: lazily built DataFrames, memoised per node."""

    def __init__(
        self,
        runner: RunContext,
        txid: int,
        plans: dict[str, BatchPlan],
        *,
        spill: bool = False,
    ) -> None:
        """Batch ``txid`` of ``runner``'s topology, reading the ranges of ``plans``.

        ``spill``: states may have their partials written to files when the runner spills
        (``trident.partials.spill``); the caller removes :attr:`spilled` after the commit.
        Off for the batches that check, build or rebuild a state.
        """
        self.runner = runner
        self.spill = spill
        self.spark = runner.spark
        self.txid = txid
        self.plans = plans
        self.recorded = plans
        """The ranges the commit makes final (a quarantine replay records its position instead
        of the old ranges it reads)."""
        self.on_commit: list[Callable[[], None]] = []
        """Writes that belong in this txid's commit transaction (e.g. marking a quarantine)."""
        self.live = live_spouts(plans)
        """The spouts that read at least one record this batch."""
        self.frames: dict[int, Any] = {}
        self.dead: dict[str, Any] = {}
        self.raws: dict[str, Any] = {}
        self.counted_dead: dict[str, int] = {}
        """Spouts whose dead letters a Spark job already counted (an Arrow kernel, or a
        window's decode): how many."""
        self.new_values: dict[str, pa.Table] = {}
        """Each state's new values this batch, as its apply returned them (new-values
        streams read them during the commit)."""
        self.expired: dict[str, pa.Table] = {}
        """Expired halves of each single join this batch (its ``<join>_expired`` output)."""
        self.value_types: dict[str, pa.DataType] = {}
        """Arrow type of each combiner state's batch partials (typing empty query results)."""
        self.nulls: dict[str, int] = {}
        """Per Sum/Min/Max state: the null values its partials skipped this batch."""
        self.folded_dead: dict[str, pa.Table] = {}
        """Spouts whose dead letters a state's own Spark job collected (see :meth:`fold_dead`)."""
        self.dead_collected = False
        """True once :meth:`prepare` has collected the spouts' dead letters."""
        self.spilled: list[Cleanup] = []
        """Remove the partials the executors wrote (once the batch has committed)."""

    # -- building DataFrames ---------------------------------------------------------------

    def is_empty(self, node: Node) -> bool:
        """True when ``node`` certainly has no tuples this batch.

        Its spouts read nothing, or it reads only streams this batch's commit has already
        written and left empty (a state's new values, a single join's expired halves).
        """
        return is_empty(node, self.live, self._written_empty)

    def _written_empty(self, node: Node) -> bool:
        """True for a new-values (or expired) stream the commit has written with no rows."""
        if node.kind == "new_values":
            written = self.new_values.get(node.args["state"].spec.name)
        elif node.kind == SINGLE_JOIN_EXPIRED:
            written = self.expired.get(node.args["state"].spec.name)
        else:
            return False
        return written is not None and written.num_rows == 0

    def collect(self, node: Node) -> pa.Table:
        """The node's tuples as Arrow; an empty node costs no Spark job.

        Neither does a global SQL-combiner aggregate of an empty stream: its one row is
        ``agg.zero()``, as :func:`combine_partials` computes it.
        """
        frame = self.frame(node)
        if self.is_empty(node):
            return empty_arrow(frame)
        a = node.args
        if (
            node.kind == "aggregate"
            and not a["group"]
            and is_sql_combiner(a["agg"])
            and self.is_empty(node.parents[0])
        ):
            (field_,) = empty_arrow(frame).schema
            return pa.table({field_.name: pa.array([a["agg"].zero()], field_.type)})
        return frame.toArrow()

    def _build(self, node: Node) -> Any:
        a = node.args
        if node.kind == "spout":
            good, dead = a["spout"].scheme.decode(self.raw(node))
            self.dead[a["spout_id"]] = dead
            return good
        if node.kind == "new_values":
            state: TridentState = a["state"]
            return to_spark(self.spark, self.new_values[state.spec.name])
        if node.kind == SINGLE_JOIN_EXPIRED:
            return to_spark(self.spark, self.expired[a["state"].spec.name])
        if node.kind in NODE_KINDS:
            return build(node, [self.frame(p) for p in node.parents])
        parent = self.frame(node.parents[0])
        built = self.row_wise(node, parent)
        if built is not None:
            return built
        if node.kind == "aggregate":
            agg = guard(a["agg"], node.label)
            if isinstance(agg, ReducerAggregator):
                return reduce_groups(parent, a["group"], a["inputs"], agg, a["output"])
            return combine_partials(parent, a["group"], a["inputs"][0], agg, a["output"])
        if node.kind == "query":
            return query_frame(self, parent, {**a, "parent": node.parents[0], "label": node.label})
        msg = f"cannot run node kind {node.kind!r}"
        raise AssertionError(msg)

    def raw(self, node: Node) -> Any:
        """The spout's raw records of this batch (built once)."""
        sid = node.args["spout_id"]
        if sid not in self.raws:
            self.raws[sid] = node.args["spout"].read(self.spark, self.runner.log, self.plans[sid])
        return self.raws[sid]

    def prepare(self) -> Prepared:
        """Run Spark for everything that does not depend on this batch's new state."""
        topo = self.runner.topology
        partials: dict[str, pa.Table] = {}
        for name, state in topo.states.items():
            if not depends_on_new_values(state.node):  # else computed during the commit
                partials[name] = self.state_input(state)
        outputs = {
            name: self.collect(stream.node)
            for name, stream in topo.outputs.items()
            if not depends_on_new_values(stream.node)
        }
        dead = {  # no Spark job where nothing was read or a job counted no dead letter
            sid: self.folded_dead[sid]
            if sid in self.folded_dead
            else self.empty_dead_letters(sid)
            if self.plans[sid].record_count == 0 or self.counted_dead.get(sid) == 0
            else self._dead_frame(sid).toArrow()
            for sid in topo.spouts
        }
        self.dead_collected = True
        tuples_in = {sid: p.record_count for sid, p in self.plans.items()}
        return Prepared(partials, outputs, dead, tuples_in, dict(self.nulls))

    def _dead_frame(self, sid: str) -> Any:
        """The spout's dead letters this batch (its decode built once)."""
        self.frame(self.runner.topology.spouts[sid])
        return self.dead[sid]

    def empty_dead_letters(self, sid: str) -> pa.Table:
        """An empty table of the spout's dead letters, with their schema.

        Found once per runner: planning a decode costs JVM analysis (a strict JSON
        scheme's about 0.1 s a batch).
        """
        known = self.runner.no_dead_letters
        if sid not in known:
            known[sid] = empty_arrow(self._dead_frame(sid))
        return known[sid]

    def fold_dead(self, node: Node) -> tuple[str, Any] | None:
        """``(spout id, dead letters frame)`` a state's job over ``node`` may collect, or None.

        Only the one spout upstream of ``node`` (through its parents), in the batch phase
        before :meth:`prepare` collects dead letters, when the spout read records, no Arrow
        kernel counted them and no other job collected them. The collector leaves the table
        (with the frame's Arrow schema) in :attr:`folded_dead`, saving their own Spark job.
        """
        sid = self.uncounted_spout(node)
        if (
            sid is None
            or sid not in self.dead
            or tuple(self.dead[sid].columns) != DEAD_LETTER_COLUMNS
        ):
            return None
        return sid, self.dead[sid]

    def uncounted_spout(self, node: Node) -> str | None:
        """The one spout upstream of ``node`` whose dead letters are still to collect, or None.

        In the batch phase (before :meth:`prepare` collects dead letters), when the spout
        read records and no job collected or counted its dead letters yet.
        """
        spouts: set[str] = set()
        todo = [node]
        while todo:
            current = todo.pop()
            if current.kind == "spout":
                spouts.add(current.args["spout_id"])
            todo.extend(current.parents)
        if self.dead_collected or len(spouts) != 1:
            return None
        (sid,) = spouts
        if sid in self.folded_dead or sid in self.counted_dead or self.plans[sid].record_count == 0:
            return None
        return sid

    def state_input(self, state: TridentState) -> Any:
        """What the commit applies to ``state``: its kind's batch input.

        Per-key partials, grouped tuples or rows (:mod:`~trident_assets.spark.state_engines`).
        What the engine's job found besides is kept here: the partials' value type, the nulls
        skipped, the dead letters it counted or collected (the next states and
        :meth:`prepare` read them).
        """
        found = engine_for(state).batch_input(self, state)
        name = state.spec.name
        if found.value_type is not None:
            self.value_types[name] = found.value_type
        if found.nulls is not None:
            self.nulls[name] = found.nulls
        self.counted_dead.update(found.counted_dead)
        self.folded_dead.update(found.folded_dead)
        return found.batch

    def commit(self, prepared: Prepared) -> BatchOutcome:
        """Apply everything inside the open store transaction."""
        runner = self.runner
        store = runner.store
        topo = runner.topology
        outcome = BatchOutcome(topo.name, self.txid, True, self.plans, prepared.tuples_in)
        state_dead: dict[str, pa.Table] = {}
        for name, state in topo.states.items():
            batch = prepared.partials.get(name)
            nulls = prepared.nulls.get(name, 0)
            if batch is None:
                batch = self.state_input(state)
                nulls = self.nulls.get(name, 0)
            applied = engine_for(state).apply(self, state, batch)
            if applied.new_values is not None:  # read by the states after it (new values)
                self.new_values[name] = applied.new_values
            if applied.expired is not None:
                self.expired[name] = applied.expired
            if applied.window is not None:
                outcome.windows[name] = applied.window
            state_dead |= applied.dead
            if isinstance(batch, SpilledPartials):  # its nulls and previews read from the files
                outcome.states[name] = applied.outcome
                outcome.previews |= spilled_previews(store, state, self.txid)
                continue
            outcome.states[name] = replace(applied.outcome, null_values_skipped=nulls)
            outcome.previews |= state_previews(state, batch, applied.new_values)
            outcome.previews |= applied.previews
        runner.fault("after_state_write")
        outputs = dict(prepared.outputs)
        for name, stream in topo.outputs.items():
            if name not in outputs:
                outputs[name] = self.collect(stream.node)
        for name, table in outputs.items():
            store_rows(store, topo.output_table(name), self.txid, table)
            outcome.outputs[name] = table.num_rows
            outcome.previews[f"output:{name}"] = head_rows(table)
        for name, table in self.new_values.items():
            store_rows(store, topo.states[name].new_values_table, self.txid, table)
            outcome.previews.setdefault(f"new_values:{name}", head_rows(table))
        all_dead = {**prepared.dead, **state_dead}
        outcome.dead_letters = store_dead_letters(store, topo.name, self.txid, all_dead)
        outcome.dead_letters_by_spout = {sid: t.num_rows for sid, t in all_dead.items()}
        for sid, dead in all_dead.items():
            outcome.previews[f"dead_letters:{sid}"] = dead_letter_rows(dead)
        for spout_id, plan in self.recorded.items():
            runner.coordinator(spout_id).commit(plan)
        record_history(store, topo.name, self.txid, {s: p.ranges for s, p in self.plans.items()})
        for write in self.on_commit:
            write()
        runner.fault("before_commit")
        return outcome

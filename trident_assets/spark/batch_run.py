"""The one frame builder: a chunk of N >= 1 consecutive txids on Spark.

Trident keeps up to ``max.spout.pending`` batches in flight; only their state commits are
strictly ordered by txid. :class:`BatchRun` builds the Spark work of a chunk of consecutive
txids (a txid run by itself is a chunk of one) and returns each txid's
:class:`~trident_assets.runtime.outcomes.Prepared`: the states' inputs, the outputs, the dead
letters. A chunk of several tags every tuple with its batch
(:data:`~.txid_tags.TXID_COLUMN`) and splits the Arrow results by txid
(:mod:`.read_modes`). The runner then commits the txids one at a time, in order, each in its
own store transaction (:func:`~trident_assets.runtime.commit.commit`); a crash between two
commits leaves the later txids to be replayed.

Which txids share one job is the planner's choice (:mod:`trident_assets.planner`). Streams
that receive no tuples in a chunk cost no Spark job: the chunk's first txid builds them as
a chunk of one. Dead letters are counted in one place
(:mod:`~trident_assets.spark.dead_letter_jobs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.core.aggregators import ReducerAggregator
from trident_assets.core.user_code import guard
from trident_assets.planner import depends_on_new_values, is_empty, live_spouts
from trident_assets.runtime.outcomes import Prepared, StateInput
from trident_assets.spark.aggregation import combine_partials, reduce_groups
from trident_assets.spark.arrow_transfer import to_spark
from trident_assets.spark.codegen_conf import codegen_conf
from trident_assets.spark.dead_letter_jobs import SpoutDeadLetters
from trident_assets.spark.read_modes import ReadMode, read_mode
from trident_assets.spark.scoped_conf import scoped_conf
from trident_assets.spark.spilled import Cleanup
from trident_assets.spark.spout_reads import reads_for, records_of
from trident_assets.spark.state_engines import engine_for
from trident_assets.spark.state_query import query_frame
from trident_assets.spark.stream_ops import NODE_KINDS, build
from trident_assets.stream.graph import ROW_WISE
from trident_assets.stream.single_join import SINGLE_JOIN_EXPIRED

if TYPE_CHECKING:
    from trident_assets.runtime.txid_loop import Batches
    from trident_assets.spark.batch_context import ChunkPartials, PartialsJob, RunContext
    from trident_assets.spouts.ranges import BatchPlan
    from trident_assets.stream.graph import Node
    from trident_assets.stream.streams import TridentState

__all__ = ["BatchRun"]


class BatchRun(SpoutDeadLetters):
    """The Spark side of a chunk of txids: lazily built DataFrames, memoised per node.

    How its frames are read (:attr:`mode`) is chosen once: tagged with each tuple's batch, or
    its txid's alone. State kinds read it (:class:`~.batch_context.BatchContext`) and return
    what they find: only this module writes into a run. A chunk of one commits its txid.
    """

    def __init__(
        self,
        runner: RunContext,
        batches: Batches,
        *,
        spill: bool = False,
        event_tops: dict[str, int | None] | None = None,
        value_types: dict[str, pa.DataType] | None = None,
    ) -> None:
        """The chunk ``batches`` of ``runner``'s topology.

        ``spill``: states may have their partials written to files when the runner spills
        (``trident.partials.spill``); the caller has them removed after the commits
        (:meth:`drop_spilled`).
        Off for the batches that check, build or rebuild a state. ``event_tops``: per
        event-time window, an upper bound of the largest event time of the chunk in flight
        before this one (see :mod:`.event_window_chunks`). ``value_types``: the partials' value
        types known already (a chunk's, for one of its txids).
        """
        self.runner = runner
        self.spill = spill
        self.spark = runner.spark
        self.batches = list(batches)
        self.txids = [txid for txid, _ in self.batches]
        self.txid, self.plans = self.batches[0]
        """The chunk's first txid and its ranges (a chunk of one: its only)."""
        self.mode: ReadMode = read_mode(len(self.batches))
        """How the chunk's frames are read: tagged with each tuple's batch, or its txid's alone."""
        self.live = set().union(*(live_spouts(plans) for _, plans in self.batches))
        self.frames: dict[int, Any] = {}
        self.dead: dict[str, tuple[Any, Any]] = {}
        """Per decoded spout: its dead letters' DataFrame and the ``Observation`` counting them
        (a chunk of several; None in a chunk of one)."""
        self.raws: dict[str, Any] = {}
        self.conf: dict[str, str] = {}
        """Spark settings for the chunk's jobs (code generation, how the reads split)."""
        self.counted_dead: dict[str, int] = {}
        """Spouts whose dead letters a Spark job already counted (an Arrow kernel, or a
        window's decode): how many."""
        self.new_values: dict[str, pa.Table] = {}
        """Each state's new values this batch, as its commit applied them (new-values
        streams read them during the commit: :meth:`read_applied`)."""
        self.expired: dict[str, pa.Table] = {}
        """Expired halves of each single join this batch (its ``<join>_expired`` output)."""
        self.value_types: dict[str, pa.DataType] = dict(value_types or {})
        self.nulls: dict[str, int] = {}
        self.folded_dead: dict[str, pa.Table] = {}
        """Spouts whose dead letters a state's own Spark job collected (see :meth:`fold_dead`)."""
        self.dead_collected = False
        """True once the batch phase has collected the spouts' dead letters."""
        self._spilled: list[Cleanup] = []
        """Remove the partials the executors wrote (once the chunk's txids have committed)."""
        self.inflight_tops: dict[str, int | None] = dict(event_tops or {})
        self.event_tops = dict(self.inflight_tops)
        """Per event-time window: an upper bound of its largest event time after the chunk (set
        by :meth:`plan`; :attr:`inflight_tops`: after the chunk in flight before this one)."""
        self._first: BatchRun | None = None

    @classmethod
    def alone(
        cls,
        runner: RunContext,
        txid: int,
        plans: dict[str, BatchPlan],
        *,
        spill: bool = False,
        value_types: dict[str, pa.DataType] | None = None,
    ) -> BatchRun:
        """Txid ``txid`` reading ``plans``, as a chunk of one."""
        return cls(runner, [(txid, plans)], spill=spill, value_types=value_types)

    @property
    def first(self) -> BatchRun:
        """The chunk's first txid as a chunk of one: it builds the streams without tuples.

        Typed by the value types this chunk knows when it is made (query results of empty
        streams are typed by them; :meth:`plan` makes it anew once every state is planned).
        """
        if self._first is None:
            self._first = self.mode.txid_run(self, self.txid)
        return self._first

    def chunk_of_one(self, txid: int) -> BatchRun:
        """The chunk's ``txid`` as a new chunk of one, typed by the value types known so far."""
        plans, types = dict(self.batches)[txid], dict(self.value_types)
        return BatchRun.alone(self.runner, txid, plans, spill=self.spill, value_types=types)

    # -- building DataFrames ---------------------------------------------------------------

    def is_empty(self, node: Node) -> bool:
        """True when ``node`` certainly has no tuples in the chunk.

        Its spouts read nothing, or it reads only streams this batch's commit has already
        written and left empty (a state's new values, a single join's expired halves).
        """
        return is_empty(node, self.live, self._written_empty)

    def _written_empty(self, node: Node) -> bool:
        """True for a new-values (or expired) stream the commit has written with no rows."""
        tables = {"new_values": self.new_values, SINGLE_JOIN_EXPIRED: self.expired}.get(node.kind)
        written = None if tables is None else tables.get(node.args["state"].spec.name)
        return written is not None and written.num_rows == 0

    def _build(self, node: Node) -> Any:
        a = node.args
        if node.kind == "spout":
            observation = self.mode.observation(a["spout_id"])
            decoded = self.mode.decode(self, a["spout_id"], reads_for(a["spout"]), observation)
            good, dead = decoded or a["spout"].scheme.decode(
                self.raw(node), keep=self.mode.keep, observation=observation
            )
            self.dead[a["spout_id"]] = (dead, observation)
            return good
        if node.kind in ROW_WISE:
            return self.row_wise(node, self.frame(node.parents[0]), keep=self.mode.keep)
        self.mode.check_builds(node)
        if node.kind == "new_values":
            state: TridentState = a["state"]
            return to_spark(self.spark, self.new_values[state.spec.name])
        if node.kind == SINGLE_JOIN_EXPIRED:
            return to_spark(self.spark, self.expired[a["state"].spec.name])
        if node.kind in NODE_KINDS:
            return build(node, [self.frame(p) for p in node.parents])
        parent = self.frame(node.parents[0])
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
        """The spout's raw records of the chunk (tagged in a chunk of several; built once)."""
        sid = node.args["spout_id"]
        if sid not in self.raws:
            raw, conf = self.mode.read(self, sid, reads_for(node.args["spout"]))
            self.raws[sid] = raw
            self.conf.update(conf)
        return self.raws[sid]

    def tagged(self, node: Node) -> Any:
        """``node``'s DataFrame with its batch tag (a chunk of one: every tuple tagged 0)."""
        home = self.mode.home(self, node)
        return home.mode.tag(home.frame(node))

    def tagged_raw(self, spout: Node) -> Any:
        """``spout``'s raw records of the chunk, tagged."""
        return self.mode.tag(self.raw(spout))

    def records(self, spout: Node) -> int:
        """How many records ``spout`` reads in the chunk."""
        sid = spout.args["spout_id"]
        return sum(plans[sid].record_count for _, plans in self.batches)

    def per_txid(self, table: pa.Table) -> dict[int, pa.Table]:
        """A table of the chunk's tuples split by txid (a chunk of one: the whole table)."""
        return self.mode.split(table, self.txids)

    # -- the batch phase -------------------------------------------------------------------

    def state_input(self, state: TridentState) -> Any:
        """What the commit applies to ``state`` in a chunk of one: its kind's batch input.

        Per-key partials, grouped tuples or rows (:mod:`~trident_assets.spark.state_engines`).
        What the engine's job found besides is kept here: the partials' value type, the nulls
        skipped, the dead letters it counted or collected (the next states and the dead
        letters' job read them). A kind without a batch input of its own (a combiner) runs
        its chunk's job over this chunk of one.
        """
        engine = engine_for(state)
        if engine.batch_input is not None:
            return self._keep(state.spec.name, engine.batch_input(self, state))
        found = self.planned(state, engine.chunk(self, state))()  # type: ignore[misc]
        nulls = found.nulls.get(self.txid)
        kept = StateInput(
            found.tables[self.txid], None, nulls, found.counted_dead, found.folded_dead
        )
        return self._keep(state.spec.name, kept)

    def _keep(self, name: str, found: StateInput) -> Any:
        if found.value_type is not None:
            self.value_types[name] = found.value_type
        if found.nulls is not None:
            self.nulls[name] = found.nulls
        self.counted_dead.update(found.counted_dead)
        self.folded_dead.update(found.folded_dead)
        return found.batch

    def planned(self, state: TridentState, job: PartialsJob) -> Callable[[], ChunkPartials]:
        """``job``'s Spark job; what its planning and its run find is kept here.

        Its value type (types empty query results), an event-time window's bound after the
        chunk, the cleanups of the files its executors will write, the dead letters it
        collected.
        """
        if job.value_type is not None:
            self.value_types[state.spec.name] = job.value_type
        if job.event_top is not None:
            self.event_tops[state.spec.name] = job.event_top
        self._spilled.extend(job.cleanups)

        def run() -> ChunkPartials:
            found = job.run()
            self.folded_dead.update(found.folded_dead)
            return found

        return run

    def _output_job(self, node: Node) -> Callable[[], dict[int, pa.Table]]:
        home = self.mode.home(self, node)
        if home is not self:  # no tuples in the chunk: the first txid's, empty, for each
            table = home.collect(node)
            return lambda: dict.fromkeys(self.txids, table)
        self.mode.plan_frame(self, node)
        return lambda: self.per_txid(self.collect(node))

    def plan(self) -> Callable[[], dict[int, Prepared]]:
        """Build every DataFrame (this thread: it reads the store); return the Spark work.

        The returned call returns each txid's inputs of the states that do not read this
        batch's new state, its outputs and its dead letters. A chunk of several's call
        touches only Spark, so it may run in another thread while this one commits earlier
        txids; a chunk of one's also asks the states' engines: run it on this thread.
        """
        topo = self.runner.topology
        spouts, log = topo.spouts, self.runner.log
        records = sum(
            records_of(spouts[sid].args["spout"], log, plan)
            for _, plans in self.batches
            for sid, plan in plans.items()
        )
        self.conf.update(codegen_conf(self.spark, records))
        states = {
            name: self.mode.state_job(self, state)
            for name, state in topo.states.items()
            if not depends_on_new_values(state.node)  # else computed during the commit
        }
        self._first = None  # made anew, typed by every state's value type
        outputs = {
            name: self._output_job(stream.node)
            for name, stream in topo.outputs.items()
            if not depends_on_new_values(stream.node)
        }
        dead = {sid: self._dead_letters_job(sid) for sid in topo.spouts}

        def run() -> dict[int, Prepared]:
            with scoped_conf(self.spark, self.conf):
                p = {name: job() for name, job in states.items()}
                o = {name: job() for name, job in outputs.items()}
                counted = dict(self.counted_dead)
                for found in p.values():
                    for sid, n in found.counted_dead.items():
                        counted[sid] = counted.get(sid, 0) + n
                # after the jobs observing them
                d = {sid: job(counted.get(sid)) for sid, job in dead.items()}
                self.dead_collected = True
            return {
                txid: Prepared(
                    partials={name: found.tables[txid] for name, found in p.items()},
                    outputs={name: t[txid] for name, t in o.items()},
                    dead={sid: t[txid] for sid, t in d.items()},
                    tuples_in={sid: plan.record_count for sid, plan in plans.items()},
                    nulls={n: f.nulls[txid] for n, f in p.items() if txid in f.nulls},
                )
                for txid, plans in self.batches
            }

        return run

    def prepare(self) -> Prepared:
        """A chunk of one's batch phase, run here: :meth:`plan`'s work for its txid."""
        return self.plan()()[self.txid]

    def drop_spilled(self) -> None:
        """Remove the partials the executors wrote (the txids committed or were abandoned)."""
        while self._spilled:
            self._spilled.pop()()

    def read_applied(self, new_values: dict[str, pa.Table], expired: dict[str, pa.Table]) -> None:
        """What this txid's commit applied so far, for the streams that read it."""
        self.new_values, self.expired = dict(new_values), dict(expired)

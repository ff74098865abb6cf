"""A combiner state's per-key partials for a chunk of txids: operators, kernel, spill or empty.

One module computes every combiner state's batch partials, for a pipelined chunk of many
txids and for one txid alike (a chunk of one): the frames carry each tuple's batch tag
(:data:`~trident_assets.spark.txid_tags.TXID_COLUMN`, tag ``i`` for the chunk's ``i``-th
txid) and the partials are grouped by ``(key, tag)``. Which way, in order:

* **empty**: a built-in combiner's input has no tuples in the chunk: typed from the
  DataFrame schema, no Spark job (a global state's one row per txid is ``agg.zero()``);
* **spill**: the executors write the partials to files or staging tables
  (:mod:`~trident_assets.spark.spilled`, ``trident.partials.spill``);
* **kernel**: the Arrow kernel counts words in the executors
  (:mod:`~trident_assets.spark.arrow_partials`), and counts the dead letters it met;
* **operators**: Spark's ``groupBy`` (and, for Sum/Min/Max, the null values skipped).

:func:`combiner_partials` plans the state's job now (the thread that owns the store) and
returns a :class:`PartialsJob`; its ``run`` touches only Spark and **returns** everything the
job found (:class:`ChunkPartials`), nothing is written into the caller's objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.core.user_code import guard
from trident_assets.spark.aggregation import combine_partials, split_nulls, state_partials
from trident_assets.spark.arrow_partials import combine_task_partials
from trident_assets.spark.batch_context import ChunkPartials, PartialsJob
from trident_assets.spark.dead_letter_jobs import take_spout_dead, with_spout_dead
from trident_assets.spark.kernel_plan import (
    arrow_kernel,
    arrow_kernels_on,
    kernel_frame,
    kernel_unavailable,
)
from trident_assets.spark.node_frames import global_partials
from trident_assets.spark.spilled import spillable
from trident_assets.spark.txid_tags import TXID_COLUMN, split_by_txid
from trident_assets.spark.window_columns import KIND, REASON, VALUE
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.spark.spilled import Spill
    from trident_assets.stream.graph import Node
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = ["combiner_partials"]


def combiner_partials(
    frames: BatchContext, state: TridentState, topology: TridentTopology, spill: Spill | None
) -> PartialsJob:
    """Plan ``state``'s partials over ``frames`` (a combiner state of ``topology``).

    ``spill``: the runner's spill target when the batch may spill (None: never); the job's
    cleanups remove what it writes.
    """
    if state_kind(state.node).sql_combiner and frames.is_empty(state.node.parents[0]):
        return _empty_job(frames, state)
    if spill is not None and spillable(state, topology):
        job = _spill_job(frames, state, spill)
        if job is not None:
            return job
    kernel = arrow_kernel(state, TXID_COLUMN)
    if kernel is not None and arrow_kernels_on(frames.spark, frames.records(kernel[1])):
        return _kernel_job(frames, state, *kernel)
    return _operators_job(frames, state)


def _tagged_partials(frames: BatchContext, state: TridentState) -> Any:
    """The state's partials DataFrame, grouped by ``(key, tag)``."""
    a = state.node.args
    agg = guard(a["agg"], state.node.label)
    parent = frames.tagged(state.node.parents[0])
    return state_partials(parent, [*a["group"], TXID_COLUMN], a["inputs"][0], agg, a["output"])


def _per_txid_globals(
    split: dict[int, pa.Table], out: str, out_type: pa.DataType, zero: Any
) -> dict[int, pa.Table]:
    """A global state's one row per txid: its partial, or ``zero`` for a txid without one."""
    result: dict[int, pa.Table] = {}
    for txid, part in split.items():
        value = part.column(out) if part.num_rows else pa.array([zero], out_type)
        if zero is not None:
            value = pc.fill_null(value, pa.scalar(zero, out_type))
        result[txid] = pa.table({out: value, **global_partials(value)})
    return result


def _operators_job(frames: BatchContext, state: TridentState) -> PartialsJob:
    """The state's partials by Spark's operators.

    In a chunk of one, the job also collects its spout's dead letters where it may
    (:meth:`~.dead_letter_jobs.SpoutDeadLetters.fold_dead`), saving their own job.
    """
    a = state.node.args
    group, out, agg = list(a["group"]), a["output"], a["agg"]
    df = _tagged_partials(frames, state)
    name = f"partials:{state.spec.name}"
    out_type = frames.empty_table(name, df).schema.field(out).type
    txids = frames.txids
    fold = frames.fold_dead(state.node)
    job = df if fold is None else with_spout_dead(df, fold[1], state)

    def run() -> ChunkPartials:
        table = frames.to_arrow(name if fold is None else f"{name}+dead letters", job)
        folded: dict[str, pa.Table] = {}
        if fold is not None:
            schema = frames.empty_dead_letters(fold[0]).schema
            table, folded[fold[0]] = take_spout_dead(schema, table, (KIND, REASON, VALUE))
        split: dict[int, pa.Table] = {}
        nulls: dict[int, int] = {}
        for txid, part in split_by_txid(table, txids).items():
            split[txid], nulls[txid] = split_nulls(part, bool(group))
        tables = split if group else _per_txid_globals(split, out, out_type, agg.zero())
        return ChunkPartials(dict(tables), nulls, folded_dead=folded)

    return PartialsJob(out_type, run)


def _spill_job(frames: BatchContext, state: TridentState, spill: Spill) -> PartialsJob | None:
    """The state's partials by Spark's operators, written by the executors per txid."""
    a = state.node.args
    df = _tagged_partials(frames, state)
    planned = spill.plan(df, a["agg"], len(frames.txids))
    if planned is None:
        return None
    job, cleanups = planned
    txids = frames.txids
    out_type = frames.empty_table(f"partials:{state.spec.name}", df).schema.field(a["output"]).type
    return PartialsJob(
        out_type, lambda: ChunkPartials(dict(zip(txids, job(), strict=True))), cleanups=cleanups
    )


def _kernel_job(frames: BatchContext, state: TridentState, spec: Any, spout: Node) -> PartialsJob:
    """The state's partials by the Arrow kernel; Spark's operators where it is unavailable."""
    sid = spout.args["spout_id"]
    df = kernel_frame(frames.tagged_raw(spout), spec)
    txids = frames.txids

    def run() -> ChunkPartials:
        try:
            table = frames.to_arrow(f"kernel:{state.spec.name}", df)
        except Exception as exc:
            if not kernel_unavailable(frames.spark, exc):
                raise
            return _operators_job(frames, state).run()
        summed, dead = combine_task_partials(spec, table)
        return ChunkPartials(dict(split_by_txid(summed, txids)), counted_dead={sid: dead})

    return PartialsJob(pa.int64(), run)


def _empty_job(frames: BatchContext, state: TridentState) -> PartialsJob:
    """The partials of a state whose input is empty in the chunk, without a Spark job.

    Grouped: no rows. Global: the one row of ``agg.zero()`` per txid.
    """
    a = state.node.args
    parent = frames.tagged(state.node.parents[0])
    group, out, agg = a["group"], a["output"], a["agg"]
    df = combine_partials(parent, group, a["inputs"][0], guard(agg, state.node.label), out)
    schema = frames.empty_table(f"empty partials:{state.spec.name}", df).schema
    out_type = schema.field(out).type
    if group:
        table = schema.empty_table()
    else:
        zero = pa.array([agg.zero()], out_type)
        table = pa.table({out: zero, **global_partials(zero)})
    txids = frames.txids
    return PartialsJob(out_type, lambda: ChunkPartials(dict.fromkeys(txids, table)))

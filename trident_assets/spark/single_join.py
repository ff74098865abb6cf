"""Running a single join for one batch (declared by :mod:`trident_assets.stream.single_join`).

Two halves around the commit: :func:`join_batch_input` collects the batch's rows of every
side in one Spark job (before the commit transaction); :func:`apply_join_state` joins them
with the pending halves in the store (:mod:`trident_assets.backends.join_state`: DuckDB or
PostgreSQL) inside it.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.duckdb_join import batch_event_time
from trident_assets.backends.join_batch_columns import SIDE_COLUMN, TS_COLUMN, value_column
from trident_assets.backends.join_state import apply_join_batch
from trident_assets.core.join import SingleJoin
from trident_assets.runtime.outcomes import Applied, StateInput, StateOutcome
from trident_assets.stream.state_kinds import SINGLE_JOIN

if TYPE_CHECKING:
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.streams import TridentState

__all__ = ["apply_join_state", "join_batch_frame", "join_batch_input"]


def join_batch_input(run: BatchContext, state: TridentState) -> StateInput:
    """The batch's rows of every side as one Arrow table (one Spark union, one transfer).

    Columns: ``__side`` (the side's index), ``__v<i>`` (a struct of side i's fields, NULL on
    the other sides' rows) and ``__ts`` (the event time in seconds, NULL without one).
    """
    return StateInput(join_batch_frame(run, state).toArrow())


def join_batch_frame(run: BatchContext, state: TridentState) -> Any:
    """The batch's rows of every side as one Spark DataFrame, never collected.

    The columns of :func:`join_batch_input`'s table; the sides' rows in side order, each side's in
    its frame's order.
    """
    from pyspark.sql import functions as F

    args = state.node.args
    spec: SingleJoin = args[SINGLE_JOIN]
    event_time = args["event_time"]
    frames = []
    for i, ((_, fields), parent) in enumerate(zip(spec.inputs, state.node.parents, strict=True)):
        ts = F.col(event_time) if event_time is not None else F.lit(None)
        frames.append(
            run.frame(parent).select(
                F.lit(i).cast("int").alias(SIDE_COLUMN),
                F.struct(*[F.col(f) for f in fields]).alias(value_column(i)),
                ts.cast("double").alias(TS_COLUMN),
            )
        )
    return reduce(lambda x, y: x.unionByName(y, allowMissingColumns=True), frames)


def apply_join_state(run: BatchContext, state: TridentState, batch: pa.Table) -> Applied:
    """Apply the batch to the join's pending table inside the open commit transaction.

    Returns what the batch did to the join's state, the joined rows (its new values) and
    the expired halves.
    """
    store = run.runner.store
    name = state.spec.name
    ts = batch_event_time(store, state.table, batch)
    result = apply_join_batch(
        store, state.node.args[SINGLE_JOIN], state.table, run.txid, batch, batch_ts=ts
    )
    outcome = StateOutcome(
        name, state.table, result.keys_in, result.keys_in, 0, result.pending_after
    )
    return Applied(outcome, new_values=result.joined, expired=result.expired)

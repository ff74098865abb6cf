"""Running a Trident window for one batch.

Declared by :mod:`trident_assets.stream.trident_windows`.

Two halves around the commit, as for a single join: :func:`window_batch_table` runs the
batch's Spark job (before the commit transaction) and :func:`apply_window_state` applies its
result to the window's store table inside it
(:mod:`trident_assets.backends.window_tuples`), returning the fired windows' aggregates:
the window's stream in this txid.

* Count windows: the batch's input tuples with their source record (topic, partition,
  offset) and their position among that record's tuples, so the store numbers them in the
  same order on every replay. The window's input is rebuilt from its spout with those
  columns carried through the row-wise operations.
* Duration windows: one row, the number of tuples and their partial (combined in Spark).

The txid's time (duration windows) is read from the runner's ``clock`` (seconds, default
``time.time``) when the txid commits, and recorded with it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.window_tuples import (
    COUNT_COLUMN,
    ORDER_COLUMNS,
    PARTIAL_COLUMN,
    apply_count_batch,
    apply_duration_batch,
)
from trident_assets.core.aggregators import Count, Sum, is_sql_combiner
from trident_assets.core.trident_windows import TridentWindow
from trident_assets.core.user_code import guard
from trident_assets.runtime.outcomes import Applied, StateInput, StateOutcome
from trident_assets.spark.aggregation import combine_partials, sql_expr
from trident_assets.spark.frame_schemas import empty_arrow
from trident_assets.spark.observed import Observed, count_dead, observed_frame
from trident_assets.stream.state_kinds import TRIDENT_WINDOW

if TYPE_CHECKING:
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.graph import Node
    from trident_assets.stream.streams import TridentState

__all__ = ["apply_window_state", "output_type", "window_batch_table"]

_SOURCE = ORDER_COLUMNS[:3]


def _tagged(run: BatchContext, node: Node) -> tuple[Any, Observed]:
    """``node``'s DataFrame carrying each tuple's source record columns; its :data:`Observed`."""
    observed = observed_frame(run.raw, node, _SOURCE)
    if observed is None:  # refused at declaration (stream.trident_windows)
        msg = f"a count window cannot order tuples through {node.label}"
        raise AssertionError(msg)
    return observed


def _global_partial(agg: Any, column: str) -> Any:
    """A SQL combiner's partial over a whole batch, as :func:`combine_partials` computes it."""
    from pyspark.sql import functions as F

    value = sql_expr(agg, column)
    zero = agg.zero()
    return value if zero is None else F.coalesce(value, F.lit(zero))


def window_batch_table(run: BatchContext, state: TridentState) -> StateInput:
    """What the commit adds to the window; no Spark job for an empty batch.

    Count windows: one Spark job (no shuffle). Duration windows: one aggregation of the
    partial and the count (a Python combiner's partial is cross-joined with the count).
    Where the window's input comes from one spout through row-wise operations only (and is
    read once), the same job counts the spout's dead letters, so the batch fetches them
    only when there are any.
    """
    from pyspark.sql import functions as F

    window: TridentWindow = state.node.args[TRIDENT_WINDOW]
    parent = state.node.parents[0]
    if window.config.by_count:
        if run.is_empty(parent):
            schema = empty_arrow(run.frame(parent).select(*window.inputs)).schema
            for name, kind in zip(ORDER_COLUMNS, _ORDER_TYPES, strict=True):
                schema = schema.append(pa.field(name, kind))
            return StateInput(schema.empty_table())
        frame, observed = _tagged(run, parent)
        # rows of one record are adjacent in one Spark partition: the id orders them
        table = frame.selectExpr(  # field names are identifiers (stream.fields): no backtick
            *[f"`{c}`" for c in (*window.inputs, *_SOURCE)],
            f"monotonically_increasing_id() AS `{ORDER_COLUMNS[3]}`",
        ).toArrow()
        return StateInput(table, counted_dead=count_dead(observed))
    agg = guard(window.aggregator, state.node.label)
    column = window.inputs[0]
    if run.is_empty(parent):
        partial = combine_partials(run.frame(parent), (), column, agg, PARTIAL_COLUMN)
        empty = empty_arrow(partial).schema.empty_table()
        return StateInput(empty.append_column(COUNT_COLUMN, pa.array([], pa.int64())))
    counted = F.count(F.lit(1)).alias(COUNT_COLUMN)
    if not is_sql_combiner(agg):  # its input is read twice: no observation over it
        frame = run.frame(parent)
        partial = combine_partials(frame, (), column, agg, PARTIAL_COLUMN)
        return StateInput(partial.crossJoin(frame.agg(counted)).toArrow())
    built = observed_frame(run.raw, parent, ())
    frame = run.frame(parent) if built is None else built[0]
    table = frame.agg(_global_partial(agg, column).alias(PARTIAL_COLUMN), counted).toArrow()
    return StateInput(table, counted_dead={} if built is None else count_dead(built[1]))


_ORDER_TYPES = (pa.string(), pa.int32(), pa.int64(), pa.int64())


def output_type(window: TridentWindow, input_type: pa.DataType) -> pa.DataType:
    """The Arrow type of the window's output field.

    Count: int64; Sum: int64 over integers, float64 over floats; Min/Max: the input's type;
    a Python aggregator: its ``output_type``. ``input_type``: the input field's type (count
    windows) or the partial's (duration windows).
    """
    agg = window.aggregator
    if isinstance(agg, Count):
        return pa.int64()
    if isinstance(agg, Sum):
        if pa.types.is_integer(input_type):
            return pa.int64()
        if pa.types.is_floating(input_type):
            return pa.float64()
        return input_type
    if is_sql_combiner(agg):
        return input_type
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    ddl = StructType.fromDDL(f"`v` {agg.output_type}")
    return to_arrow_schema(ddl, timezone="UTC").field("v").type


def apply_window_state(run: BatchContext, state: TridentState, batch: pa.Table) -> Applied:
    """Apply the batch to the window's store inside the open commit transaction.

    Returns what it did and the fired windows' aggregates (its new values).
    """
    store = run.runner.store
    window: TridentWindow = state.node.args[TRIDENT_WINDOW]
    name = state.spec.name
    if window.config.by_count:
        out = output_type(window, batch.schema.field(window.inputs[0]).type)
        result = apply_count_batch(store, window, state.table, run.txid, batch, out)
    else:
        out = output_type(window, batch.schema.field(PARTIAL_COLUMN).type)
        clock = getattr(run.runner, "clock", None) or time.time
        clock_ms = round(float(clock()) * 1000)
        result = apply_duration_batch(store, window, state.table, run.txid, batch, clock_ms, out)
    fired = result.fired.num_rows
    outcome = StateOutcome(name, state.table, result.tuples_in, fired, 0, result.held)
    return Applied(outcome, new_values=result.fired)

"""``GroupedStream.window_aggregate``: an exactly-once event-time windowed aggregation.

The declaration is pure and checked up front (fields exist, the aggregator combines
partials, names are free). The state keeps its open windows in its table
``<topology>__<state>``, its final windows in ``<topology>__<state>__finals`` and one
watermark row per txid in :data:`WATERMARKS`; all three change in the txid's commit
transaction (:mod:`trident_assets.backends.window_store`). Its new-values stream is the
stream of the windows each txid made final. The rules (assignment, watermark, emission,
late records) are those of :mod:`trident_assets.core.event_windows`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trident_assets.core.aggregators import CombinerAggregator, is_sql_combiner
from trident_assets.core.contracts import describe_aggregator
from trident_assets.core.event_windows import EventWindow
from trident_assets.errors import ConfigError
from trident_assets.names import check_state_columns
from trident_assets.stream.fields import Fields, as_fields, check_distinct, require_fields
from trident_assets.stream.graph import Node, StateSpec
from trident_assets.stream.kv_specs import refuse_key_value
from trident_assets.stream.state_kinds import EVENT_WINDOW, STATE_KIND
from trident_assets.stream.states import TridentState

if TYPE_CHECKING:
    from trident_assets.stream.streams import GroupedStream

__all__ = [
    "WindowedAggregation",
    "WindowedState",
    "declare_window_aggregate",
]

WINDOW_START = "window_start"
WINDOW_END = "window_end"


@dataclass(frozen=True)
class WindowedAggregation:
    """What a windowed state computes: the window, the aggregator, its input and output."""

    window: EventWindow
    agg: CombinerAggregator[Any]
    group: tuple[str, ...]
    input: str | None
    output: str

    def describe(self) -> dict[str, Any]:
        """The contract description: the aggregator, with the window's parameters."""
        desc = describe_aggregator(self.agg)
        params = dict(desc["aggregator_params"])
        params.update({f"window.{k}": v for k, v in self.window.describe().items()})
        params["input"] = repr(self.input)
        return {
            "aggregator": desc["aggregator"],
            "aggregator_params": params,
            "version": desc["version"],
        }


class WindowedState(TridentState):
    """A windowed aggregation's state: open windows, final windows and watermarks.

    Read them with ``TopologyRunner.window_finals`` / ``window_open`` (or
    :mod:`trident_assets.backends.window_store` over a store).
    """

    @property
    def windowed(self) -> WindowedAggregation:
        """The declaration."""
        spec: WindowedAggregation = self.node.args[EVENT_WINDOW]
        return spec

    @property
    def open_table(self) -> str:
        """The store table of the windows not final yet (the state's table)."""
        return self.table

    @property
    def finals_table(self) -> str:
        """The store table of the final windows (each emitted once, with its ``final_txid``)."""
        return f"{self.table}__finals"


def declare_window_aggregate(
    grouped: GroupedStream,
    window: EventWindow,
    agg: CombinerAggregator[Any],
    output: str,
    *,
    spec: StateSpec,
    inputs: Fields | None = None,
) -> WindowedState:
    """Aggregate per group and event-time ``window`` into state ``spec``, exactly once.

    ``GroupedStream.window_aggregate`` (``grouped``). Returns the :class:`WindowedState`;
    each window's final value is emitted once.

    Raises:
        ConfigError: ``window`` is not an EventWindow, ``spec`` not a StateSpec, the
            aggregator does not combine partials (windows merge partials: Count, Sum, Min,
            Max), a missing input for Sum/Min/Max, reserved or repeated names, a state name
            already used.
        FieldNotFoundError: the time field or an input is not a field of the stream.
    """
    stream = grouped.stream
    if not isinstance(window, EventWindow):
        msg = (
            "window_aggregate needs an EventWindow (EventWindow.tumbling, .sliding or "
            f".session), got {window!r}"
        )
        raise ConfigError(msg)
    if not isinstance(spec, StateSpec):
        msg = f"window_aggregate needs spec=StateSpec(...), got {spec!r}"
        raise ConfigError(msg)
    refuse_key_value(spec, "window_aggregate")
    require_fields((window.time_field,), stream.fields, "window_aggregate time_field")
    if not isinstance(agg, CombinerAggregator):
        msg = (
            f"window_aggregate needs a CombinerAggregator (windows merge partials, across "
            f"batches and when sessions merge): Count, Sum, Min or Max; got {agg!r}"
        )
        raise ConfigError(msg)
    if not is_sql_combiner(agg):
        msg = (
            f"window_aggregate merges partials in SQL: use Count, Sum, Min or Max; "
            f"{type(agg).__name__} combines in Python only"
        )
        raise ConfigError(msg)
    ins = () if inputs is None else as_fields(inputs, "window_aggregate inputs")
    if len(ins) > 1:
        msg = f"combiner aggregators take a single input field, got {list(ins)}"
        raise ConfigError(msg)
    if not ins and type(agg).__name__ != "Count":
        msg = f"window_aggregate with {type(agg).__name__} needs inputs='<field>' to aggregate"
        raise ConfigError(msg)
    require_fields(ins, stream.fields, "window_aggregate inputs")
    (out,) = as_fields(output, "window_aggregate output")
    group = grouped.group
    reserved = (WINDOW_START, WINDOW_END, "final_txid", "value", "final")
    check_state_columns(spec.name, "key field", group, extra=reserved)
    check_distinct((out,), group, "window_aggregate")
    check_state_columns(spec.name, "output field", (out,), extra=reserved[:3])
    topo = stream.topology
    topo.check_exactly_once(spec, stream.node)
    windowed = WindowedAggregation(window, agg, group, ins[0] if ins else None, out)
    node = Node(
        EVENT_WINDOW,
        (*group, WINDOW_START, WINDOW_END, out),
        (stream.node,),
        {EVENT_WINDOW: windowed, "spec": spec, "group": group, "inputs": ins, "output": out}
        | {STATE_KIND: EVENT_WINDOW},
    )
    state = WindowedState(topo, spec, node, group=group, value_field=None)
    finals = f"{state.table}__finals"
    topo.claim(f"state {spec.name!r}", (finals,), (f"{spec.name}_finals",), check_only=True)
    topo.register_state(state)
    topo.claim(f"state {spec.name!r}", (finals,), (f"{spec.name}_finals",))
    return state

"""Declaring Trident windows: ``tumbling_window``, ``sliding_window`` and ``window`` of a Stream.

A window is a state of the topology (its store table keeps the tuples, or per-txid partials,
that open windows still need; written in the txid's commit transaction) whose new-values
stream is the stream of fired windows' aggregates: each window's aggregate enters the stream
in the txid in which it fired, once. The firing rules are in
:mod:`trident_assets.core.trident_windows`; the running half is
:mod:`trident_assets.spark.trident_windows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trident_assets.core.aggregators import ReducerAggregator, check_aggregator
from trident_assets.core.trident_windows import (
    SlidingCountWindow,
    SlidingDurationWindow,
    TridentWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    WindowConfig,
)
from trident_assets.errors import ConfigError
from trident_assets.names import check_state_columns
from trident_assets.stream.fields import Fields, as_fields, require_fields
from trident_assets.stream.graph import Derivable, Node, StateSpec
from trident_assets.stream.kv_specs import refuse_key_value
from trident_assets.stream.state_kinds import STATE_KIND, TRIDENT_WINDOW

__all__ = ["ORDERED_KINDS", "window_config", "window_node"]


ORDERED_KINDS = frozenset({"spout", "each", "filter", "project", "peek"})
"""Node kinds a count window's input may pass through: they keep each tuple's source record,
so tuples are numbered by (txid, partition, offset) on every replay."""


def _ordered_input(node: Node) -> str | None:
    """Why ``node``'s tuples cannot be numbered by their source records (None: they can)."""
    while True:
        if node.kind not in ORDERED_KINDS:
            return f"its input passes through {node.label}"
        if node.kind == "spout":
            return None
        if len(node.parents) != 1:
            return f"its input merges {len(node.parents)} streams"
        node = node.parents[0]


def window_node(
    stream: Derivable,
    config: WindowConfig,
    inputs: Fields,
    aggregator: Any,
    output: Fields,
    spec: StateSpec | str,
) -> tuple[Node, StateSpec]:
    """Validate a window over ``stream``; return its state node and store spec.

    ``Stream.window`` registers the node as a state of the topology and returns its
    new-values stream: the stream of the fired windows' aggregates.

    Raises:
        ConfigError: a config that is not a WindowConfig, a spec that is not a StateSpec or
            a name, an aggregator that is not a CombinerAggregator or ReducerAggregator (a
            combiner over several fields; a Python aggregator without ``output_type``; a
            reducer on a duration window, which keeps one partial per txid), other than one
            output field, a reserved output name, a count window over a stream whose tuples
            cannot be ordered by their source records, or a name already taken.
        FieldNotFoundError: an input field the stream does not have.
    """
    if isinstance(spec, str):
        spec = StateSpec.opaque(spec)
    if not isinstance(spec, StateSpec):
        msg = f"a window needs a StateSpec or a name for its store, got {spec!r}"
        raise ConfigError(msg)
    refuse_key_value(spec, "a window")
    name = spec.name
    if not isinstance(config, WindowConfig):
        msg = (
            f"window {name!r} needs a WindowConfig (TumblingCountWindow, SlidingCountWindow, "
            f"TumblingDurationWindow, SlidingDurationWindow), got {config!r}"
        )
        raise ConfigError(msg)
    ins = as_fields(inputs, f"window {name!r} inputs")
    require_fields(ins, stream.fields, f"window {name!r}")
    outs = as_fields(output, f"window {name!r} output")
    if len(outs) != 1:
        msg = f"window {name!r} emits one output field per aggregator, got {list(outs)}"
        raise ConfigError(msg)
    check_state_columns(name, "output field", outs)
    _check_aggregator(name, config, ins, aggregator)
    if config.by_count:
        why = _ordered_input(stream.node)
        if why is not None:
            msg = (
                f"count window {name!r}: {why}; a count window numbers its tuples by their "
                "source records (txid, partition, offset), so its input must come from one "
                "spout through each, filter, project or peek only (duration windows take any "
                "stream)"
            )
            raise ConfigError(msg)
    window = TridentWindow(config, ins, aggregator, outs[0])
    args = {TRIDENT_WINDOW: window, "spec": spec, STATE_KIND: TRIDENT_WINDOW}
    node = Node(TRIDENT_WINDOW, outs, (stream.node,), args)
    return node, spec


def _check_aggregator(name: str, config: WindowConfig, ins: Sequence[str], agg: Any) -> None:
    if not config.by_count and isinstance(agg, ReducerAggregator):
        msg = (
            f"duration window {name!r} keeps one partial per txid (every tuple of a txid "
            f"shares its time), so it needs a CombinerAggregator, got {type(agg).__name__}; "
            "use a count window for a ReducerAggregator"
        )
        raise ConfigError(msg)
    check_aggregator(agg, ins, f"window {name!r}")


def window_config(
    count: int | None, duration: Any, *, slide: Any = None, sliding: bool = False
) -> WindowConfig:
    """The config of a ``tumbling_window`` (or with ``sliding``, a ``sliding_window``).

    Raises:
        ConfigError: neither or both of ``count`` and ``duration``.
    """
    if (count is None) == (duration is None):
        operation = "sliding_window" if sliding else "tumbling_window"
        msg = f"{operation} takes count or duration (one of them), got {count=} {duration=}"
        raise ConfigError(msg)
    if sliding:
        return (
            SlidingCountWindow(count, slide)
            if count is not None
            else SlidingDurationWindow(duration, slide)
        )
    return TumblingCountWindow(count) if count is not None else TumblingDurationWindow(duration)

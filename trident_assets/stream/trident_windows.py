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
from typing import TYPE_CHECKING, Any

from trident_assets.core.aggregators import CombinerAggregator, ReducerAggregator, is_sql_combiner
from trident_assets.core.trident_windows import TridentWindow, WindowConfig
from trident_assets.errors import ConfigError
from trident_assets.names import check_state_columns
from trident_assets.stream.fields import as_fields, require_fields
from trident_assets.stream.graph import Node, StateSpec
from trident_assets.stream.kv_specs import KeyValueStateSpec
from trident_assets.stream.state_kinds import STATE_KIND, TRIDENT_WINDOW

if TYPE_CHECKING:
    from trident_assets.stream.streams import Stream

__all__ = ["ORDERED_KINDS", "TRIDENT_WINDOW", "window_node"]


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
    stream: Stream,
    config: WindowConfig,
    inputs: str | Sequence[str],
    aggregator: Any,
    output: str | Sequence[str],
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
    if isinstance(spec, KeyValueStateSpec):
        msg = (
            f"{spec.store} state {spec.name!r}: a window keeps its state in the topology's "
            "store; give it a StateSpec (key-value stores hold persistent_aggregate states)"
        )
        raise ConfigError(msg)
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
    if not isinstance(agg, CombinerAggregator | ReducerAggregator):
        msg = f"window {name!r} needs a CombinerAggregator or ReducerAggregator, got {agg!r}"
        raise ConfigError(msg)
    if isinstance(agg, CombinerAggregator) and len(ins) != 1:
        msg = f"window {name!r}: combiner aggregators take a single input field, got {list(ins)}"
        raise ConfigError(msg)
    if not config.by_count and not isinstance(agg, CombinerAggregator):
        msg = (
            f"duration window {name!r} keeps one partial per txid (every tuple of a txid "
            f"shares its time), so it needs a CombinerAggregator, got {type(agg).__name__}; "
            "use a count window for a ReducerAggregator"
        )
        raise ConfigError(msg)
    if not is_sql_combiner(agg) and not getattr(agg, "output_type", None):
        msg = (
            f"window {name!r}: {type(agg).__name__} is a Python aggregator: set its class "
            "attribute output_type to the SQL type of its result (e.g. output_type = 'bigint')"
        )
        raise ConfigError(msg)

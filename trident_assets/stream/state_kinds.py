"""The kinds of state a topology declares, and what each kind allows: the one registry.

Every persisted state is one :class:`StateKind`, told by the declaration that made its node
(:func:`state_kind`, the only code that reads a state node's arguments to classify it):

===================  ==============================================================
kind                 declared by
===================  ==============================================================
``combiner``         ``persistent_aggregate`` with a combiner (Count, Sum, Min, Max...)
``reducer``          ``persistent_aggregate`` with a reducer (folds tuples in order)
``updater``          ``partition_persist`` (the user's ``StateUpdater``)
``single_join``      ``single_join`` (pending halves, expired after a timeout)
``trident_window``   ``window`` (Trident's count and duration windows)
``event_window``     ``window_aggregate`` (event-time windows with a watermark)
``key_value``        ``persistent_aggregate`` into a ``RedisClusterState`` or
                     ``MemcachedState`` (values updated on the executors)
``key_value_join``   ``single_join`` into a ``RedisClusterState`` or ``MemcachedState``
                     (pending halves updated on the executors)
===================  ==============================================================

A kind answers the capability questions the runtime asks (is it a map of keys to one value,
may its txids be reordered, can it be built from the log alone); a new kind is one new
class here plus its entry in :data:`KINDS`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from trident_assets.core.aggregators import CombinerAggregator, ReducerAggregator, is_sql_combiner
from trident_assets.stream.kv_specs import KeyValueStateSpec

if TYPE_CHECKING:
    from trident_assets.stream.graph import Node

__all__ = [
    "EVENT_WINDOW",
    "KINDS",
    "SINGLE_JOIN",
    "TRIDENT_WINDOW",
    "Combiner",
    "EventWindowKind",
    "KEY_VALUE",
    "KEY_VALUE_JOIN",
    "KeyValueJoinKind",
    "KeyValueKind",
    "Reducer",
    "SingleJoinKind",
    "StateKind",
    "TridentWindowKind",
    "Updater",
    "state_kind",
]

EVENT_WINDOW = "event_window"
"""Node argument (and node kind) of an event-time window state."""
SINGLE_JOIN = "single_join"
"""Node argument (and node kind) of a single join's state."""
TRIDENT_WINDOW = "trident_window"
"""Node argument (and node kind) of a Trident window state."""
KEY_VALUE = "key_value"
"""Kind name of a state kept in a key-value cluster (its spec is a ``KeyValueStateSpec``)."""
KEY_VALUE_JOIN = "key_value_join"
"""Kind name of a single join whose pending halves live in a key-value cluster."""


class StateKind:
    """One kind of state: its name and its answers to the runtime's capability questions."""

    name: ClassVar[str]
    map_state: ClassVar[bool] = False
    """Keys and one value each (a ``persistent_aggregate``): readable as of a txid, rebuilt
    by ``trident state rebuild``, published to the replica as a map."""
    order_refusal: ClassVar[str | None] = None
    """Why the state's result depends on the order of txids, completing "state NAME ..."
    (None: it does not). Such a state cannot have a txid quarantined and processed after
    later ones."""
    log_refusal: ClassVar[str | None] = None
    """Why the state cannot be built from the log of its spouts alone (None: it can)."""

    def __init__(self, node: Node) -> None:
        """The kind of the state ``node`` declares."""
        self.node = node

    @property
    def sql_combiner(self) -> bool:
        """True for a built-in combiner the store merges in SQL (Count, Sum, Min, Max)."""
        return False

    def __repr__(self) -> str:
        return f"<{self.name} state>"


class Combiner(StateKind):
    """``persistent_aggregate`` with a combiner: partials per key, merged in any order."""

    name = "combiner"
    map_state = True

    @property
    def sql_combiner(self) -> bool:
        """True for Count, Sum, Min and Max (merged by one SQL statement per batch)."""
        return is_sql_combiner(self.node.args["agg"])


class Reducer(StateKind):
    """``persistent_aggregate`` with a reducer: each key's tuples folded in order."""

    name = "reducer"
    map_state = True

    @property
    def order_refusal(self) -> str:  # type: ignore[override]
        """The reducer's class, which folds tuples in order."""
        agg = type(self.node.args["agg"]).__name__
        return (
            f"uses a {agg}, which folds tuples in order; only combiner aggregates may see "
            "records later than others"
        )


class Updater(StateKind):
    """``partition_persist``: the user's updater applies each batch's tuples."""

    name = "updater"
    order_refusal = "is a partition_persist: its updater sees tuples in order"


class SingleJoinKind(StateKind):
    """A single join's pending halves, expired after a timeout."""

    name = SINGLE_JOIN
    order_refusal = "is a single join: its matches depend on arrival order"
    log_refusal = (
        "it is a single join: its pending halves and expiries depend on the state as it "
        "was at each txid, not on the log alone"
    )


class TridentWindowKind(StateKind):
    """Trident's count and duration windows: tuples held until their window fires."""

    name = TRIDENT_WINDOW
    order_refusal = "is a window: which tuples it holds depends on their order"
    log_refusal = (
        "it is a window: the windows it fired before were emitted then, and its open "
        "windows depend on the tuples and times of every txid"
    )


class EventWindowKind(StateKind):
    """Event-time windows with a watermark: each window's final value emitted once."""

    name = EVENT_WINDOW
    order_refusal = "is an event window: its watermark depends on txid order"
    log_refusal = (
        "it is an event-window state: building one from the log is not supported yet "
        "(its late records and watermarks are decided batch by batch)"
    )


class KeyValueKind(StateKind):
    """``persistent_aggregate`` into a Redis Cluster or memcached: updated on the executors.

    Not a map state of the store (no as-of reads, rebuild or replica), never pipelined
    (each txid's reads and writes reach the servers in txid order, one Spark job per txid)
    and never spilled (the executors write the servers, not files).
    """

    name = KEY_VALUE
    log_refusal = (
        "it is kept in a key-value store: building it from the log is not supported "
        "(declare it before the topology's first txid)"
    )


class KeyValueJoinKind(SingleJoinKind):
    """A single join whose pending halves live in a Redis Cluster or memcached.

    Its halves are updated on the executors (each partition its own join keys); its meta
    row and clock stay in the topology's store. Never pipelined, like every join.
    """

    name = KEY_VALUE_JOIN
    log_refusal = (
        "it is a single join kept in a key-value store: its pending halves and expiries "
        "depend on the state as it was at each txid, not on the log alone"
    )


KINDS: dict[str, type[StateKind]] = {
    SINGLE_JOIN: SingleJoinKind,
    TRIDENT_WINDOW: TridentWindowKind,
    EVENT_WINDOW: EventWindowKind,
    "updater": Updater,
}
"""The node argument that marks each kind (``persistent_aggregate``'s ``agg`` aside: a
combiner or a reducer by the aggregator's class)."""


def state_kind(node: Node) -> StateKind:
    """The kind of state ``node`` (a state's declaring node) keeps.

    Raises:
        TypeError: ``node`` declares no state (a bug: every state's node declares one).
    """
    if SINGLE_JOIN in node.args and isinstance(node.args.get("spec"), KeyValueStateSpec):
        return KeyValueJoinKind(node)
    for marker, kind in KINDS.items():
        if marker in node.args:
            return kind(node)
    if isinstance(node.args.get("spec"), KeyValueStateSpec):
        return KeyValueKind(node)
    agg = node.args.get("agg")
    if isinstance(agg, CombinerAggregator):
        return Combiner(node)
    if isinstance(agg, ReducerAggregator):
        return Reducer(node)
    msg = f"node {node.kind!r} declares no state (arguments: {sorted(node.args)})"
    raise TypeError(msg)

"""The kinds of state a topology declares, and what each kind allows: the one registry.

Every state is one :class:`StateKind`, named by its declaration (the node argument
:data:`STATE_KIND`, set by the call that made the node) and looked up in :data:`KINDS`:

===================  ==============================================================
kind                 declared by
===================  ==============================================================
``combiner``         ``persistent_aggregate`` with a combiner (Count, Sum, Min, Max...)
``reducer``          ``persistent_aggregate`` with a reducer (folds tuples in order)
``distinct_count``   ``persistent_aggregate`` with ``DistinctCount`` (the values seen
                     per key, each counted once)
``updater``          ``partition_persist`` (the user's ``StateUpdater``)
``single_join``      ``single_join`` (pending halves, expired after a timeout)
``trident_window``   ``window`` (Trident's count and duration windows)
``event_window``     ``window_aggregate`` (event-time windows with a watermark)
``key_value``        ``persistent_aggregate`` into a ``RedisClusterState`` or
                     ``MemcachedState`` (values updated on the executors)
``key_value_join``   ``single_join`` into a ``RedisClusterState`` or ``MemcachedState``
                     (pending halves updated on the executors)
``static_state``     ``new_static_state`` (read by queries, written by nothing)
===================  ==============================================================

A kind answers every question the other layers ask about a state (is it a map of keys to
one value, may its txids be reordered or share a Spark job, can it be built from the log,
which tables the replica carries, what its contract names, how queries read it); nothing
outside this module tells kinds apart. A new kind is one class here, its entry in
:data:`KINDS` (and :data:`AGGREGATE_KINDS` if ``persistent_aggregate`` declares it) and its
engine (``spark/state_engines.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from trident_assets.core.aggregators import (
    CombinerAggregator,
    DistinctCount,
    ReducerAggregator,
    is_sql_combiner,
)
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError
from trident_assets.stream.graph import record_time_spout
from trident_assets.stream.kv_specs import KeyValueStateSpec

if TYPE_CHECKING:
    from trident_assets.stream.graph import Node, StateSpec

__all__ = [
    "AGGREGATE_KINDS",
    "EVENT_WINDOW",
    "KEY_VALUE",
    "KEY_VALUE_JOIN",
    "KINDS",
    "SINGLE_JOIN",
    "STATE_KIND",
    "STATIC_STATE",
    "TRIDENT_WINDOW",
    "Combiner",
    "DistinctCountKind",
    "EventWindowKind",
    "KeyValueJoinKind",
    "KeyValueKind",
    "Reducer",
    "SingleJoinKind",
    "StateKind",
    "StaticKind",
    "TridentWindowKind",
    "Updater",
    "aggregate_kind",
    "join_kind",
    "state_kind",
]

STATE_KIND = "state_kind"
"""Node argument naming the kind of state the node declares (a key of :data:`KINDS`)."""
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
STATIC_STATE = "static_state"
"""Kind name (and node kind) of a static state."""


class StateKind:
    """One kind of state: its name and its answers to the other layers' questions."""

    name: ClassVar[str]
    map_state: ClassVar[bool] = False
    """Keys and one value each (a ``persistent_aggregate``): readable as of a txid, rebuilt
    by ``trident state rebuild``, published to the replica as a map, queried by key."""
    keeps_partials: ClassVar[bool] = False
    """A grouped state keeps each txid's per-key partials (``TridentState.partials_table``,
    an asset of the graph)."""
    in_key_value_store: ClassVar[bool] = False
    """Its values live in a Redis Cluster or memcached, written on the executors: read from
    those servers, no new values on the driver."""
    static: ClassVar[bool] = False
    """Written by nothing in the topology: queries join its table, it has no asset."""
    queried_as_table: ClassVar[bool] = False
    """A query's ``batch_retrieve`` gets its table (``PersistedState``), not a map."""
    order_refusal: ClassVar[str | None] = None
    """Why the state's result depends on the order of txids, completing "state NAME ..."
    (None: it does not). Such a state cannot have a txid quarantined and processed after
    later ones."""
    log_refusal: ClassVar[str | None] = None
    """Why the state cannot be built from the log of its spouts alone (None: it can)."""

    def __init__(self, node: Node) -> None:
        """The kind of the state ``node`` declares."""
        self.node = node

    @classmethod
    def check_spec(cls, spec: StateSpec) -> None:
        """Refuse a state spec this kind cannot keep exactly (declaration time)."""

    @property
    def sql_combiner(self) -> bool:
        """True for a built-in combiner the store merges in SQL (Count, Sum, Min, Max)."""
        return False

    @property
    def typed_by_input(self) -> bool:
        """True when the value type is the input field's (a Sum/Min/Max without output_type)."""
        return False

    @property
    def recomputable(self) -> bool:
        """True for a count or sum that a replay of its records alone recomputes."""
        return False

    def shares_chunk_job(self) -> bool:
        """True when consecutive txids' inputs can come from one Spark job."""
        return False

    def contract_subject(self) -> tuple[Any, str]:
        """What the state's contract describes (its aggregator, updater or spec) and as what."""
        return self.node.args.get(self.node.kind, self.node.kind), self.node.kind

    @property
    def value_type(self) -> str | None:
        """The SQL type of its values when the declaration fixes one."""
        return None

    def appended_tables(self, table: str) -> dict[str, str]:
        """Append tables the replica carries for state ``table``, with their txid column."""
        return {}

    def __repr__(self) -> str:
        return f"<{self.name} state>"


class _Aggregated(StateKind):
    """A ``persistent_aggregate``: its aggregator is the contract's subject."""

    @property
    def agg(self) -> Any:
        """The declared aggregator."""
        return self.node.args["agg"]

    def contract_subject(self) -> tuple[Any, str]:
        """The aggregator."""
        return self.agg, "aggregator"

    @property
    def value_type(self) -> str | None:
        """The aggregator's ``output_type``."""
        return getattr(self.agg, "output_type", None)


class Combiner(_Aggregated):
    """``persistent_aggregate`` with a combiner: partials per key, merged in any order."""

    name = "combiner"
    map_state = True
    keeps_partials = True

    @property
    def sql_combiner(self) -> bool:
        """True for Count, Sum, Min and Max (merged by one SQL statement per batch)."""
        return is_sql_combiner(self.agg)

    @property
    def typed_by_input(self) -> bool:
        """A Sum, Min or Max without ``output_type``."""
        return self.sql_combiner and self.value_type is None

    @property
    def recomputable(self) -> bool:
        """A Count or Sum."""
        return self.sql_combiner and self.agg.sql_combine == "sum"

    def shares_chunk_job(self) -> bool:
        """A SQL combiner's partials are grouped by (key, txid) in one job."""
        return self.sql_combiner


class Reducer(_Aggregated):
    """``persistent_aggregate`` with a reducer: each key's tuples folded in order."""

    name = "reducer"
    map_state = True

    @property
    def order_refusal(self) -> str:  # type: ignore[override]
        """The reducer's class, which folds tuples in order."""
        agg = type(self.agg).__name__
        return (
            f"uses a {agg}, which folds tuples in order; only combiner aggregates may see "
            "records later than others"
        )


class DistinctCountKind(_Aggregated):
    """``persistent_aggregate`` with ``DistinctCount``: the values seen per key, each once.

    A map of keys to their count of distinct values, fed by each txid's new values per key
    (its partials); the values seen are kept beside it with the txid that first saw them.
    """

    name = "distinct_count"
    map_state = True
    keeps_partials = True
    log_refusal = (
        "it is a distinct count: building the values it has seen from the log is not "
        "supported (declare it before the topology's first txid)"
    )

    @classmethod
    def check_spec(cls, spec: StateSpec) -> None:
        """Opaque or transactional: a non-transactional count would count a replay twice.

        Raises:
            ConfigError: a non-transactional spec.
        """
        if spec.state_type is StateType.NON_TRANSACTIONAL:
            msg = (
                f"DistinctCount state {spec.name!r} must be opaque or transactional "
                "(StateSpec.opaque(...)): a non-transactional state would count a replayed "
                "txid's values again"
            )
            raise ConfigError(msg)


class Updater(StateKind):
    """``partition_persist``: the user's updater applies each batch's tuples."""

    name = "updater"
    queried_as_table = True
    order_refusal = "is a partition_persist: its updater sees tuples in order"

    def contract_subject(self) -> tuple[Any, str]:
        """The updater."""
        return self.node.args["updater"], "updater"


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

    def shares_chunk_job(self) -> bool:
        """Over record timestamps, whose late records are known before the job."""
        return record_time_spout(self.node.args[EVENT_WINDOW], self.node.parents[0]) is not None

    def appended_tables(self, table: str) -> dict[str, str]:
        """Its finals, appended once each."""
        return {f"{table}__finals": "final_txid"}


class KeyValueKind(_Aggregated):
    """``persistent_aggregate`` into a Redis Cluster or memcached: updated on the executors.

    Not a map state of the store (no as-of reads, rebuild or replica), never pipelined
    (each txid's reads and writes reach the servers in txid order, one Spark job per txid)
    and never spilled (the executors write the servers, not files).
    """

    name = KEY_VALUE
    in_key_value_store = True
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


class StaticKind(StateKind):
    """A static state (``new_static_state``): a table queries read, written by nothing."""

    name = STATIC_STATE
    static = True


KINDS: dict[str, type[StateKind]] = {
    kind.name: kind
    for kind in (
        Combiner,
        Reducer,
        DistinctCountKind,
        Updater,
        SingleJoinKind,
        TridentWindowKind,
        EventWindowKind,
        KeyValueKind,
        KeyValueJoinKind,
        StaticKind,
    )
}
"""Every kind by its name, the value of its node's :data:`STATE_KIND` argument."""

AGGREGATE_KINDS: dict[type, type[StateKind]] = {
    DistinctCount: DistinctCountKind,
    CombinerAggregator: Combiner,
    ReducerAggregator: Reducer,
}
"""The kind ``persistent_aggregate`` declares with each class of aggregator (a subclass
takes its nearest base's)."""


def aggregate_kind(agg: Any, spec: StateSpec) -> str:
    """The kind of a ``persistent_aggregate`` of ``agg`` into ``spec`` (for :data:`STATE_KIND`).

    Raises:
        ConfigError: ``agg`` is no aggregator ``persistent_aggregate`` takes, or a state kept
            in a key-value store is given anything but a combiner.
    """
    found = next((AGGREGATE_KINDS[c] for c in type(agg).__mro__ if c in AGGREGATE_KINDS), None)
    if found is None:
        msg = (
            "persistent_aggregate needs a CombinerAggregator, a ReducerAggregator or "
            f"DistinctCount(), got {agg!r}"
        )
        raise ConfigError(msg)
    if isinstance(spec, KeyValueStateSpec):
        if found is not Combiner:
            msg = (
                f"{spec.store} state {spec.name!r} takes a combiner aggregator (Count, Sum, "
                f"Min, Max or your CombinerAggregator), got {type(agg).__name__}; keep a "
                "reducer's state in the topology's store (StateSpec.opaque(...))"
            )
            raise ConfigError(msg)
        return KEY_VALUE
    found.check_spec(spec)
    return found.name


def join_kind(spec: StateSpec) -> str:
    """The kind of a single join keeping its state in ``spec``."""
    return KEY_VALUE_JOIN if isinstance(spec, KeyValueStateSpec) else SINGLE_JOIN


def state_kind(node: Node) -> StateKind:
    """The kind of state ``node`` (a state's declaring node) keeps.

    Raises:
        TypeError: ``node`` declares no state (a bug: every state's node declares one).
    """
    name = node.args.get(STATE_KIND)
    if name not in KINDS:
        msg = f"node {node.kind!r} declares no state (arguments: {sorted(node.args)})"
        raise TypeError(msg)
    return KINDS[name](node)

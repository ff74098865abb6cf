"""The topology graph's building blocks: nodes, state specs, the state updater base class.

A declared topology is a graph of :class:`Node` objects (see
:mod:`trident_assets.stream.topology`); :class:`StateSpec` names a state and its replay
guarantee. Nothing here runs anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, TypeVar

from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError
from trident_assets.spouts.config import validate_name

BACKFILL_MODES = ("from_start", "from_retained")
"""How a state added to a running topology is built from the retained log."""

__all__ = [
    "Derivable",
    "Node",
    "PersistedState",
    "StateSpec",
    "StateUpdater",
    "StreamT",
]


@dataclass(frozen=True, slots=True)
class StateSpec:
    """Which state a persist writes: its name (unique in the topology) and replay guarantee.

    ``backfill`` says how a state added to a topology that has committed txids is built:
    ``"from_start"`` (the default) replays the log of every committed txid and refuses when
    retention deleted part of it; ``"from_retained"`` starts at the first txid whose records
    are all still readable (recorded as the contract's ``first_txid``).
    """

    name: str
    state_type: StateType = StateType.OPAQUE
    backfill: str = "from_start"

    def __post_init__(self) -> None:
        """Validate the name and the backfill mode."""
        validate_name("state", self.name)
        if self.backfill not in BACKFILL_MODES:
            modes = ", ".join(repr(m) for m in BACKFILL_MODES)
            msg = f"state {self.name!r}: backfill must be one of {modes}, got {self.backfill!r}"
            raise ConfigError(msg)

    @classmethod
    def opaque(cls, name: str) -> StateSpec:
        """An opaque state: exactly-once with transactional and opaque spouts."""
        return cls(name, StateType.OPAQUE)

    @classmethod
    def transactional(cls, name: str) -> StateSpec:
        """A transactional state: exactly-once with transactional spouts only."""
        return cls(name, StateType.TRANSACTIONAL)

    @classmethod
    def non_transactional(cls, name: str) -> StateSpec:
        """A non-transactional state: at-least-once (replays count twice)."""
        return cls(name, StateType.NON_TRANSACTIONAL)


class StateUpdater:
    """Applies a whole batch to a state (``partition_persist``), in bulk.

    Subclasses implement :meth:`update_state`; it receives the state's store, the table
    name, the batch as a pyarrow Table of the input fields, and the txid, runs inside the
    batch's commit transaction, and returns the new-values rows (a pyarrow Table) or None.
    """

    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> Any:
        """Apply ``batch`` to the state; return the new-values rows or None."""
        msg = f"{type(self).__name__} must implement update_state(store, table, batch, txid)"
        raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class PersistedState:
    """What a QueryFunction's ``batch_retrieve`` gets for a ``partition_persist`` state.

    A StateUpdater keeps its state in tables of its own design, so a query reads them
    through the store (one bulk statement per batch), as committed before the batch.
    """

    store: Any
    """The state store (e.g. a DuckDBStore: ``store.conn``, ``store.registered(arrow)``)."""
    table: str
    """The table name the StateUpdater was given."""


@dataclass(eq=False)
class Node:
    """A node of the topology graph."""

    kind: str
    fields: tuple[str, ...]
    parents: tuple[Node, ...] = ()
    args: dict[str, Any] = field(default_factory=dict)

    def spouts(self) -> list[Node]:
        """Every spout node upstream of this node (through new-values streams too), once."""
        found: list[Node] = []
        seen: set[int] = set()
        todo: list[Node] = [self]
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.kind == "spout":
                found.append(node)
            todo += node.parents
            if node.kind == "new_values":
                todo.append(node.args["state"].node)
        return found

    @property
    def label(self) -> str:
        """How errors name this operation: its ``name``, else its kind, inputs and fields."""
        named = self.args.get("name")
        if named:
            return f"{self.kind} {named!r}"
        inputs = self.args.get("inputs")
        head = f"{self.kind}({', '.join(inputs)})" if inputs else self.kind
        return f"{head} -> {', '.join(self.fields)}"


class Derivable(Protocol):
    """A stream as the declarations of its next operations see it (a ``Stream`` is one)."""

    node: Node

    @property
    def fields(self) -> tuple[str, ...]:
        """The stream's fields."""
        ...

    def derive(self, kind: str, fields: Sequence[str], **args: Any) -> Self:
        """A stream of a new ``kind`` node over this one."""
        ...


StreamT = TypeVar("StreamT", bound=Derivable)
"""The stream type a declaration takes and returns (``Stream``)."""


ROW_WISE = frozenset({"spout", "each", "filter", "project", "peek"})
"""Node kinds that map each tuple to at most one tuple, on its own."""


def record_time_spout(spec: Any, parent: Node) -> Node | None:
    """The spout whose record timestamps are event-time window ``spec``'s times, if any.

    ``parent`` is the window's input. For a tumbling or sliding window with a SQL combiner
    whose time field is the record timestamp of a spout (``with_metadata``), passed
    unchanged through row-wise nodes (``each`` only appends fields, ``filter`` drops tuples,
    ``project`` keeps them), and whose spout bounds a batch's timestamps before reading it
    (``max_timestamp_ms``). Such a window's txids can share one Spark job: which records
    could be late is known from the bounds before the job
    (:mod:`trident_assets.spark.event_window_chunks`).
    """
    from trident_assets.core.aggregators import is_sql_combiner

    if spec.window.kind == "session" or not is_sql_combiner(spec.agg):
        return None
    if spec.window.time_unit != "timestamp":
        return None
    node = parent
    while node.kind in ROW_WISE and node.kind != "spout":
        node = node.parents[0]
    if node.kind != "spout" or spec.window.time_field != "timestamp":
        return None
    spout = node.args["spout"]
    scheme = getattr(spout, "scheme", None)
    if not getattr(scheme, "with_metadata", False) or not hasattr(spout, "max_timestamp_ms"):
        return None
    return node

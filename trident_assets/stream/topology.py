"""Declaring a topology: ``TridentTopology``, the graph of streams and states it owns.

Declaration is pure: it validates field names and the exactly-once compatibility of spouts
and states, and builds a graph of nodes. The declaration layer is split in three modules:
:mod:`~trident_assets.stream.graph` (``Node``, ``StateSpec``, ``StateUpdater``,
``PersistedState``), :mod:`~trident_assets.stream.streams` (``Stream``, ``GroupedStream``,
``TridentState``) and this one (``TridentTopology``), which re-exports them all.
:mod:`trident_assets.planner` analyses the graph and :mod:`trident_assets.spark.executor`
runs it for one batch on Spark; neither is imported here.

Example:
    >>> from trident_assets.stream.topology import TridentTopology, StateSpec
    >>> from trident_assets.stream.operations import Split
    >>> from trident_assets.core.aggregators import Count
    >>> topo = TridentTopology("word_count")
    >>> # spout: e.g. LogSpout("sentences", StringScheme("sentence"))
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError
from trident_assets.names import MAP_LOG_PREFIX, MAP_SEQ_PREFIX, MAX_IDENTIFIER_LENGTH
from trident_assets.spouts.config import SpoutKind, validate_name
from trident_assets.stream.batch_join import JoinType, merge_selections, plan_join
from trident_assets.stream.fields import Fields
from trident_assets.stream.graph import Node, PersistedState, StateSpec, StateUpdater
from trident_assets.stream.lakehouse_specs import Publication
from trident_assets.stream.single_join import declare_single_join
from trident_assets.stream.static_state import StaticSource, StaticState
from trident_assets.stream.streams import GroupedStream, Stream, TridentState

__all__ = [
    "ExactlyOnceWarning",
    "GroupedStream",
    "PersistedState",
    "StateSpec",
    "StateUpdater",
    "Stream",
    "TridentState",
    "TridentTopology",
]


class ExactlyOnceWarning(UserWarning):
    """A topology combines a spout and a state in a way that cannot be exactly-once."""


class TridentTopology:
    """A named graph of streams and states; one partition of its assets is one txid."""

    def __init__(self, name: str, *, strict: bool = False) -> None:
        """Declare topology ``name``; ``strict`` turns exactly-once warnings into errors."""
        self.name = validate_name("topology", name)
        self.strict = strict
        self.spouts: dict[str, Node] = {}
        self.states: dict[str, TridentState] = {}
        self.queries: list[Stream] = []
        self.outputs: dict[str, Stream] = {}
        self.static_states: dict[str, TridentState] = {}
        """States queries read but nothing in the topology writes (``new_static_state``)."""
        self.claims: dict[str, str] = {}
        """Every store table and asset name the declarations use -> the declaration using it."""
        self.publications: list[Publication] = []
        """The lakehouse tables its states and outputs are published to (``.publish``)."""

    def new_stream(self, spout_id: str, spout: Any) -> Stream:
        """A stream of the batches a spout emits; ``spout_id`` names its offset metadata."""
        validate_name("spout", spout_id)
        if spout_id in self.spouts:
            msg = f"topology {self.name!r} already has a spout {spout_id!r}; spout ids are unique"
            raise ConfigError(msg)
        node = Node("spout", tuple(spout.fields), args={"spout_id": spout_id, "spout": spout})
        self.claim(f"spout {spout_id!r}", (), (f"{spout_id}_batch",))
        self.spouts[spout_id] = node
        return Stream(self, node)

    def stream_of(self, node: Node) -> Stream:
        """The stream of ``node``, a node of this topology."""
        return Stream(self, node)

    single_join = declare_single_join
    """Join streams across batches (Storm's SingleJoinBolt): :func:`.declare_single_join`."""

    def new_static_state(self, name: str, source: Any) -> TridentState:
        """A state that queries read and nothing in the topology writes (``newStaticState``).

        ``source`` is a StaticTable (a table of the store) or a StaticFile (loaded once).
        """
        if not isinstance(source, StaticSource):
            msg = f"new_static_state needs a StaticTable or StaticFile, got {source!r}"
            raise ConfigError(msg)
        state = StaticState(self, name, source)
        if name in self.states or name in self.static_states:
            msg = f"topology {self.name!r} already has a state {name!r}"
            raise ConfigError(msg)
        self.static_states[name] = state
        return state

    def _own(self, streams: Sequence[Stream], operation: str) -> None:
        for s in streams:
            if not isinstance(s, Stream) or s.topology is not self:
                msg = f"{operation}: {s!r} is not a stream of topology {self.name!r}"
                raise ConfigError(msg)

    def merge(self, *streams: Stream, fields: Fields | None = None) -> Stream:
        """The tuples of every stream in one stream, per batch (Trident's ``merge``).

        Streams must have the first stream's fields (aligned by name); with ``fields`` they
        are aligned by position and renamed.
        """
        self._own(streams, "merge")
        outs, selections = merge_selections([s.fields for s in streams], fields)
        node = Node("merge", outs, tuple(s.node for s in streams), {"selections": selections})
        return Stream(self, node)

    def join(
        self,
        streams: Sequence[Stream],
        join_fields: Fields | Sequence[Sequence[str]],
        out_fields: Fields,
        how: str | JoinType | Sequence[str | JoinType] = "inner",
    ) -> Stream:
        """Join streams on key fields within each batch (Trident's ``join``, COMPACT output).

        ``how``: ``"inner"``, ``"outer"``, ``"left"`` (first stream INNER, the others OUTER)
        or one JoinType per stream. Output: the join fields, then each stream's other
        fields, named by ``out_fields``.
        """
        self._own(streams, "join")
        plan = plan_join([s.fields for s in streams], join_fields, out_fields, how)
        node = Node("join", plan.out_fields, tuple(s.node for s in streams), {"plan": plan})
        return Stream(self, node)

    def output_table(self, name: str) -> str:
        """The store table of output ``name``'s rows of each recent txid."""
        return f"{self.name}__out_{name}"

    def state_names(self, state: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The (store tables, asset names) state ``state`` may use.

        Its table ``<topology>__<state>``, the map log and sequence behind it, its new-values
        and partials tables; its asset and its new-values and partials assets.
        """
        table = f"{self.name}__{state}"
        tables = (
            table,
            f"{table}__new_values",
            f"{table}__partials",
            f"{MAP_LOG_PREFIX}{table}",
            f"{MAP_SEQ_PREFIX}{table}",
        )
        return tables, (state, f"{state}_new_values", f"{state}_partials")

    def output_names(self, output: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The (store tables, asset names) output ``output`` uses."""
        return (self.output_table(output),), (output,)

    def claim(
        self, owner: str, tables: Sequence[str], assets: Sequence[str], *, check_only: bool = False
    ) -> None:
        """Record that ``owner`` (e.g. ``"state 'counts'"``) uses ``tables`` and ``assets``.

        Two declarations of a topology never share a table or an asset name, and every
        table name fits in :data:`~trident_assets.names.MAX_IDENTIFIER_LENGTH` characters.
        (Tables of different topologies never meet: topology, state and output names hold
        no ``__`` and neither start nor end with ``_``, so a table name's part before its
        first ``__`` is its topology.) ``check_only`` checks without recording.

        Raises:
            ConfigError: a name is too long or already used, naming both declarations.
        """
        for table in tables:
            if len(table) > MAX_IDENTIFIER_LENGTH:
                msg = (
                    f"{owner} of topology {self.name!r} needs store table {table!r} "
                    f"({len(table)} characters), longer than the {MAX_IDENTIFIER_LENGTH} a "
                    "table name may have; shorten the topology name or the "
                    f"{owner.split(' ', 1)[0]} name"
                )
                raise ConfigError(msg)
        for kind, names in (("store table", tables), ("asset name", assets)):
            for name in names:
                other = self.claims.get(f"{kind}:{name}")
                if other is not None and other != owner:
                    msg = (
                        f"{owner} of topology {self.name!r} would use {kind} {name!r}, which "
                        f"{other} already uses; rename one of them (each state and output "
                        "needs tables and assets of its own)"
                    )
                    raise ConfigError(msg)
        if check_only:
            return
        for kind, names in (("store table", tables), ("asset name", assets)):
            for name in names:
                self.claims[f"{kind}:{name}"] = owner

    def register_state(self, state: TridentState) -> None:
        """Add ``state`` to the topology (called by the operations that declare states).

        Raises:
            ConfigError: the topology already has a state of that name, or another
                declaration uses one of its tables or assets (see :meth:`claim`).
        """
        if state.spec.name in self.states or state.spec.name in self.static_states:
            msg = f"topology {self.name!r} already has a state {state.spec.name!r}"
            raise ConfigError(msg)
        self.claim(f"state {state.spec.name!r}", *self.state_names(state.spec.name))
        self.states[state.spec.name] = state

    def check_exactly_once(self, spec: StateSpec, node: Node) -> None:
        """Warn (or raise in strict mode) if ``spec`` fed by ``node`` cannot be exactly-once."""
        kinds = {spout.args["spout"].config.kind for spout in node.spouts()}
        problems = []
        if spec.state_type is StateType.NON_TRANSACTIONAL:
            problems.append("a non-transactional state counts replays twice")
        if SpoutKind.NON_TRANSACTIONAL in kinds:
            problems.append("a non-transactional spout cannot replay a batch")
        if spec.state_type is StateType.TRANSACTIONAL and SpoutKind.OPAQUE in kinds:
            problems.append(
                "a transactional state with an opaque spout skips a replayed batch that may differ"
            )
        if not problems:
            return
        msg = (
            f"state {spec.name!r} of topology {self.name!r} is not exactly-once: "
            + "; ".join(problems)
            + ". Use an opaque state (works with transactional and opaque spouts)."
        )
        if self.strict:
            raise ConfigError(msg)
        warnings.warn(msg, ExactlyOnceWarning, stacklevel=3)

"""What building a state from the log of committed txids may replay, planned before any run.

A state added to a topology that committed txids ``1..N`` is built from what each committed
txid read (:mod:`trident_assets.backends.spout_history`) before it joins the topology's
batches (:func:`plan_backfill`); a state removed and declared again is first replayed the
txids it missed (:func:`plan_rejoin`). Both are refused before any write, naming the state,
when the state reads another state (a state query, a new-values stream, a single join) or
txids whose ranges were not recorded or whose records retention deleted (unless the state is
declared ``backfill="from_retained"``). The replay itself is
:func:`trident_assets.spark.backfill.catch_up_one`; a rebuild is
:func:`trident_assets.spark.rebuild.rebuild_state`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trident_assets.backends.spout_history import SpoutJoins, read_history, spout_joins
from trident_assets.errors import StateContractError
from trident_assets.planner import upstream
from trident_assets.spouts.ranges import PartitionRange
from trident_assets.stream.single_join import SINGLE_JOIN_EXPIRED
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "BackfillOutcome",
    "plan_backfill",
    "plan_rejoin",
    "replay_refusal",
    "txid_text",
    "unreadable_txids",
]


@dataclass
class BackfillOutcome:
    """What a catch-up did for one state: the txids it applied (in this call), from ``first``."""

    state: str
    first_txid: int
    last_txid: int
    applied: list[int] = field(default_factory=list)


# -- what can be replayed ------------------------------------------------------------------------


def _state_name(state: Any) -> str:
    spec = getattr(state, "spec", None)
    return str(getattr(spec, "name", None) or getattr(state, "name", "?"))


def replay_refusal(state: TridentState) -> str | None:
    """Why ``state`` cannot be built from the log of its spouts alone (None: it can)."""
    refusal = state_kind(state.node).log_refusal
    if refusal is not None:
        return refusal
    for node in upstream([state.node.parents[0] if state.node.parents else state.node]):
        if node.kind == "query":
            return (
                f"it reads state {_state_name(node.args.get('state'))!r} through a state "
                "query, whose values at each past txid are not kept"
            )
        if node.kind == "new_values":
            return (
                f"it reads the new values of state {_state_name(node.args.get('state'))!r}, "
                "which are kept for recent txids only"
            )
        if node.kind == SINGLE_JOIN_EXPIRED:
            return "it reads the expired halves of a single join, which depend on its state"
        if node.kind == "spout" and not callable(getattr(node.args["spout"], "source", None)):
            return f"its spout {node.args['spout_id']!r} cannot re-read recorded offset ranges"
    return None


def txid_text(txids: Iterable[int]) -> str:
    """``1..3, 5`` for {1, 2, 3, 5}."""
    ordered = sorted(set(txids))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}..{ordered[j]}")
        i = j + 1
    return ", ".join(parts)


def unreadable_txids(
    topology: TridentTopology,
    store: StateStore,
    log: Any,
    spouts: Iterable[str],
    last: int,
    joins: SpoutJoins,
    first: int = 1,
) -> tuple[dict[tuple[str, int], list[PartitionRange]], set[int], set[int]]:
    """The history of txids ``first..last`` of ``spouts``; txids unrecorded; unreadable.

    Unrecorded: a spout that was part of the txid has no recorded range. Unreadable: the
    log no longer holds a range (retention, a re-created topic, a lost partition). One read
    of the history; each partition's bounds are asked once.
    """
    spout_ids = sorted(spouts)
    history = read_history(store, topology.name, spout_ids, first, last)
    missing = {
        t
        for t in range(first, last + 1)
        for s in spout_ids
        if (s, t) not in history and not joins.absent(s, t)
    }
    gone: set[int] = set()
    for sid in spout_ids:
        source = topology.spouts[sid].args["spout"].source(log)
        existing = set(source.partitions())
        bounds: dict[str, tuple[int, int, str | None]] = {}
        for (s, txid), ranges in history.items():
            if s != sid:
                continue
            for r in ranges:
                if r.count == 0:
                    continue
                if r.partition not in existing:
                    gone.add(txid)
                    continue
                if r.partition not in bounds:
                    get_id = getattr(source, "topic_id", None)
                    bounds[r.partition] = (
                        source.earliest(r.partition),
                        source.latest(r.partition),
                        None if get_id is None else get_id(r.partition),
                    )
                earliest, latest, topic_id = bounds[r.partition]
                deleted = r.first_offset < earliest or r.next_offset > latest
                if deleted or (r.topic_id is not None and r.topic_id != topic_id):
                    gone.add(txid)
    return history, missing, gone - missing


def plan_backfill(
    topology: TridentTopology, store: StateStore, log: Any, name: str, last: int
) -> int:
    """The first txid new state ``name`` is built from (``last + 1``: nothing to replay).

    A spout added to the topology after txids it was not part of read nothing in them
    (:class:`~trident_assets.backends.spout_history.SpoutJoins`): a state fed only by spouts
    new since txid ``last`` has nothing to replay and covers txids from ``last + 1`` (every
    record its spouts read); a state fed by older and newer spouts replays what each read.
    Nothing is written.

    Raises:
        StateContractError: the state cannot be replayed, or part of txids ``1..last`` is
            unrecorded or no longer readable and the state is not ``backfill="from_retained"``.
    """
    state = topology.states[name]
    head = (
        f"state {name!r} is new in topology {topology.name!r}, which has committed txids 1..{last}"
    )
    refusal = replay_refusal(state)
    if refusal is not None:
        msg = (
            f"{head}: it cannot be built from the log of those txids because {refusal}. "
            "Nothing was run or written. Declare it in a new topology (a new topology name "
            "reads its spouts from the start, into tables of its own), or remove it from "
            "this topology"
        )
        raise StateContractError(msg)
    joins = spout_joins(store, topology.name)
    spouts = state.contract().spouts
    if all(joins.absent(s, 1) and joins.absent(s, last) for s in spouts):  # in none of 1..last
        return last + 1
    _, missing, gone = unreadable_txids(topology, store, log, spouts, last, joins)
    bad = missing | gone
    if not bad:
        return 1
    first = max(bad) + 1
    if state.spec.backfill == "from_retained":
        return first
    what = []
    if gone:
        what.append(
            f"txid(s) {txid_text(gone)} can no longer be read (retention deleted records "
            "they read, or their topic or partition was re-created)"
        )
    if missing:
        what.append(
            f"the offset ranges of txid(s) {txid_text(missing)} were not recorded (committed "
            "before this version kept them)"
        )
    start = (
        f"txid {first}, the first txid from which the log is complete"
        if first <= last
        else f"txid {first}, the next txid (no committed txid can be replayed)"
    )
    msg = (
        f"{head}: it is built from the log of those txids before it joins, but "
        f"{' and '.join(what)}. Nothing was run or written. Declare it with "
        f'StateSpec({name!r}, ..., backfill="from_retained") to build it from {start} '
        f"(its contract then records first_txid={first}), or declare it in a new topology "
        "(a new topology name reads its spouts from their earliest retained offsets, into "
        "tables of its own)"
    )
    raise StateContractError(msg)


def plan_rejoin(
    topology: TridentTopology, store: StateStore, log: Any, name: str, left_after: int, last: int
) -> int:
    """The first txid a state declared again after leaving the topology is caught up from.

    The state's stored values cover txids up to ``left_after``; the topology committed
    ``left_after + 1..last`` without it. Those txids are replayed into it before it rejoins
    (``last + 1`` when there are none). Nothing is written.

    Raises:
        StateContractError: those txids cannot be replayed into it (it reads another state,
            or their ranges were not recorded or are no longer readable).
    """
    if left_after >= last:
        return last + 1
    state = topology.states[name]
    head = (
        f"state {name!r} of topology {topology.name!r} left the topology after txid "
        f"{left_after} (txids {left_after + 1}..{last} committed without it) and is declared "
        "again: it is caught up from the log of those txids before it rejoins"
    )
    way_out = (
        "Nothing was run or written. Rename it (a new state is built from the retained log), "
        "or take it out of the declaration, drop its stored values (`trident state drop "
        f"{topology.name} {name}`) and declare it again (it is then built anew)"
    )
    refusal = replay_refusal(state)
    if refusal is not None:
        msg = f"{head}, but {refusal}. {way_out}"
        raise StateContractError(msg)
    joins = spout_joins(store, topology.name)
    spouts = state.contract().spouts
    _, missing, gone = unreadable_txids(topology, store, log, spouts, last, joins, left_after + 1)
    if missing or gone:
        msg = (
            f"{head}, but txid(s) {txid_text(missing | gone)} can no longer be replayed "
            f"(ranges not recorded, or records deleted by retention). {way_out}"
        )
        raise StateContractError(msg)
    return left_after + 1

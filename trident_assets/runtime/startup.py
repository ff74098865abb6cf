"""What a runner plans when it starts, before any Spark job or write: the topology's state.

A runner compares the declaration with what the store holds (:func:`plan_startup`):

* every state's contract is checked (a changed meaning is refused; a new state's contract
  is written with the next commit);
* a state new to a topology that committed txids, or declared again after it was removed,
  is planned to be built from the log of the txids it missed before the next batch;
* stored states the declaration lacks are recorded, at each commit, as missing its txid;
* a spout added after txid N joins at N + 1, from its start position (:func:`joining_spouts`).

A refused declaration leaves the store exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trident_assets.backends.spout_history import spout_joins
from trident_assets.backends.state_contracts import (
    check_contracts,
    check_topology_scope,
    states_left,
    stored_contracts,
)
from trident_assets.errors import CorruptStateError
from trident_assets.runtime.backfill_plans import plan_backfill, plan_rejoin
from trident_assets.runtime.commit import progress

if TYPE_CHECKING:
    from trident_assets.backends.duckdb_spout_meta import DuckDBSpoutMetaStore
    from trident_assets.backends.state_store import StateStore
    from trident_assets.core.contracts import StateContract
    from trident_assets.stream.topology import TridentTopology

__all__ = ["Startup", "joining_spouts", "plan_startup"]


@dataclass
class Startup:
    """A runner's plan of the topology's states and spouts when it starts."""

    last: int | None
    """The topology's last committed txid."""
    pending_contracts: list[StateContract]
    """Contracts of new states, written with the next commit."""
    absent: list[str]
    """Stored states not declared: each commit records that they miss its txid."""
    building: dict[str, int]
    """States to build from the log before the next batch: name -> first txid."""
    joining: set[str]
    """States whose progress rows (and records of having left) the next commit removes."""


def plan_startup(topology: TridentTopology, store: StateStore, log: Any) -> Startup:
    """Check ``topology``'s declaration against ``store``; plan its states' catch-ups.

    Writes nothing: a refused declaration leaves the store as it was.

    Raises:
        StateContractError: a state's declaration changes what its stored values mean.
        ConfigError: the topology's tables belong to another topology.
        BatchUnavailableError: a new state's history can no longer be read.
    """
    check_topology_scope(store, topology.name)
    last = store.last_committed(topology.name)
    building = {
        name: first
        for name, (first, _done) in progress(store, topology.name).items()
        if name in topology.states
    }

    def catch_up(contract: StateContract) -> None:
        assert last is not None
        building[contract.state] = plan_backfill(topology, store, log, contract.state, last)

    pending = check_contracts(
        store,
        topology.name,
        [state.contract() for state in topology.states.values()],
        last,
        catch_up=catch_up,
    )
    # A stored state this declaration lacks misses the txids committed without it; if it is
    # declared again later, those txids are replayed into it before it rejoins.
    declared = set(topology.states)
    stored_here = {c.state for c in stored_contracts(store) if c.topology == topology.name}
    rejoining: set[str] = set()
    for name, after in states_left(store, topology.name).items():
        if name not in declared:
            continue
        rejoining.add(name)
        if name not in building and last is not None:
            first = plan_rejoin(topology, store, log, name, after, last)
            if first <= last:
                building[name] = first
    return Startup(
        last,
        pending,
        sorted(stored_here - declared),
        building,
        rejoining - building.keys(),
    )


def joining_spouts(
    topology: TridentTopology, store: StateStore, meta: DuckDBSpoutMetaStore, last: int | None
) -> dict[str, int]:
    """Spouts declared since the topology committed txids ``1..last``: name -> ``last``.

    Such a spout joins at ``last + 1`` from its start position. A spout without committed
    positions whose reads the history records lost its positions: refused.

    Raises:
        CorruptStateError: a spout's committed positions are missing from the store.
    """
    if not last:
        return {}
    scope = topology.name
    joins = spout_joins(store, scope)
    joining: dict[str, int] = {}
    for sid in topology.spouts:
        if meta.last_committed_txid(scope, sid) is not None:
            continue
        if sid in joins.joined:
            msg = (
                f"spout {sid!r} of topology {scope!r} read txids from "
                f"{joins.joined[sid]} on (the store's spout history records them), but its "
                "committed positions are missing from the store, so its next batch cannot "
                "know where to start. Nothing was run or written. Restore the state store "
                "from a backup (`trident state restore`)"
            )
            raise CorruptStateError(msg)
        joining[sid] = last
    return joining

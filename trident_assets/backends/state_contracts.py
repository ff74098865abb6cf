"""State contracts in the state store (DuckDB or PostgreSQL), checked before a topology runs.

Table ``_trident_state_contracts``: one row per (topology, state) with the state's table and
its :class:`~trident_assets.core.contracts.StateContract` as stable JSON. A state's contract
is written in the transaction of the first txid the runner commits after the state was
declared, so a contract exists exactly when the state's values do.

:func:`check_contracts` compares the declaration with the stored contracts before anything
runs: it refuses (:class:`~trident_assets.errors.StateContractError`) an incompatible change,
a state new to a topology that already committed txids when it cannot be built from the log
(:mod:`trident_assets.runtime.backfill_plans` plans that) and a table owned by another (topology,
state); it adopts the declaration of a store created before contracts existed, with a
warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from trident_assets.backends.state_store import StateStore
from trident_assets.core.contracts import StateContract, compare
from trident_assets.errors import StateContractError
from trident_assets.names import CONTRACTS_TABLE, STATES_LEFT_TABLE

__all__ = [
    "check_contracts",
    "check_state_asset_scope",
    "check_topology_scope",
    "delete_state_rows",
    "record_left",
    "refuse_value_type",
    "states_left",
    "stored_contracts",
    "write_contracts",
]

log = logging.getLogger(__name__)


def stored_contracts(store: StateStore) -> list[StateContract]:
    """Every stored contract (none when the table does not exist yet); nothing is written."""
    if not store.has_table(CONTRACTS_TABLE):
        return []
    rows = store.fetch_rows(f"SELECT contract FROM {CONTRACTS_TABLE} ORDER BY topology, state")
    return [StateContract.from_json(str(r[0])) for r in rows]


def write_contracts(store: StateStore, contracts: Sequence[StateContract]) -> None:
    """Insert ``contracts`` (in the open transaction, if any) in one statement."""
    if not contracts:
        return
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {CONTRACTS_TABLE} (topology VARCHAR NOT NULL, state VARCHAR "
        "NOT NULL, table_name VARCHAR NOT NULL, contract VARCHAR NOT NULL, "
        "PRIMARY KEY (topology, state))"
    )
    rows = pa.table(
        {
            "topology": [c.topology for c in contracts],
            "state": [c.state for c in contracts],
            "table_name": [c.table for c in contracts],
            "contract": [c.to_json() for c in contracts],
        }
    )
    with store.staged(rows) as name:
        store.execute(
            f"INSERT INTO {CONTRACTS_TABLE} SELECT topology, state, table_name, contract "
            f'FROM "{name}" ON CONFLICT (topology, state) DO NOTHING'
        )


def record_left(store: StateStore, topology: str, states: Sequence[str], after: int) -> None:
    """Record that ``states`` (stored, no longer declared) miss txids after ``after``.

    Call in the commit transaction of txid ``after + 1``; the first record of a state stays
    (one statement).
    """
    if not states:
        return
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {STATES_LEFT_TABLE} (topology VARCHAR NOT NULL, "
        "state VARCHAR NOT NULL, left_after BIGINT NOT NULL, PRIMARY KEY (topology, state))"
    )
    names = sorted(states)
    values = ", ".join("(?, ?, ?)" for _ in names)
    store.execute(
        f"INSERT INTO {STATES_LEFT_TABLE} (topology, state, left_after) VALUES {values} "
        "ON CONFLICT (topology, state) DO NOTHING",
        [v for name in names for v in (topology, name, after)],
    )


def states_left(store: StateStore, topology: str) -> dict[str, int]:
    """Per state of ``topology`` that txids were committed without: the last txid it has."""
    if not store.has_table(STATES_LEFT_TABLE):
        return {}
    rows = store.fetch_rows(
        f"SELECT state, left_after FROM {STATES_LEFT_TABLE} WHERE topology = ?", [topology]
    )
    return {str(state): int(after) for state, after in rows}


def delete_state_rows(store: StateStore, table: str, topology: str, states: Iterable[str]) -> None:
    """Delete the rows of ``states`` of ``topology`` from bookkeeping table ``table``.

    ``table`` is one of the project's own table names (never user input); one statement.
    """
    names = sorted(states)
    if not names or not store.has_table(table):
        return
    marks = ", ".join("?" for _ in names)
    store.execute(
        f"DELETE FROM {table} WHERE topology = ? AND state IN ({marks})", [topology, *names]
    )


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_show(v) for v in value) + ")"
    return "none" if value is None else repr(value) if isinstance(value, str) else str(value)


def check_contracts(
    store: StateStore,
    topology: str,
    declared: Sequence[StateContract],
    last_committed: int | None,
    *,
    catch_up: Callable[[StateContract], None] | None = None,
) -> list[StateContract]:
    """Check ``declared`` against the store; return the contracts to write at the next commit.

    Nothing is written here. Identical and compatible declarations pass (nothing to write).
    A declared state without a stored contract is written with the next commit when the
    topology has committed nothing yet (it covers txid 1 on), or adopted (with a warning)
    when the topology committed txids before contracts existed and the state's tables exist.
    A state new to a topology that has committed txids is passed to ``catch_up``, which
    plans building it from the log (its contract is written then) or raises; without
    ``catch_up`` it is refused.

    Raises:
        StateContractError: a table owned by another (topology, state); an incompatible
            change of a stored contract; a new state on a topology with committed txids that
            cannot be built from the log (raised by ``catch_up``) or without ``catch_up``.
    """
    stored = stored_contracts(store)
    by_state = {c.state: c for c in stored if c.topology == topology}
    owners = {c.table: c for c in stored}
    pending: list[StateContract] = []
    adopted: list[str] = []
    for d in declared:
        owner = owners.get(d.table)
        if owner is not None and (owner.topology, owner.state) != (d.topology, d.state):
            msg = (
                f"state {d.state!r} of topology {d.topology!r} would write table {d.table!r}, "
                f"which belongs to state {owner.state!r} of topology {owner.topology!r}. "
                "Nothing was run or written. Rename the state or the topology so that their "
                "tables differ"
            )
            raise StateContractError(msg)
        have = by_state.get(d.state)
        if have is not None:
            _refuse_incompatible(have, d)
            continue
        if last_committed is None:
            pending.append(d)
        elif not by_state and any(
            t == d.table or t.startswith(f"{d.table}__") for t in store.tables()
        ):
            pending.append(replace(d, first_txid=1))
            adopted.append(d.state)
        elif catch_up is not None:
            catch_up(d)
        else:
            msg = (
                f"state {d.state!r} is new in topology {topology!r}, which has committed txids "
                f"1..{last_committed}: it would hold only txids from {last_committed + 1} on "
                f"and miss txids 1..{last_committed}. Nothing was run or written. A "
                "TopologyRunner builds it from the log of those txids before it joins the "
                "topology; or declare it in a new topology"
            )
            raise StateContractError(msg)
    if adopted:
        log.warning(
            "topology %r has committed txids 1..%s but no state contracts (a store created "
            "before contracts existed): adopting the current declaration of state(s) %s as "
            "their contract without checking it against how the stored values were made",
            topology,
            last_committed,
            ", ".join(repr(s) for s in adopted),
        )
    return pending


def check_topology_scope(store: StateStore, topology: str) -> None:
    """Refuse a topology whose commit scope a user state asset of the store already uses.

    A state asset persisted by the TridentIOManager (``state_asset_metadata(name, ...)``)
    keeps map table ``name`` and commit scope ``name``; a topology's tables all hold ``__``.
    Nothing is written.

    Raises:
        StateContractError: naming the topology and the state asset.
    """
    if topology in store.tables():
        msg = (
            f"topology {topology!r} would share commit scope {topology!r} with the state asset "
            f"{topology!r} that the TridentIOManager persists in this store (map table "
            f"{topology!r}). Nothing was run or written. Rename the topology or the state asset"
        )
        raise StateContractError(msg)


def check_state_asset_scope(store: StateStore, state: str) -> None:
    """Refuse a user state asset whose name is the name of a topology of the store.

    The asset's commit scope is its name; a topology of that name has tables ``<name>__...``
    or commits without a map table ``<name>``. Nothing is written.

    Raises:
        StateContractError: naming the state asset and the topology.
    """
    tables = store.tables()
    owned = [t for t in tables if t.startswith(f"{state}__")]
    if owned or (state not in tables and store.last_committed(state) is not None):
        shown = f" (its tables {', '.join(owned)})" if owned else ""
        msg = (
            f"state asset {state!r} would share commit scope {state!r} with topology "
            f"{state!r} in this store{shown}. Nothing was written. Rename the state asset "
            "(state_asset_metadata(name, ...)) or the topology"
        )
        raise StateContractError(msg)


def _refuse_incompatible(stored: StateContract, declared: StateContract) -> None:
    result = compare(stored, declared)
    if result.compatible:
        return
    lines = "; ".join(
        f"{d.name}: stored {_show(d.stored)}, declared {_show(d.declared)}"
        for d in result.incompatible
    )
    raise StateContractError(_refusal(declared, lines))


def refuse_value_type(
    declared: StateContract, stored_type: str, declared_type: str, source: str
) -> None:
    """Refuse a state whose declared stream yields values the stored value column cannot hold.

    For states whose contract leaves the value type to the input (Sum, Min, Max): the
    runner types the declared partials before any Spark job runs (``stored_type`` and
    ``declared_type`` are SQL types; ``source`` says where the declared type comes from,
    e.g. ``Sum over field 'n' (string)``). Nothing is written.

    Raises:
        StateContractError: naming the state, both types and the ways out.
    """
    detail = f"value_type: stored {stored_type!r}, declared {declared_type!r} ({source})"
    raise StateContractError(_refusal(declared, detail))


def _refusal(declared: StateContract, detail: str) -> str:
    return (
        f"state {declared.state!r} of topology {declared.topology!r} (table "
        f"{declared.table!r}) is declared differently from how its stored values were made "
        f"({detail}). Nothing was run or written: the stored values would be mixed with values "
        "of another meaning. Ways out: restore the stored declaration; rename the state (a "
        "new state is built from the retained log before it joins the topology); remove the "
        "state from the topology, drop its stored values (`trident state drop "
        f"{declared.topology} {declared.state}`, refused while a topology declares it) and "
        "declare it again (it is then built anew from the retained log); or, keeping its "
        "keys and state type, recompute it under the new declaration (`trident state rebuild "
        f"{declared.topology} {declared.state} --module MODULE`)"
    )

"""Dropping one stored state of a topology: its tables, bookkeeping rows, contract and replica copy.

A state ``S`` of topology ``T`` lives in the store as table ``T__S`` and what derives from it:

* a map state (``persistent_aggregate``): the view ``T__S``, its log ``_trident_log_T__S`` and
  sequence ``_trident_seq_T__S``, and its rows in ``_trident_maps`` (the catalog),
  ``_trident_compactions`` and ``_trident_totals``;
* a single join: the pending table ``T__S`` and its row in ``_trident_join_meta``;
* either: the per-txid tables ``T__S__new_values`` and ``T__S__partials`` and the state's row
  in ``_trident_state_contracts``;
* a checked count/sum state: its ``exactly_once`` checkpoint, the table
  ``_trident_verified_T__S`` and its row in ``_trident_verified``.

:func:`drop_state` removes all of these in one store transaction (DuckDB and PostgreSQL both
drop tables transactionally), then the state's directories in the read replica. The topology's
commit marker, its spout metadata, its outputs, dead letters and other states are untouched.
Declaring the state again later makes a *new* state (see
:func:`~trident_assets.backends.state_contracts.check_contracts`).

Whether the state may be dropped (is it still declared?) is the caller's decision: the
``trident state drop`` command refuses a state its code location still declares.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trident_assets.backends.map_layout import log_table, quote_ident, seq_name
from trident_assets.backends.replica import Replica
from trident_assets.backends.state_batches import TOTALS_TABLE
from trident_assets.backends.state_contracts import stored_contracts
from trident_assets.backends.state_store import StateStore
from trident_assets.backends.verified import values_table
from trident_assets.names import (
    CATALOG_TABLE,
    COMPACTIONS_TABLE,
    CONTRACTS_TABLE,
    JOIN_META_TABLE,
    KV_JOIN_CLOCK_TABLE,
    STATES_LEFT_TABLE,
    VERIFIED_TABLE,
    WINDOWS_TABLE,
    find_named,
    validate_identifier,
)

__all__ = [
    "DERIVED_SUFFIXES",
    "DroppedState",
    "StoredState",
    "drop_state",
    "find_stored_state",
    "plan_drop",
    "stored_states",
    "table_owner",
]

DERIVED_SUFFIXES = ("new_values", "partials")
"""The per-txid tables of a state ``T__S``: ``T__S__new_values`` and ``T__S__partials``."""
SIDE_SUFFIXES = ("seen",)
"""Tables a state keeps beside its map: a distinct count's values seen, ``T__S__seen``."""


@dataclass(frozen=True)
class StoredState:
    """One state found in a store: by its map table, its join table or its contract.

    ``kind``: the map kind (``opaque``, ``transactional``, ``plain``), ``single_join`` for a
    join's pending table, ``window`` for a Trident window's store table, or ``contract only``
    for a contract whose tables are gone.
    """

    topology: str
    state: str
    table: str
    kind: str
    has_contract: bool


@dataclass(frozen=True)
class DroppedState:
    """What :func:`drop_state` removed.

    ``tables``: the store's tables, views and sequences dropped, in order; ``rows``: the
    bookkeeping tables a row of the state was deleted from; ``replica_dirs``: the replica
    directories removed.
    """

    topology: str
    state: str
    tables: tuple[str, ...]
    rows: tuple[str, ...]
    replica_dirs: tuple[Path, ...]


def table_owner(table: str, scopes: Collection[str]) -> tuple[str, str] | None:
    """(topology, state) owning ``table``, among the committed topologies ``scopes``.

    The longest committed topology prefixing it, else the part before the first ``__`` (as
    ``trident state list`` has always named states); a table that is a commit scope itself
    is a state written through the IO manager: ``(table, table)``.
    """
    owners = [s for s in scopes if table.startswith(f"{s}__")]
    if owners:
        owner = max(owners, key=len)
    elif table in scopes:
        return table, table
    else:
        owner, sep, _ = table.partition("__")
        if not sep:
            return None
    state = table[len(owner) + 2 :]
    return (owner, state) if state else None


def stored_states(store: StateStore) -> dict[str, dict[str, StoredState]]:
    """Every topology of ``store`` (committed scopes and owners of states) and its states.

    A state is found by its map table (the catalog), a join's pending table
    (``_trident_join_meta``) or its contract; a contract names its owner exactly, tables are
    owned as :func:`table_owner` says. Nothing is written.
    """
    scopes = list(store.scopes())
    found: dict[str, dict[str, StoredState]] = {name: {} for name in sorted(scopes)}
    contracts = {(c.topology, c.state): c for c in stored_contracts(store)}
    by_table = {c.table: key for key, c in contracts.items()}
    kinds = {t: store.layout(t).kind for t in store.tables()}  # type: ignore[union-attr]
    for meta, kind in ((JOIN_META_TABLE, "single_join"), (WINDOWS_TABLE, "window")):
        listed = store.fetch_rows(f"SELECT table_name FROM {meta}") if store.has_table(meta) else []
        kinds |= {str(t): kind for (t,) in listed if t not in kinds and store.has_table(t)}
    for table, kind in sorted(kinds.items()):
        owner = by_table.get(table) or table_owner(table, scopes)
        if owner is None:
            continue
        topology, state = owner
        found.setdefault(topology, {})[state] = StoredState(
            topology, state, table, kind, owner in contracts
        )
    for (topology, state), contract in sorted(contracts.items()):
        if state not in found.get(topology, {}):
            found.setdefault(topology, {})[state] = StoredState(
                topology, state, contract.table, "contract only", True
            )
    return {t: dict(sorted(s.items())) for t, s in sorted(found.items())}


def find_stored_state(store: StateStore, topology: str, state: str) -> StoredState:
    """Return ``topology``'s stored ``state``.

    Raises:
        ConfigError: an invalid name, or no such topology or state in the store (the message
            lists those that exist).
    """
    return find_named(stored_states(store), topology, state, f"state store {store.path}")


def _drop_statements(
    store: StateStore, found: StoredState
) -> tuple[list[tuple[str, list[Any]]], list[str], list[str]]:
    """The statements dropping ``found`` (SQL, params).

    Also returns the objects they drop and the tables whose rows of the state they delete.
    """
    table = validate_identifier(found.table, "table")
    statements: list[tuple[str, list[Any]]] = []
    dropped: list[str] = []
    rows: list[str] = []
    layout = store.layout(table)
    if layout is not None:
        statements += [
            (f"DROP VIEW IF EXISTS {quote_ident(table)}", []),
            (f"DROP TABLE IF EXISTS {log_table(table)}", []),
            (f"DROP SEQUENCE IF EXISTS {seq_name(table)}", []),
            (f'DELETE FROM "{CATALOG_TABLE}" WHERE table_name = ?', [table]),
        ]
        dropped += [table, log_table(table).strip('"'), seq_name(table).strip('"')]
        rows.append(CATALOG_TABLE)
    elif store.has_table(table):
        statements.append((f"DROP TABLE {quote_ident(table)}", []))
        dropped.append(table)
    for derived in (f"{table}__{suffix}" for suffix in (*DERIVED_SUFFIXES, *SIDE_SUFFIXES)):
        if store.has_table(derived):
            statements.append((f"DROP TABLE {quote_ident(derived)}", []))
            dropped.append(derived)

    def delete_rows(meta: str, where: str, params: list[Any]) -> None:
        if store.has_table(meta) and store.fetch_rows(f"SELECT count(*) {where}", params)[0][0]:
            statements.append((f"DELETE {where}", params))
            rows.append(meta)

    sides = (COMPACTIONS_TABLE, TOTALS_TABLE, JOIN_META_TABLE, KV_JOIN_CLOCK_TABLE, WINDOWS_TABLE)
    for side in sides:
        delete_rows(side, f'FROM "{side}" WHERE table_name = ?', [table])
    if found.has_contract:
        statements.append(
            (
                f"DELETE FROM {CONTRACTS_TABLE} WHERE topology = ? AND state = ?",
                [found.topology, found.state],
            )
        )
        rows.append(CONTRACTS_TABLE)
    verified = values_table(table)
    if store.has_table(verified):
        statements.append((f"DROP TABLE {quote_ident(verified)}", []))
        dropped.append(verified)
    for meta in (STATES_LEFT_TABLE, VERIFIED_TABLE):  # the state's rows in per-topology tables
        delete_rows(
            meta, f"FROM {meta} WHERE topology = ? AND state = ?", [found.topology, found.state]
        )
    return statements, dropped, rows


def _replica_dirs(found: StoredState, replica: Replica | None) -> list[Path]:
    if replica is None:
        return []
    names = [found.table, *(f"{found.table}__{s}" for s in DERIVED_SUFFIXES)]
    return [replica.root / n for n in names if (replica.root / n).is_dir()]


def plan_drop(
    store: StateStore, topology: str, state: str, *, replica: Replica | None = None
) -> DroppedState:
    """What :func:`drop_state` would remove now; nothing is written.

    Raises:
        ConfigError: as :func:`drop_state`.
    """
    found = find_stored_state(store, topology, state)
    _, dropped, rows = _drop_statements(store, found)
    return DroppedState(
        topology, state, tuple(dropped), tuple(rows), tuple(_replica_dirs(found, replica))
    )


def drop_state(
    store: StateStore, topology: str, state: str, *, replica: Replica | None = None
) -> DroppedState:
    """Drop ``topology``'s ``state`` from ``store`` (one transaction), then from ``replica``.

    Removes the state's tables, views and sequences, its derived per-txid tables, its rows in
    the catalog, compaction, totals and join bookkeeping tables, its contract and its
    ``exactly_once`` checkpoint; nothing
    else (the topology's commit marker and spout metadata, its other states, outputs and
    dead letters stay). The replica's copies (``<root>/T__S``, ``T__S__new_values``,
    ``T__S__partials``) are removed after the store commits: each is first renamed to a
    hidden name, so readers never see half a directory.

    Raises:
        ConfigError: an invalid name, or no such topology or state (the message lists those
            that exist); nothing is written.
    """
    with store.transaction():
        found = find_stored_state(store, topology, state)
        statements, dropped, rows = _drop_statements(store, found)
        for sql, params in statements:
            store.execute(sql, params)
    forget = getattr(store, "forget_layouts", None)
    if forget is not None:
        forget()
    removed: list[Path] = []
    for folder in _replica_dirs(found, replica):
        hidden = folder.with_name(f".dropped-{folder.name}-{os.getpid()}")
        folder.rename(hidden)
        shutil.rmtree(hidden)
        removed.append(folder)
    return DroppedState(topology, state, tuple(dropped), tuple(rows), tuple(removed))

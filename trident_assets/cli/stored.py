"""The states of a state file as the read commands name them: by topology and state name.

The replica's counterpart is :mod:`trident_assets.cli.replica` (``find_published``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trident_assets.errors import ConfigError
from trident_assets.names import find_named

if TYPE_CHECKING:
    from trident_assets.backends.map_layout import MapLayout
    from trident_assets.backends.state_store import StateStore

__all__ = ["StateRef", "check_txid", "find_state_or_none", "topologies"]


@dataclass(frozen=True)
class StateRef:
    """One state of a topology, as stored."""

    topology: str
    state: str
    layout: MapLayout


def topologies(store: StateStore) -> dict[str, dict[str, StateRef]]:
    """Return the topologies of a store (commit scopes and map owners) and their states.

    A map table is ``<topology>__<state>``; the longest committed topology name that prefixes
    it owns it, else the part before the first ``__``. A state written through the IO manager
    is its own commit scope: table ``<state>``, listed as topology ``<state>``, state ``<state>``.
    """
    scopes = sorted(store.scopes(), key=len, reverse=True)
    found: dict[str, dict[str, StateRef]] = {name: {} for name in sorted(store.scopes())}
    for table in store.tables():
        owner = next((s for s in scopes if table.startswith(f"{s}__")), None)
        if owner is None and table in scopes:  # a state asset (the IO manager's)
            layout = store.layout(table)
            if layout is not None:
                found[table][table] = StateRef(table, table, layout)
            continue
        if owner is None:
            owner, sep, _ = table.partition("__")
            if not sep:
                continue
        state = table[len(owner) + 2 :]
        layout = store.layout(table)
        if layout is not None and state:
            found.setdefault(owner, {})[state] = StateRef(owner, state, layout)
    return found


def check_txid(store: StateStore, ref: StateRef, txid: int | None) -> None:
    """Refuse reading ``ref`` as of ``txid`` where the store has no exact answer (None: now).

    Raises:
        ConfigError, StateLayoutError, HistoryUnavailableError: see
            :func:`~trident_assets.cli.replica.check_as_of`.
    """
    from trident_assets.cli.replica import check_as_of

    if txid is not None:
        last, plain = store.last_committed(ref.topology), ref.layout.kind == "plain"
        oldest = lambda: store.oldest_readable_txid(ref.layout.table)  # noqa: E731
        check_as_of(ref.topology, ref.state, txid, last, plain=plain, oldest=oldest)


def find_state_or_none(store: StateStore, topology: str, state: str) -> StateRef | None:
    """``topology``'s ``state``, or None when the store holds an event-window ``state`` instead.

    Raises:
        ConfigError: an invalid name, or no such topology or state (the message lists those
            that exist).
    """
    from trident_assets.backends.window_store import stored_windows

    try:
        return find_named(topologies(store), topology, state, f"state file {store.path}")
    except ConfigError:
        if any((w.topology, w.state) == (topology, state) for w in stored_windows(store)):
            return None
        raise

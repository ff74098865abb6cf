"""``trident state get`` / ``scan`` of a state kept in a Redis Cluster or memcached.

Such a state's values are on its servers, which only its declaration (``--module``) names;
they are read latest only: the servers keep no history and no commit marker.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trident_assets.cli.common import Format, code_location, emit, open_state
from trident_assets.errors import ConfigError, TridentError

if TYPE_CHECKING:
    from trident_assets.stream.streams import TridentState

__all__ = ["declared_kv_state", "kv_get", "kv_hint", "kv_hinted", "kv_scan", "largest_first"]


def declared_kv_state(modules: Sequence[str] | None, topology: str, state: str) -> Any:
    """The declared key-value state ``state`` of ``topology`` in ``--module`` ``modules``.

    None when no module is given, the modules do not declare it, or they declare it in the
    topology's store (the usual reads of the home apply).

    Raises:
        ConfigError: a module cannot be found or imported.
    """
    if not modules:
        return None
    from trident_assets.stream.state_kinds import state_kind

    topo = code_location(modules).topologies.get(topology)
    found = None if topo is None else topo.states.get(state)
    if found is None or not state_kind(found.node).in_key_value_store:
        return None
    return found


def _refuse_txid(state: TridentState, txid: int | None) -> None:
    if txid is not None:
        from trident_assets.backends.kv_backing import refuse_as_of
        from trident_assets.backends.kv_target import target_of

        raise refuse_as_of(target_of(state), txid)


def _candidates(text: str) -> list[Any]:
    """A key value typed on the command line: the text, and the JSON number/bool it spells."""
    found: list[Any] = [text]
    try:
        parsed = json.loads(text)
    except ValueError:
        return found
    if isinstance(parsed, int | float | bool):
        found.append(parsed)
    return found


def _columns(state: TridentState) -> list[str]:
    """The columns shown: the key fields (none for a global state) and the value field."""
    return [*state.group, str(state.value_field)]


def kv_get(state: TridentState, key: list[str], txid: int | None, fmt: Format) -> None:
    """Print the latest value of ``key`` (strings typed on the command line) from the servers.

    A value that spells a JSON number or boolean is looked up as that too (one bulk read of
    every reading); each reading stored is printed.

    Raises:
        ConfigError: the key's arity is wrong, or no reading of it is stored.
        KeyValueStoreError: ``txid`` is given (no history), or a server does not answer.
    """
    from trident_assets.backends.kv_backing import current_value, open_backing
    from trident_assets.backends.kv_target import target_of
    from trident_assets.cli.replica import check_key
    from trident_assets.core.caching import GLOBAL_KEY

    _refuse_txid(state, txid)
    group = list(state.group)
    topology, name = state.topology.name, state.spec.name
    if not group and key:
        msg = f"state {name!r} of {topology!r} is global (one value): give no key"
        raise ConfigError(msg)
    if group:
        check_key(topology, name, group, key)
    keys = (
        [GLOBAL_KEY]
        if not group
        else [tuple(k) for k in itertools.product(*(_candidates(v) for v in key))]
    )
    backing = open_backing(target_of(state))
    try:
        found = backing.multi_get(keys)
    finally:
        backing.close()
    rows = [
        {**dict(zip(group, k, strict=True)), str(state.value_field): current_value(v)}
        for k, v in zip(keys, found, strict=True)
        if v is not None
    ]
    if not rows:
        msg = (
            f"key {' '.join(key)!r} is not in {topology}.{name} (read from its servers)"
            if group
            else f"{topology}.{name} has no value on its servers"
        )
        raise ConfigError(msg)
    where = f"{state.spec.store} state {name!r} of topology {topology!r}"
    emit(rows, _columns(state), fmt, f"{topology}.{name} ({where}, latest value)")


def kv_scan(state: TridentState, txid: int | None, limit: int | None, fmt: Format) -> None:
    """Print the state's latest values from its servers, largest first (Redis Cluster only).

    Raises:
        KeyValueStoreError: ``txid`` is given, the store is memcached (it cannot list its
            keys), or a server does not answer.
    """
    from trident_assets.backends.kv_backing import read_latest
    from trident_assets.backends.kv_target import target_of

    _refuse_txid(state, txid)
    value = str(state.value_field)
    data = read_latest(target_of(state), list(state.group), value).to_pylist()
    data.sort(key=lambda r: largest_first(r[value]))
    shown = data[: limit or (20 if fmt is Format.table else len(data))]
    title = (
        f"{state.topology.name}.{state.spec.name}: {len(data)} keys, latest values on its "
        f"{state.spec.store} servers"
    )
    if len(shown) < len(data):
        title += f" (largest {len(shown)} shown)"
    emit(shown, _columns(state), fmt, title)


def largest_first(value: Any) -> tuple[int, float, str]:
    """Sort key of ``scan``: numbers largest first, then other values by their JSON text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, -float(value), "")
    return (1, 0.0, json.dumps(value, default=str, sort_keys=True))


def kv_hint(
    home: Path, database: str | None, wait: float, topology: str, state: str
) -> ConfigError | None:
    """The error for a state the home's store has a contract for but no values of.

    A state kept in a key-value store is such a state (its values are on its servers): the
    command needs ``--module`` to find them. None when the store holds values of the state
    (a map, a join, a window, an event window) or no contract for it.
    """
    from trident_assets.backends.state_drop import stored_states
    from trident_assets.backends.window_store import stored_windows

    try:
        store = open_state(home, database, wait)
    except TridentError:  # no state file, or a writer holds it: the first error stands
        return None
    try:
        found = stored_states(store).get(topology, {}).get(state)
        if found is None or found.kind != "contract only":
            return None
        if any((w.topology, w.state) == (topology, state) for w in stored_windows(store)):
            return None
    finally:
        store.close()
    return ConfigError(
        f"state {state!r} of {topology!r} has a contract but no values in the state file: a "
        "state kept in a key-value store (a RedisClusterState or MemcachedState) has its "
        f"values on its servers, which its declaration names; pass --module MODULE (the code "
        f"location declaring topology {topology!r}, or set TRIDENT_MODULE) to read them"
    )


@contextlib.contextmanager
def kv_hinted(home: Path, database: str | None, topology: str, state: str) -> Iterator[None]:
    """Replace a "no such state" error by :func:`kv_hint`'s where the store has only its contract.

    Used where no declared key-value state was found (no ``--module``, or modules that do not
    declare it). The store is opened once more without waiting: busy, the first error stands.
    """
    try:
        yield
    except ConfigError:
        hint = kv_hint(home, database, 0.0, topology, state)
        if hint is None:
            raise
        raise hint from None

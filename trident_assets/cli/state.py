"""``trident state``: read states (``list``, ``scan``, ``get``), and the commands that change them.

The state file is opened read-only, so reading never blocks another reader; while a writer
(a running batch) holds the file, a read fails at once, or waits ``--wait`` seconds. Errors
name topologies and states, never the DuckDB tables behind them. ``backup``, ``restore``,
``accept-lost-commits``, ``drop`` and ``rebuild`` are in :mod:`trident_assets.cli.state_admin`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trident_assets.cli.common import (
    DEFAULT_HOME,
    DatabaseOption,
    Format,
    FormatOption,
    HomeOption,
    ModulesOption,
    WaitOption,
    cli_errors,
    code_location,
    emit,
    open_state,
)
from trident_assets.cli.kv_state import (
    declared_kv_state,
    kv_get,
    kv_hinted,
    kv_scan,
    largest_first,
)
from trident_assets.cli.replica import StateRef, check_txid, find_state_or_none
from trident_assets.cli.state_admin import ADMIN_COMMANDS
from trident_assets.cli.windows import EventWindows, event_windows_instead
from trident_assets.errors import ConfigError

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore

__all__ = ["state_app"]

state_app = typer.Typer(
    name="state",
    help="Read persisted states; back them up and restore them; drop a state no longer declared.",
    no_args_is_help=True,
)

TxidOption = Annotated[
    int | None,
    typer.Option(
        "--txid", min=1, help="Read the state as it was once this txid committed (default: now)."
    ),
]


def _value(ref: Any, value: Any) -> Any:
    if not isinstance(ref, StateRef):
        return value  # read from the replica: decoded there
    if ref.layout.value_type == "JSON" and isinstance(value, str):
        return json.loads(value)
    return value


MAP_KINDS = ("opaque", "transactional", "plain")


def _list_rows(store: StateStore) -> list[dict[str, Any]]:
    """One row per stored state: map states, joins, windows, event windows, contract-only.

    ``keys``: a map's keys, a join's pending entries, the rows a Trident window's open windows
    hold, an event-window state's windows (final and open).
    """
    from trident_assets.backends.map_layout import quote_ident
    from trident_assets.backends.state_contracts import stored_contracts
    from trident_assets.backends.state_drop import stored_states
    from trident_assets.backends.window_store import stored_windows

    last = store.scopes()
    contracts = {(c.topology, c.state): c for c in stored_contracts(store)}
    windows = {(w.topology, w.state): w for w in stored_windows(store)}
    rows: list[dict[str, Any]] = []
    for states in stored_states(store).values():
        for found in states.values():
            contract = contracts.get((found.topology, found.state))
            layout = store.layout(found.table) if found.kind in MAP_KINDS else None
            window = windows.get((found.topology, found.state))
            kind, value_type = found.kind, contract.value_type if contract is not None else None
            key_columns = ",".join(contract.key_fields) if contract is not None else ""
            keys: int | None = None
            if window is not None and store.has_table(window.table):
                # an event-window state: its windows, open and final
                kind, key_columns = "event_window", ",".join(window.key_fields)
                tables = [window.table] + (
                    [window.finals_table] if store.has_table(window.finals_table) else []
                )
                keys = sum(
                    int(store.fetch_rows(f"SELECT count(*) FROM {quote_ident(t)}")[0][0])
                    for t in tables
                )
            elif layout is not None:
                keys = store.size(found.table)
                key_columns, value_type = ",".join(layout.key_columns), layout.value_type
            elif found.kind in ("single_join", "window"):
                keys = int(
                    store.fetch_rows(f"SELECT count(*) FROM {quote_ident(found.table)}")[0][0]
                )
            row = {
                "topology": found.topology,
                "state": found.state,
                "kind": kind,
                "key_columns": key_columns,
                "value_type": value_type,
                "keys": keys,
                "last_txid": last.get(found.topology),
            }
            if found.table == found.topology:  # a state asset: declared by no topology
                row["orphaned"] = STATE_ASSET
            rows.append(row)
    return rows


STATE_ASSET = "n/a (asset)"
"""``orphaned`` of a state written through the IO manager: a Dagster asset declares it."""


@state_app.command("list")
def state_list(
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    fmt: FormatOption = Format.table,
    wait: WaitOption = 0.0,
    module: ModulesOption = None,
) -> None:
    """List topologies and their states: kind, key columns, key count, last txid, orphaned.

    A stored state that no topology of code location --module declares is ``orphaned``
    (renamed or removed from its declaration); `trident state drop` removes it. Without
    --module (or TRIDENT_MODULE), the built-in examples only vouch for the topologies they
    declare: the states of any other topology are ``unknown``. A state written through the IO
    manager is listed as topology and state of its name, orphaned ``n/a (asset)``.
    """
    with cli_errors():
        with open_state(home, database, wait) as store:
            rows = _list_rows(store)
        location = code_location(module)
    declared = location.declared_states()
    orphans: list[str] = []
    unknown: list[str] = []
    for row in rows:
        if row.get("orphaned") == STATE_ASSET:
            continue
        states = declared.get(row["topology"])
        if states is None and not location.given:
            row["orphaned"] = "unknown"
            unknown.append(row["topology"])
            continue
        orphaned = row["state"] not in (states or set())
        row["orphaned"] = "yes" if orphaned else "no"
        if orphaned:
            orphans.append(f"{row['topology']}.{row['state']}")
    columns = [
        "topology", "state", "kind", "key_columns", "value_type", "keys", "last_txid", "orphaned"
    ]  # fmt: skip
    emit(rows, columns, fmt, f"states in {store.path}")
    if orphans:
        typer.echo(
            f"orphaned (declared by no topology in {location.where}): {', '.join(orphans)}. "
            "Remove one with `trident state drop TOPOLOGY STATE`, or pass --module with the "
            "module that declares it",
            err=True,
        )
    if unknown:
        names = list(dict.fromkeys(unknown))
        which = f"topolog{'y' if len(names) == 1 else 'ies'} {', '.join(names)}"
        typer.echo(
            f"orphaned unknown: cannot tell whether the states of {which} are still declared "
            f"(no --module given; the built-in examples, {location.where}, do not declare "
            f"{'it' if len(names) == 1 else 'them'}). Pass --module MODULE (or set "
            "TRIDENT_MODULE) with the code location that declares them",
            err=True,
        )


@state_app.command("scan")
def state_scan(
    topology: Annotated[str, typer.Argument(help="Topology name, e.g. word_count.")],
    state: Annotated[str, typer.Argument(help="State name, e.g. word_counts.")],
    txid: TxidOption = None,
    limit: Annotated[
        int | None,
        typer.Option(help="Rows to show (default: 20 in a table, all in json/csv).", min=1),
    ] = None,
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    fmt: FormatOption = Format.table,
    wait: WaitOption = 0.0,
    modules: ModulesOption = None,
) -> None:
    """Print TOPOLOGY's STATE, largest values first, with the txid it is read at.

    Reads the home's replica (lock-free: never waits for or holds up a running batch) when
    it has one, else the state file read-only. A state kept in a Redis Cluster is read from
    its servers (latest values), found through --module (memcached cannot list its keys).
    """
    with cli_errors():
        kv = declared_kv_state(modules, topology, state)
        if kv is not None:
            kv_scan(kv, txid, limit, fmt)
            return
    with cli_errors(), kv_hinted(home, database, topology, state):
        found = _read(home, database, wait, topology, state, txid)
        if isinstance(found, EventWindows):
            found.emit(limit or (20 if fmt is Format.table else None), fmt)
            return
    ref, data, at, replica = found
    rows = [{**r, "value": _value(ref, r["value"])} for r in data.to_pylist()]
    rows.sort(key=lambda r: largest_first(r["value"]))
    shown = rows[: limit or (20 if fmt is Format.table else len(rows))]
    when = f"as of txid {txid}" if txid is not None else f"last committed txid {at}"
    title = f"{topology}.{state}: {len(rows)} keys, {when}"
    if len(shown) < len(rows):
        title += f" (largest {len(shown)} shown)"
    _emit_state(shown, data.column_names, ref, _namer(home, database, replica), fmt, title)


def _read(
    home: Path,
    database: str | None,
    wait: float,
    topology: str,
    state: str,
    txid: int | None,
    key: list[str] | None = None,
) -> tuple[Any, Any, int | None, Any] | EventWindows:
    """``state`` as of ``txid``: ``(ref, rows, txid read at, replica)``, or its windows.

    ``key``: only its rows (``[]``: a global state's value). Replica first, else the file.
    """
    from trident_assets.cli.replica import check_key, home_replica, published_states, read_state
    from trident_assets.core.caching import GLOBAL_KEY
    from trident_assets.names import find_named

    wanted = None if key is None else key or list(GLOBAL_KEY)
    replica = home_replica(home, database)
    if replica is not None:
        try:
            ref: Any = find_named(published_states(replica), topology, state, str(replica.root))
        except ConfigError:
            return event_windows_instead(home, database, wait, topology, state, txid)
        if key == [] and not ref.is_global:
            raise _not_global(topology, state, ref.key_columns)
        data, at = read_state(replica, ref, txid, wanted)
        return ref, data, at, replica
    with open_state(home, database, wait) as store:
        ref = find_state_or_none(store, topology, state)
        if ref is not None:
            if key == [] and ref.layout.arity != 1:
                raise _not_global(topology, state, ref.layout.key_columns)
            check_txid(store, ref, txid)
            if wanted is not None:
                check_key(topology, state, ref.layout.key_columns, wanted)
            data = store.scan(ref.layout.table, as_of=txid, key=wanted)
            if key == [] and data.num_rows == 0 and txid is None:
                raise _not_global(topology, state, ref.layout.key_columns)
            at = txid if txid is not None else store.last_committed(topology)
    if ref is None:
        return event_windows_instead(home, database, wait, topology, state, txid)
    return ref, data, at, None


def _namer(home: Path, database: str | None, replica: Any) -> Any:
    """The replica naming a state's value field: the one read, else the home's (if any)."""
    from trident_assets.backends.replica import Replica

    if replica is not None or database is not None:
        return replica
    return Replica(home / "replica")


def _emit_state(
    rows: list[dict[str, Any]],
    columns: list[str],
    ref: Any,
    replica: Any,
    fmt: Format,
    title: str,
) -> None:
    """Print a state's rows: ``value`` under the state's value field, no internal global key.

    ``replica``: the home's replica, which names the value field (``value`` without one).
    """
    from trident_assets.cli.replica import hide_global_key, value_name

    table = ref.layout.table if isinstance(ref, StateRef) else ref.table
    name = value_name(replica, table)
    keys = hide_global_key(rows, [c for c in columns if c != "value"])
    if name in keys:
        name = "value"
    shown = [{**{k: r[k] for k in keys}, name: r["value"]} for r in rows]
    emit(shown, [*keys, name], fmt, title)


@state_app.command("get")
def state_get(
    topology: Annotated[str, typer.Argument(help="Topology name, e.g. word_count.")],
    state: Annotated[str, typer.Argument(help="State name, e.g. word_counts.")],
    key: Annotated[
        list[str] | None,
        typer.Argument(help="The key's values (one per key column); none for a global state."),
    ] = None,
    txid: TxidOption = None,
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    fmt: FormatOption = Format.table,
    wait: WaitOption = 0.0,
    modules: ModulesOption = None,
) -> None:
    """Print the value of KEY in TOPOLOGY's STATE (now, or as of --txid); exit 1 if absent.

    A global state (an aggregate without group_by) has one value: give no KEY. Reads the
    home's replica when it has one (lock-free), else the state file read-only. A state kept
    in a Redis Cluster or memcached is read from its servers (latest value), found through
    --module.
    """
    omitted = not key
    with cli_errors():
        kv = declared_kv_state(modules, topology, state)
        if kv is not None:
            kv_get(kv, key or [], txid, fmt)
            return
    with cli_errors(), kv_hinted(home, database, topology, state):
        found = _read(home, database, wait, topology, state, txid, key or [])
        if isinstance(found, EventWindows):
            found.emit_key(key or [], fmt)
            return
        ref, data, _, replica = found
        if data.num_rows == 0:
            at = f" as of txid {txid}" if txid is not None else ""
            if omitted:
                msg = f"{topology}.{state} has no value{at}"
            else:
                msg = f"key {' '.join(key)!r} is not in {topology}.{state}{at}"
            raise ConfigError(msg)
    rows = [{**r, "value": _value(ref, r["value"])} for r in data.to_pylist()]
    _emit_state(
        rows, data.column_names, ref, _namer(home, database, replica), fmt, f"{topology}.{state}"
    )


def _not_global(topology: str, state: str, key_columns: Any) -> ConfigError:
    """The error for a KEY left out of ``state get`` on a keyed (not global) state."""
    msg = (
        f"state {state!r} of {topology!r} is keyed by {', '.join(key_columns)}: give one value "
        f"per key column, e.g. `trident state get {topology} {state} VALUE`"
    )
    return ConfigError(msg)


for _name, _command in ADMIN_COMMANDS.items():
    state_app.command(_name)(_command)

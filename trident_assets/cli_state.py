"""``trident state list|scan|get|backup|restore|accept-lost-commits|drop``: read, back up states.

The state file is opened read-only, so reading never blocks another reader; while a writer
(a running batch) holds the file, a read fails at once, or waits ``--wait`` seconds. Errors
name topologies and states, never the DuckDB tables behind them. ``backup`` and ``restore``
are :mod:`trident_assets.backends.backup` (a checkpoint and a copy under the file's lock).
``drop`` removes one state no longer declared (:mod:`trident_assets.backends.state_drop`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trident_assets.cli_common import (
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
    refuse_dsn,
    require_home,
    state_path,
)
from trident_assets.errors import ConfigError, HistoryUnavailableError, StateLayoutError
from trident_assets.names import validate_identifier

if TYPE_CHECKING:
    from trident_assets.backends.map_layout import MapLayout
    from trident_assets.backends.state_store import StateStore

__all__ = ["StateRef", "find_state", "state_app", "topologies"]

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


@dataclass(frozen=True)
class StateRef:
    """One state of a topology, as stored."""

    topology: str
    state: str
    layout: MapLayout


def topologies(store: StateStore) -> dict[str, dict[str, StateRef]]:
    """Return the topologies of a store (commit scopes and map owners) and their states.

    A map table is ``<topology>__<state>``; the longest committed topology name that prefixes
    it owns it, else the part before the first ``__``.
    """
    scopes = sorted(store.scopes(), key=len, reverse=True)
    found: dict[str, dict[str, StateRef]] = {name: {} for name in sorted(store.scopes())}
    for table in store.tables():
        owner = next((s for s in scopes if table.startswith(f"{s}__")), None)
        if owner is None:
            owner, sep, _ = table.partition("__")
            if not sep:
                continue
        state = table[len(owner) + 2 :]
        layout = store.layout(table)
        if layout is not None and state:
            found.setdefault(owner, {})[state] = StateRef(owner, state, layout)
    return found


def find_state(store: StateStore, topology: str, state: str) -> StateRef:
    """Return ``topology``'s ``state``.

    Raises:
        ConfigError: an invalid name, or no such topology or state (the message lists those
            that exist).
    """
    validate_identifier(topology, "topology")
    validate_identifier(state, "state")
    known = topologies(store)
    if topology not in known:
        names = ", ".join(sorted(known)) or "none yet"
        msg = f"no topology {topology!r} in state file {store.path}; topologies: {names}"
        raise ConfigError(msg)
    states = known[topology]
    if state not in states:
        names = ", ".join(sorted(states)) or "none"
        msg = f"topology {topology!r} has no state {state!r}; its states: {names}"
        raise ConfigError(msg)
    return states[state]


def _check_txid(store: StateStore, ref: StateRef, txid: int | None) -> None:
    """Refuse an as-of read the store cannot answer exactly, in the user's names."""
    if txid is None:
        return
    last = store.last_committed(ref.topology)
    if last is None or txid > last:
        done = "nothing is committed yet" if last is None else f"the last committed txid is {last}"
        msg = f"txid {txid} of topology {ref.topology!r} is not committed: {done}"
        raise ConfigError(msg)
    if ref.layout.kind == "plain":
        msg = (
            f"state {ref.state!r} of {ref.topology!r} is non-transactional: it stores no "
            "txids, so it cannot be read as of a txid (drop --txid)"
        )
        raise StateLayoutError(msg)
    oldest = store.oldest_readable_txid(ref.layout.table)
    if oldest is not None and txid < oldest:
        msg = (
            f"state {ref.state!r} of {ref.topology!r} cannot be read as of txid {txid}: "
            f"compaction removed the versions it needs; the oldest txid that can still be "
            f"read is {oldest}"
        )
        raise HistoryUnavailableError(msg)


def _value(ref: Any, value: Any) -> Any:
    if not isinstance(ref, StateRef):
        return value  # read from the replica: decoded there
    if ref.layout.value_type == "JSON" and isinstance(value, str):
        return json.loads(value)
    return value


def _largest_first(row: dict[str, Any]) -> tuple[int, float, str]:
    value = row["value"]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, -float(value), "")
    return (1, 0.0, json.dumps(value, default=str, sort_keys=True))


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
            if window is not None and store.has_table(window.table):
                # an event-window state: its windows, open and final
                tables = [window.table] + (
                    [window.finals_table] if store.has_table(window.finals_table) else []
                )
                keys = sum(
                    int(store.fetch_rows(f"SELECT count(*) FROM {quote_ident(t)}")[0][0])
                    for t in tables
                )
                rows.append(
                    {
                        "topology": found.topology,
                        "state": found.state,
                        "kind": "event_window",
                        "key_columns": ",".join(window.key_fields),
                        "value_type": contract.value_type if contract is not None else None,
                        "keys": keys,
                        "last_txid": last.get(found.topology),
                    }
                )
                continue
            if layout is not None:
                keys: int | None = store.size(found.table)
                key_columns, value_type = ",".join(layout.key_columns), layout.value_type
            else:
                keys = (
                    int(store.fetch_rows(f"SELECT count(*) FROM {quote_ident(found.table)}")[0][0])
                    if found.kind in ("single_join", "window")
                    else None
                )
                key_columns = ",".join(contract.key_fields) if contract is not None else ""
                value_type = contract.value_type if contract is not None else None
            rows.append(
                {
                    "topology": found.topology,
                    "state": found.state,
                    "kind": found.kind,
                    "key_columns": key_columns,
                    "value_type": value_type,
                    "keys": keys,
                    "last_txid": last.get(found.topology),
                }
            )
    return rows


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
    declare: the states of any other topology are ``unknown``.
    """
    with cli_errors():
        store = open_state(home, database, wait)
        try:
            rows = _list_rows(store)
        finally:
            store.close()
        location = code_location(module)
    declared = location.declared_states()
    orphans: list[str] = []
    unknown: list[str] = []
    for row in rows:
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
) -> None:
    """Print TOPOLOGY's STATE, largest values first, with the txid it is read at.

    Reads the home's replica (lock-free: never waits for or holds up a running batch) when
    it has one, else the state file read-only.
    """
    from trident_assets.cli_replica import find_published, home_replica, read_state

    with cli_errors():
        replica = home_replica(home, database)
        windows = None
        if replica is not None:
            try:
                ref: Any = find_published(replica, topology, state)
            except ConfigError:
                windows = _event_windows_instead(home, database, wait, topology, state, txid)
            else:
                data, at = read_state(replica, ref, txid)
        else:
            store = open_state(home, database, wait)
            try:
                ref = _find_state_or_none(store, topology, state)
                if ref is not None:
                    _check_txid(store, ref, txid)
                    data = store.scan(ref.layout.table, as_of=txid)
                    at = txid if txid is not None else store.last_committed(topology)
            finally:
                store.close()
            if ref is None:
                windows = _event_windows_instead(home, database, wait, topology, state, txid)
        if windows is not None:
            windows.emit(limit or (20 if fmt is Format.table else None), fmt)
            return
    rows = [{**r, "value": _value(ref, r["value"])} for r in data.to_pylist()]
    rows.sort(key=_largest_first)
    shown = rows[: limit or (20 if fmt is Format.table else len(rows))]
    when = f"as of txid {txid}" if txid is not None else f"last committed txid {at}"
    title = f"{topology}.{state}: {len(rows)} keys, {when}"
    if len(shown) < len(rows):
        title += f" (largest {len(shown)} shown)"
    _emit_state(shown, data.column_names, ref, _namer(home, database, replica), fmt, title)


@dataclass(frozen=True)
class _EventWindows:
    """An event-window state's windows as read from the store: final ones, then open ones."""

    topology: str
    state: str
    key_fields: tuple[str, ...]
    value: str
    rows: list[dict[str, Any]]
    """Key fields, window_start, window_end, the value, ``final``, ``final_txid``."""
    finals: int
    txid: int | None
    last: int | None

    @property
    def columns(self) -> list[str]:
        """The columns printed."""
        return [*self.key_fields, "window_start", "window_end", self.value, "final", "final_txid"]

    def _title(self, rows: list[dict[str, Any]], shown: int) -> str:
        finals = sum(1 for r in rows if r["final"])
        if self.txid is not None:
            title = (
                f"{self.topology}.{self.state}: {finals} final windows as of txid {self.txid} "
                "(open windows are shown without --txid only)"
            )
        else:
            title = (
                f"{self.topology}.{self.state}: {finals} final windows, {len(rows) - finals} "
                f"open (not final yet: their values may still change), last committed txid "
                f"{self.last}"
            )
        if shown < len(rows):
            title += f" ({shown} shown)"
        return title

    def emit(self, limit: int | None, fmt: Format) -> None:
        """Print the windows (the first ``limit``; None: all)."""
        shown = self.rows[:limit] if limit is not None else self.rows
        emit(shown, self.columns, fmt, self._title(self.rows, len(shown)))

    def emit_key(self, key: list[str], fmt: Format) -> None:
        """Print the windows of ``key`` (one value per key field).

        Raises:
            ConfigError: the wrong number of values, or the key has no window.
        """
        if len(key) != len(self.key_fields):
            msg = (
                f"state {self.state!r} of {self.topology!r} has {len(self.key_fields)} key "
                f"column(s) ({', '.join(self.key_fields)}); got {len(key)} value(s): {key}"
            )
            raise ConfigError(msg)
        rows = [
            r
            for r in self.rows
            if all(str(r[f]) == v for f, v in zip(self.key_fields, key, strict=True))
        ]
        if not rows:
            at = f" as of txid {self.txid}" if self.txid is not None else ""
            msg = f"key {' '.join(key)!r} has no window in {self.topology}.{self.state}{at}"
            raise ConfigError(msg)
        emit(rows, self.columns, fmt, self._title(rows, len(rows)))


def _find_state_or_none(store: StateStore, topology: str, state: str) -> StateRef | None:
    """:func:`find_state`, or None when the store holds an event-window ``state`` instead."""
    from trident_assets.backends.window_store import stored_windows

    try:
        return find_state(store, topology, state)
    except ConfigError:
        if any((w.topology, w.state) == (topology, state) for w in stored_windows(store)):
            return None
        raise


def _event_windows_instead(
    home: Path, database: str | None, wait: float, topology: str, state: str, txid: int | None
) -> _EventWindows:
    """``state`` is no map state: read it as an event-window state, else re-raise the error.

    Call in the ``except`` of the failed lookup, or after :func:`_find_state_or_none` found
    an event window. With a replica, the store is opened only if the replica publishes
    ``state``'s finals (so a misspelt name never waits for a running batch).
    """
    import sys

    from trident_assets.cli_replica import home_replica

    failed = sys.exc_info()[1]
    replica = home_replica(home, database)
    if replica is not None:
        try:
            replica.appended_files(f"{topology}__{state}__finals", topology)
        except (ConfigError, StateLayoutError):
            if failed is not None:
                raise failed from None
            raise
    windows = _event_windows(home, database, wait, topology, state, txid)
    if windows is None:
        if failed is not None:
            raise failed
        msg = f"topology {topology!r} has no state {state!r}"
        raise ConfigError(msg)
    return windows


def _event_windows(
    home: Path,
    database: str | None,
    wait: float,
    topology: str,
    state: str,
    txid: int | None,
) -> _EventWindows | None:
    """``topology``'s event-window ``state`` read from the state store; None if it has none.

    The open windows live in the state store only (the replica publishes the finals), so
    both are read from the store, read-only. With ``txid``: the windows final once it
    committed.

    Raises:
        ConfigError: ``txid`` is not committed.
    """
    from trident_assets.backends.window_store import read_finals, read_open, stored_windows

    validate_identifier(topology, "topology")
    validate_identifier(state, "state")
    store = open_state(home, database, wait)
    try:
        found = next(
            (w for w in stored_windows(store) if (w.topology, w.state) == (topology, state)),
            None,
        )
        if found is None:
            return None
        last = store.last_committed(topology)
        if txid is not None and (last is None or txid > last):
            done = "nothing is committed yet" if last is None else f"the last is {last}"
            msg = f"txid {txid} of topology {topology!r} is not committed: {done}"
            raise ConfigError(msg)
        finals = read_finals(store, found)
        opened = read_open(store, found) if txid is None else []
    finally:
        store.close()
    if txid is not None:
        finals = [r for r in finals if r["final_txid"] <= txid]
    fixed = {*found.key_fields, "window_start", "window_end", "final_txid", "txid", "final"}
    sample = finals[0] if finals else opened[0] if opened else {}
    value = next((c for c in sample if c not in fixed), "value")
    rows = [{**r, "final": True} for r in finals]
    rows += [{**r, "final": False, "final_txid": None} for r in opened]
    order = [*found.key_fields, "window_start"]
    rows.sort(key=lambda r: tuple((r[c] is None, r[c]) for c in order))
    return _EventWindows(topology, state, found.key_fields, value, rows, len(finals), txid, last)


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
    from trident_assets.cli_replica import hide_global_key, value_name

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
) -> None:
    """Print the value of KEY in TOPOLOGY's STATE (now, or as of --txid); exit 1 if absent.

    A global state (an aggregate without group_by) has one value: give no KEY. Reads the
    home's replica when it has one (lock-free), else the state file read-only.
    """
    from trident_assets.cli_replica import find_published, home_replica, read_state
    from trident_assets.core.caching import GLOBAL_KEY

    omitted = not key
    with cli_errors():
        replica = home_replica(home, database)
        try:
            published = find_published(replica, topology, state) if replica else None
        except ConfigError:
            windows = _event_windows_instead(home, database, wait, topology, state, txid)
            windows.emit_key(key or [], fmt)
            return
        if replica is not None:
            ref: Any = published
            if omitted and not ref.is_global:
                raise _not_global(topology, state, ref.key_columns)
            key = key or list(GLOBAL_KEY)
            data, _ = read_state(replica, ref, txid, key)
        else:
            store = open_state(home, database, wait)
            try:
                ref = _find_state_or_none(store, topology, state)
                if ref is None:
                    store.close()
                    windows = _event_windows_instead(home, database, wait, topology, state, txid)
                    windows.emit_key(key or [], fmt)
                    return
                if omitted and ref.layout.arity != 1:
                    raise _not_global(topology, state, ref.layout.key_columns)
                key = key or list(GLOBAL_KEY)
                _check_txid(store, ref, txid)
                if len(key) != ref.layout.arity:
                    msg = (
                        f"state {state!r} of {topology!r} has {ref.layout.arity} key column(s) "
                        f"({', '.join(ref.layout.key_columns)}); got {len(key)} value(s): {key}"
                    )
                    raise ConfigError(msg)
                data = store.scan(ref.layout.table, as_of=txid, key=key)
                if omitted and data.num_rows == 0 and txid is None:
                    raise _not_global(topology, state, ref.layout.key_columns)
            finally:
                store.close()
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


LockWaitOption = Annotated[
    float,
    typer.Option(
        "--wait",
        help="Seconds to wait while another process (a running batch) holds the state file.",
        min=0,
    ),
]


def _at(scopes: dict[str, int]) -> str:
    return ", ".join(f"{name} at txid {txid}" for name, txid in scopes.items()) or "no commits"


@state_app.command("backup")
def state_backup(
    dest: Annotated[Path, typer.Argument(help="The backup file to write (must not exist).")],
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    wait: LockWaitOption = 30.0,
) -> None:
    """Copy the state file to DEST consistently, even while batches run (checkpoint + copy).

    The copy is taken under the state file's lock, so it is the state after one committed
    txid per topology; a batch that wants the file meanwhile waits for the copy.
    """
    from trident_assets.backends.backup import backup_state

    with cli_errors():
        info = backup_state(state_path(home, database), dest, lock_timeout_s=wait)
    typer.echo(
        f"backed up {state_path(home, database)} to {info.path}: {info.size} bytes in "
        f"{info.seconds:.2f}s; {_at(info.scopes)}"
    )


@state_app.command("restore")
def state_restore(
    src: Annotated[Path, typer.Argument(help="A backup written by `trident state backup`.")],
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing state file (moved aside).")
    ] = False,
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    wait: LockWaitOption = 30.0,
) -> None:
    """Make backup SRC the state file; the read replica (<home>/replica) is rebuilt from it.

    An existing state file is refused unless --force; with --force it is moved aside as
    <file>.before-restore-<time>, never deleted. Batches then resume from the backup's txids.
    """
    from trident_assets.backends.backup import restore_state

    with cli_errors():
        refuse_dsn(database)
        target = Path(database) if database is not None else require_home(home) / "state.duckdb"
        own = database is None or target.resolve() == (home / "state.duckdb").resolve()
        replica = home / "replica" if own and home.is_dir() else None
        info = restore_state(src, target, force=force, replica=replica, lock_timeout_s=wait)
    typer.echo(f"restored {src} to {target}: {info.size} bytes; {_at(info.scopes)}")
    for aside in info.moved_aside:
        typer.echo(f"  moved aside: {aside}")
    if replica is not None:
        typer.echo(f"  rebuilt the read replica {replica}")


@state_app.command("accept-lost-commits")
def state_accept_lost_commits(
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    wait: LockWaitOption = 30.0,
) -> None:
    """Accept that the state file lost committed txids (a torn or deleted write-ahead log).

    The store refuses to open while its file is behind its commit marker file
    (<file>.commits). This makes the database's txids the committed ones: the lost txids run
    again with the next batches. Restoring a backup (`trident state restore`) is the
    alternative that keeps them.
    """
    from trident_assets.backends.backup import accept_lost_commits
    from trident_assets.backends.marker_file import lost_txids

    with cli_errors():
        refuse_dsn(database)
        path = state_path(home, database)
        lost = accept_lost_commits(path, lock_timeout_s=wait)
    if not lost:
        typer.echo(f"state file {path} lost no committed txid; nothing changed")
        return
    for topology, (db, txid) in lost.items():
        typer.echo(
            f"{topology}: accepted the loss of {lost_txids((db, txid))}; the state is at "
            f"{'no txid' if db is None else f'txid {db}'}, txid {(db or 0) + 1} runs next"
        )


def _home_replica_root(home: Path, database: str | None) -> Path | None:
    """The replica a drop must update: ``<home>/replica`` of the home's own store, if any.

    The home's own store is its state file or a PostgreSQL DSN (runs over a
    ``state_dsn`` publish to the home's replica too); another DuckDB file has none.
    """
    from trident_assets.backends.postgres_config import is_postgres_dsn

    root = home / "replica"
    if not root.is_dir():
        return None
    if database is None or is_postgres_dsn(database):
        return root
    own = home / "state.duckdb"
    return root if own.exists() and Path(database).resolve() == own.resolve() else None


@state_app.command("drop")
def state_drop(
    topology: Annotated[str, typer.Argument(help="Topology name, e.g. word_count.")],
    state: Annotated[str, typer.Argument(help="State name, e.g. word_counts.")],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Drop without asking for confirmation.")
    ] = False,
    module: ModulesOption = None,
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    wait: LockWaitOption = 30.0,
) -> None:
    """Drop TOPOLOGY's STATE: its tables, contract and replica copy, in one transaction.

    Refused while a topology of code location --module still declares the state (remove it
    from the declaration first: a run would otherwise recreate it). The topology's committed
    txids, spout offsets and other states are untouched. Asks for confirmation unless --yes.
    Declaring the state again later makes a new state.
    """
    from trident_assets.backends.replica import Replica
    from trident_assets.backends.state_drop import drop_state, plan_drop

    with cli_errors():
        root = _home_replica_root(home, database)
        replica = Replica(root) if root is not None else None
        store = open_state(home, database, wait)
        try:
            plan = plan_drop(store, topology, state, replica=replica)
        finally:
            store.close()
        location = code_location(module)
        declared = location.declared_states()
        if topology not in declared and not location.given:
            msg = (
                f"cannot tell whether state {state!r} of topology {topology!r} is still "
                f"declared: no code location was given and the built-in examples "
                f"({location.where}) do not declare topology {topology!r}. Nothing was "
                "dropped. Pass --module MODULE (or set TRIDENT_MODULE) with the code location "
                "that declares the topology"
            )
            raise ConfigError(msg)
        if state in declared.get(topology, set()):
            msg = (
                f"state {state!r} of topology {topology!r} is still declared in "
                f"{location.where}: "
                "its next run would create it again, as a new state. Nothing was "
                "dropped. Remove the state from the topology's declaration first (or pass "
                "--module with the code location that no longer declares it)"
            )
            raise ConfigError(msg)
        copies = ", ".join(map(str, plan.replica_dirs))
        where = f"; replica copies: {copies}" if copies else ""
        summary = (
            f"state {state} of topology {topology} in {store.path}: tables "
            f"{', '.join(plan.tables) or 'none'}; rows in {', '.join(plan.rows) or 'none'}"
            f"{where}"
        )
        if not yes:
            typer.echo(f"This drops {summary}.")
            typer.echo("Its values cannot be recovered (`trident state backup` keeps a copy).")
            try:
                confirmed = typer.confirm("Drop it?", default=False)
            except typer.Abort:  # no answer (end of input): end the prompt's line
                typer.echo()
                confirmed = False
            if not confirmed:
                msg = "not confirmed: nothing was dropped (pass --yes to drop without asking)"
                raise ConfigError(msg)
        store = open_state(home, database, wait, read_only=False)
        try:
            done = drop_state(store, topology, state, replica=replica)
        finally:
            store.close()
    typer.echo(f"dropped state {state} of topology {topology} from {store.path}")
    typer.echo(f"  tables: {', '.join(done.tables) or 'none'}")
    typer.echo(f"  rows in: {', '.join(done.rows) or 'none'}")
    for folder in done.replica_dirs:
        typer.echo(f"  replica: removed {folder}")


@state_app.command("rebuild")
def state_rebuild(
    topology: Annotated[str, typer.Argument(help="Topology name.")],
    state: Annotated[str, typer.Argument(help="State name (a persistent_aggregate).")],
    home: HomeOption = DEFAULT_HOME,
    module: ModulesOption = None,
    database: DatabaseOption = None,
    leave_dependents: Annotated[
        bool,
        typer.Option(
            "--leave-dependents",
            help="Rebuild even though other states were computed from this one's values "
            "(a state query or its new values); they keep their values.",
        ),
    ] = False,
) -> None:
    """Recompute STATE from the log of every committed txid and swap it in atomically.

    For a state whose values a bug made wrong: fix the code (give the aggregator a new
    ``version`` if its meaning changed), then rebuild. The state is recomputed as the
    --module code location(s) declare it, into a shadow table, then replaces the stored one
    in one transaction; readers see the old values or the new ones. Other states are
    untouched: a rebuild is refused when other states were computed from this one's values,
    unless --leave-dependents. Run it while the topology is stopped (it takes the state
    file's write lock).
    """
    import os

    from trident_assets.backends.postgres_config import is_postgres_dsn
    from trident_assets.cli_quarantine import LOG_FILE
    from trident_assets.console import engine_logs_to
    from trident_assets.dagster.resources import TridentResource
    from trident_assets.spark.rebuild import rebuild_state

    with cli_errors():
        require_home(home)
        os.environ.setdefault("TRIDENT_HOME", str(home))
        topo = code_location(module).topology(topology)
        if database is not None and is_postgres_dsn(database):  # rebuild_state refuses it
            trident = TridentResource(home=str(home), state_dsn=database)
        else:
            trident = TridentResource(home=str(home), state_database=database)
        with engine_logs_to(home / LOG_FILE, verbose=False), trident.store() as store:
            done = rebuild_state(
                topo,
                state,
                trident.spark(),
                store,
                trident.log(),
                replica=trident.replica(),
                leave_dependents=leave_dependents,
            )
    typer.echo(
        f"state {state} of {topology} rebuilt from txids {done.first_txid}..{done.last_txid}: "
        f"{done.keys} keys"
    )

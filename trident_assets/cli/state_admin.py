"""``trident state backup|restore|accept-lost-commits|drop|rebuild``: change a state file.

Registered on ``trident state`` by :mod:`trident_assets.cli.state`, in :data:`ADMIN_COMMANDS`'
order.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from trident_assets.cli.common import (
    DEFAULT_HOME,
    DatabaseOption,
    HomeOption,
    ModulesOption,
    WaitOption,
    cli_errors,
    code_location,
    open_state,
    refuse_dsn,
    require_home,
    state_path,
)
from trident_assets.errors import ConfigError

__all__ = ["ADMIN_COMMANDS"]


def _at(scopes: dict[str, int]) -> str:
    return ", ".join(f"{name} at txid {txid}" for name, txid in scopes.items()) or "no commits"


def state_backup(
    dest: Annotated[Path, typer.Argument(help="The backup file to write (must not exist).")],
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    wait: WaitOption = 30.0,
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


def state_restore(
    src: Annotated[Path, typer.Argument(help="A backup written by `trident state backup`.")],
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing state file (moved aside).")
    ] = False,
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    wait: WaitOption = 30.0,
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


def state_accept_lost_commits(
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    wait: WaitOption = 30.0,
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
        path = state_path(home, database)  # refuses a PostgreSQL DSN
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


def state_drop(
    topology: Annotated[str, typer.Argument(help="Topology name, e.g. word_count.")],
    state: Annotated[str, typer.Argument(help="State name, e.g. word_counts.")],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Drop without asking for confirmation.")
    ] = False,
    module: ModulesOption = None,
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    wait: WaitOption = 30.0,
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
        with open_state(home, database, wait) as store:
            plan = plan_drop(store, topology, state, replica=replica)
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
        with open_state(home, database, wait, read_only=False) as store:
            done = drop_state(store, topology, state, replica=replica)
    typer.echo(f"dropped state {state} of topology {topology} from {store.path}")
    typer.echo(f"  tables: {', '.join(done.tables) or 'none'}")
    typer.echo(f"  rows in: {', '.join(done.rows) or 'none'}")
    for folder in done.replica_dirs:
        typer.echo(f"  replica: removed {folder}")


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
    from trident_assets.cli.quarantine import home_runtime

    with cli_errors(), home_runtime(home, topology, module, database) as (topo, trident, store):
        from trident_assets.spark.rebuild import rebuild_state  # it refuses a PostgreSQL store

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


ADMIN_COMMANDS: dict[str, Callable[..., Any]] = {
    "backup": state_backup,
    "restore": state_restore,
    "accept-lost-commits": state_accept_lost_commits,
    "drop": state_drop,
    "rebuild": state_rebuild,
}
"""The commands of ``trident state`` that change a state file, by name."""

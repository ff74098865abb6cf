"""What every ``trident`` command shares: ``--home``, ``--format``, the error style, state access.

Errors: a :class:`~trident_assets.errors.TridentError` (bad input, a missing home, topology or
state, a locked or foreign state file) is printed as one ``error: ...`` line on stderr and
exits 1; typer's usage errors (unknown option, missing argument, bad value) exit 2. Commands
that read never create anything: a missing home is an error, not a new directory.
"""

from __future__ import annotations

import csv
import enum
import json
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from trident_assets.errors import ConfigError, StoreLockedError, TridentError

__all__ = [
    "DEFAULT_HOME",
    "DatabaseOption",
    "Format",
    "FormatOption",
    "HomeOption",
    "WaitOption",
    "cli_errors",
    "emit",
    "open_state",
    "refuse_dsn",
    "require_home",
    "state_path",
]

DEFAULT_HOME = Path(".trident")
"""The default trident home (``TRIDENT_HOME``): the log, the state and the demo's instance."""

HomeOption = Annotated[
    Path,
    typer.Option(
        "--home",
        envvar="TRIDENT_HOME",
        help="trident home: the log in <home>/log, the state in <home>/state.duckdb.",
        file_okay=False,
    ),
]
DatabaseOption = Annotated[
    str | None,
    typer.Option(
        "--database",
        help="The state store: a DuckDB file (default: <home>/state.duckdb) or a "
        "postgresql:// DSN (TridentResource's state_dsn).",
    ),
]
WaitOption = Annotated[
    float,
    typer.Option(
        "--wait",
        help="Seconds to wait while another process (a running batch) holds the state file.",
        min=0,
    ),
]


class Format(enum.StrEnum):
    """How a command prints rows: a table for people, JSON or CSV for scripts."""

    table = "table"
    json = "json"
    csv = "csv"


FormatOption = Annotated[
    Format,
    typer.Option(
        "--format", help="table (for people), json (an array of objects) or csv (with a header)."
    ),
]


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn a :class:`TridentError` into ``error: <message>`` on stderr and exit code 1.

    A DuckDB I/O error of a damaged state file (DuckDB opens a truncated file and fails when
    a read reaches a missing block) is reported the same way, naming the file.
    """
    try:
        yield
    except TridentError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    except Exception as exc:
        from trident_assets.backends.duckdb_store import corrupt_state_error, is_corrupt_state

        if not is_corrupt_state(exc):
            raise
        found = _DUCKDB_FILE.search(str(exc))
        typer.echo(f"error: {corrupt_state_error(found.group(1) if found else '?', exc)}", err=True)
        raise typer.Exit(code=1) from None


def require_home(home: Path, needs: str | None = None) -> Path:
    """Return ``home`` if it exists (and holds ``needs``, a path inside it); never create it.

    Raises:
        ConfigError: the home (or ``needs`` in it) does not exist; the message says how to
            point at another home.
    """
    if not home.is_dir():
        msg = (
            f"trident home {home} does not exist; pass --home DIR or set TRIDENT_HOME "
            "(`make demo` fills the default home .trident)"
        )
        raise ConfigError(msg)
    if needs is not None and not (home / needs).exists():
        msg = f"trident home {home} has no {needs}; pass --home DIR or set TRIDENT_HOME"
        raise ConfigError(msg)
    return home


def refuse_dsn(database: str | None) -> None:
    """Refuse a PostgreSQL ``--database`` for a command on state files (backup, restore).

    Raises:
        ConfigError: ``database`` is a PostgreSQL DSN; the message names pg_dump.
    """
    from trident_assets.backends.postgres_config import is_postgres_dsn

    if database is not None and is_postgres_dsn(database):
        msg = (
            "this command works on a DuckDB state file; --database is a PostgreSQL DSN: "
            "back PostgreSQL state up with pg_dump and restore it with pg_restore"
        )
        raise ConfigError(msg)


def state_path(home: Path, database: str | None) -> Path:
    """The state file of a command: ``--database`` or ``<home>/state.duckdb``, which must exist.

    Raises:
        ConfigError: the file (or the home) does not exist, or ``--database`` is a PostgreSQL
            DSN (file commands: back a PostgreSQL store up with ``pg_dump``).
    """
    if database is not None:
        refuse_dsn(database)
        if not Path(database).is_file():
            msg = f"state file {database} does not exist (--database)"
            raise ConfigError(msg)
        return Path(database)
    path = require_home(home) / "state.duckdb"
    if not path.is_file():
        msg = (
            f"no state file {path}: nothing has committed in trident home {home} yet; "
            "pass --home DIR or --database FILE"
        )
        raise ConfigError(msg)
    return path


_PID = re.compile(r"\(PID (\d+)\)")
_DUCKDB_FILE = re.compile(r'file "([^"]+)"')


def open_state(home: Path, database: str | None, wait_s: float, *, read_only: bool = True) -> Any:
    """Open the state store (the DuckDB file, or a ``postgresql://`` ``--database``).

    Read-only unless ``read_only=False`` (``trident state drop``). DuckDB allows several
    readers, but not beside a writer; PostgreSQL readers never wait.

    Raises:
        StoreLockedError: a writer holds the file (after ``wait_s`` seconds of retries); the
            message names the file, the holder's PID and ``--wait``.
        StateLayoutError: the file is not a DuckDB database or not a trident state store.
        ConfigError: the PostgreSQL server cannot be reached.
    """
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.backends.postgres_config import is_postgres_dsn

    if database is not None and is_postgres_dsn(database):
        from trident_assets.backends.postgres_store import PostgresStore

        return PostgresStore(database, read_only=read_only)
    path = state_path(home, database)
    try:
        return DuckDBStore(path, read_only=read_only, lock_timeout_s=wait_s)
    except StoreLockedError as exc:
        found = _PID.search(str(exc.__cause__ or exc))
        holder = f" (PID {found.group(1)})" if found else ""
        waited = f", still after {wait_s:g}s" if wait_s else ""
        msg = (
            f"state file {path} is locked by another process{holder}{waited}: a running batch, "
            "`dagster dev` or the demo. Retry when it is done, or pass --wait SECONDS to wait"
        )
        raise StoreLockedError(msg) from None


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def emit(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    fmt: Format,
    title: str | None = None,
) -> None:
    """Print ``rows`` (dicts keyed by ``columns``) as a table, JSON or CSV on stdout.

    JSON is one array of objects; CSV has a header row; values that are not JSON scalars are
    printed as text. ``title`` (table only) is printed above the table, whose numeric columns
    are right-aligned.
    """
    if fmt is Format.json:
        data = [{c: _plain(row.get(c)) for c in columns} for row in rows]
        typer.echo(json.dumps(data, ensure_ascii=False))
    elif fmt is Format.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if row.get(c) is None else _plain(row.get(c)) for c in columns])
        sys.stdout.flush()
    else:
        # not a terminal (a pipe, a file): as wide as the content, never cut at 80 columns
        console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
        if title is not None:
            console.print(title, markup=False, soft_wrap=True)
        table = Table()
        for column in columns:
            values = [row.get(column) for row in rows if row.get(column) is not None]
            numeric = values and all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in values
            )
            justify = "right" if numeric else "left"
            table.add_column(column, justify=justify, overflow="fold")
        for row in rows:
            table.add_row(*["" if row.get(c) is None else str(_plain(row.get(c))) for c in columns])
        console.print(table)

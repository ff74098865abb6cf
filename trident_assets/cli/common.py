"""What every ``trident`` command shares: ``--home``, ``--format``, ``--module``, errors, state.

Errors: a :class:`~trident_assets.errors.TridentError` (bad input, a missing home, topology or
state, a locked or foreign state file) is printed as one ``error: ...`` line on stderr and
exits 1; typer's usage errors (unknown option, missing argument, bad value) exit 2. Commands
that read never create anything: a missing home is an error, not a new directory. Commands
that run Spark or Dagster keep their own output readable: the engines' logs go to a file
(:func:`engine_logs_to`).
"""

from __future__ import annotations

import csv
import enum
import importlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from trident_assets.errors import ConfigError, StoreLockedError, TridentError

if TYPE_CHECKING:
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "DEFAULT_HOME",
    "DEFAULT_MODULE",
    "CodeLocation",
    "DatabaseOption",
    "Format",
    "FormatOption",
    "HomeOption",
    "ModulesOption",
    "WaitOption",
    "cli_errors",
    "code_location",
    "emit",
    "engine_logs_to",
    "find_module",
    "import_module",
    "module_topologies",
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


DEFAULT_MODULE = "trident_assets.examples.topologies"
"""The code location of commands given no ``--module``: the built-in examples' topologies."""

ModulesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--module",
        "-m",
        envvar="TRIDENT_MODULE",
        help="A code location module declaring your topologies (e.g. my_pkg.defs), importable "
        "from the current directory or installed; repeat for several. Default: the built-in "
        "examples.",
    ),
]


def find_module(name: str) -> str:
    """Check that module ``name`` is importable, as ``dagster dev -m`` finds it; return it.

    The current directory is importable (put first on ``sys.path``, as ``python -m`` does),
    then the installed packages. The module is not imported.

    Raises:
        ConfigError: ``name`` is not a module name, or no such module can be found.
    """
    if not name or not all(part.isidentifier() for part in name.split(".")):
        msg = f"--module {name!r} is not a Python module name (e.g. my_pkg.defs)"
        raise ConfigError(msg)
    cwd = str(Path.cwd().resolve())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
        importlib.invalidate_caches()
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:  # a parent package is missing
        spec = None
    if spec is None:
        msg = (
            f"--module {name!r}: no such module importable from {cwd} (run trident in the "
            "directory that holds it, or install it)"
        )
        raise ConfigError(msg)
    return name


def import_module(name: str) -> ModuleType:
    """Import code location module ``name`` (found as :func:`find_module` says).

    Raises:
        ConfigError: no such module, or importing it failed (the message has the error).
    """
    find_module(name)
    try:
        return importlib.import_module(name)
    except Exception as exc:  # the user's code failed to import: say how
        msg = f"cannot import module {name!r}: {type(exc).__name__}: {exc}"
        raise ConfigError(msg) from exc


def module_topologies(name: str) -> dict[str, TridentTopology]:
    """The topologies among module ``name``'s module-level values (or lists of them), by name.

    Raises:
        ConfigError: the module cannot be found or imported.
    """
    from trident_assets.stream.topology import TridentTopology

    module = import_module(name)
    found: dict[str, TridentTopology] = {}
    for value in vars(module).values():
        # exact lists/tuples only: Dagster's @record Definitions (a tuple subclass) and other
        # sequences refuse iteration or are not collections of topologies
        values = list(value) if type(value) in (list, tuple) else [value]
        for item in values:
            if isinstance(item, TridentTopology):
                found[item.name] = item
    return found


@dataclass(frozen=True)
class CodeLocation:
    """The code location modules a command was given (or the default), and their topologies.

    ``given``: the user named the modules (``--module`` or ``TRIDENT_MODULE``); without them
    the default (the built-in examples) only vouches for the topologies it declares.
    """

    modules: tuple[str, ...]
    given: bool
    topologies: dict[str, TridentTopology]

    @property
    def where(self) -> str:
        """The modules, for messages: ``module a`` or ``modules a, b``."""
        if len(self.modules) == 1:
            return f"module {self.modules[0]}"
        return f"modules {', '.join(self.modules)}"

    def declared_states(self) -> dict[str, set[str]]:
        """Per topology declared, the names of its states."""
        return {
            name: set(topo.states) | set(topo.static_states)
            for name, topo in self.topologies.items()
        }

    def topology(self, name: str) -> TridentTopology:
        """The declared topology ``name``.

        Raises:
            ConfigError: none of the modules declares it (the message lists those declared).
        """
        if name not in self.topologies:
            verb = "declares" if len(self.modules) == 1 else "declare"
            declared = ", ".join(sorted(self.topologies)) or "none"
            msg = (
                f"{self.where} {verb} no topology {name!r} (declared: {declared}); pass "
                "--module with the code location that declares it"
            )
            raise ConfigError(msg)
        return self.topologies[name]


def code_location(modules: Sequence[str] | None) -> CodeLocation:
    """The code location of ``--module`` values ``modules`` (none: :data:`DEFAULT_MODULE`).

    Every command that takes ``--module`` resolves it here: each module is found from the
    current directory, then the installed packages (:func:`find_module`), and imported; the
    first module declaring a topology name wins.

    Raises:
        ConfigError: a module cannot be found or imported.
    """
    names = tuple(dict.fromkeys(modules or ()))
    given = bool(names)
    found: dict[str, TridentTopology] = {}
    for name in names or (DEFAULT_MODULE,):
        for topology, topo in module_topologies(name).items():
            found.setdefault(topology, topo)
    return CodeLocation(names or (DEFAULT_MODULE,), given, found)


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
        from trident_assets.backends.duckdb_open import corrupt_state_error, is_corrupt_state

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


@contextmanager
def engine_logs_to(log_path: Path, verbose: bool) -> Iterator[IO[str]]:
    """Yield the stream the story is printed to.

    Unless ``verbose``, everything else written to stdout or stderr meanwhile (Dagster's logs,
    warnings, the Spark JVM's log4j lines, child processes) goes to ``log_path``.
    """
    if verbose:
        yield sys.stdout
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    story = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    with open(log_path, "ab", buffering=0) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield story
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            story.close()

"""Opening a DuckDB state file: waiting out another process's lock, and naming a bad file."""

from __future__ import annotations

import os
import time
from typing import Any

import duckdb

from trident_assets.errors import (
    ConfigError,
    CorruptStateError,
    StateLayoutError,
    StoreLockedError,
)

__all__ = [
    "CREATION_GRACE_S",
    "HEADER_BYTES",
    "RESTORE_HINT",
    "connect_file",
    "corrupt_state_error",
    "is_corrupt_state",
    "quiet_connect",
]

_LOCK_MARKER = "Could not set lock"
_NOT_A_DATABASE_MARKER = "not a valid DuckDB database"
HEADER_BYTES = 12288
"""A DuckDB file's main header and its two database headers: every database file has them."""
CREATION_GRACE_S = 2.0
"""How long a file shorter than :data:`HEADER_BYTES` may take to become a database.

DuckDB refuses a file that exists without its headers. Another process that is creating the
file has made it but not yet written them (two processes opening one new state file at
once), so such a file is opened again until the grace ends; a stray short file is then
refused. A file that was short before an attempt and is whole after it (its creator finished
while DuckDB read it) is opened again too.
"""

RESTORE_HINT = "Restore the last backup with `trident state restore BACKUP` (README, Guarantees)"
"""The recovery path every corrupt-state message ends with."""


def corrupt_state_error(path: str, exc: BaseException) -> CorruptStateError:
    """Return the error for a DuckDB I/O failure on state file ``path`` (not a lock conflict).

    DuckDB opens a truncated file without complaint and fails when a query reaches a missing
    block (``IO Error: Could not read enough bytes``); this names the file and the way back.
    """
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    msg = (
        f"state file {path} is corrupt or unreadable ({detail}); it was left unchanged. "
        f"{RESTORE_HINT}"
    )
    return CorruptStateError(msg)


def is_corrupt_state(exc: BaseException) -> bool:
    """True for a DuckDB I/O error that is neither another process's lock nor a full disk."""
    text = str(exc)
    return (
        isinstance(exc, duckdb.IOException)
        and _LOCK_MARKER not in text
        and "No space left" not in text
    )


def quiet_connect(
    database: str = ":memory:", *, read_only: bool = False, config: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect`` without DuckDB's progress bar.

    DuckDB draws a progress bar on the process's stdout for a query running over two
    seconds; it would end up inside a command's JSON or CSV output (or a run's logs).
    """
    conn = duckdb.connect(database, read_only=read_only, config=config or {})
    conn.execute("SET enable_progress_bar = false")
    return conn


def connect_file(
    path: str, timeout_s: float, config: dict[str, Any], read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """Open DuckDB file ``path`` (``config``: DuckDB settings), waiting out another process's lock.

    Raises:
        StoreLockedError: the file stayed locked by another process for ``timeout_s``.
        StateLayoutError: the file is not a DuckDB database.
        CorruptStateError: the file is a damaged DuckDB database.
        ConfigError: ``config`` holds an invalid setting.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    delay = 0.05
    while True:
        before = _file_size(path)
        try:
            return quiet_connect(path, read_only=read_only, config=config)
        except (duckdb.ParserException, duckdb.InvalidInputException) as exc:
            if not config:
                raise
            msg = f"DuckDB settings {config} of state store {path!r} are invalid: {exc}"
            raise ConfigError(msg) from exc
        except duckdb.IOException as exc:
            if _NOT_A_DATABASE_MARKER in str(exc):
                size = _file_size(path)
                short = min(before, size) < HEADER_BYTES  # when DuckDB read it, or now
                if short and time.monotonic() < start + CREATION_GRACE_S:
                    time.sleep(0.02)  # perhaps another process is creating it
                    continue
                raise StateLayoutError(_not_a_database(path, size)) from exc
            if is_corrupt_state(exc):
                raise corrupt_state_error(path, exc) from exc
            if _LOCK_MARKER not in str(exc):
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                msg = (
                    f"DuckDB state store {path!r} is locked by another process and stayed locked "
                    f"for {timeout_s:g}s ({exc}). Stop the other process that holds the file "
                    "(a running job, `dagster dev`, a notebook), or raise lock_timeout_s."
                )
                raise StoreLockedError(msg) from exc
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 1.0)


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _not_a_database(path: str, size: int) -> str:
    msg = f"{path} is not a DuckDB database file (it was left unchanged)"
    if size < HEADER_BYTES:
        msg += f": {size} bytes, fewer than the {HEADER_BYTES} of a DuckDB file's headers"
    return msg

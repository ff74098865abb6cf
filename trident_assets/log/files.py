"""Durable files of the log: fsync, atomic JSON, and the writer's lock with its holder's PID."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trident_assets.errors import ConfigError, LogLockTimeoutError

__all__ = [
    "DEFAULT_LOCK_TIMEOUT_S",
    "TMP_PREFIX",
    "UnknownTopicError",
    "flock",
    "fsync_path",
    "write_json_atomic",
]

TMP_PREFIX = ".tmp-"
"""Files being written start with this; readers skip them and a writer removes its own."""


class UnknownTopicError(ConfigError):
    """The named topic does not exist in this log."""


def fsync_path(path: Path, directory: bool = False) -> None:
    """Flush ``path`` (a file, or a ``directory``'s entries) to the disk."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Replace ``path`` with ``payload`` as JSON: whole or not at all, durable on return."""
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{uuid.uuid4().hex}")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(payload, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.rename(tmp, path)
    fsync_path(path.parent, directory=True)


DEFAULT_LOCK_TIMEOUT_S = 30.0
"""How long a writer waits for a partition or topic lock before failing (seconds)."""


def lock_holder(fd: int) -> str:
    """The PID the current holder wrote into the lock file, as text for a message."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        text = ""
    return f"process {text}" if text.isdigit() else "an unknown process"


@contextlib.contextmanager
def flock(path: Path, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold an exclusive flock on ``path``, waiting at most ``timeout_s`` seconds for it.

    The holder writes its PID into the lock file after acquiring it (a flock has no owner),
    so a writer that times out can name the process holding it.

    Raises:
        LogLockTimeoutError: the lock was not free within ``timeout_s``; the message names the
            lock file and the holder's PID when known.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:
        msg = f"directory {str(path.parent)!r} is missing (topic deleted?)"
        raise UnknownTopicError(msg) from None
    try:
        deadline = time.monotonic() + timeout_s
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    msg = (
                        f"timed out after {timeout_s:g} s waiting for the log lock "
                        f"{str(path)!r}, held by {lock_holder(fd)}; if that process is stuck, "
                        "stop it (the lock is released when it exits), or raise lock_timeout_s"
                    )
                    raise LogLockTimeoutError(msg) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock

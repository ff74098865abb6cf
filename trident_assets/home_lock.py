"""The home lock: one process at a time serves or replaces a trident home.

``trident demo`` (which replaces its home's log, state and Dagster instance) and ``trident
ui`` (which runs ``dagster dev`` over the home) hold ``<home>/home.lock`` for their whole
life: an advisory ``flock`` on that file, with the holder's PID and command written in it. A
second demo or UI on the same home is refused before it touches anything, naming the holder.
The kernel releases the lock when its process ends, however it ends (a crash, SIGKILL): a
lock file left by a dead process never blocks; the next holder writes its own PID over it.

The other commands do not take the home lock, so they keep working while ``trident ui``
runs: reads go to the read replica (or open the state file read-only), and writes take the
locks of what they change (the state file's writer lock, the log's partition locks), which a
running batch holds too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from trident_assets.errors import HomeLockedError

__all__ = ["LOCK_FILE", "HomeLock", "acquire_home_lock", "home_lock"]

LOCK_FILE = "home.lock"
"""The file in a home whose ``flock`` its demo or UI holds (never deleted while held)."""

_HOLDER_READ_S = 1.0
"""How long a refused process waits for a holder that just took the lock to write its PID."""


class HomeLock:
    """The lock of one home held by this process: :meth:`release` it (or end the process)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        """The lock file, ``<home>/home.lock``."""
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        """True until :meth:`release`."""
        return self._fd is not None

    def release(self) -> None:
        """Release the lock (the file stays: deleting it would let two processes hold one)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _holder(fd: int) -> tuple[int | None, str]:
    """The PID and command written in the lock file open as ``fd`` ((None, "") if none yet)."""
    deadline = time.monotonic() + _HOLDER_READ_S
    while True:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        first, _, command = text.partition("\n")
        if first.strip().isdigit():
            return int(first), command.strip()
        if time.monotonic() >= deadline:
            return None, ""
        time.sleep(0.05)


def acquire_home_lock(home: Path, command: str) -> HomeLock:
    """Take the lock of ``home`` (created if missing) for this process, writing its PID in it.

    ``command`` says what holds the home (e.g. ``trident ui on port 3000``): a refused process
    names it. The file descriptor is not inherited by child processes.

    Raises:
        HomeLockedError: another process holds the lock (also another holder in this one);
            nothing of the home was changed.
    """
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    path = home / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid, holder = _holder(fd)
        os.close(fd)
        who = f"{holder or 'another process'} (PID {pid})" if pid else "another process"
        stop = f"Ctrl-C where it runs, or `kill {pid}`" if pid else "Ctrl-C where it runs"
        msg = (
            f"trident home {home} is in use by {who}: stop that process first ({stop}), "
            "or pass --home with another directory"
        )
        raise HomeLockedError(msg, pid) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n{command}\n".encode(), 0)
    return HomeLock(path, fd)


@contextlib.contextmanager
def home_lock(home: Path, command: str) -> Iterator[HomeLock]:
    """Hold the lock of ``home`` for the block (see :func:`acquire_home_lock`).

    Raises:
        HomeLockedError: another process holds it.
    """
    lock = acquire_home_lock(home, command)
    try:
        yield lock
    finally:
        lock.release()

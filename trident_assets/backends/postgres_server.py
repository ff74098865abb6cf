"""A throwaway PostgreSQL server on 127.0.0.1 from the machine's binaries, for tests and benchmarks.

``initdb`` a data directory, ``pg_ctl start`` on a free port (socket in the data directory's
sibling), and ``pg_ctl stop -m fast`` (then the postmaster's PID) on exit. PostgreSQL refuses
to run as root: as root, the data directory is handed to an unprivileged user (``nobody`` by
default) and the server runs as that user through ``runuser``.

Example (a shell)::

    python -m trident_assets.backends.postgres_server /tmp/pg   # prints the DSN, Ctrl-C stops
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from glob import glob
from pathlib import Path

from trident_assets.errors import ConfigError, TridentError
from trident_assets.local_ports import free_port

__all__ = ["LocalPostgres", "find_pg_bin", "local_postgres"]

START_TIMEOUT_S = 60.0
_SETTING_RE = re.compile(r"^[A-Za-z0-9_.]+$")


def find_pg_bin() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``: on PATH, else Debian's layout.

    Raises:
        ConfigError: no PostgreSQL server binaries (Debian: ``apt-get install postgresql``).
    """
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for candidate in sorted(glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    msg = (
        "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin; "
        "install them (Debian: apt-get install postgresql) or run scripts/setup.sh"
    )
    raise ConfigError(msg)


@dataclass
class LocalPostgres:
    """A running server: where it lives and how to reach it."""

    data_dir: Path
    port: int
    bin_dir: Path
    run_as: str | None
    """The unprivileged user the server runs as (None: the current user)."""

    @property
    def dsn(self) -> str:
        """The ``postgresql://`` URI of the ``postgres`` database as the bootstrap user."""
        user = self.run_as or getpass.getuser()
        return f"postgresql://{user}@127.0.0.1:{self.port}/postgres"

    def _cmd(self, *args: str) -> list[str]:
        base = [str(self.bin_dir / args[0]), *args[1:]]
        return ["runuser", "-u", self.run_as, "--", *base] if self.run_as else base

    def pid(self) -> int | None:
        """The postmaster's PID (None when it is not running)."""
        pidfile = self.data_dir / "postmaster.pid"
        try:
            return int(pidfile.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def stop(self) -> None:
        """Stop the server: ``pg_ctl stop -m fast``, then SIGKILL by PID if it is still up."""
        pid = self.pid()
        subprocess.run(
            self._cmd("pg_ctl", "-D", str(self.data_dir), "stop", "-m", "fast", "-w"),
            capture_output=True,
            check=False,
            timeout=60,
        )
        if pid is not None and self.pid() == pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def start_postgres(
    root: Path,
    *,
    run_as: str = "nobody",
    durable: bool = False,
    settings: Mapping[str, str] | None = None,
) -> LocalPostgres:
    """``initdb`` ``root/data`` and start a server on a free 127.0.0.1 port; return it.

    Trust authentication on loopback only; the Unix socket lives in ``root/sock``. Unless
    ``durable`` (benchmarks), ``fsync=off``: a test server's data is thrown away.
    ``settings``: more server parameters (``{"shared_buffers": "2GB"}``), names and values
    of letters, digits, ``_`` and ``.`` only.

    Raises:
        ConfigError: no server binaries.
        TridentError: initdb or the server failed (the message holds their output).
    """
    bin_dir = find_pg_bin()
    root.mkdir(parents=True, exist_ok=True)
    data, sock, log = root / "data", root / "sock", root / "server.log"
    sock.mkdir(exist_ok=True)
    user = run_as if os.geteuid() == 0 else None
    if user:
        os.chmod(root, 0o755)
        data.mkdir(exist_ok=True)
        log.touch()
        for path in (sock, data, log):
            shutil.chown(path, user)
    server = LocalPostgres(data, free_port(), bin_dir, user)
    init = subprocess.run(
        server._cmd("initdb", "-D", str(data), "-A", "trust", "-E", "UTF8", "--no-sync"),
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    if init.returncode:
        msg = f"initdb {data} failed ({init.returncode}): {init.stderr.strip() or init.stdout}"
        raise TridentError(msg)
    opts = f"-p {server.port} -k {sock} -c listen_addresses=127.0.0.1"
    if not durable:
        opts += " -c fsync=off"
    for name, value in (settings or {}).items():
        if not (_SETTING_RE.match(name) and _SETTING_RE.match(value)):
            msg = f"invalid server setting {name}={value!r}"
            raise ConfigError(msg)
        opts += f" -c {name}={value}"
    start = subprocess.run(
        server._cmd("pg_ctl", "-D", str(data), "-l", str(log), "-o", opts, "-w", "start"),
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        timeout=START_TIMEOUT_S,
    )
    if start.returncode:
        tail = log.read_text()[-2000:] if log.exists() else ""
        server.stop()
        msg = f"pg_ctl start failed ({start.returncode}): {start.stderr.strip()} {tail}"
        raise TridentError(msg)
    return server


@contextlib.contextmanager
def local_postgres(
    root: Path | None = None,
    *,
    run_as: str = "nobody",
    durable: bool = False,
    settings: Mapping[str, str] | None = None,
) -> Iterator[LocalPostgres]:
    """A server for the ``with`` block (see :func:`start_postgres`); stopped on exit.

    Without ``root``, the server lives in a new temporary directory (removed on exit) that the
    unprivileged user can reach: pytest's own ``/tmp/pytest-of-root`` is private to root.
    """
    made = root is None
    where = Path(tempfile.mkdtemp(prefix="trident-pg-")) if root is None else root
    if made:
        os.chmod(where, 0o755)
    try:
        server = start_postgres(where, run_as=run_as, durable=durable, settings=settings)
        try:
            yield server
        finally:
            server.stop()
    finally:
        if made:
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    with local_postgres(Path(sys.argv[1]) if len(sys.argv) > 1 else None) as pg:
        print(pg.dsn, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)

"""The home lock: `trident demo` and `trident ui` refuse a home another of them uses.

The holder is a child process (as a running `trident ui` is): its ``flock`` on
``<home>/home.lock`` is what a second demo or UI finds. Nothing of the home is touched by a
refused command, nothing is started by a refused UI, a lock left by a killed process does not
block, and the read commands keep working while the home is held. A busy port is refused by
`trident ui` before anything starts too.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trident_assets.cli import app
from trident_assets.cli.demo import DEMO_MARKER
from trident_assets.errors import HomeLockedError
from trident_assets.home_lock import LOCK_FILE, acquire_home_lock, home_lock
from trident_assets_tests.test_cli import make_home

HOLD = """
import sys, time
from trident_assets.home_lock import acquire_home_lock
lock = acquire_home_lock(sys.argv[1], sys.argv[2])
print("held", flush=True)
time.sleep(600)
"""


def _hold(home: Path, command: str) -> subprocess.Popen[str]:
    """A child process holding ``home``'s lock as ``command`` (returns once it holds it)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(home), command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != "held\n":
        proc.kill()
        proc.wait()
        pytest.fail(f"the holder did not take the lock: {line!r} {proc.stderr.read()!r}")
    return proc


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A demo's home (marker, log, state, Dagster instance) held by `trident ui` in a child."""
    home = tmp_path / "h"
    for name in ("log", "replica", "dagster/history"):
        (home / name).mkdir(parents=True)
    (home / DEMO_MARKER).write_text("demo\n")
    (home / "state.duckdb").write_bytes(b"state")
    (home / "dagster" / "history" / "runs.db").write_bytes(b"runs")
    proc = _hold(home, "trident ui on port 3000")
    try:
        yield home, proc
    finally:
        proc.kill()
        proc.wait()


def _tree(home: Path) -> dict[str, bytes | None]:
    """Every path under ``home`` with its bytes (None for a directory), but the lock file."""
    return {
        str(p.relative_to(home)): None if p.is_dir() else p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.name != LOCK_FILE
    }


def _refusal(home: Path, pid: int, holder: str = "trident ui on port 3000") -> str:
    return (
        f"error: trident home {home} is in use by {holder} (PID {pid}): stop that process "
        f"first (Ctrl-C where it runs, or `kill {pid}`), or pass --home with another directory\n"
    )


def test_a_held_home_is_refused_naming_the_holders_pid(tmp_path: Path) -> None:
    proc = _hold(tmp_path, "trident demo")
    try:
        with pytest.raises(HomeLockedError) as refused:
            acquire_home_lock(tmp_path, "trident ui on port 3000")
        assert refused.value.pid == proc.pid
        assert str(refused.value) == _refusal(tmp_path, proc.pid, "trident demo")[7:-1]
        assert (tmp_path / LOCK_FILE).read_text() == f"{proc.pid}\ntrident demo\n"
    finally:
        proc.kill()
        proc.wait()
    # a process that ends (here: killed) leaves its lock behind unheld: it never blocks
    with home_lock(tmp_path, "trident ui on port 3000") as lock:
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\ntrident ui on port 3000\n"
        with pytest.raises(HomeLockedError) as again:  # one holder, even in one process
            acquire_home_lock(tmp_path, "trident demo")
        assert again.value.pid == os.getpid()
    assert not lock.held
    assert (tmp_path / LOCK_FILE).read_text() == ""


def test_a_lock_left_by_a_sigkilled_holder_does_not_block(tmp_path: Path) -> None:
    proc = _hold(tmp_path, "trident ui on port 3000")
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert (tmp_path / LOCK_FILE).read_text() == f"{proc.pid}\ntrident ui on port 3000\n"
    lock = acquire_home_lock(tmp_path, "trident demo")
    try:
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\ntrident demo\n"
    finally:
        lock.release()


def test_demo_on_a_home_the_ui_uses_is_refused_and_touches_nothing(
    holder: tuple[Path, subprocess.Popen[str]],
) -> None:
    home, proc = holder
    before = _tree(home)
    result = CliRunner().invoke(app, ["demo", "--home", str(home)])
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", _refusal(home, proc.pid))
    assert _tree(home) == before
    assert proc.poll() is None


def test_a_second_ui_on_a_home_in_use_is_refused_before_starting_anything(
    holder: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    home, proc = holder
    before = _tree(home)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = CliRunner().invoke(app, ["ui", "--home", str(home), "--port", str(port)])
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", _refusal(home, proc.pid))
    assert _tree(home) == before  # no spark-connect.log, no workspace.yaml: nothing started


def test_ui_on_a_busy_port_is_refused_before_starting_anything(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(app, ["ui", "--home", str(home), "--port", str(port)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        1,
        "",
        f"error: port {port} on 127.0.0.1 is in use (another `trident ui` or `dagster dev`?): "
        "stop the process listening on it, or pass --port N with a free port\n",
    )
    assert sorted(p.name for p in home.iterdir()) == [LOCK_FILE]  # nothing else: no Spark
    with home_lock(home, "trident demo"):  # and the refused UI let go of the home
        pass


def test_read_and_log_commands_work_while_the_ui_holds_the_home(tmp_path: Path) -> None:
    """Only the demo and the UI take the home lock: the other commands run beside the UI."""
    home = make_home(tmp_path)
    proc = _hold(home, "trident ui on port 3000")
    try:
        runner = CliRunner()
        scan = runner.invoke(
            app, ["state", "scan", "word_count", "word_counts", "--format", "csv", "--home", home]
        )
        assert (scan.exit_code, scan.stdout) == (0, "word,value\ncow,5\nthe,5\nmoon,1\n")
        made = runner.invoke(app, ["log", "create-topic", "lines", "--home", str(home)])
        assert made.exit_code == 0, made.stderr
        topics = runner.invoke(app, ["log", "topics", "--format", "csv", "--home", str(home)])
        assert (topics.exit_code, topics.stdout) == (0, "topic,partitions\nlines,1\n")
    finally:
        proc.kill()
        proc.wait()

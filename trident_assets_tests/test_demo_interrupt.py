"""Ctrl-C in `trident demo`: a short message, exit status 130, no traceback, the home let go.

The demo runs as a child process in its own session with a clean environment, as `make demo`
runs it; SIGINT goes to its process group (as Ctrl-C in a terminal sends it) at a point read
from its output: right after its first line (producing sentences), and once txid 1's run has
started its step (Dagster holds a SIGINT back during a run and ends the run as failed), and
twice there (a second Ctrl-C ends the demo at once). The group is killed by PID in the test's
``finally``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from trident_assets.home_lock import home_lock
from trident_assets_tests.conftest import JVM_ENV

TRIDENT = Path(sys.executable).parent / "trident"


def _interrupted(doing: str) -> str:
    return (
        f"trident demo interrupted while {doing}. Nothing committed is lost: every txid "
        "committed before stays committed in h (a batch stopped before its commit changed "
        f"nothing). Run `{TRIDENT} demo --home h` to run the demo again (it starts over).\n"
    )


def _after_first_line(cwd: Path, proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    return [proc.stdout.readline()]


def _after_txid_1_started(cwd: Path, proc: subprocess.Popen[str]) -> list[str]:
    """The story's lines up to step 2, once demo.log says txid 1's step started."""
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(3)]
    log = cwd / "h" / "demo.log"
    deadline = time.monotonic() + 300
    while "STEP_START" not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"the demo ended first: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "txid 1's step did not start within 300 s"
        time.sleep(0.2)
    return lines


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("wait", "sigints", "seen", "doing"),
    [
        (_after_first_line, 1, 1, "producing sentences (step 1)"),
        (_after_txid_1_started, 1, 3, "running word_count through Dagster (step 2, txid 1)"),
        (_after_txid_1_started, 2, 3, "running word_count through Dagster (step 2, txid 1)"),
    ],
    ids=["producing", "in-txid-1", "twice-in-txid-1"],
)
def test_ctrl_c_ends_the_demo_with_a_message_and_status_130(
    tmp_path: Path,
    wait: Callable[[Path, subprocess.Popen[str]], list[str]],
    sigints: int,
    seen: int,
    doing: str,
) -> None:
    proc = subprocess.Popen(
        # many sentences: producing them lasts a while (step 1); small batches: txid 1's run,
        # which Dagster lets finish before the demo sees the signal, is short
        [str(TRIDENT), "demo", "--home", "h", "--sentences", "200000", "--batch-size", "5000"],
        cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin", **JVM_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a background process inherits SIGINT ignored: a terminal's Ctrl-C reaches a shell's
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        first = wait(tmp_path, proc)
        for _ in range(sigints):
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.3)
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"the demo did not end within 300 s of SIGINT:\n{''.join(first)}{out}{err}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(ProcessLookupError):  # the story's Spark JVM, if it outlived it
            os.killpg(proc.pid, signal.SIGKILL)
    story = "".join(first) + out
    assert "Traceback" not in story + err, story + err
    assert (proc.returncode, err) == (130, _interrupted(doing)), story
    assert (
        story.splitlines()[:seen]
        == [
            "trident demo in h (Dagster and Spark logs: h/demo.log)",
            "1. produced 200,000 sentences into h/log (topic sentences, 4 partitions)",
            "2. running word_count through Dagster: one run per txid, Spark + DuckDB",
        ][:seen]
    )
    assert len(story.splitlines()) == seen, story  # nothing after the interrupted step
    with home_lock(tmp_path / "h", "trident demo"):  # the interrupted demo let go of its home
        pass

"""``bench.chaos_soak`` run as a child process by the chaos tests, its JSON result read back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["REPO", "run_soak", "soak_env"]

REPO = Path(__file__).resolve().parents[1]


def soak_env() -> dict[str, str]:
    """This process's environment, with Spark's Python workers on this interpreter."""
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}


def run_soak(tmp_path: Path, *args: str, env: dict[str, str]) -> dict[str, Any]:
    """Run ``python -m bench.chaos_soak args`` (root and JSON file under ``tmp_path``) to its
    end in a session of its own; assert it exited 0 and said ``RESULT: PASS``; return its JSON
    result.

    A soak still running after 1700 s gets SIGTERM (it stops what it started), then its group
    SIGKILL after 120 s more.
    """
    out = tmp_path / "soak.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.chaos_soak", *args,
         "--root", str(tmp_path / "soak"), "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=1700)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    assert proc.returncode == 0, stdout[-4000:] + stderr[-4000:]
    assert "RESULT: PASS" in stdout, stdout[-4000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result

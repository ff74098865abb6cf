"""Child processes as users start them: the installed ``trident`` or Python, a clean environment.

A clean environment is what a shell, ``dagster dev`` or cron gives a process: ``HOME``, a
system ``PATH`` and a UTF-8 locale, no Spark or project variables. Only the suite's JVM
options (:data:`~trident_assets_tests.conftest.JVM_ENV`: JIT, collector, class archive) are
added: they change how fast a JVM starts, never what it does.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from trident_assets_tests.conftest import JVM_ENV

__all__ = ["TRIDENT", "clean_env", "run_child", "run_python", "run_trident"]

TRIDENT = Path(sys.executable).parent / "trident"
"""The ``trident`` command the package installed next to this interpreter."""


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment with ``HOME`` at ``home``, plus ``extra`` variables."""
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    # a child that dies of a signal prints every thread's Python stack to its stderr
    env["PYTHONFAULTHANDLER"] = "1"
    env.update(JVM_ENV)
    env.update(extra)
    assert "PYSPARK_PYTHON" not in env
    return env


def run_child(
    command: Sequence[str],
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in ``cwd`` (environment: ``clean_env(cwd)`` unless given); never raises on
    its exit status."""
    return subprocess.run(
        list(command),
        cwd=cwd,
        env=clean_env(cwd) if env is None else env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_trident(
    cwd: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``trident args`` in ``cwd`` with a clean environment (``HOME`` is ``cwd``)."""
    return run_child([str(TRIDENT), *args], cwd, env=env, stdin=stdin)


def run_python(
    cwd: Path, code: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` in ``cwd`` with a clean environment (``HOME`` is ``cwd``)."""
    return run_child([sys.executable, "-c", code, *args], cwd, env=env)

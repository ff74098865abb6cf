"""Shared fixtures: one local SparkSession for the whole session; every file under tmp_path.

``demo_run``: ``trident demo`` run once for the session, as a new user runs it (a child
process, a clean environment); the demo's story test and the UI test over its home share it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local[2] SparkSession shared by every test that needs Spark."""
    from trident_assets.spark.session import build_spark_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = build_spark_session(
        {"spark.sql.warehouse.dir": str(warehouse), "spark.local.dir": str(warehouse)}
    )
    yield session
    session.stop()


@dataclass(frozen=True)
class DemoRun:
    cwd: Path
    """The directory the demo ran in (its HOME too)."""
    home: Path
    """The demo's trident home, ``cwd / "h"``."""
    done: subprocess.CompletedProcess[str]


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """``trident demo --home h`` (smaller: 5 txids of 400 sentences, txid 3 killed, replayed).

    Run once: a child process in a clean environment (HOME, PATH=/usr/local/bin:/usr/bin:/bin,
    80 columns), as `make demo` runs it.
    """
    cwd = tmp_path_factory.mktemp("demo")
    home = cwd / "h"
    trident = Path(sys.executable).parent / "trident"
    done = subprocess.run(
        [str(trident), "demo", "--home", str(home), "--sentences", "2000", "--batch-size", "400"],
        cwd=cwd,
        env={"HOME": str(cwd), "PATH": "/usr/local/bin:/usr/bin:/bin", "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return DemoRun(cwd, home, done)

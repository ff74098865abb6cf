"""Exactly once into Delta and Iceberg across SIGKILLs at every fault point of the commit.

A child process runs the word count (counts published to a Delta and an Iceberg table) and
SIGKILLs itself at one fault point: before the store commit (``after_emit``,
``after_state_write``, ``before_commit``), after it (``after_commit``: the marker moved, no
table written), and after each table commit (``after_table_commit``: the Delta table has the
txid, the Iceberg one not yet; then both). A new runner then runs to the end; each table has
every txid exactly once and equals the store's state as of each txid, for DuckDB and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trident_assets.backends.state_store import open_state_store
from trident_assets.spark.executor import TopologyRunner
from trident_assets_tests.children import clean_env
from trident_assets_tests.lakehouse_child import both_formats
from trident_assets_tests.lakehouse_util import (
    SENTENCES,
    delta_rows,
    iceberg_catalog,
    iceberg_rows,
    make_log,
    send,
    state_of,
    truth,
)

POINTS = [
    ("after_emit", 2),
    ("after_state_write", 2),
    ("before_commit", 2),
    ("after_commit", 2),
    ("after_table_commit", 3),  # txid 2: Delta committed, Iceberg not yet
    ("after_table_commit", 4),  # txid 2: both committed, the next txid not started
]


def _kill_run(root: Path, location: str, point: str, nth: int) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trident_assets_tests.lakehouse_child",
            str(root),
            location,
            point,
            str(nth),
        ],
        cwd=Path(__file__).resolve().parent.parent,
        env=clean_env(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    _out, err = proc.communicate(timeout=300)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # its Spark JVM
    assert proc.returncode == -signal.SIGKILL, err.decode()[-3000:]


def _counts(rows: Any) -> dict[str, int]:
    return {r["word"]: r["count"] for r in rows.to_pylist()}


@pytest.mark.parametrize(("point", "nth"), POINTS)
@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_sigkill_at_every_fault_point_publishes_each_txid_once(
    spark: Any, tmp_path: Path, request: pytest.FixtureRequest, kind: str, point: str, nth: int
) -> None:
    log = make_log(tmp_path)
    send(log, SENTENCES * 2)  # three txids of 4, 4 and 2 sentences
    location = (
        str(tmp_path / "state.duckdb") if kind == "duckdb" else request.getfixturevalue("pg_dsn")
    )
    _kill_run(tmp_path, location, point, nth)
    topo = both_formats(tmp_path)
    store = open_state_store(location)
    try:
        runner = TopologyRunner(topo, spark, store, log)
        while runner.backlog() > 0:
            assert runner.run_batch((runner.last_committed() or 0) + 1).applied
        assert runner.last_committed() == 3
        assert not runner.run_batch(3).applied  # a replay writes nothing, here or there
        states = {t: state_of(store, topo, as_of=t) for t in (1, 2, 3)}
        catalog = iceberg_catalog(tmp_path, location)
        for publisher in runner.tables:
            versions = publisher.writer.versions()
            assert sorted(versions) == [1, 2, 3], publisher.publication.asset
            for txid, version in versions.items():
                if publisher.publication.table.format == "delta":
                    rows = delta_rows(tmp_path / "lake" / "counts", version)
                else:
                    rows = iceberg_rows(catalog, "lake.counts", version)
                assert _counts(rows) == states[txid]
        assert states[3] == truth(log)
        delta_log = sorted((tmp_path / "lake" / "counts" / "_delta_log").glob("*.json"))
        assert len(delta_log) == 3  # one Delta commit per txid, none written twice
    finally:
        store.close()

"""Exactly once into Delta and Iceberg across SIGKILLs at every fault point of the commit.

A child process runs the word count (counts published to a Delta and an Iceberg table; its
sentences from the log, or from JSON-lines files through a FileSpout) and
SIGKILLs itself at one fault point: before the store commit (``after_emit``,
``after_state_write``, ``before_commit``), after it (``after_commit``: the marker moved, no
table written), and after each table commit (``after_table_commit``: the Delta table has the
txid, the Iceberg one not yet; then both). A new runner then runs to the end; each table has
every txid exactly once and equals the store's state as of each txid, for DuckDB and PostgreSQL.
`make check` runs a covering selection of the cross product (:data:`COVERING`), `make soak` all.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
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

WORDS = dict(Counter(w for s in SENTENCES * 2 for w in s.split()))
"""The word counts of the ten sentences, in the log or in the files."""
POINTS = [
    ("after_emit", 2),
    ("after_state_write", 2),
    ("before_commit", 2),
    ("after_commit", 2),
    ("after_table_commit", 3),  # txid 2: Delta committed, Iceberg not yet
    ("after_table_commit", 4),  # txid 2: both committed, the next txid not started
]
COVERING = {
    ("files", "postgres", "after_state_write", 2),
    ("log", "duckdb", "after_commit", 2),
    ("log", "postgres", "after_table_commit", 3),
    ("files", "duckdb", "after_table_commit", 4),
}
"""What `make check` runs (a child process and its JVM each): one point before the store commit
(the tables are published only after it, so ``after_emit``, ``after_state_write`` and
``before_commit`` leave them alike: untouched, txid 2 replayed), every point after it, each
store and each spout kind twice, every store with every spout kind. The rest of the cross
product is marked slow (`make soak`); `make check` SIGKILLs runners without tables at the other
points before the commit in test_executor, test_event_windows and test_chaos (the short soak)."""
CASES = [
    pytest.param(
        source, kind, point, nth,
        id=f"{source}-{kind}-{point}-{nth}",
        marks=() if (source, kind, point, nth) in COVERING else pytest.mark.slow,
    )
    for source in ("log", "files")
    for kind in ("duckdb", "postgres")
    for point, nth in POINTS
]  # fmt: skip


def _land_files(root: Path) -> None:
    """The same ten sentences as three JSON-lines files (4, 4, 2), landed a while ago."""
    landing = root / "landing"
    landing.mkdir()
    lines = [json.dumps({"sentence": s}) for s in SENTENCES * 2]
    for i, part in enumerate((lines[:4], lines[4:8], lines[8:])):
        path = landing / f"part-{i}.jsonl"
        path.write_text("\n".join(part) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def _kill_run(root: Path, location: str, point: str, nth: int, source: str) -> None:
    argv = [str(root), location, point, str(nth), source]
    proc = subprocess.Popen(
        [sys.executable, "-m", "trident_assets_tests.lakehouse_child", *argv],
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


@pytest.mark.parametrize(("source", "kind", "point", "nth"), CASES)
def test_sigkill_at_every_fault_point_publishes_each_txid_once(
    spark: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    source: str,
    kind: str,
    point: str,
    nth: int,
) -> None:
    log = make_log(tmp_path)
    if source == "log":
        send(log, SENTENCES * 2)  # three txids of 4, 4 and 2 sentences
    else:
        _land_files(tmp_path)  # three txids of one file each
    location = (
        str(tmp_path / "state.duckdb") if kind == "duckdb" else request.getfixturevalue("pg_dsn")
    )
    _kill_run(tmp_path, location, point, nth, source)
    topo = both_formats(tmp_path, source)
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
        assert states[3] == (truth(log) if source == "log" else WORDS)
        delta_log = sorted((tmp_path / "lake" / "counts" / "_delta_log").glob("*.json"))
        assert len(delta_log) == 3  # one Delta commit per txid, none written twice
    finally:
        store.close()

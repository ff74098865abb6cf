"""`trident ui --live` as a user runs it: one live run commits each record as it arrives.

A child process with a clean environment over a fresh home: records appended one at a time
are each committed (the read replica shows them) by the one live run the coordinator sensor
launched, not by a run per txid; the counts are exact; stopping `trident ui` by PID stops
everything it started.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.cli.ui import stop_process_group
from trident_assets.examples.word_count import SENTENCES
from trident_assets.log.store import PartitionedLog
from trident_assets_tests.dagster_dev_helpers import free_port, gone, server_up, start_ui, wait_for

pytestmark = pytest.mark.slow


def test_ui_live_commits_each_record_in_one_live_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    log = PartitionedLog(home / "log")
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    port = free_port()
    out_path = tmp_path / "ui.log"
    proc = start_ui(tmp_path, "--home", "home", "--port", str(port), "--live", log=out_path)
    replica = Replica(home / "replica")
    producer = log.producer("sentences", partitioner="round_robin")
    sent = list(SENTENCES[:4])
    try:
        wait_for("the webserver", server_up(f"http://127.0.0.1:{port}"), 240, out_path)
        for txid, sentence in enumerate(sent, start=1):
            producer.send(sentence.encode())
            producer.flush()
            wait_for(
                f"txid {txid}",
                lambda t=txid: (replica.latest("word_count") or 0) >= t,
                300 if txid == 1 else 60,
                out_path,
            )
            time.sleep(0.5)  # the next record arrives while the live run polls
        lines = out_path.read_text().splitlines()
        assert lines[1].startswith(f"DAGSTER_HOME={home.resolve() / 'dagster'} "), lines[:3]
        assert " TRIDENT_LIVE=all " in lines[1]
        dev_pid = int(lines[2].removeprefix("dagster dev: pid "))
        with dg.DagsterInstance.from_config(str(home.resolve() / "dagster")) as instance:
            runs = instance.get_runs(dg.RunsFilter(tags={"trident/topology": "word_count"}))
        assert [(r.job_name, r.tags["trident/live"]) for r in runs] == [("word_count_live", "true")]
    finally:
        stop_process_group(proc, timeout_s=120)
    assert proc.returncode == 0, out_path.read_text()[-4000:]
    assert gone(dev_pid, group=True), "a process of dagster dev's group outlived `trident ui`"
    assert replica.latest("word_count") == 4
    words = Counter(w for s in sent for w in s.split())
    with DuckDBStore(home / "state.duckdb") as store:
        assert store.last_committed("word_count") == 4
        rows = store.scan("word_count__word_counts").to_pylist()
    assert {r["word"]: r["value"] for r in rows} == dict(words)
    assert "Launching run for word_count_coordinator" in out_path.read_text()

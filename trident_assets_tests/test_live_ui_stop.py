"""Ctrl-C of `trident ui --live` as a user presses it: a clean stop, then an exact restart.

`trident ui --live` runs as a child process in its own session with a clean environment over
a home a producer keeps appending to; once txids committed, SIGINT goes to its process group
(as Ctrl-C in a terminal sends it). It ends with status 0, a short message and no traceback;
the live run ends as a success, not a failure; every process it started (Spark Connect,
`dagster dev` and its webserver, daemon, code server and run worker) is gone. A second
`trident ui --live` then commits the rest: every word of every record counted exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
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


class _Producer(threading.Thread):
    """Appends one sentence every 0.2 s until stopped; counts the words it appended."""

    def __init__(self, log: PartitionedLog) -> None:
        super().__init__(name="producer", daemon=True)
        self.producer = log.producer("sentences", partitioner="round_robin")
        self.words: Counter[str] = Counter()
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.wait(0.2):
            sentence = SENTENCES[i % len(SENTENCES)]
            self.producer.send(sentence.encode())
            self.producer.flush()
            self.words.update(sentence.split())
            i += 1


def _descendants(pid: int) -> set[int]:
    """The PIDs of every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _start(tmp_path: Path, port: int, out_path: Path) -> subprocess.Popen[bytes]:
    return start_ui(tmp_path, "--home", "home", "--port", str(port), "--live", log=out_path)


def _ctrl_c(proc: subprocess.Popen[bytes], out_path: Path) -> tuple[str, set[int]]:
    """SIGINT to ``proc``'s group; its output and the PIDs it had started, once it ended."""
    started = _descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail(f"trident ui still ran 240 s after Ctrl-C:\n{out_path.read_text()[-4000:]}")
    return out_path.read_text(), started


@pytest.mark.timeout(900)
def test_ctrl_c_stops_live_mode_cleanly_and_a_restart_counts_exactly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    log = PartitionedLog(home / "log")
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    replica = Replica(home / "replica")
    producer = _Producer(log)
    port = free_port()
    first_out = tmp_path / "ui-1.log"
    proc = _start(tmp_path, port, first_out)
    try:
        wait_for("the webserver", server_up(f"http://127.0.0.1:{port}"), 240, first_out)
        producer.start()
        wait_for("3 txids", lambda: (replica.latest("word_count") or 0) >= 3, 300, first_out)
        output, started = _ctrl_c(proc, first_out)  # records keep arriving meanwhile
    finally:
        stop_process_group(proc, timeout_s=60)
    assert proc.returncode == 0, output[-4000:]
    assert "Traceback" not in output, output[-6000:]
    assert "InterruptedError" not in output, output[-6000:]
    assert "was interrupted" not in output, output[-6000:]
    tail = output.splitlines()
    assert tail[-1] == "trident ui stopped: nothing it started runs", tail[-5:]
    assert any(line.startswith("Stopping trident ui: each live run ends after") for line in tail)
    assert started
    assert all(gone(pid) for pid in started), sorted(started)
    with dg.DagsterInstance.from_config(str(home.resolve() / "dagster")) as instance:
        runs = instance.get_runs(dg.RunsFilter(tags={"trident/live": "true"}))
        statuses = {run.status for run in runs}
        stopped = [
            e.message
            for run in runs
            for e in instance.all_logs(run.run_id)
            if "live run of word_count stopped (trident ui is stopping)" in e.message
        ]
    assert statuses == {dg.DagsterRunStatus.SUCCESS}, [(r.run_id, r.status) for r in runs]
    assert len(stopped) == 1, stopped
    assert not (home / "dagster" / "trident-live-stop").exists()

    # the restart commits what arrived since, the producer still appending; then all of it
    second_out = tmp_path / "ui-2.log"
    proc = _start(tmp_path, port, second_out)
    try:
        wait_for("more txids", lambda: (replica.latest("word_count") or 0) >= 6, 400, second_out)
        producer.stop.set()
        producer.join()
        expected = dict(producer.words)

        def counted() -> bool:
            table = replica.read_map("word_count__word_counts", scope="word_count")
            return dict(zip(*table.to_pydict().values(), strict=True)) == expected

        wait_for("every record counted", counted, 120, second_out)
        output, started = _ctrl_c(proc, second_out)
    finally:
        stop_process_group(proc, timeout_s=60)
    assert proc.returncode == 0, output[-4000:]
    assert "Traceback" not in output, output[-6000:]
    assert all(gone(pid) for pid in started), sorted(started)
    with DuckDBStore(home / "state.duckdb") as store:
        last = store.last_committed("word_count")
        rows = store.scan("word_count__word_counts").to_pylist()
    assert {r["word"]: r["value"] for r in rows} == expected
    assert last == replica.latest("word_count")

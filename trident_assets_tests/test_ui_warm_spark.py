"""`trident ui` as a user runs it: `dagster dev` plus a warm Spark Connect server for its runs.

A child process with a clean environment, in a directory holding the user's own package,
started with ``--module my_pkg.defs``: the server is warmed up (one line says so), the
webserver lists the user's assets and not the built-in examples, the coordinator sensor's
run commits the user's txids on the warm server (its log says so), the counts are exact,
and stopping `trident ui` stops `dagster dev` and the server (its whole group) by PID.
A server whose supervisor is SIGKILLed stops too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.cli import app
from trident_assets.cli.ui import (
    SPARK_REMOTE_ENV,
    IdleTickFilter,
    stop_process_group,
    ui_environment,
)
from trident_assets.examples.word_count import SENTENCES
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.warm_up import WARM_UP_BATCHES
from trident_assets_tests.children import TRIDENT, clean_env
from trident_assets_tests.conftest import JVM_ENV
from trident_assets_tests.dagster_dev_helpers import free_port, gone, server_up, start_ui, wait_for

USER_DEFS = """\
import trident_assets as ta

topo = ta.TridentTopology("my_clicks")
spout = ta.LogSpout("clicks", ta.StringScheme("line"), ta.SpoutConfig(max_batch_size=2))
(topo.new_stream("clicks", spout)
    .each("line", ta.Split(), "word")
    .group_by("word")
    .persistent_aggregate(ta.StateSpec.opaque("word_totals"), "word", ta.Count(), "n"))
defs = ta.trident_definitions([topo], ta.TridentResource(home="home"))
"""
"""A user's code location as the docs write it: its home relative to where `trident ui` runs."""


def _asset_keys(port: int) -> list[str]:
    """The asset keys the running webserver lists (GraphQL), as ``a/b`` paths."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": "{ assetNodes { assetKey { path } } }"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        nodes = json.loads(response.read())["data"]["assetNodes"]
    return sorted("/".join(n["assetKey"]["path"]) for n in nodes)


def test_ui_module_runs_the_users_topology_on_its_warm_spark_then_stops_everything(
    tmp_path: Path,
) -> None:
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_pkg" / "defs.py").write_text(USER_DEFS)
    home = tmp_path / "home"
    log = PartitionedLog(home / "log")
    log.create_topic("clicks", 2)
    producer = log.producer("clicks", partitioner="round_robin")
    for sentence in SENTENCES:
        producer.send(sentence.encode())
    producer.flush()
    env = clean_env(tmp_path)
    refused = subprocess.run(
        [str(TRIDENT), "ui", "--home", "home", "--module", "nosuch_pkg.defs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"error: --module 'nosuch_pkg.defs': no such module importable from {tmp_path} "
        "(run trident in the directory that holds it, or install it)\n"
    )
    port = free_port()
    out_path = tmp_path / "ui.log"
    # batches of 2 sentences: one catch-up run, one chunk
    ui_args = ["--home", "home", "--port", str(port), "--module", "my_pkg.defs"]
    proc = start_ui(tmp_path, *ui_args, log=out_path)
    try:
        wait_for("the webserver", server_up(f"http://127.0.0.1:{port}"), 240, out_path)
        keys = _asset_keys(port)
        assert "my_clicks/word_totals" in keys, keys
        assert not [k for k in keys if "word_count" in k], keys  # the built-ins are replaced
        wait_for("txid 1", lambda: Replica(home / "replica").latest("my_clicks"), 300, out_path)
        lines = out_path.read_text().splitlines()
        found = re.fullmatch(
            r"Spark Connect (sc://127\.0\.0\.1:\d+) \(pid (\d+), log (.+)\): every run launched "
            r"by dagster dev uses it",
            lines[0],
        )
        assert found, lines[:3]
        url, server_pid, server_log = found.group(1), int(found.group(2)), Path(found.group(3))
        dagster_home = home.resolve() / "dagster"
        assert lines[1] == (
            f"DAGSTER_HOME={dagster_home} {SPARK_REMOTE_ENV}={url} {sys.executable} -W "
            f"ignore::FutureWarning {TRIDENT.parent / 'dagster'} "
            f"dev --host 127.0.0.1 --port {port} -w {dagster_home / 'workspace.yaml'}"
        )
        dev_pid = int(lines[2].removeprefix("dagster dev: pid "))
        assert server_log == home.resolve() / "spark-connect.log"
        assert server_log.exists()
        config = (dagster_home / "dagster.yaml").read_text()
        assert "telemetry:\n  enabled: false" in config
        assert "key: trident/topology" in config
        assert "sensors:\n  use_threads: true" in config
        workspace = (dagster_home / "workspace.yaml").read_text()
        assert "module_name: my_pkg.defs" in workspace
        assert f'working_directory: "{tmp_path.resolve()}"' in workspace
        wait_for("the run to finish", lambda: _finished_runs(dagster_home), 120, out_path)
        (messages,) = _finished_runs(dagster_home)  # one catch-up run, several txids
        assert f"Spark: Spark Connect {url}" in messages
        last = Replica(home / "replica").latest("my_clicks")
        assert last is not None
        assert last >= 2, "a chunk of several txids (the pipelined path) ran"
        idle = f"skipped: my_clicks: no new records after txid {last}"
        wait_for("the sensor's reason to skip", lambda: idle in out_path.read_text(), 60, out_path)
        warmed = re.compile(r"^Spark Connect warmed up in \d+\.\d s \((\d+) batches\)$", re.M)
        wait_for("the warm-up", lambda: warmed.search(out_path.read_text()), 240, out_path)
    finally:
        stop_process_group(proc, timeout_s=120)
    assert proc.returncode == 0, out_path.read_text()[-4000:]
    assert gone(server_pid), "the Spark Connect server outlived `trident ui`"
    assert gone(server_pid, group=True), "a process of the server's group outlived `trident ui`"
    assert gone(dev_pid), "dagster dev outlived `trident ui`"
    assert gone(dev_pid, group=True), "a process of dagster dev's group outlived `trident ui`"
    logged = out_path.read_text()
    (batches,) = warmed.findall(logged)  # once, on one line
    assert 1 <= int(batches) <= len(WARM_UP_BATCHES)
    assert "warm-up failed" not in logged
    assert "telemetry" not in logged.lower().replace("telemetry:", "")
    assert "SupersessionWarning" not in logged
    assert "will not be used" not in logged
    assert "Checking for new runs for sensor" not in logged, "idle ticks are not logged"
    assert "No run requests returned" not in logged
    skips = [line.split(" - ", 3)[-1] for line in logged.splitlines() if " skipped: " in line]
    assert skips, "a sensor's reason to skip is shown (once)"
    assert len(skips) == len(set(skips)), "\n".join(skips)
    assert "Launching run for my_clicks_coordinator" in logged, "a run request is logged"
    words = Counter(w for s in SENTENCES for w in s.split())
    with DuckDBStore(home / "state.duckdb") as store:
        assert store.last_committed("my_clicks") == last
        rows = store.scan("my_clicks__word_totals").to_pylist()
    assert {r["word"]: r["value"] for r in rows} == dict(words)


def _finished_runs(dagster_home: Path) -> list[list[str]]:
    """The log messages of each finished run of the user's topology (none while one runs)."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        records = instance.get_run_records(
            filters=dg.RunsFilter(tags={"trident/topology": "my_clicks"})
        )
        if not records or any(not r.dagster_run.is_finished for r in records):
            return []
        return [[e.message for e in instance.all_logs(r.dagster_run.run_id)] for r in records]


def test_connect_server_stops_when_its_supervisor_is_killed(tmp_path: Path) -> None:
    """`trident ui` SIGKILLed cannot stop its server: the kernel sends the server SIGTERM."""
    script = (
        "import sys; from pathlib import Path\n"
        "from trident_assets.spark.local_servers import start_connect_server\n"
        "server = start_connect_server(Path(sys.argv[1]), with_parent=True)\n"
        "print(server.process.pid, flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    env = {"HOME": str(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin", **JVM_ENV}
    supervisor = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "connect.log")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a supervisor started with SIGTERM ignored (inherited across exec, as from a shell
        # or a test runner that ignores it): its server must still get the signal
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN),
    )
    try:
        assert supervisor.stdout is not None
        server_pid = int(supervisor.stdout.readline())
        assert not gone(server_pid)
        assert os.getpgid(server_pid) == server_pid, "the server has a process group of its own"
    finally:
        os.killpg(supervisor.pid, signal.SIGKILL)
        supervisor.wait(timeout=30)
    deadline = time.monotonic() + 60
    while not gone(server_pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not gone(server_pid):
        os.killpg(server_pid, signal.SIGKILL)
        pytest.fail("the Spark Connect server outlived its supervisor's SIGKILL")


def test_ui_refuses_a_spark_remote_that_is_not_a_connect_url(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    result = CliRunner().invoke(
        app, ["ui", "--home", str(tmp_path / "home"), "--spark-remote", "spark://h:7077"]
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --spark-remote must be a Spark Connect URL sc://host:port, got 'spark://h:7077'\n"
    )


def test_ui_environment_sets_or_drops_the_spark_remote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SPARK_REMOTE_ENV, "sc://stale:1")
    assert SPARK_REMOTE_ENV not in ui_environment(tmp_path)
    env = ui_environment(tmp_path, "sc://127.0.0.1:15002")
    assert env[SPARK_REMOTE_ENV] == "sc://127.0.0.1:15002"
    assert env["TRIDENT_HOME"] == str(tmp_path.resolve())


def _daemon_line(message: str) -> str:
    return (
        "\x1b[32m2026-11-25 19:16:50 +0000\x1b[0m - dagster.daemon.SensorDaemon - "
        f"\x1b[34mINFO\x1b[0m - {message}\n"
    )


def test_idle_sensor_ticks_are_not_shown_and_a_skip_reason_once_until_it_changes() -> None:
    lines = [
        "\x1b[32m2026-11-25 19:16:44 +0000\x1b[0m - dagster - \x1b[34mINFO\x1b[0m - Launching "
        "Dagster services...\n",
        _daemon_line("Checking for new runs for sensor: wc"),
        _daemon_line("Sensor wc skipped: wc: no new records after txid 5"),
        _daemon_line("Checking for new runs for sensor: wc"),
        _daemon_line("Sensor wc skipped: wc: no new records after txid 5"),
        _daemon_line("Sensor ga skipped: ga: waiting for its topic"),
        _daemon_line("No run requests returned for ga, skipping"),
        _daemon_line("Added partition keys to dynamic partitions definition 'wc': ['6']"),
        _daemon_line("Launching run for wc"),
        _daemon_line("Completed launch of run 0a1b for wc"),
        _daemon_line("Sensor wc skipped: wc: no new records after txid 5"),
        _daemon_line("Sensor wc skipped: wc: no new records after txid 6"),
        _daemon_line("Sensor ga skipped: ga: waiting for its topic"),
    ]
    keep = IdleTickFilter().keep
    shown = [i for i, line in enumerate(lines) if keep(line)]
    assert shown == [0, 2, 5, 7, 8, 9, 10, 11]


def _asset_daemon_line(message: str) -> str:
    return _daemon_line(message).replace("SensorDaemon", "AssetDaemon")


def test_idle_asset_daemon_ticks_are_not_shown() -> None:
    """The automation ticks (every ~15 s, as `dagster dev` logs them): only runs requested."""
    group = "for trident_finals_checks in trident_assets"
    idle = [
        _asset_daemon_line(
            f"Checking 1 assets/checks and 0 observable source assets {group} in thread "
            "dagster-daemon-ASSET"
        ),
        _asset_daemon_line("Prefetching asset records for 0 records."),
        _asset_daemon_line("Done prefetching asset records."),
        _asset_daemon_line(
            f"Tick produced 0 runs and 1 asset evaluation for evaluation ID 5 {group}"
        ),
        _asset_daemon_line(f"Adding 1 asset evaluations for evaluation 5 {group}"),
        _asset_daemon_line(f"Submitting 0 runs for evaluation 5 {group}"),
        _asset_daemon_line(f"Finished auto-materialization tick {group}"),
    ]
    busy = [
        _asset_daemon_line(
            f"Tick produced 1 run and 1 asset evaluation for evaluation ID 6 {group}"
        ),
        _asset_daemon_line(f"Submitting 1 run for evaluation 6 {group}"),
        _asset_daemon_line("Renaming any states corresponding to the legacy default name"),
        _asset_daemon_line("Auto materialize evaluations are not getting logged.").replace(
            "INFO", "WARNING"
        ),
    ]
    keep = IdleTickFilter().keep
    assert [keep(line) for line in idle] == [False] * len(idle)
    assert [keep(line) for line in busy] == [True] * len(busy)
    # a failed tick is an error: shown, whatever its message
    assert keep(_asset_daemon_line("Checking 1 assets/checks").replace("INFO", "ERROR"))


LATE_LEADER = """
import pathlib, signal, subprocess, sys, time
marker = pathlib.Path(sys.argv[1])
LATE = (
    "import pathlib, signal, sys, time\\n"
    "m = pathlib.Path(sys.argv[1])\\n"
    "def term(*_):\\n"
    "    (m / 'late_terminated').write_text('1')\\n"
    "    sys.exit(0)\\n"
    "signal.signal(signal.SIGTERM, term)\\n"
    "(m / 'late_ready').write_text('1')\\n"
    "time.sleep(600)\\n"
)
def on_term(*_):  # as dagster dev may: start a process while shutting down, then exit
    subprocess.Popen([sys.executable, "-c", LATE, str(marker)])
    while not (marker / "late_ready").exists():
        time.sleep(0.02)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
(marker / "leader_ready").write_text("1")
time.sleep(600)
"""


def test_stopping_a_group_also_stops_a_process_started_during_the_shutdown(
    tmp_path: Path,
) -> None:
    leader = subprocess.Popen(
        [sys.executable, "-c", LATE_LEADER, str(tmp_path)], start_new_session=True
    )
    (tmp_path / "no.log").touch()
    try:
        ready = tmp_path / "leader_ready"
        wait_for("the leader", ready.exists, 60, tmp_path / "no.log")
        stop_process_group(leader, timeout_s=120)  # SIGKILL only after 120 s
    finally:
        if not gone(leader.pid, group=True):
            os.killpg(leader.pid, signal.SIGKILL)
    assert leader.returncode == 0
    assert (tmp_path / "late_ready").exists()
    assert (tmp_path / "late_terminated").exists(), "the late process got SIGTERM, not SIGKILL"
    assert gone(leader.pid, group=True)

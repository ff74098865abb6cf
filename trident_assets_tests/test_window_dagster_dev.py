"""End to end: `dagster dev` runs the page-views example; each closed hour is materialized once.

The code location's page-views topology is seeded (49 views, batches of 16: 4 txids, run by
its coordinator sensor), so the watermark completes every hourly finals partition of
2026-01-01. A replay of txid 2 launched over GraphQL (as the UI's Materialize button does)
materializes nothing new. The server is stopped by its process group id.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import dagster as dg
from dagster._core.instance.ref import InstanceRef

from trident_assets.examples.page_views import produce_seed
from trident_assets.log.store import PartitionedLog
from trident_assets_tests.test_dagster_dev import (
    _free_port,
    _launch,
    _run,
    _runs,
    _wait,
    gql,
)

REPO = Path(__file__).resolve().parents[1]
FINALS = ["page_views", "views_10m_finals"]
STATE = ["page_views", "views_10m"]
HOURS = [f"2026-01-01-{h:02d}:00" for h in range(24)]


def _partitions(url: str, path: list[str]) -> list[str]:
    data = gql(
        url,
        "{ assetNodeOrError(assetKey: {path: PATH}) { ... on AssetNode { assetPartitionStatuses "
        "{ ... on DefaultPartitionStatuses { materializedPartitions } "
        "... on TimePartitionStatuses { ranges { status startKey endKey } } } } } }".replace(
            "PATH", json.dumps(path)
        ),
    )
    statuses = data["assetNodeOrError"]["assetPartitionStatuses"]
    if "ranges" in statuses:
        return [f"{r['startKey']}..{r['endKey']}:{r['status']}" for r in statuses["ranges"]]
    return sorted(statuses["materializedPartitions"])


def test_dagster_dev_materializes_each_closed_hour_once(tmp_path: Path) -> None:
    home, dagster_home = tmp_path / "trident", tmp_path / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(REPO / "dagster.yaml", dagster_home / "dagster.yaml")
    produce_seed(PartitionedLog(home / "log"))
    port = _free_port()
    log_file = tmp_path / "dagster_dev.log"
    env = {  # what a shell gives `dagster dev`: no PYSPARK_PYTHON, no project variables
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "DAGSTER_HOME": str(dagster_home),
        "TRIDENT_HOME": str(home),
    }
    with log_file.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dagster",
                "dev",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-w",
                "workspace.yaml",
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(
            "the webserver",
            lambda: urllib.request.urlopen(f"{url}/server_info", timeout=5),
            180,
            log_file,
        )
        txids = [f"{t:010d}" for t in range(1, 5)]
        _wait("txids 1..4", lambda: _partitions(url, STATE) == txids, 420, log_file)
        hours = ["2026-01-01-00:00..2026-01-01-23:00:MATERIALIZED"]
        _wait("the finals of Jan 1st", lambda: _partitions(url, FINALS) == hours, 120, log_file)
        _wait(
            "the batch runs",
            lambda: all(r["status"] == "SUCCESS" for r in _runs(url)),
            120,
            log_file,
        )
        replay = _launch(url, [STATE], "0000000002")
        _wait("the replay", lambda: _run(url, replay)["status"] == "SUCCESS", 300, log_file)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home))) as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(FINALS)), limit=100
        ).records
        partitions = sorted(r.asset_materialization.partition for r in records)
        assert partitions == HOURS, "each closed hour exactly once, none by the replay"
        by_key = {r.asset_materialization.partition: r for r in records}
        first = by_key[HOURS[0]].asset_materialization.metadata
        assert (first["windows"].value, first["total"].value) == (18, 24.0)
        assert {by_key[h].run_id for h in HOURS} != {replay}
        replay_mats = [r for r in records if r.run_id == replay]
        assert replay_mats == []

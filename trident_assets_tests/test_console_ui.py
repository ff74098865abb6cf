"""The UI as the operator's console: a topology's overview and a finals asset, in Chromium.

A user's package ``shop_pkg`` declares topology ``shop``: JSON page views, a function that
refuses page ``boom``, views per page per 10 minutes (hourly finals). Its txids run as
Dagster runs in this process, against the Dagster instance of the home ``trident ui`` uses:
txid 1 (the seeded two hours of 2026-01-01 and 2 malformed records), txid 2 (a view at
03:05 that closes the hours 00:00 to 02:00, a late view and a malformed record), then txid 3
fails (page ``boom``). ``trident ui --module shop_pkg.defs`` then runs as a child process
with a clean environment; headless Chromium opens ``shop/overview`` (the last committed
txid, the backlog, the last failure, the dead letters per txid with their reasons, the
charts) and ``shop/views_10m_finals`` (3 hourly partitions, not every hour up to today,
opening on 01:00, the latest with windows). Screenshots: ``console_overview.png`` and
``console_finals.png`` in the test's tmp directory (and ``/tmp/trident_screens/``).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.cli.ui import dagster_home
from trident_assets.dagster.partitions import txid_key
from trident_assets.examples.page_views import seed_rows
from trident_assets.log.store import PartitionedLog
from trident_assets.names import DEAD_LETTERS_TABLE
from trident_assets_tests.dagster_dev_helpers import (
    VIEWPORT,
    chromium,
    free_port,
    gql,
    need_chromium,
    screenshot,
    server_up,
    show_markdown,
    start_ui,
    stop_ui,
    table_rows,
    wait_for,
)

SHOP_DEFS = """\
import os

import trident_assets as ta


def _checked(page):
    if page == "boom":
        raise ValueError("page 'boom' is not a page of the shop")
    return [(page,)]


shop = ta.TridentTopology("shop")
spout = ta.LogSpout(
    "views",
    ta.JsonScheme({"page": "string", "ts": "string"}),
    ta.SpoutConfig(kind=ta.SpoutKind.TRANSACTIONAL, max_batch_size=None),
)
(
    shop.new_stream("views", spout)
    .each("page", ta.PyFunction(_checked, {"checked": "string"}), "checked")
    .group_by("page")
    .window_aggregate(
        ta.EventWindow.tumbling("10 minutes", time_field="ts", allowed_lateness="1 minute"),
        ta.Count(),
        "views",
        spec=ta.StateSpec("views_10m"),
    )
)
defs = ta.trident_definitions(
    [shop], ta.TridentResource(home=os.environ["TRIDENT_HOME"]), max_attempts=1
)
"""
OVERVIEW = ["shop", "overview"]
FINALS = ["shop", "views_10m_finals"]
HOURS = ["2026-01-01-00:00", "2026-01-01-01:00", "2026-01-01-02:00"]
PARTITION_KEYS = """
query ($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) { ... on AssetNode { partitionKeys } }
}
"""


def _produce(log: PartitionedLog, records: list[bytes]) -> None:
    producer = log.producer("views")
    for record in records:
        producer.send(record)
    producer.flush()


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, txid: int) -> Any:
    instance.add_dynamic_partitions("shop_txids", [txid_key(txid)])
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        partition_key=txid_key(txid), instance=instance, raise_on_error=False
    )


def _dead_letters(home: Path) -> list[tuple[int, str]]:
    with DuckDBStore(home / "state.duckdb", read_only=True) as store:
        rows = store.fetch_rows(
            f"SELECT txid, reason FROM {DEAD_LETTERS_TABLE} ORDER BY txid, reason"
        )
    return [(int(t), str(r)) for t, r in rows]


def _commit_shop(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Txids 1 and 2 committed, txid 3 failed: Dagster runs on the home's instance."""
    (tmp_path / "shop_pkg").mkdir()
    (tmp_path / "shop_pkg" / "__init__.py").write_text("")
    (tmp_path / "shop_pkg" / "defs.py").write_text(SHOP_DEFS)
    log = PartitionedLog(home / "log")
    log.create_topic("views", 1)
    monkeypatch.setenv("TRIDENT_HOME", str(home))
    monkeypatch.syspath_prepend(str(tmp_path))
    defs = importlib.import_module("shop_pkg.defs").defs
    rows = [json.dumps(r).encode() for r in seed_rows()[:48]]
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home(home)))) as instance:
        _produce(log, [*rows, b"{not json", b'{"page": "home", "ts": 7'])
        assert _run(defs, instance, 1).success
        _produce(
            log,
            [
                b'{"page": "docs", "ts": "2026-01-01 03:05:00"}',
                b'{"page": "docs", "ts": "2026-01-01 00:30:00"}',  # late: 00:30 closed
                b"[1, 2]",
            ],
        )
        assert _run(defs, instance, 2).success
        _produce(log, [b'{"page": "boom", "ts": "2026-01-01 03:06:00"}'])
        assert not _run(defs, instance, 3).success


@pytest.mark.timeout(900)
def test_overview_and_finals_pages_show_the_topology_at_a_glance(
    tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_chromium()
    home = tmp_path / "home"
    _commit_shop(tmp_path, home, monkeypatch)
    letters = _dead_letters(home)
    assert [t for t, _ in letters] == [1, 1, 2, 2]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_file = tmp_path / "ui.log"
    ui_args = ["--home", "home", "--port", str(port), "--local-spark", "--module", "shop_pkg.defs"]
    proc = start_ui(tmp_path, *ui_args, log=log_file)
    try:
        wait_for("the webserver", server_up(url), 240, log_file)
        wait_for(
            "the code location",
            lambda: gql(url, PARTITION_KEYS, {"path": FINALS})["assetNodeOrError"],
            240,
            log_file,
        )
        keys = gql(url, PARTITION_KEYS, {"path": FINALS})["assetNodeOrError"]["partitionKeys"]
        assert keys == HOURS, "the partitions end at the watermark (03:04), not today"

        with chromium() as browser:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(f"{url}/assets/shop/overview", wait_until="networkidle")
            page.get_by_text("Start here").first.wait_for(timeout=60_000)
            page.get_by_text("dead letter reasons").first.wait_for(timeout=60_000)
            screenshot(page, tmp_path, "console_overview.png")
            rows = table_rows(page)  # key: [timestamp, value]
            assert rows["last committed txid"][-1] == "2"
            assert rows["backlog (records waiting)"][-1] == "1"
            assert rows["lag by partition"][-1] == "views@0=1"
            assert rows["quarantined"][-1] == "none"
            failure = rows["last failure"][-1]
            assert failure.startswith("txid 3 at "), failure
            assert failure.endswith(
                " (not committed yet): UserCodeError: each(page) -> page, ts, checked "
                "[PyFunction]: shop_pkg.defs._checked failed on input tuple ('boom',): "
                "ValueError: page 'boom' is not a page of the shop"
            ), failure
            assert rows["dead letters"][-1] == "4"
            # the bar chart of dead letters per txid, shown inline (a nested table)
            bars = "txid\tdead letters\n1\t" + "█" * 16 + " 2\n2\t" + "█" * 16 + " 2"
            assert rows["dead letters per txid"][-1] == bars
            assert rows["txids committed per minute"][-1].startswith("minute (UTC)\t")
            show_markdown(page)  # the reasons: longer, behind a button
            body = page.inner_text("body")
            for txid in (1, 2):
                reasons = sorted({r for t, r in letters if t == txid})
                row = next(
                    line
                    for line in body.splitlines()
                    if line.startswith(f"{txid}\t") and "█" not in line
                )
                for reason in reasons:
                    assert reason[:60] in row, (reason, row)
            page.keyboard.press("Escape")

            page.goto(f"{url}/assets/shop/views_10m_finals", wait_until="networkidle")
            page.get_by_text("fingerprint").first.wait_for(timeout=60_000)
            show_markdown(page)
            page.get_by_text("2026-01-01-01:00").first.wait_for(timeout=60_000)
            screenshot(page, tmp_path, "console_finals.png")
            rows = table_rows(page)  # the latest materialization: 01:00, 18 windows
            assert (rows["windows"][-1], rows["watermark"][-1]) == ("18", "2026-01-01 03:04:00")
            assert "2026-01-01-01:00" in page.inner_text("body")

            page.goto(f"{url}/assets/shop/views_10m_finals?view=partitions")
            page.get_by_text("2026-01-01-02:00").first.wait_for(timeout=60_000)
            screenshot(page, tmp_path, "console_finals_partitions.png")
            body = page.inner_text("body")
            assert "3 Partitions Selected" in body
            assert "Materialized (3)" in body
            assert "Missing (0)" in body
    finally:
        stop_ui(proc)

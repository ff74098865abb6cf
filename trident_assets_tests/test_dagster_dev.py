"""End to end: one real `dagster dev` on 127.0.0.1 whose coordinator sensors run two examples.

The server is started once for the module with the repository's workspace.yaml and
dagster.yaml. The word count is fed 20 sentences (3 batches of at most 8: one catch-up run),
then 4 more (a 4th batch in its own run); the page-views example is seeded at the start too
(49 views, batches of 16: 4 txids in one run of its own coordinator sensor), so the watermark
completes every hourly finals partition of 2026-01-01. The two topologies write one state
file, which a batch run holds for its whole run: their runs share the file's pool, so they
take turns in Dagster's queue and none fails on the lock.

The tests read what a user would see: GraphQL and the asset page in headless Chromium
(Debian's ``chromium`` package; CI installs it). Later tests launch runs as the UI does
(``launchRun`` with an asset selection, no sensor tags): the downstream example
``top_words``, two runs of the word count's state asset at once, which the shipped
dagster.yaml's pool serialises, and (last) a replay of page-views txid 2, which materializes
no hour again: each closed hour is materialized exactly once, read from the Dagster instance
in the server's home (read-only, while the server runs). Tests that look at runs select
their topology's. Screenshots of the asset pages are saved in the module's tmp directory and
copied to ``/tmp/trident_screens/``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.dagster.in_flight import batches_pool
from trident_assets.examples.page_views import produce_seed
from trident_assets.examples.word_count import SENTENCES
from trident_assets.log.store import PartitionedLog
from trident_assets_tests.conftest import JVM_ENV
from trident_assets_tests.dagster_dev_helpers import (
    VIEWPORT,
    chromium,
    free_port,
    gql,
    screenshot,
    server_up,
    show_markdown,
    start_server,
    stop_ui,
    wait_for,
)

REPO = Path(__file__).resolve().parents[1]
STATE = ["word_count", "word_counts"]
SPOUT = ["word_count", "sentences_batch"]
TOP_WORDS = ["word_count", "top_words"]
PV_STATE = ["page_views", "views_10m"]
PV_FINALS = ["page_views", "views_10m_finals"]
HOURS = [f"2026-01-01-{h:02d}:00" for h in range(24)]


@dataclass
class Dev:
    url: str
    home: Path
    sentences: list[str]
    log_file: Path
    dagster_home: Path


def _materialized(url: str, path: list[str]) -> list[str]:
    query = (
        "{ assetNodeOrError(assetKey: {path: PATH}) { ... on AssetNode { assetPartitionStatuses "
        "{ ... on DefaultPartitionStatuses { materializedPartitions failedPartitions } } } } }"
    )
    data = gql(url, query.replace("PATH", json.dumps(path)))
    statuses = data["assetNodeOrError"]["assetPartitionStatuses"]
    assert statuses["failedPartitions"] == [], statuses
    return sorted(statuses["materializedPartitions"])


def _produce(log: PartitionedLog, sentences: list[str]) -> None:
    producer = log.producer("sentences", partitioner="round_robin")
    for sentence in sentences:
        producer.send(sentence.encode())
    producer.flush()


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    root = tmp_path_factory.mktemp("dagster_dev")
    home, dagster_home = root / "trident", root / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(REPO / "dagster.yaml", dagster_home / "dagster.yaml")
    log = PartitionedLog(home / "log")
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    first = list(SENTENCES) * 4
    _produce(log, first)
    produce_seed(log)
    port = free_port()
    log_file = root / "dagster_dev.log"
    env = {  # what a shell gives `dagster dev`: no PYSPARK_PYTHON, no project variables
        "HOME": os.environ.get("HOME", str(root)),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "DAGSTER_HOME": str(dagster_home),
        "TRIDENT_HOME": str(home),
        "TRIDENT_MAX_BATCH_SIZE": "8",
        **JVM_ENV,
    }
    argv = [sys.executable, "-m", "dagster", "dev", "-h", "127.0.0.1", "-p", str(port)]
    proc = start_server([*argv, "-w", "workspace.yaml"], REPO, env, log_file)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("the webserver", server_up(url), 180, log_file)
        keys = [f"{t:010d}" for t in range(1, 4)]
        wait_for("txids 1..3", lambda: _materialized(url, STATE) == keys, 420, log_file)
        more = list(SENTENCES[:4])
        _produce(log, more)
        keys4 = [*keys, "0000000004"]
        wait_for("txid 4", lambda: _materialized(url, STATE) == keys4, 300, log_file)
        txids = [f"{t:010d}" for t in range(1, 5)]
        wait_for(
            "page-views txids 1..4", lambda: _partitions(url, PV_STATE) == txids, 420, log_file
        )
        hours = ["2026-01-01-00:00..2026-01-01-23:00:MATERIALIZED"]
        wait_for(
            "the finals of Jan 1st", lambda: _partitions(url, PV_FINALS) == hours, 120, log_file
        )
        wait_for(
            "the runs to finish",
            lambda: all(r["status"] == "SUCCESS" for r in _runs(url)),
            120,
            log_file,
        )
        yield Dev(url, home, first + more, log_file, dagster_home)
    finally:
        stop_ui(proc)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module's pages."""
    with chromium() as opened:
        yield opened


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A new tall page in the module's browser, closed after the test."""
    opened = browser.new_page(viewport=VIEWPORT)
    try:
        yield opened
    finally:
        opened.close()


def _runs(url: str, topology: str | None = None) -> list[dict[str, Any]]:
    """All runs, or (``topology``) those tagged ``trident/topology: <topology>`` (sensor runs)."""
    data = gql(
        url,
        "{ runsOrError { ... on Runs { results { runId status startTime endTime "
        "tags { key value } } } } }",
    )
    runs: list[dict[str, Any]] = data["runsOrError"]["results"]
    if topology is None:
        return runs
    tag = {"key": "trident/topology", "value": topology}
    return [r for r in runs if tag in r["tags"]]


def _partitions(url: str, path: list[str]) -> list[str]:
    """Materialized partitions: txid keys, or a time-partitioned asset's status ranges."""
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


def test_sensor_runs_batches_in_order_with_one_catch_up_run(dev: Dev) -> None:
    runs = sorted(_runs(dev.url, "word_count"), key=lambda r: r["startTime"])
    tags = [{t["key"]: t["value"] for t in r["tags"]} for r in runs]
    assert [r["status"] for r in runs] == ["SUCCESS", "SUCCESS"]
    assert tags[0]["dagster/asset_partition_range_start"] == "0000000001"
    assert tags[0]["dagster/asset_partition_range_end"] == "0000000003"
    assert tags[1]["dagster/partition"] == "0000000004"
    assert all(t["dagster/sensor_name"] == "word_count_coordinator" for t in tags)
    assert runs[0]["endTime"] <= runs[1]["startTime"], "runs of one topology never overlap"
    assert _materialized(dev.url, SPOUT) == [f"{t:010d}" for t in range(1, 5)]

    config = gql(dev.url, "{ instance { runQueueConfig { tagConcurrencyLimitsYaml } } }")
    limits = config["instance"]["runQueueConfig"]["tagConcurrencyLimitsYaml"]
    assert "trident/topology" in limits
    assert "limit: 1" in limits

    expected = Counter(w for s in dev.sentences for w in s.split())
    with DuckDBStore(dev.home / "state.duckdb") as store:
        state = {r["word"]: r["value"] for r in store.scan("word_count__word_counts").to_pylist()}
        assert store.last_committed("word_count") == 4
    assert state == dict(expected)


def test_asset_checks_pass_and_are_visible_through_graphql(dev: Dev) -> None:
    checks: dict[tuple[str, str], bool] = {}
    for path in (STATE, SPOUT):
        data = gql(
            dev.url,
            "{ assetNodeOrError(assetKey: {path: PATH}) { ... on AssetNode { assetChecksOrError "
            "{ ... on AssetChecks { checks { name executionForLatestMaterialization "
            "{ status evaluation { success } } } } } } } }".replace("PATH", json.dumps(path)),
        )
        for check in data["assetNodeOrError"]["assetChecksOrError"]["checks"]:
            execution = check["executionForLatestMaterialization"]
            checks[(path[-1], check["name"])] = (
                execution["status"] == "SUCCEEDED" and execution["evaluation"]["success"]
            )
    assert checks == {
        ("word_counts", "exactly_once"): True,
        ("sentences_batch", "txids_contiguous"): True,
        ("sentences_batch", "ranges_contiguous"): True,
        ("sentences_batch", "dead_letters_below_threshold"): True,
        ("sentences_batch", "lag_below_threshold"): True,
    }


def test_state_asset_page_shows_txids_and_plots_in_chromium(dev: Dev, page: Any) -> None:
    page.goto(f"{dev.url}/assets/word_count/word_counts", wait_until="networkidle")
    page.get_by_text("keys_updated").first.wait_for(timeout=60_000)
    # the status section (latest materialization's txid) loads on its own
    page.get_by_text("0000000004").first.wait_for(timeout=60_000)
    overview = page.inner_text("body")
    for label in ("txid", "keys_updated", "keys_skipped", "state_size", "Latest check"):
        assert label in overview
    page.get_by_text("Plots", exact=True).first.click()
    page.locator("canvas").first.wait_for(timeout=60_000)
    assert page.locator("canvas").count() >= 5, "one chart per numeric metadata key"
    plots = page.inner_text("body")
    assert "graphing values by partition" in plots
    page.goto(f"{dev.url}/assets/word_count/word_counts?view=partitions", wait_until="networkidle")
    page.get_by_text("0000000004").first.wait_for(timeout=60_000)
    partitions = page.inner_text("body")
    assert all(f"{t:010d}" in partitions for t in range(1, 5))


LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""


def _launch(url: str, assets: list[list[str]], partition: str) -> str:
    """Launch a run as the UI's Materialize button does: an asset selection, no trident tags."""
    params = {
        "selector": {
            "repositoryLocationName": "trident_assets",
            "repositoryName": "__repository__",
            "pipelineName": "__ASSET_JOB",
            "assetSelection": [{"path": path} for path in assets],
            "assetCheckSelection": [],
        },
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]},
    }
    result = gql(url, LAUNCH, {"params": params})["launchRun"]
    assert result["__typename"] == "LaunchRunSuccess", result
    return str(result["run"]["runId"])


def _run(url: str, run_id: str) -> dict[str, Any]:
    data = gql(
        url,
        "{ runOrError(runId: RUN) { ... on Run { runId status startTime endTime "
        "tags { key value } } } }".replace("RUN", json.dumps(run_id)),
    )
    return data["runOrError"]


def _finished(url: str, run_ids: list[str], log_file: Path) -> list[dict[str, Any]]:
    wait_for(
        f"runs {run_ids} to finish",
        lambda: all(_run(url, r)["status"] in ("SUCCESS", "FAILURE") for r in run_ids),
        300,
        log_file,
    )
    runs = [_run(url, r) for r in run_ids]
    assert [r["status"] for r in runs] == ["SUCCESS"] * len(run_ids), runs
    return runs


def test_ui_runs_without_sensor_tags_are_serialised_by_the_pool(dev: Dev) -> None:
    limits = gql(dev.url, "{ instance { concurrencyLimits { concurrencyKey slotCount } } }")
    # the pool exists once a run needed it: the sensor's runs did
    pool = batches_pool("word_count", None, dev.home / "state.duckdb")
    assert {"concurrencyKey": pool, "slotCount": 1} in limits["instance"]["concurrencyLimits"]
    ids = [_launch(dev.url, [STATE], "0000000004") for _ in range(2)]
    runs = sorted(_finished(dev.url, ids, dev.log_file), key=lambda r: r["startTime"])
    for run in runs:
        tags = {t["key"] for t in run["tags"]}
        assert "trident/topology" not in tags
        assert "dagster/sensor_name" not in tags
    assert runs[0]["endTime"] <= runs[1]["startTime"], (
        "two untagged runs of one topology launched at once never overlap"
    )
    assert _materialized(dev.url, STATE) == [f"{t:010d}" for t in range(1, 5)]


def test_downstream_top_words_shows_its_preview_in_chromium(
    dev: Dev, request: pytest.FixtureRequest
) -> None:
    (run_id,) = [_launch(dev.url, [TOP_WORDS], "0000000004")]
    _finished(dev.url, [run_id], dev.log_file)
    assert _materialized(dev.url, TOP_WORDS) == ["0000000004"]
    expected = Counter(w for s in dev.sentences for w in s.split())
    top_word, top_count = sorted(expected.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    page = request.getfixturevalue("page")  # Chromium: after the run
    page.goto(f"{dev.url}/assets/word_count/top_words", wait_until="networkidle")
    page.get_by_text("total_words").first.wait_for(timeout=60_000)
    show_markdown(page)
    cell = page.locator("td", has_text=top_word).first
    cell.wait_for(timeout=60_000)
    screenshot(page, dev.home.parent, "top_words.png")
    body = page.inner_text("body")
    assert "preview" in body
    assert f"{top_word}\t{top_count}" in body, "the Markdown preview's first row"


def test_state_asset_page_shows_the_preview_schema_and_table(dev: Dev, page: Any) -> None:
    page.goto(f"{dev.url}/assets/word_count/word_counts", wait_until="networkidle")
    page.get_by_text("keys_updated").first.wait_for(timeout=60_000)
    page.get_by_text("0000000004").first.wait_for(timeout=60_000)
    show_markdown(page)
    page.get_by_text("word_count__word_counts").first.wait_for(timeout=60_000)
    screenshot(page, dev.home.parent, "word_counts.png")
    body = page.inner_text("body")
    for label in ("preview", "Columns", "word", "count", "int64", "state_size", "attempt"):
        assert label in body, label


def test_page_views_materializes_each_closed_hour_once(dev: Dev) -> None:
    """Last in the module: its replay is a run the word count's tests do not expect."""
    url = dev.url
    txids = [f"{t:010d}" for t in range(1, 5)]
    assert _partitions(url, PV_STATE) == txids
    hours = ["2026-01-01-00:00..2026-01-01-23:00:MATERIALIZED"]
    assert _partitions(url, PV_FINALS) == hours
    assert all(r["status"] == "SUCCESS" for r in _runs(url, "page_views"))
    replay = _launch(url, [PV_STATE], "0000000002")
    wait_for("the replay", lambda: _run(url, replay)["status"] == "SUCCESS", 300, dev.log_file)
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dev.dagster_home))) as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(PV_FINALS)), limit=100
        ).records
    partitions = sorted(r.asset_materialization.partition for r in records)
    assert partitions == HOURS, "each closed hour exactly once, none by the replay"
    by_key = {r.asset_materialization.partition: r for r in records}
    first = by_key[HOURS[0]].asset_materialization.metadata
    assert (first["windows"].value, first["total"].value) == (18, 24.0)
    assert {by_key[h].run_id for h in HOURS} != {replay}
    replay_mats = [r for r in records if r.run_id == replay]
    assert replay_mats == []

"""End to end, as a new user: `trident demo --home H`, then `trident ui --home H`, then the browser.

The demo run is the session's ``demo_run`` (shared with the demo's story test in
test_cli.py): 5 txids of 4,000 sentences, txid 3 SIGKILLed between its state write and its
commit, then replayed (attempt 1). `trident ui` (``dagster dev`` over the demo's home) runs
as a child process with a clean environment in its own session, and is stopped by process
group. GraphQL cross-checks what the pages show; headless Chromium (Debian's ``chromium``)
opens the state asset's page (the ``preview`` of the latest txid) and its partition
``0000000003`` (the replayed txid: ``attempt`` 1). Screenshots go to the test's tmp directory
and to ``/tmp/trident_screens/`` (``demo_state.png``, ``demo_txid3.png``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets_tests.conftest import DemoRun
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
from trident_assets_tests.test_dagster_dev import STATE, _materialized

TXIDS = [f"{t:010d}" for t in range(1, 6)]
PREVIEW_ROWS = 10
"""Rows of a state's ``preview`` (the keys its txid touched, largest values first)."""

MATERIALIZATIONS = """
query ($path: [String!]!, $partition: String!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode {
      assetMaterializations(partitions: [$partition]) {
        runId
        partition
        metadataEntries {
          label
          ... on IntMetadataEntry { intValue }
          ... on BoolMetadataEntry { boolValue }
          ... on MarkdownMetadataEntry { mdStr }
        }
      }
    }
  }
}
"""
RUNS = """
query ($partition: String!) {
  runsOrError(filter: {tags: [{key: "dagster/partition", value: $partition}]}) {
    ... on Runs { results { runId status tags { key value } } }
  }
}
"""
CHECKS = """
query ($path: [String!]!) {
  assetNodeOrError(assetKey: {path: $path}) {
    ... on AssetNode {
      assetChecksOrError {
        ... on AssetChecks { checks { name executionForLatestMaterialization { status } } }
      }
    }
  }
}
"""


def _top(store: DuckDBStore, as_of: int | None) -> tuple[list[tuple[str, int]], int]:
    """The ``preview`` rows of word_counts (all keys touched) and its number of keys."""
    rows = store.scan("word_count__word_counts", as_of=as_of).to_pylist()
    counts = sorted(((r["word"], r["value"]) for r in rows), key=lambda kv: (-kv[1], kv[0]))
    return counts[:PREVIEW_ROWS], len(counts)


def _as_markdown(rows: list[tuple[str, int]], total: int) -> str:
    """The ``preview`` metadata as written (Markdown)."""
    body = [f"| {w} | {n} |" for w, n in rows]
    return "\n".join(["| word | count |", "|---|---|", *body]) + (
        f"\n\n{len(rows)} of {total} rows"
    )


def _as_shown(rows: list[tuple[str, int]], total: int) -> str:
    """The ``preview`` metadata as the UI renders it (a table's inner text)."""
    body = [f"{w}\t{n}" for w, n in rows]
    return "\n".join(["word\tcount", *body]) + f"\n\n{len(rows)} of {total} rows"


def _metadata(materialization: dict[str, Any]) -> dict[str, Any]:
    return {
        e["label"]: e.get("intValue", e.get("boolValue", e.get("mdStr")))
        for e in materialization["metadataEntries"]
    }


@pytest.mark.timeout(1200)
def test_demo_then_ui_shows_the_state_preview_and_the_replayed_txid(
    demo_run: DemoRun, tmp_path: Path
) -> None:
    done, home = demo_run.done, demo_run.home
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    story = done.stdout.splitlines()
    assert story[6] == (
        "   txid 3: child exit code -9 (SIGKILL); state and commit marker unchanged "
        "(last committed txid 2)"
    )
    assert story[7].startswith("   txid 3: 4,000 sentences replayed after the crash (attempt 1, ")
    assert story[-1] == "make ui"
    need_chromium()
    with DuckDBStore(home / "state.duckdb") as store:
        assert store.last_committed("word_count") == 5
        latest, latest_keys = _top(store, None)
        at_3, keys_3 = _top(store, 3)
    assert (latest_keys, keys_3) == (28, 28), "all 28 words by txid 3: previews are the top rows"

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_file = tmp_path / "ui.log"
    proc = start_ui(demo_run.cwd, "--home", str(home), "--port", str(port), log=log_file)
    try:
        wait_for("the webserver", server_up(url), 180, log_file)
        wait_for("the code location", lambda: _materialized(url, STATE) == TXIDS, 180, log_file)

        # GraphQL: txid 3 has one materialization, the replay's (attempt 1) ...
        data = gql(url, MATERIALIZATIONS, {"path": STATE, "partition": "0000000003"})
        (txid3,) = data["assetNodeOrError"]["assetMaterializations"]
        meta3 = _metadata(txid3)
        assert {k: meta3[k] for k in ("txid", "attempt", "already_committed")} == {
            "txid": 3,
            "attempt": 1,
            "already_committed": False,
        }
        assert meta3["preview"] == _as_markdown(at_3, keys_3)
        # ... by the second run of the partition; the first (attempt 0) was the killed one
        runs = gql(url, RUNS, {"partition": "0000000003"})["runsOrError"]["results"]
        attempts = sorted(
            ({t["key"]: t["value"] for t in r["tags"]}["trident/attempt"], r["status"], r["runId"])
            for r in runs
        )
        assert [(a, s) for a, s, _ in attempts] == [("0", "FAILURE"), ("1", "SUCCESS")]
        assert attempts[1][2] == txid3["runId"]
        data = gql(url, MATERIALIZATIONS, {"path": STATE, "partition": "0000000005"})
        (txid5,) = data["assetNodeOrError"]["assetMaterializations"]
        assert _metadata(txid5)["preview"] == _as_markdown(latest, latest_keys)
        # the lineage's check badges: every check of the latest materialization passed (the
        # demo's no-op re-run of txid 1 evaluates none, so none is shown for an old one)
        badges = {}
        for path in (STATE, ["word_count", "sentences_batch"]):
            data = gql(url, CHECKS, {"path": path})["assetNodeOrError"]["assetChecksOrError"]
            for check in data["checks"]:
                execution = check["executionForLatestMaterialization"] or {}
                badges[path[-1], check["name"]] = execution.get("status")
        assert badges == {
            ("word_counts", "exactly_once"): "SUCCEEDED",
            ("sentences_batch", "txids_contiguous"): "SUCCEEDED",
            ("sentences_batch", "ranges_contiguous"): "SUCCEEDED",
            ("sentences_batch", "dead_letters_below_threshold"): "SUCCEEDED",
            ("sentences_batch", "lag_below_threshold"): "SUCCEEDED",
        }

        with chromium() as browser:
            page = browser.new_page(viewport=VIEWPORT)
            # the asset page: its latest materialization (txid 5) and the state's preview
            page.goto(f"{url}/assets/word_count/word_counts", wait_until="networkidle")
            page.get_by_text("0000000005").first.wait_for(timeout=60_000)
            show_markdown(page)
            page.get_by_text(f"10 of {latest_keys} rows").first.wait_for(timeout=60_000)
            screenshot(page, tmp_path, "demo_state.png")
            rows = table_rows(page)  # key: [timestamp, value]
            assert rows["txid"][-1] == "5"
            assert rows["preview"][-1] == _as_shown(latest, latest_keys)

            # partition 0000000003: the replayed txid, attempt 1, and its preview
            page.goto(
                f"{url}/assets/word_count/word_counts?view=partitions&partition=0000000003",
                wait_until="networkidle",
            )
            show_markdown(page)
            page.get_by_text(f"10 of {keys_3} rows").first.wait_for(timeout=60_000)
            page.locator("td", has_text="attempt").first.wait_for(timeout=60_000)
            screenshot(page, tmp_path, "demo_txid3.png")
            rows = table_rows(page)  # key: [value, ""]
            assert (rows["txid"][0], rows["attempt"][0], rows["already_committed"][0]) == (
                "3",
                "1",
                "false",
            )
            assert rows["preview"][0] == _as_shown(at_3, keys_3)
    finally:
        stop_ui(proc)

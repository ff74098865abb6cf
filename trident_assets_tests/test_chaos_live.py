"""`bench.chaos_soak --live`: live mode survives SIGKILLs of its run's process and the daemon.

The soak runs as a child process with a clean environment: the shipped code location in live
mode over a fresh home, served by the Dagster daemon, with a warm Spark Connect server and a
steady producer. The live run's process is SIGKILLed ``kills`` times (the daemon once,
halfway); after each kill the coordinator sensor starts a new live run, which commits the
next txid. At the end the state equals what the log holds: no word lost or counted twice,
every malformed record a dead letter, the committed ranges tiling the log.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trident_assets_tests.children import clean_env
from trident_assets_tests.soaks import REPO, run_soak


@pytest.mark.timeout(1800)  # a loaded machine; nothing here asserts a duration
@pytest.mark.parametrize(
    "kills",
    [pytest.param(2, id="ci"), pytest.param(12, id="long", marks=pytest.mark.slow)],
)
def test_live_soak_every_kill_gets_a_new_live_run_and_nothing_is_lost(
    tmp_path: Path, kills: int
) -> None:
    result = run_soak(
        tmp_path, "--live", "--kills", str(kills), "--seed", "11",
        env=clean_env(tmp_path, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    assert result["ok"] is True
    assert result["problems"] == []
    assert result["kills"] == kills
    runs = [k["run_id"] for k in result["kill_figures"]]
    assert len(set(runs)) == kills, "each kill hit another live run"
    for kill, nxt in zip(result["kill_figures"], [*runs[1:], None], strict=True):
        assert kill["next_run_id"] != kill["run_id"]  # a new live run followed the kill ...
        assert nxt in (None, kill["next_run_id"])  # ... and it is the one killed next
        assert kill["restart_s"] > 0
        if kill["txid_tag"] is not None and kill["txid_tag"] > kill["latest_at_kill"]:
            assert kill["next_run_attempt"] >= 1, "the txid in flight is replayed"
    assert result["live_runs"]["FAILURE"] == kills  # the killed ones, nothing else failed
    assert result["daemon_kill"]["next_txid_s"] > 0
    cmp = result["comparison"]
    assert (cmp["lost"], cmp["double_counted"], cmp["keys_mismatched"]) == (0, 0, 0)
    assert cmp["words_truth"] == cmp["words_state"] > 0
    assert cmp["dead_letters"] == cmp["malformed_in_log"] == result["produced"]["bad"]
    assert cmp["ranges_ok"] is True
    assert cmp["replica_mismatched"] == 0

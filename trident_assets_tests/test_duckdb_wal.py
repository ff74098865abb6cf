"""A torn DuckDB write-ahead log: the last txid is lost whole and recomputed exactly.

A crash can leave the ``.wal`` file next to the DuckDB state file cut short: the tail of the
last commit never reached the disk. DuckDB then replays the WAL up to the last complete
commit and drops the torn entry, so the store reopens at the previous txid, its values, commit
marker and spout metadata together (they commit in one transaction). The lost txid is then
run again from the retained log, and the result is exact because the log is replayable.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spouts.config import SpoutKind
from trident_assets_tests.test_executor import (
    SENTENCES,
    _counts,
    _log,
    _plan_values,
    _send,
    _spout_rows,
    _word_count,
    _words,
)


def _wal(db: Path) -> Path:
    return db.with_name(db.name + ".wal")


@pytest.mark.parametrize("kind", [SpoutKind.OPAQUE, SpoutKind.TRANSACTIONAL])
@pytest.mark.parametrize("cut", ["txid_2_entry_half", "txid_2_entry_last_byte"])
def test_a_torn_wal_reopens_at_the_previous_txid_and_the_rerun_is_exact(
    spark: Any, tmp_path: Path, kind: SpoutKind, cut: str
) -> None:
    log = _log(tmp_path, {"sentences": 1})
    _send(log, "sentences", SENTENCES)
    topo, counts = _word_count("wal", kind=kind, max_batch_size=2)
    live = tmp_path / "live" / "state.duckdb"
    store = DuckDBStore(live, config={"checkpoint_threshold": "1GB"})
    runner = TopologyRunner(topo, spark, store, log)
    first = runner.run_batch(1)
    after_1 = _wal(live).stat().st_size
    spout_rows_1 = _spout_rows(store)
    second = runner.run_batch(2)
    after_2 = _wal(live).stat().st_size
    assert after_2 > after_1 > 0, "both commits are in the WAL, none checkpointed"
    spout_rows = _spout_rows(store)
    # what a crash right after txid 2's commit leaves on disk: the file and its WAL
    crashed = tmp_path / "crashed" / "state.duckdb"
    crashed.parent.mkdir()
    shutil.copyfile(live, crashed)
    shutil.copyfile(_wal(live), _wal(crashed))
    store.close()
    size = after_1 + (after_2 - after_1) // 2 if cut == "txid_2_entry_half" else after_2 - 1
    with _wal(crashed).open("r+b") as wal:
        wal.truncate(size)

    reopened = DuckDBStore(crashed)
    runner = TopologyRunner(topo, spark, reopened, log)
    assert runner.last_committed() == 1
    txid_1 = _plan_values(log, first.plans["sentences"])
    assert txid_1 == SENTENCES[:2]
    assert _counts(reopened, counts.table) == dict(_words(txid_1))
    # a transactional spout records txid 2's ranges at first emission, in a transaction of
    # their own before the commit: they survive, uncommitted, and the replay re-reads them
    recorded_2 = [(*r[:7], False, *r[8:]) for r in spout_rows]
    transactional = kind is SpoutKind.TRANSACTIONAL
    assert _spout_rows(reopened) == spout_rows_1 + (recorded_2 if transactional else [])

    rerun = runner.run_batch(2)
    assert rerun.applied
    assert rerun.plans["sentences"].ranges == second.plans["sentences"].ranges
    txids_1_2 = txid_1 + _plan_values(log, rerun.plans["sentences"])
    assert txids_1_2 == SENTENCES[:4]
    assert _counts(reopened, counts.table) == dict(_words(txids_1_2))
    assert _spout_rows(reopened) == spout_rows
    assert runner.last_committed() == 2
    reopened.close()

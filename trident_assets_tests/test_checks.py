"""The O(recent) ranges_contiguous lookup equals the full-history one (real Dagster instance)."""

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from trident_assets.dagster import checks
from trident_assets.dagster.partitions import txid_key
from trident_assets.dagster.spout_checks import ranges_check
from trident_assets.runtime.outcomes import BatchOutcome
from trident_assets.spouts.config import SpoutKind
from trident_assets.spouts.ranges import BatchPlan, PartitionRange

KEY = dg.AssetKey(["t", "s_batch"])
Ranges = list[tuple[str, int, int]]


def _instance(tmp_path: Path) -> dg.DagsterInstance:
    (tmp_path / "dg").mkdir()
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path / "dg")))


def _mat(
    inst: dg.DagsterInstance, txid: int, offsets: dict[str, list[int]] | None, *, done: bool = False
) -> None:
    meta: dict[str, Any] = {"txid": txid, "already_committed": dg.MetadataValue.bool(done)}
    if offsets is not None:
        meta["offsets"] = dg.MetadataValue.json(offsets)
    inst.report_runless_asset_event(
        dg.AssetMaterialization(asset_key=KEY, partition=txid_key(txid), metadata=meta)
    )


def _outcome(txid: int, ranges: Ranges, *, applied: bool = True, skipped: int = 0) -> BatchOutcome:
    plan = BatchPlan.of(
        "t",
        "s",
        txid,
        SpoutKind.OPAQUE,
        [PartitionRange(p, a, b, "") for p, a, b in ranges],
        replay=False,
        skipped_by_retention=skipped,
    )
    return BatchOutcome("t", txid, applied, plans={"s": plan})


def _fast_and_full(
    inst: dg.DagsterInstance, outcomes: list[BatchOutcome]
) -> tuple[dict[str, int], dict[str, int]]:
    fast = checks._previous_ends(inst, KEY, "s", outcomes, None)
    history = checks._spout_history(inst, KEY)
    full = checks._previous_ends(inst, KEY, "s", outcomes, history)
    needed = {r.partition for o in outcomes if o.applied for r in o.plans["s"].ranges}
    return (
        {p: v for p, v in fast.items() if p in needed},
        {p: v for p, v in full.items() if p in needed},
    )


def test_usual_case_reads_only_the_previous_txid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every partition in txid N-1's record: no full-history read, same answer, check passes."""
    inst = _instance(tmp_path)
    for t in range(1, 6):
        _mat(inst, t, {"a@0": [10 * (t - 1), 10 * t - 1], "a@1": [5 * (t - 1), 5 * t - 1]})
    _mat(inst, 3, {"a@0": [0, 0]}, done=True)
    reads: list[int] = []
    real = checks._spout_history

    def spy(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[int, dict[str, Any]]:
        reads.append(1)
        return real(instance, key)

    monkeypatch.setattr(checks, "_spout_history", spy)
    outcomes = [_outcome(6, [("a@0", 50, 60), ("a@1", 25, 30)])]
    previous = checks._previous_ends(inst, KEY, "s", outcomes, None)
    assert previous == {"a@0": 50, "a@1": 25}
    assert reads == []
    assert ranges_check(KEY, "s", previous, outcomes).passed


def test_latest_applied_record_of_a_txid_wins(tmp_path: Path) -> None:
    """A txid applied twice: the later record counts; already-committed records never do."""
    inst = _instance(tmp_path)
    _mat(inst, 1, {"a@0": [0, 9]})
    _mat(inst, 2, {"a@0": [10, 19]})
    _mat(inst, 2, {"a@0": [10, 14]})
    _mat(inst, 2, {"a@0": [10, 99]}, done=True)
    outcomes = [_outcome(3, [("a@0", 20, 30)])]
    fast, full = _fast_and_full(inst, outcomes)
    assert fast == full == {"a@0": 15}
    previous = checks._previous_ends(inst, KEY, "s", outcomes, None)
    result = ranges_check(KEY, "s", previous, outcomes)
    assert not result.passed
    assert result.metadata["problems"].value == [
        "txid 3 a@0: starts at 20, skipping offsets 15..19"
    ]


def test_partition_absent_from_the_previous_batch_reads_the_history(tmp_path: Path) -> None:
    """A partition txid N-1 did not read is looked up further back (full history)."""
    inst = _instance(tmp_path)
    _mat(inst, 1, {"a@0": [0, 9], "a@1": [0, 4]})
    _mat(inst, 2, {"a@0": [10, 19]})
    outcomes = [_outcome(3, [("a@0", 20, 30), ("a@1", 3, 8)])]
    fast, full = _fast_and_full(inst, outcomes)
    assert fast == full == {"a@0": 20, "a@1": 5}
    previous = checks._previous_ends(inst, KEY, "s", outcomes, None)
    assert ranges_check(KEY, "s", previous, outcomes).metadata["problems"].value == [
        "txid 3 a@1: starts at 3, overlapping the previous batch (which ended before 5)"
    ]


def test_previous_txid_without_an_applied_record_reads_the_history(tmp_path: Path) -> None:
    """Txid N-1 only has an already-committed record: the latest applied one before it counts."""
    inst = _instance(tmp_path)
    _mat(inst, 1, {"a@0": [0, 9]})
    _mat(inst, 2, {"a@0": [10, 19]}, done=True)
    _mat(inst, 3, None)
    fast, full = _fast_and_full(inst, [_outcome(4, [("a@0", 10, 20)])])
    assert fast == full == {"a@0": 10}


def test_range_runs_first_txid_and_unapplied_batches(tmp_path: Path) -> None:
    """The first applied txid decides; txid 1 and runs with nothing applied read nothing."""
    inst = _instance(tmp_path)
    _mat(inst, 1, {"a@0": [0, 9]})
    outcomes = [
        _outcome(2, [("a@0", 10, 20)], applied=False),
        _outcome(3, [("a@0", 10, 20)]),
        _outcome(4, [("a@0", 20, 30), ("a@1", 0, 5)]),
    ]
    fast, full = _fast_and_full(inst, outcomes)
    assert fast == full == {"a@0": 10}
    assert checks._previous_ends(inst, KEY, "s", [_outcome(1, [("a@0", 0, 10)])], None) == {}
    assert checks._previous_ends(inst, KEY, "s", [_outcome(5, [])], None) == {}
    unapplied = [_outcome(5, [("a@0", 0, 1)], applied=False)]
    assert checks._previous_ends(inst, KEY, "s", unapplied, None) == {}


def test_a_skip_by_retention_passes(tmp_path: Path) -> None:
    """Offsets that retention deleted before an opaque spout read them are no skip."""
    inst = _instance(tmp_path)
    _mat(inst, 1, {"a@0": [0, 9]})
    outcomes = [_outcome(2, [("a@0", 15, 20)], skipped=5)]
    previous = checks._previous_ends(inst, KEY, "s", outcomes, None)
    assert previous == {"a@0": 10}
    assert ranges_check(KEY, "s", previous, outcomes).passed

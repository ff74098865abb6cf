"""Long runs hold: a TopologyRunner in a child process, a producer appending all along.

Both tests run :func:`bench.long_run.soak` (the run process is ``bench.long_run runner``: one
Spark session, one DuckDB store, the example word count with an opaque spout, the read replica,
state compaction and log retention). They check the state key by key against the producer's
own counts, that the log's and the replica's files and the state file stay bounded, and that
the run process's RSS (Python and JVM) does not grow past a generous bound. Never timings.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.long_run import EARLY, TOPIC, parser, soak
from trident_assets.log.store import PartitionedLog

REPO = Path(__file__).resolve().parents[1]


def _soak(root: Path, monkeypatch: pytest.MonkeyPatch, *argv: str) -> dict[str, Any]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    args = parser().parse_args(["--root", str(root), *argv])
    root.mkdir()
    lines: list[str] = []
    result = soak(args, root, emit=lines.append)
    print("\n".join(lines))
    return result


def _check(result: dict[str, Any], root: Path, txids: int) -> None:
    assert result["problems"] == [], result["problems"]
    assert result["ok"] is True
    # exactly once against the producer's own counts
    assert (result["lost"], result["double_counted"], result["keys_mismatched"]) == (0, 0, 0)
    assert result["keys_truth"] == result["keys_state"] > 0
    assert result["words_truth"] == result["words_state"] > 0
    assert result["dead_letters"] == result["produced"]["bad"]
    assert result["produced"]["good"] > 0
    rows = result["rows"]
    early = next(r for r in rows if r["txid"] == EARLY)
    end = rows[-1]
    assert str(end["txid"]).startswith("end:")
    assert any(r["txid"] == txids for r in rows)
    # bounded files: the end against the early checkpoint, plus a small constant
    assert end["log_files"] <= 2 * early["log_files"] + 100
    assert end["replica_files"] <= 2 * early["replica_files"] + 60
    # a saw-tooth: the versioned log grows until compaction (min_rows), the WAL until checkpoint
    assert end["state_mb"] <= 2 * early["state_mb"] + 32
    # retention really ran: the first records are gone from every partition
    log = PartitionedLog(root / "log")
    assert all(log.earliest_offset(TOPIC, p) > 0 for p in range(log.partitions(TOPIC)))
    # memory stays flat (generous bounds: the JVM's heap settles in steps)
    assert early["rss_py_mb"] > 0
    assert early["rss_jvm_mb"] > 0
    assert end["rss_py_mb"] <= early["rss_py_mb"] + 256
    assert end["rss_jvm_mb"] <= early["rss_jvm_mb"] + 1024


@pytest.mark.timeout(1800)  # a loaded machine; nothing here asserts a duration
def test_short_long_run_exact_and_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "soak"
    result = _soak(
        root, monkeypatch, "--txids", "25", "--rate", "100", "--every", "5", "--retention", "5",
        "--keep-txids", "8", "--batch-size", "1000", "--max-spout-pending", "4",
    )  # fmt: skip
    _check(result, root, 25)


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_long_run_200_txids_exact_and_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "soak"
    result = _soak(root, monkeypatch, "--txids", "200", "--every", "50")
    _check(result, root, 200)
    assert {10, 100, 200} <= {r["txid"] for r in result["rows"]}

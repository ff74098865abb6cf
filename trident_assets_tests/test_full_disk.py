"""A real full disk (ENOSPC) on a small tmpfs: during a log append and during a commit.

Each test mounts its own tmpfs (root and CAP_SYS_ADMIN needed: where the machine refuses the
mount the tests skip, saying so; ``test_chaos.py`` keeps a simulated full disk that runs
everywhere). Expected: a clear :class:`DiskFullError` naming what was being written and what
to do, the log and the state readable afterwards, no half-published segment, and once space
is freed the same records go through exactly once.
"""

from __future__ import annotations

import os
import random
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.errors import DiskFullError
from trident_assets.examples.word_count import build_word_count
from trident_assets.log.store import PartitionedLog
from trident_assets.log.verify import verify_log
from trident_assets.spark.executor import TopologyRunner


def _fill(directory: Path, keep_free: int) -> Path:
    """Fill the filesystem of ``directory`` up to ``keep_free`` bytes left; the filler file."""
    filler = directory / "filler"
    stats = os.statvfs(directory)
    size = stats.f_bavail * stats.f_frsize - keep_free
    with open(filler, "wb") as out:
        out.write(os.urandom(max(0, size)))
    return filler


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for this test only, unmounted afterwards."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); the simulated full "
                    "disk of test_chaos.py still runs")  # fmt: skip
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_log_append_on_a_full_disk_fails_clearly_and_loses_nothing(small_fs: Path) -> None:
    log = PartitionedLog(small_fs / "log")
    log.create_topic("t", 1)
    producer = log.producer("t")
    values = [os.urandom(50_000) for _ in range(8)]
    for value in values[:4]:
        producer.send(value)
    assert producer.flush() == {0: (0, 3)}
    filler = _fill(small_fs, keep_free=100_000)
    for value in values[4:]:
        producer.send(value)
    with pytest.raises(DiskFullError) as full:
        producer.flush()
    assert str(full.value) == (
        f"no space left on device appending 4 records to t@0 (offsets 4..7) under "
        f"{small_fs / 'log' / 't' / '00000'}: nothing was appended. Free space on that device "
        "(e.g. retention: PartitionedLog.delete_records_before), then send them again"
    )
    assert log.latest_offset("t", 0) == 4
    # the complete segment and its checksum file; no half-written segment or checksum
    assert sorted(
        p.name for p in (small_fs / "log" / "t" / "00000").iterdir() if p.name != ".lock"
    ) == [
        "00000000000000000000-00000000000000000003.parquet",
        "00000000000000000000-00000000000000000003.parquet.crc32",
    ], "no half-written segment left behind"
    [report] = verify_log(log)
    assert (report.ok, report.latest) == (True, 4)
    filler.unlink()
    assert producer.flush() == {0: (4, 7)}, "the buffered records were kept for the retry"
    assert log.read("t", 0, 0, 7).column("value").to_pylist() == values


def test_commit_on_a_full_disk_fails_clearly_and_the_state_survives(
    spark: Any, tmp_path: Path, small_fs: Path
) -> None:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("sentences", 1)
    log.create_topic("word_queries", 1)
    rnd = random.Random(5)
    sentences = [" ".join(f"w{rnd.randrange(10**6)}" for _ in range(8)) for _ in range(6_000)]
    producer = log.producer("sentences")
    for sentence in sentences:
        producer.send(sentence.encode())
    producer.flush()
    topo = build_word_count("wc_enospc", max_batch_size=2_000)
    db = small_fs / "state.duckdb"
    store = DuckDBStore(db)
    runner = TopologyRunner(topo, spark, store, log)
    assert runner.run_batch(1).applied
    before = store.scan("wc_enospc__word_counts").sort_by("word")
    filler = _fill(small_fs, keep_free=200_000)
    with pytest.raises(DiskFullError) as full:
        runner.run_batch(2)
    assert str(full.value) == (
        f"no space left on device committing txid 2 of topology 'wc_enospc' to state file "
        f"{db}: nothing of it was committed. Free space on that device, then run txid 2 again"
    )
    assert "No space left on device" in str(full.value.__cause__)
    store.close()
    filler.unlink()
    with DuckDBStore(db) as reopened:
        assert reopened.last_committed("wc_enospc") == 1
        assert reopened.scan("wc_enospc__word_counts").sort_by("word").equals(before)
        runner = TopologyRunner(topo, spark, reopened, log)
        assert [o.txid for o in runner.run_batches([2, 3])] == [2, 3]
        counts = {
            r["word"]: r["value"] for r in reopened.scan("wc_enospc__word_counts").to_pylist()
        }
        assert counts == dict(Counter(w for s in sentences for w in s.split()))

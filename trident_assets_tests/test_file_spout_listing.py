"""A file spout's planning without Spark: which files a txid takes, in which order, at what cost."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from trident_assets.backends.duckdb_spout_meta import DuckDBSpoutMetaStore
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.errors import BatchUnavailableError, ConfigError
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.coordinator import BatchCoordinator
from trident_assets.spouts.file_catalog import FileCatalog
from trident_assets.spouts.file_listing import Location
from trident_assets.spouts.file_spout import FileSpout

T0 = 1_700_000_000  # seconds: every file's modification time is set from here


def _file(folder: Path, name: str, data: bytes, mtime_s: float) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    ns = int(mtime_s * 1e9)
    os.utime(path, ns=(ns, ns))
    return path


class _Planner:
    """A file spout's coordinator over a DuckDB store: emit and commit txids as a runner does."""

    def __init__(self, tmp_path: Path, spout: FileSpout) -> None:
        self.store = DuckDBStore(tmp_path / "state.duckdb")
        self.log = PartitionedLog(tmp_path / "log")
        self.spout = spout
        self.source = spout.source(self.log)
        self.coordinator = BatchCoordinator(
            "t", "files", self.source, spout.config, DuckDBSpoutMetaStore(self.store)
        )

    def take(self, txid: int, *, commit: bool = True) -> list[str]:
        plan = self.coordinator.emit(txid)
        if commit:
            with self.store.transaction():
                self.coordinator.commit(plan)
        return [e.path for e in self.spout.files(self.log, plan)]

    def close(self) -> None:
        self.store.close()


def _spout(path: Path | str, **options: Any) -> FileSpout:
    options.setdefault("stable_after", 0)
    return FileSpout(str(path), JsonScheme({"word": "string"}), **options)


def test_temp_names_are_never_taken_and_recent_files_wait_for_their_quiet_period(
    tmp_path: Path,
) -> None:
    land = tmp_path / "in"
    now = [T0 + 100.0]
    _file(land, "a.jsonl", b"{}\n", T0)
    for name in (".a.jsonl", "_b.jsonl", "c.jsonl.tmp", "d.crc", "e._COPYING_", "_tmp/f.jsonl"):
        _file(land, name, b"{}\n", T0)
    _file(land, "g.jsonl", b"{}\n", T0 + 98.0)  # modified 2 s ago: still being written
    catalog = FileCatalog(tmp_path / "idx", Location(str(land)), 5.0, clock=lambda: now[0])
    assert catalog.refresh() == 1  # one file waits
    assert catalog.last_refresh is not None
    assert (catalog.last_refresh.listed, catalog.last_refresh.unstable) == (2, 1)
    assert catalog.bounded_end(0, 10, None) == 1  # a batch takes it: numbered 0
    assert [e.path for e in catalog.entries(0, 10)] == ["a.jsonl"]
    now[0] = T0 + 103.0  # 5 s after g's last write
    assert catalog.refresh() == 2
    assert catalog.bounded_end(1, 10, None) == 2
    assert [e.path for e in catalog.entries(0, 10)] == ["a.jsonl", "g.jsonl"]
    catalog.close()


def test_a_txid_takes_the_next_files_by_modification_time_then_name(tmp_path: Path) -> None:
    land = tmp_path / "in"
    _file(land, "b.jsonl", b"1\n", T0 + 1)
    _file(land, "a.jsonl", b"1\n", T0 + 1)
    _file(land, "c.jsonl", b"1\n", T0)
    _file(land, "sub/d.jsonl", b"1\n", T0 + 2)
    planner = _Planner(tmp_path, _spout(land, max_files=2))
    assert planner.take(1) == ["c.jsonl", "a.jsonl"]
    assert planner.take(2) == ["b.jsonl", "sub/d.jsonl"]
    assert planner.take(3) == []
    planner.close()


def test_a_late_file_with_an_older_modification_time_is_taken_exactly_once(
    tmp_path: Path,
) -> None:
    land = tmp_path / "in"
    _file(land, "b.jsonl", b"1\n", T0 + 20)
    _file(land, "c.jsonl", b"1\n", T0 + 30)
    planner = _Planner(tmp_path, _spout(land))
    assert planner.take(1) == ["b.jsonl", "c.jsonl"]
    _file(land, "a.jsonl", b"1\n", T0 + 10)  # copied in later, keeping its older time
    assert planner.take(2) == ["a.jsonl"]
    assert planner.take(3) == []
    assert planner.take(4) == []
    planner.close()


def test_max_bytes_ends_a_batch_early_and_a_larger_file_is_a_batch_of_its_own(
    tmp_path: Path,
) -> None:
    land = tmp_path / "in"
    for i, size in enumerate((10, 10, 30, 10, 10, 10)):
        _file(land, f"f{i}.jsonl", b"x" * size, T0 + i)
    planner = _Planner(tmp_path, _spout(land, max_files=3, max_bytes=25))
    batches = [planner.take(txid) for txid in range(1, 6)]
    assert batches == [
        ["f0.jsonl", "f1.jsonl"],
        ["f2.jsonl"],
        ["f3.jsonl", "f4.jsonl"],
        ["f5.jsonl"],
        [],
    ]
    planner.close()


def test_a_glob_selects_files_and_star_stays_within_one_folder(tmp_path: Path) -> None:
    land = tmp_path / "in"
    for name in ("a.jsonl", "b.csv", "x/c.jsonl", "x/y/d.jsonl"):
        _file(land, name, b"1\n", T0)
    names = sorted(r for r, _ in Location(f"{land}/*.jsonl").names())
    assert names == ["a.jsonl"]
    names = sorted(r for r, _ in Location(f"file://{land}/**/*.jsonl").names())
    assert names == ["a.jsonl", "x/c.jsonl", "x/y/d.jsonl"]
    assert sorted(r for r, _ in Location(str(land)).names()) == [
        "a.jsonl",
        "b.csv",
        "x/c.jsonl",
        "x/y/d.jsonl",
    ]
    assert Location(f"file://{land}/*.jsonl").url == f"file://{land}/*.jsonl"


def test_a_recorded_file_changed_or_removed_refuses_its_txid_naming_the_file(
    tmp_path: Path,
) -> None:
    land = tmp_path / "in"
    _file(land, "a.jsonl", b"1\n", T0)
    b = _file(land, "b.jsonl", b"2\n", T0 + 1)
    spout = _spout(land)
    planner = _Planner(tmp_path, spout)
    plan = planner.coordinator.emit(1)  # recorded, not committed (a run that crashed)
    entries = spout.files(planner.log, plan)
    spout.check(plan, entries)
    _file(land, "b.jsonl", b"22\n", T0 + 1)
    with pytest.raises(BatchUnavailableError) as refused:
        spout.check(plan, entries)
    assert str(refused.value) == (
        f"cannot read txid 1 of spout 'files': its file file://{b} has changed: recorded 2 "
        "bytes modified at 2023-11-14T22:13:21.000000+00:00, now 3 bytes modified at "
        "2023-11-14T22:13:21.000000+00:00. A transactional batch is never read with other "
        "data; put the file back as it was, or redeploy the topology with a fresh state."
    )
    b.unlink()
    with pytest.raises(BatchUnavailableError, match=f"its file file://{b} no longer exists"):
        spout.check(plan, entries)
    replayed = planner.coordinator.emit(1)  # a replay plans the same files, never others
    assert (replayed.replay, replayed.ranges) == (True, plan.ranges)
    planner.close()


def test_a_rebuilt_file_index_never_replays_batches_recorded_against_the_old_one(
    tmp_path: Path,
) -> None:
    land = tmp_path / "in"
    _file(land, "a.jsonl", b"1\n", T0)
    planner = _Planner(tmp_path, _spout(land))
    planner.coordinator.emit(1)
    planner.source.catalog.close()
    for index in (tmp_path / "log" / "_file_spouts").iterdir():
        index.unlink()
    fresh = _spout(land)
    coordinator = BatchCoordinator(
        "t", "files", fresh.source(planner.log), fresh.config, DuckDBSpoutMetaStore(planner.store)
    )
    with pytest.raises(BatchUnavailableError, match="deleted and re-created"):
        coordinator.emit(1)
    planner.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_files": 0}, "FileSpout max_files must be an integer >= 1, got 0"),
        ({"max_bytes": -1}, "FileSpout max_bytes must be an integer >= 1, got -1"),
        ({"stable_after": -1}, "FileSpout stable_after must be a number of seconds >= 0"),
    ],
)
def test_bad_options_are_refused_at_declaration(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _spout(tmp_path, **options)


def test_planning_a_txid_over_100000_files_costs_the_same_after_many_txids(
    tmp_path: Path,
) -> None:
    """Each txid's listing stats no file it saw before and reads no index row again.

    Counted, not timed; the planning time per txid is printed (``-s``) for the record.
    """
    land = tmp_path / "in"
    land.mkdir()
    for i in range(100_000):
        (land / f"f{i:06d}.jsonl").write_bytes(b"1\n")
    planner = _Planner(tmp_path, _spout(land, max_files=1000))
    catalog = planner.source.catalog
    assert planner.take(1)[:2] == ["f000000.jsonl", "f000001.jsonl"]
    assert catalog.last_refresh is not None
    refresh = catalog.last_refresh
    assert (refresh.listed, refresh.statted, refresh.numbered) == (100_000, 100_000, 1000)
    seconds = []
    for txid in range(2, 22):
        started = time.perf_counter()
        taken = planner.take(txid)
        seconds.append(time.perf_counter() - started)
        assert len(taken) == 1000
        assert taken[0] == f"f{(txid - 1) * 1000:06d}.jsonl"
        refresh = catalog.last_refresh
        assert (refresh.listed, refresh.statted, refresh.loaded, refresh.numbered) == (
            100_000,
            0,
            0,
            1000,
        )
    print(
        f"planning over 100,000 files: txids 2-6 {sum(seconds[:5]) / 5:.3f} s each, "
        f"txids 17-21 {sum(seconds[-5:]) / 5:.3f} s each"
    )
    planner.close()

"""Spark's own sources read a txid's files: the same rows, checks and dead letters as Python's."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trident_assets import Count
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.errors import ConfigError
from trident_assets.log.store import PartitionedLog
from trident_assets.spark import file_native, file_reader
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.file_reader import read_files
from trident_assets.spark.file_schemes import ParquetScheme
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spark.scoped_conf import scoped_conf
from trident_assets.spouts.file_listing import FileEntry, Location, fingerprint_bytes
from trident_assets.spouts.file_spout import FileSpout
from trident_assets.stream.topology import StateSpec, TridentTopology
from trident_assets_tests.faults import Crash, crash_at

T0_NS = 1_700_000_000_123_456_789
STAMP = dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
LINES = (
    b'{"word": "cow"}\r\n\n{"word": "moon"}',
    b'\n\n{"word": "owl"}\n',
    b"not json\n",
    b'{"word": "jumped"}\n{"word": 3}\n',
    b'{"word": "cow"}\r\n\r\n',
)
"""Five lines files; their non-empty lines by number (from 1), a trailing CR removed."""
KEPT = (
    [(1, b'{"word": "cow"}'), (3, b'{"word": "moon"}')],
    [(3, b'{"word": "owl"}')],
    [(1, b"not json")],
    [(1, b'{"word": "jumped"}'), (2, b'{"word": 3}')],
    [(1, b'{"word": "cow"}')],
)
LINE_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


def _entry(folder: Path, name: str, data: bytes, mtime_ns: int) -> FileEntry:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return FileEntry(name, len(data), mtime_ns, fingerprint_bytes(data))


def _rows(frame: Any, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in columns) for r in frame.collect())


def _scans(frame: Any) -> int:
    return len(
        re.findall(
            r"FileScan (?:text|parquet)", frame._jdf.queryExecution().executedPlan().toString()
        )
    )


def test_lines_files_are_read_a_scan_each_in_one_plan_with_the_python_readers_rows(
    spark: Any, tmp_path: Path
) -> None:
    entries = [
        _entry(tmp_path, f"{i}.jsonl", data, T0_NS + i * 1000) for i, data in enumerate(LINES)
    ]
    location = Location(str(tmp_path))
    expected = sorted(
        (f"file://{tmp_path}/{i}.jsonl", 0, n, STAMP + dt.timedelta(microseconds=i), None, v, None)
        for i, kept in enumerate(KEPT)
        for n, v in kept
    )
    scheme = JsonScheme({"word": "string"})
    native = read_files(spark, location, entries, scheme, "lines", 1, native=True)
    python = read_files(spark, location, entries, scheme, "lines", 1, native=False)
    assert _scans(native) == 5
    assert "MapInArrow" not in native._jdf.queryExecution().executedPlan().toString()
    with scoped_conf(spark, file_native.whole_file_conf()):
        assert _rows(native, *LINE_COLUMNS) == expected
    assert _rows(python, *LINE_COLUMNS) == expected
    assert native.schema.simpleString() == python.schema.simpleString()


def test_many_parquet_files_are_read_in_one_scan_numbered_by_row_and_checked_each(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_native, "SCAN_FILES", 2)
    entries = []
    for i in range(3):
        path = tmp_path / f"{i}.parquet"
        pq.write_table(pa.table({"word": [f"w{i}a", None, f"w{i}c"], "n": [1, 2, 3]}), path)
        os.utime(path, ns=(T0_NS + i * 1000, T0_NS + i * 1000))
        data = path.read_bytes()
        entries.append(FileEntry(path.name, len(data), T0_NS + i * 1000, fingerprint_bytes(data)))
    location = Location(str(tmp_path))
    scheme = ParquetScheme({"word": "string"})
    expected = sorted(
        (f"file://{tmp_path}/{i}.parquet", 0, n, STAMP + dt.timedelta(microseconds=i), None, w)
        for i in range(3)
        for n, w in ((1, f"w{i}a"), (2, None), (3, f"w{i}c"))
    )
    native = read_files(spark, location, entries, scheme, "parquet", native=True)
    python = read_files(spark, location, entries, scheme, "parquet", native=False)
    assert _scans(native) == 2
    assert native.columns == python.columns
    assert _rows(native, *native.columns) == expected
    assert _rows(python, *python.columns) == expected
    late = T0_NS + 7_000_000  # Spark knows a modification time to the millisecond
    moved = [
        *entries[:2],
        FileEntry(entries[2].path, entries[2].size, late, entries[2].fingerprint),
    ]
    frame = read_files(spark, location, moved, scheme, "parquet", native=True)
    changed = f"file file://{tmp_path}/2.parquet changed after it was recorded for its txid"
    with pytest.raises(Exception, match=re.escape(changed)):
        frame.collect()


def _spout_run(
    spark: Any, tmp_path: Path, spout: FileSpout, fault: Any = None
) -> tuple[TopologyRunner, DuckDBStore, str]:
    topo = TridentTopology("wc")
    counts = (
        topo.new_stream("files", spout)
        .group_by("word")
        .persistent_aggregate(StateSpec.transactional("counts"), "word", Count(), "count")
    )
    store = DuckDBStore(tmp_path / "home" / "state.duckdb")
    log = PartitionedLog(tmp_path / "home" / "log")
    return TopologyRunner(topo, spark, store, log, fault=fault), store, counts.table


@pytest.mark.parametrize("point", ["after_state_write", "before_commit"])
def test_native_json_lines_dead_letter_by_file_and_line_and_a_crash_replays_the_same_files(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    monkeypatch.setattr(file_reader, "NATIVE_FORMATS", ("lines", "csv", "parquet"))
    monkeypatch.setattr(file_native, "SCAN_FILES", 2)
    land = tmp_path / "in"
    for i, data in enumerate(LINES):
        _entry(land, f"{i}.jsonl", data, T0_NS + i * 1_000_000_000)

    def spout() -> FileSpout:
        return FileSpout(str(land), JsonScheme({"word": "string"}), max_files=3, stable_after=0)

    runner, store, table = _spout_run(spark, tmp_path, spout(), crash_at(point))
    with pytest.raises(Crash):
        runner.run_batch(1)
    _entry(land, "late.jsonl", b'{"word": "late"}\n', T0_NS - 10**9)  # before the replay
    store.close()
    runner, store, table = _spout_run(spark, tmp_path, spout())
    outcomes = list(runner.run_batches([1, 2]))
    assert [o.applied for o in outcomes] == [True, True]
    assert outcomes[0].plans["files"].replay
    counts = {r["word"]: r["value"] for r in store.scan(table).to_pylist()}
    assert counts == {"cow": 2, "moon": 1, "owl": 1, "jumped": 1, "late": 1}
    dead = store.fetch_rows(
        'SELECT txid, topic, partition, "offset", reason, value FROM _trident_dead_letters '
        'ORDER BY txid, topic, "offset"'
    )
    assert dead == [
        (1, f"file://{land}/2.jsonl", 0, 1, "value is not valid JSON (RFC 8259)", b"not json"),
        (
            2,
            f"file://{land}/3.jsonl",
            0,
            2,
            "member 'word' is an integer, declared string",
            b'{"word": 3}',
        ),
    ]
    store.close()


def test_native_parquet_schema_mismatch_refuses_the_txid_naming_file_and_field(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_reader, "NATIVE_FORMATS", ("lines", "csv", "parquet"))
    land = tmp_path / "in"
    land.mkdir()
    for i, table in enumerate(
        [pa.table({"word": ["cow", None]}), pa.table({"word": pa.array([1], pa.int64())})]
    ):
        path = land / f"{i}.parquet"
        pq.write_table(table, path)
        os.utime(path, ns=(T0_NS + i * 10**9, T0_NS + i * 10**9))
    spout = FileSpout(str(land), ParquetScheme({"word": "string"}), max_files=1, stable_after=0)
    runner, store, table = _spout_run(spark, tmp_path, spout)
    assert runner.run_batch(1).applied
    assert {r["word"]: r["value"] for r in store.scan(table).to_pylist()} == {"cow": 1}
    assert store.fetch_rows('SELECT topic, "offset", reason FROM _trident_dead_letters') == [
        (f"file://{land}/0.parquet", 2, "field 'word' is null")
    ]
    with pytest.raises(ConfigError) as refused:
        runner.run_batch(2)
    assert str(refused.value) == (
        f"txid 2: Parquet file file://{land}/1.parquet: field 'word' is int64 in the file, "
        "declared string. Declare the file's type or rewrite the file."
    )
    assert store.last_committed("wc") == 1
    store.close()

"""How a file spout's files are read: Spark's own sources or the Python reader, same records."""

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
from trident_assets.errors import BatchUnavailableError
from trident_assets.log.store import PartitionedLog
from trident_assets.spark import file_reader
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.file_native import reads_natively, split_message
from trident_assets.spark.file_reader import read_files
from trident_assets.spark.file_schemes import CsvScheme, ParquetScheme
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spark.scoped_conf import scoped_conf
from trident_assets.spouts.file_listing import FileEntry, Location, fingerprint_bytes
from trident_assets.spouts.file_spout import FileSpout
from trident_assets.stream.topology import StateSpec, TridentTopology

T0_NS = 1_700_000_000_123_456_789
STAMP = dt.datetime(2023, 11, 14, 22, 13, 20, 123456)
JSON_A = b'{"word": "cow"}\r\n\n{"word": "\xff"}\n\r\n\n{"word": "moon"}'
JSON_B = b'{"word": "owl"}\n' * 3
CSV = b"word,n\r\ncow,1\n\nmoon,2\n"
LINE_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


def _entry(folder: Path, name: str, data: bytes, mtime_ns: int) -> FileEntry:
    path = folder / name
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return FileEntry(name, len(data), mtime_ns, fingerprint_bytes(data))


def _rows(frame: Any, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in columns) for r in frame.collect())


def test_lines_are_numbered_from_1_counting_empty_lines_and_crlf_the_same_either_way(
    spark: Any, tmp_path: Path
) -> None:
    a = _entry(tmp_path, "a.jsonl", JSON_A, T0_NS)
    b = _entry(tmp_path, "b.jsonl", JSON_B, T0_NS + 1_000_000)
    location = Location(str(tmp_path))
    assert [reads_natively(location, e, "lines") for e in (a, b)] == [True, True]
    scheme = JsonScheme({"word": "string"})
    later = STAMP + dt.timedelta(milliseconds=1)
    uri_a, uri_b = f"file://{tmp_path}/a.jsonl", f"file://{tmp_path}/b.jsonl"
    expected = [
        (uri_a, 0, 1, STAMP, None, b'{"word": "cow"}', None),
        (uri_a, 0, 3, STAMP, None, b'{"word": "\xff"}', None),
        (uri_a, 0, 6, STAMP, None, b'{"word": "moon"}', None),
        *[(uri_b, 0, n, later, None, b'{"word": "owl"}', None) for n in (1, 2, 3)],
    ]
    default = read_files(spark, location, [a, b], scheme, "lines", 1)  # the Python reader
    assert "MapInArrow" in default._jdf.queryExecution().executedPlan().toString()
    native = read_files(spark, location, [a, b], scheme, "lines", 1, native=True)
    python = read_files(spark, location, [a, b], scheme, "lines", 1, native=False)
    assert "MapInArrow" not in native._jdf.queryExecution().executedPlan().toString()
    assert "MapInArrow" in python._jdf.queryExecution().executedPlan().toString()
    assert _rows(native, *LINE_COLUMNS) == expected
    assert _rows(python, *LINE_COLUMNS) == expected
    assert native.schema.simpleString() == python.schema.simpleString()


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_csv_lines_skip_the_header_either_way(spark: Any, tmp_path: Path, native: bool) -> None:
    c = _entry(tmp_path, "c.csv", CSV, T0_NS)
    scheme = CsvScheme({"word": "string", "n": "int"})
    frame = read_files(spark, Location(str(tmp_path)), [c], scheme, "csv", 1, native=native)
    assert _rows(frame, "offset", "value") == [(2, b"cow,1"), (4, b"moon,2")]


def test_parquet_rows_are_the_same_natively_or_by_python_and_odd_paths_go_to_python(
    spark: Any, tmp_path: Path
) -> None:
    paths = {name: tmp_path / name for name in ("p.parquet", "q q.parquet")}
    for i, path in enumerate(paths.values()):
        pq.write_table(pa.table({"word": [f"w{i}a", f"w{i}b"], "skip": [1, 2]}), path)
        os.utime(path, ns=(T0_NS, T0_NS))
    entries = [
        FileEntry(n, p.stat().st_size, T0_NS, fingerprint_bytes(p.read_bytes()))
        for n, p in paths.items()
    ]
    location = Location(str(tmp_path))
    assert [reads_natively(location, e, "parquet") for e in entries] == [True, False]
    p, q = (f"file://{tmp_path}/{n}" for n in paths)
    expected = [
        (p, 0, 1, STAMP, None, "w0a"),
        (p, 0, 2, STAMP, None, "w0b"),
        (q, 0, 1, STAMP, None, "w1a"),
        (q, 0, 2, STAMP, None, "w1b"),
    ]
    scheme = ParquetScheme({"word": "string"})
    for native in (True, False):
        frame = read_files(spark, location, entries, scheme, "parquet", native=native)
        assert frame.columns == [
            "topic",
            "partition",
            "offset",
            "timestamp",
            "value",
            "__file_word",
        ]
        assert _rows(frame, *frame.columns) == expected


def test_a_file_split_across_tasks_fails_the_read_naming_it(spark: Any, tmp_path: Path) -> None:
    a = _entry(tmp_path, "a.jsonl", JSON_B * 20, T0_NS)
    frame = read_files(
        spark, Location(str(tmp_path)), [a], JsonScheme({"word": "string"}), "lines", native=True
    )
    split = {"spark.sql.files.maxPartitionBytes": "64", "spark.sql.files.openCostInBytes": "0"}
    message = re.escape(split_message(f"file://{tmp_path}/a.jsonl"))
    with scoped_conf(spark, split), pytest.raises(Exception, match=message):
        frame.collect()


def test_a_file_whose_size_or_time_differs_from_its_record_fails_the_native_read_naming_it(
    spark: Any, tmp_path: Path
) -> None:
    a = _entry(tmp_path, "a.jsonl", JSON_A, T0_NS)
    moved = FileEntry(a.path, a.size, T0_NS - 5_000_000, a.fingerprint)
    location = Location(str(tmp_path))
    frame = read_files(
        spark, location, [moved], JsonScheme({"word": "string"}), "lines", native=True
    )
    message = (
        f"file file://{tmp_path}/a.jsonl changed after it was recorded for its txid "
        f"(51 bytes, fingerprint {a.fingerprint}; now 51 bytes): a transactional batch is "
        "never read with other data; put the file back as it was"
    )
    with pytest.raises(Exception, match=re.escape(message)):
        frame.collect()
    p = tmp_path / "p.parquet"
    pq.write_table(pa.table({"word": ["cow"]}), p)
    os.utime(p, ns=(T0_NS, T0_NS))
    late = FileEntry(
        "p.parquet", p.stat().st_size, T0_NS + 7_000_000, fingerprint_bytes(p.read_bytes())
    )
    scheme = ParquetScheme({"word": "string"})
    frame = read_files(spark, location, [late], scheme, "parquet", native=True)
    with pytest.raises(Exception, match=re.escape(f"file file://{p} changed after it was")):
        frame.collect()


def test_a_file_whose_content_or_size_changed_is_refused_before_the_native_read(
    spark: Any, tmp_path: Path
) -> None:
    a = _entry(tmp_path, "a.jsonl", JSON_A, T0_NS)
    _entry(tmp_path, "a.jsonl", JSON_A.replace(b"cow", b"dog"), T0_NS)
    location = Location(str(tmp_path))
    with pytest.raises(BatchUnavailableError) as refused:
        read_files(spark, location, [a], JsonScheme({"word": "string"}), "lines", native=True)
    assert str(refused.value) == (
        f"file file://{tmp_path}/a.jsonl changed after it was recorded for its txid "
        f"(51 bytes, fingerprint {a.fingerprint}; now 51 bytes): a transactional batch is "
        "never read with other data; put the file back as it was"
    )
    _entry(tmp_path, "a.jsonl", JSON_A + b"\n", T0_NS)
    with pytest.raises(BatchUnavailableError, match=re.escape("(51 bytes, fingerprint ")):
        read_files(spark, location, [a], JsonScheme({"word": "string"}), "lines", native=True)


@pytest.mark.parametrize("max_files", [1, 2], ids=["two_txids_one_job", "one_txid"])
@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_files_above_sparks_split_size_are_read_whole_with_exact_line_numbers(
    spark: Any, tmp_path: Path, max_files: int, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark would split a file of 6 MB into tasks; a txid's read keeps each whole."""
    if native:
        monkeypatch.setattr(file_reader, "NATIVE_FORMATS", ("lines", "csv", "parquet"))
    land = tmp_path / "in"
    land.mkdir()
    line = b'{"word": "cow"}\n'
    n = (6 << 20) // len(line)
    for i in range(2):
        _entry(land, f"{i}.jsonl", line * n + b"not json\n", T0_NS + i * 1_000_000_000)
    spout = FileSpout(
        str(land), JsonScheme({"word": "string"}), max_files=max_files, stable_after=0
    )
    topo = TridentTopology("big")
    counts = (
        topo.new_stream("files", spout)
        .group_by("word")
        .persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "count")
    )
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, PartitionedLog(tmp_path / "log"))
    outcomes = list(runner.run_batches(range(1, 3 - max_files + 1)))
    assert [o.applied for o in outcomes] == [True] * (3 - max_files)
    assert {r["word"]: r["value"] for r in store.scan(counts.table).to_pylist()} == {"cow": 2 * n}
    dead = store.fetch_rows(
        'SELECT topic, "offset", reason FROM _trident_dead_letters ORDER BY topic'
    )
    assert dead == [
        (f"file://{land}/{i}.jsonl", n + 1, "value is not valid JSON (RFC 8259)") for i in range(2)
    ]
    store.close()


def _parquet(folder: Path, name: str, words: list[str]) -> FileEntry:
    path = folder / name
    pq.write_table(pa.table({"word": words}), path)
    os.utime(path, ns=(T0_NS, T0_NS))
    return FileEntry(name, path.stat().st_size, T0_NS, fingerprint_bytes(path.read_bytes()))


def test_batches_read_together_share_a_scan_and_tag_each_row_with_its_batch(
    spark: Any, tmp_path: Path
) -> None:
    """Parquet files of two batches: one native scan, rows tagged by their file's batch."""
    a, b, c, odd = (
        _parquet(tmp_path, name, [f"{name[0]}1", f"{name[0]}2"])
        for name in ("a.parquet", "b.parquet", "c.parquet", "odd name.parquet")
    )
    location = Location(str(tmp_path))
    scheme = ParquetScheme({"word": "string"})
    frame = file_reader.read_file_batches(
        spark, location, [(0, 7, [a, b]), (2, 8, []), (3, 9, [c, odd])], scheme, "parquet", "t"
    )
    assert frame.columns == [
        "topic", "partition", "offset", "timestamp", "value", "__file_word", "t"
    ]  # fmt: skip
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert plan.count("FileScan parquet") == 1, "a, b and c: one scan of three files"
    assert "MapInArrow" in plan, "the odd name: the Python reader"
    assert _rows(frame, "__file_word", "offset", "t") == [
        ("a1", 1, 0), ("a2", 2, 0), ("b1", 1, 0), ("b2", 2, 0),
        ("c1", 1, 3), ("c2", 2, 3), ("o1", 1, 3), ("o2", 2, 3),
    ]  # fmt: skip
    empty = file_reader.read_file_batches(spark, location, [(0, 7, [])], scheme, "parquet", "t")
    assert empty.columns == frame.columns
    assert empty.count() == 0


def test_a_changed_file_of_a_later_batch_refuses_the_read_naming_it(
    spark: Any, tmp_path: Path
) -> None:
    first = _parquet(tmp_path, "a.parquet", ["a"])
    second = _parquet(tmp_path, "b.parquet", ["b"])
    grown = FileEntry(second.path, second.size + 1, second.mtime_ns, second.fingerprint)
    with pytest.raises(BatchUnavailableError, match=re.escape(f"file://{tmp_path}/b.parquet")):
        file_reader.read_file_batches(
            spark,
            Location(str(tmp_path)),
            [(0, 1, [first]), (1, 2, [grown])],
            ParquetScheme({"word": "string"}),
            "parquet",
            "t",
        )

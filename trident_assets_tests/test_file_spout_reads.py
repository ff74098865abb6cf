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

from trident_assets.errors import BatchUnavailableError
from trident_assets.spark.file_native import reads_natively
from trident_assets.spark.file_reader import read_files
from trident_assets.spark.file_schemes import CsvScheme, ParquetScheme
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.file_listing import FileEntry, Location, fingerprint_bytes

T0_NS = 1_700_000_000_123_000_000
STAMP = dt.datetime(2023, 11, 14, 22, 13, 20, 123000)
JSON_A = b'{"word": "cow"}\r\n\n{"word": "\xff"}\n\n{"word": "moon"}'
JSON_B = b'{"word": "owl"}\n' * 3
CSV = b"word,n\r\ncow,1\n\nmoon,2\n"


def _entry(folder: Path, name: str, data: bytes, mtime_ns: int) -> FileEntry:
    path = folder / name
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))
    return FileEntry(name, len(data), mtime_ns, fingerprint_bytes(data))


def _rows(frame: Any, *columns: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in columns) for r in frame.collect())


LINE_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")


@pytest.mark.parametrize(
    ("bound", "native"),
    [(1 << 20, [True, True]), (48, [False, True]), (0, [False, False])],
    ids=["native", "mixed", "python"],
)
def test_lines_are_the_same_records_read_natively_or_by_python(
    spark: Any, tmp_path: Path, bound: int, native: list[bool]
) -> None:
    a = _entry(tmp_path, "a.jsonl", JSON_A, T0_NS)
    b = _entry(tmp_path, "b.jsonl", JSON_B, T0_NS + 1_000_000)
    location = Location(str(tmp_path))
    assert [reads_natively(location, e, "lines", bound) for e in (a, b)] == native
    frame = read_files(spark, location, [a, b], JsonScheme({"word": "string"}), "lines", 1, bound)
    later = STAMP + dt.timedelta(milliseconds=1)
    uri_a, uri_b = f"file://{tmp_path}/a.jsonl", f"file://{tmp_path}/b.jsonl"
    assert _rows(frame, *LINE_COLUMNS) == [
        (uri_a, 0, 1, STAMP, None, b'{"word": "cow"}', None),
        (uri_a, 0, 3, STAMP, None, b'{"word": "\xff"}', None),
        (uri_a, 0, 5, STAMP, None, b'{"word": "moon"}', None),
        *[(uri_b, 0, n, later, None, b'{"word": "owl"}', None) for n in (1, 2, 3)],
    ]


@pytest.mark.parametrize("bound", [1 << 20, 0], ids=["native", "python"])
def test_csv_lines_skip_the_header_either_way(spark: Any, tmp_path: Path, bound: int) -> None:
    c = _entry(tmp_path, "c.csv", CSV, T0_NS)
    scheme = CsvScheme({"word": "string", "n": "int"})
    frame = read_files(spark, Location(str(tmp_path)), [c], scheme, "csv", 1, bound)
    assert _rows(frame, "offset", "value") == [(2, b"cow,1"), (4, b"moon,2")]


def test_parquet_is_read_natively_unless_spark_would_name_the_path_differently(
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
    assert [reads_natively(location, e, "parquet", 0) for e in entries] == [True, False]
    frame = read_files(spark, location, entries, ParquetScheme({"word": "string"}), "parquet")
    assert frame.columns == ["topic", "partition", "offset", "timestamp", "value", "__file_word"]
    p, q = (f"file://{tmp_path}/{n}" for n in paths)
    assert _rows(frame, *frame.columns) == [
        (p, 0, 1, STAMP, None, "w0a"),
        (p, 0, 2, STAMP, None, "w0b"),
        (q, 0, 1, STAMP, None, "w1a"),
        (q, 0, 2, STAMP, None, "w1b"),
    ]


def test_a_file_changed_after_its_fingerprint_check_fails_the_native_read_naming_it(
    spark: Any, tmp_path: Path
) -> None:
    a = _entry(tmp_path, "a.jsonl", JSON_A, T0_NS)
    moved = FileEntry(a.path, a.size, T0_NS - 5_000_000, a.fingerprint)
    frame = read_files(
        spark, Location(str(tmp_path)), [moved], JsonScheme({"word": "string"}), "lines"
    )
    message = (
        f"file file://{tmp_path}/a.jsonl changed after it was recorded for its txid "
        f"(49 bytes, fingerprint {a.fingerprint}; now 49 bytes): a transactional batch is "
        "never read with other data; put the file back as it was"
    )
    with pytest.raises(Exception, match=re.escape(message)):
        frame.collect()


def test_a_file_whose_content_changed_is_refused_before_the_native_read(
    spark: Any, tmp_path: Path
) -> None:
    a = _entry(tmp_path, "a.jsonl", JSON_A, T0_NS)
    _entry(tmp_path, "a.jsonl", JSON_A.replace(b"cow", b"dog"), T0_NS)
    with pytest.raises(BatchUnavailableError) as refused:
        read_files(spark, Location(str(tmp_path)), [a], JsonScheme({"word": "string"}), "lines")
    assert str(refused.value) == (
        f"file file://{tmp_path}/a.jsonl changed after it was recorded for its txid "
        f"(49 bytes, fingerprint {a.fingerprint}; now 49 bytes): a transactional batch is "
        "never read with other data; put the file back as it was"
    )

"""Spark reads of log ranges: the same records as direct reads, in parallel, validated."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from trident_assets.errors import BatchUnavailableError, ConfigError, CorruptSegmentError
from trident_assets.log import PartitionedLog, Record
from trident_assets.log.records import log_spark_schema
from trident_assets.spark import log_reader
from trident_assets.spark.log_reader import (
    INLINE_MAX_RECORDS_CONF,
    read_ranges,
    read_ranges_tagged,
    split_conf,
)
from trident_assets.spark.scoped_conf import scoped_conf


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as plain dicts sorted by (topic, partition, offset); timestamps as epoch ms."""
    table = table.set_column(
        table.schema.get_field_index("timestamp"),
        "timestamp",
        table.column("timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()),
    )
    rows = table.to_pylist()
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


@pytest.fixture
def log(tmp_path: Path) -> PartitionedLog:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("events", 4)
    log.create_topic("other", 1)
    for p in range(4):
        for batch in range(3):
            log.append(
                "events",
                p,
                [
                    Record(
                        value=f"p{p}-b{batch}-{i}".encode(),
                        key=None if i % 3 == 0 else f"k{i}".encode(),
                        timestamp_ms=1_700_000_000_000 + 1000 * batch + i,
                        headers=[("n", str(i).encode()), ("empty", None)] if i % 2 else None,
                    )
                    for i in range(10 + p)
                ],
            )
    log.append("other", 0, [Record(b"o0"), Record(b"o1")])
    return log


@pytest.mark.parametrize("inline_records", [0, 10_000])
def test_spark_read_equals_direct_read(
    spark: Any, log: PartitionedLog, inline_records: int
) -> None:
    """The same records by Spark's file scan and inline (the driver reads a small batch)."""
    ranges = [
        ("events", 0, 5, 24),
        ("events", 1, 0, 32),
        ("events", 2, 11, 11),
        ("events", 3, 0, 38),
    ]
    ranges.append(("other", 0, 1, 1))
    df = read_ranges(spark, log, ranges, inline_records=inline_records)
    assert (df.inputFiles() == []) == bool(inline_records)
    assert df.schema == log_spark_schema()
    direct = pa.concat_tables([log.read(*r) for r in ranges])
    assert _rows(df.toArrow()) == _rows(direct)
    assert df.count() == direct.num_rows == 20 + 33 + 1 + 39 + 1


def test_tagged_read_tags_each_range_in_one_scan(spark: Any, log: PartitionedLog) -> None:
    ranges = [
        (7, "events", 0, 0, 9),
        (8, "events", 0, 10, 24),  # adjacent to txid 7's range
        (9, "events", 0, 27, 29),  # after a gap: offsets 25 and 26 are not read
        (8, "events", 1, 3, 5),
        (9, "events", 2, 4, 3),  # empty
        (9, "other", 0, 0, 1),
    ]
    df = read_ranges_tagged(spark, log, ranges, "txid")
    got = sorted(
        (r["topic"], r["partition"], r["offset"], r["txid"]) for r in df.toArrow().to_pylist()
    )
    expected = sorted(
        (topic, p, o, tag) for tag, topic, p, first, last in ranges for o in range(first, last + 1)
    )
    assert got == expected
    assert len(got) == 10 + 15 + 3 + 3 + 2
    assert ("events", 0, 25, 9) not in got
    empty = read_ranges_tagged(spark, log, [(1, "events", 1, 0, -1)], "txid")
    assert empty.count() == 0
    assert empty.schema["txid"].dataType.simpleString() == "bigint"


def test_split_per_file_changes_tasks_not_records(
    spark: Any, log: PartitionedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Big segments get a task each; tiny ones stay packed; the records are the same."""
    ranges = [(7, "events", 0, 0, 9), (8, "events", 0, 10, 24), (8, "events", 1, 0, 32)]
    plain = [r[1:] for r in ranges]
    assert split_conf(log, plain) == {}, "tiny segments: Spark packs them"
    assert split_conf(log, plain[:1]) == {}, "one file: nothing to split"
    monkeypatch.setattr(log_reader, "PER_FILE_TASK_MIN_BYTES", 1)
    conf = split_conf(log, plain)
    assert list(conf) == ["spark.sql.files.openCostInBytes"]
    before = spark.conf.get("spark.sql.files.openCostInBytes")
    packed = read_ranges_tagged(spark, log, ranges, "txid")
    expected = sorted(tuple(r) for r in packed.select("offset", "txid").collect())
    with scoped_conf(spark, conf):
        split = read_ranges_tagged(spark, log, ranges, "txid")
        assert split.rdd.getNumPartitions() == 6, "one task per segment file (3 + 3)"
        got = sorted(tuple(r) for r in split.select("offset", "txid").collect())
    assert got == expected
    assert len(got) == 10 + 15 + 33
    assert spark.conf.get("spark.sql.files.openCostInBytes") == before, "restored"


def test_overlapping_scopes_restore_the_value_from_before_the_first(spark: Any) -> None:
    """Two runners' jobs in two threads of one session: A opens, B opens, A closes, B closes."""
    key = "spark.sql.codegen.wholeStage"
    before = spark.conf.get(key)
    a, b = scoped_conf(spark, {key: "false"}), scoped_conf(spark, {key: "false"})
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert spark.conf.get(key) == "false", "B's job still runs"
    b.__exit__(None, None, None)
    assert spark.conf.get(key) == before, "not the value A had set when B opened"
    with scoped_conf(spark, {"spark.sql.files.maxRecordsPerFile": "7"}):
        assert spark.conf.get("spark.sql.files.maxRecordsPerFile") == "7"
    assert spark.conf.get("spark.sql.files.maxRecordsPerFile") == "0"


@pytest.mark.parametrize("inline_records", [0, 10_000])
def test_partial_segments_and_empty_ranges(
    spark: Any, log: PartitionedLog, inline_records: int
) -> None:
    ranges = [("events", 0, 3, 2), ("events", 2, 12, 13), ("events", 3, 39, 38)]
    df = read_ranges(spark, log, ranges, inline_records=inline_records)
    assert [r["offset"] for r in df.orderBy("offset").collect()] == [12, 13]
    assert _rows(df.toArrow()) == _rows(log.read("events", 2, 12, 13))


def _has_filter(df: Any) -> bool:
    return "Filter" in df._jdf.queryExecution().optimizedPlan().toString()


def test_whole_segments_are_read_without_an_offset_filter(spark: Any, log: PartitionedLog) -> None:
    # partition 1 holds segments 0..10, 11..21, 22..32: ranges of whole segments need no
    # filter (its offsets would be literals compiled into Spark's code every batch)
    whole = [("events", 1, 11, 32), ("events", 0, 0, 9), ("other", 0, 0, 1)]
    df = read_ranges(spark, log, whole, inline_records=0)
    assert not _has_filter(df)
    direct = pa.concat_tables([log.read(*r) for r in whole])
    assert _rows(df.toArrow()) == _rows(direct)
    assert direct.num_rows == 22 + 10 + 2
    # one range ending inside a segment: the filter stays, for every range of the read
    partial = [("events", 1, 11, 31), ("events", 0, 0, 9)]
    df = read_ranges(spark, log, partial, inline_records=0)
    assert _has_filter(df)
    assert _rows(df.toArrow()) == _rows(pa.concat_tables([log.read(*r) for r in partial]))


def _generated_code(df: Any) -> list[str]:
    """The lines of Spark's generated Java source for ``df``'s plan."""
    debug = df.sparkSession._jvm.org.apache.spark.sql.execution.debug.package
    text = debug.codegenString(df._jdf.queryExecution().executedPlan())
    return [line for line in text.splitlines() if line.startswith("/*")]


def test_tagged_whole_segments_are_tagged_by_file_with_the_same_code(
    spark: Any, log: PartitionedLog
) -> None:
    # partition 0 holds segments 0..9, 10..19, 20..29; partition 1 0..10, 11..21, 22..32
    first = [(0, "events", 0, 0, 9), (1, "events", 0, 10, 19), (0, "events", 1, 0, 21)]
    second = [(0, "events", 0, 10, 19), (1, "events", 0, 20, 29), (0, "events", 1, 22, 32)]
    codes = []
    for ranges in (first, second):
        df = read_ranges_tagged(spark, log, ranges, "txid")
        assert not _has_filter(df), "whole segments: no offset filter"
        got = sorted(tuple(r) for r in df.select("partition", "offset", "txid").collect())
        expected = sorted((p, o, tag) for tag, _, p, a, b in ranges for o in range(a, b + 1))
        assert got == expected
        codes.append(_generated_code(df))
    assert codes[0] == codes[1], "the offsets and file names are no literals in the code"


def test_empty_inputs_give_empty_frame_with_schema(spark: Any, log: PartitionedLog) -> None:
    for ranges in ([], [("events", 1, 0, -1)], [("events", 1, 33, 32)]):
        df = read_ranges(spark, log, ranges)
        assert df.schema == log_spark_schema()
        assert df.count() == 0


@pytest.mark.parametrize("inline_records", [0, 10_000])
def test_unreadable_ranges_raise_before_spark_runs(
    spark: Any, log: PartitionedLog, inline_records: int
) -> None:
    log.delete_records_before("events", 0, 10)  # removes the first segment (0..9)
    with pytest.raises(BatchUnavailableError, match=r"'events' partition 0: offsets 5\.\.12"):
        read_ranges(spark, log, [("events", 0, 5, 12)], inline_records)
    with pytest.raises(BatchUnavailableError, match="latest offset 30"):
        read_ranges(spark, log, [("events", 0, 10, 30)], inline_records)
    with pytest.raises(ConfigError, match="invalid topic name"):
        read_ranges(spark, log, [("../events", 0, 0, 1)], inline_records)
    with pytest.raises(ConfigError, match=r"\(topic, partition, first, last\)"):
        read_ranges(spark, log, [("events", 0, 1)], inline_records)  # type: ignore[list-item]
    df = read_ranges(spark, log, [("events", 0, 10, 29)], inline_records)
    assert _rows(df.toArrow()) == _rows(log.read("events", 0, 10, 29))


def test_glob_characters_in_root_are_refused(spark: Any, tmp_path: Path) -> None:
    log = PartitionedLog(tmp_path / "we[ird]")
    log.create_topic("t", 1)
    log.append("t", 0, [Record(b"x")])
    with pytest.raises(ConfigError, match="glob character"):
        read_ranges(spark, log, [("t", 0, 0, 0)])


def test_read_is_split_into_parallel_tasks(spark: Any, log: PartitionedLog) -> None:
    df = read_ranges(spark, log, [("events", p, 0, 29 + p) for p in range(4)], inline_records=0)
    # 12 small files packed by Spark's file-split planning into at least one task per core
    assert 1 <= df.rdd.getNumPartitions() <= 12
    assert df.groupBy("partition").count().orderBy("partition").collect() == [
        (p, 30 + p) for p in range(4)
    ]


def test_many_segment_files_listed_on_driver_conf_restored(spark: Any, tmp_path: Path) -> None:
    log = PartitionedLog(tmp_path / "many")
    log.create_topic("t", 1)
    for i in range(40):  # more files than Spark's parallel-listing threshold (32)
        log.append("t", 0, [Record(f"{i}-{j}".encode()) for j in range(3)])
    key = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before = spark.conf.get(key, None)
    df = read_ranges(spark, log, [("t", 0, 1, 118)], inline_records=0)
    assert spark.conf.get(key, None) == before
    assert _rows(df.toArrow()) == _rows(log.read("t", 0, 1, 118))


def test_inline_reads_up_to_the_limit_and_refuses_a_bad_setting(
    spark: Any, log: PartitionedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``trident.log.inlineMaxRecords`` and the files' bytes decide; a bad value fails first."""
    ranges = [("events", 1, 0, 32)]  # 33 records in three segment files
    assert read_ranges(spark, log, ranges, inline_records=33).inputFiles() == []
    assert len(read_ranges(spark, log, ranges, inline_records=32).inputFiles()) == 3
    with scoped_conf(spark, {INLINE_MAX_RECORDS_CONF: "33"}):
        assert read_ranges(spark, log, ranges).inputFiles() == []
    with scoped_conf(spark, {INLINE_MAX_RECORDS_CONF: "0"}):
        assert len(read_ranges(spark, log, ranges).inputFiles()) == 3
    size = sum(os.path.getsize(p) for p in log.segment_files("events", 1, 0, 32))
    monkeypatch.setattr(log_reader, "INLINE_MAX_BYTES", size - 1)
    assert len(read_ranges(spark, log, ranges, inline_records=33).inputFiles()) == 3
    with scoped_conf(spark, {INLINE_MAX_RECORDS_CONF: "10k"}), pytest.raises(ConfigError) as bad:
        read_ranges(spark, log, ranges)
    assert str(bad.value) == (
        "Spark conf trident.log.inlineMaxRecords='10k' must be a non-negative integer (records; "
        "0 always lets Spark read the files; default 10000)"
    )


def test_a_flipped_bit_is_refused_inline_as_by_the_file_scan(
    spark: Any, log: PartitionedLog
) -> None:
    (path, *_) = log.segment_files("events", 2, 0, 11)
    data = bytearray(Path(path).read_bytes())
    data[len(data) // 2] ^= 0x01
    Path(path).write_bytes(bytes(data))
    errors = []
    for inline_records in (0, 10_000):
        with pytest.raises(CorruptSegmentError) as refused:
            read_ranges(spark, log, [("events", 2, 0, 11)], inline_records)
        errors.append(str(refused.value))
    assert errors[0] == errors[1]
    assert path in errors[0]

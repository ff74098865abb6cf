"""Tests of the embedded partitioned log: offsets, partitioning, durability, retention, names,
concurrent producer processes and producers killed mid-append."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from trident_assets.errors import BatchUnavailableError, ConfigError, TridentError
from trident_assets.log import (
    HEADERS_TYPE,
    LOG_SCHEMA,
    PartitionedLog,
    Record,
    TopicExistsError,
    UnknownTopicError,
)
from trident_assets.log.partitioner import (
    kafka_partition,
    kafka_partitions,
    murmur2,
    murmur2_many,
    to_positive,
)

REPO = Path(__file__).resolve().parents[1]

# Computed with Kafka's Utils.murmur2 Java code (compiled with javac 17 and run); the first
# six keys' hashes also appear in Kafka's own UtilsTest.testMurmur2.
# (key, signed murmur2, partition of 3, partition of 7)
JAVA_VECTORS = [
    (b"21", -973932308, 0, 3),
    (b"foobar", -790332482, 0, 0),
    (b"a-little-bit-long-string", -985981536, 2, 1),
    (b"a-little-bit-longer-string", -1486304829, 2, 0),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971, 2, 3),
    (b"abc", 479470107, 0, 4),
    (b"", 275646681, 0, 2),
    (b"a", -1563381124, 1, 5),
    (b"ab", 316155434, 2, 0),
    (b"abcd", -1323649548, 2, 5),
    (b"user-1", 1404122828, 2, 3),
    (b"user-42", 1459644460, 1, 1),
    (b"hello", 2132663229, 0, 4),
    ("été-日本".encode(), 1580312863, 1, 3),
]
JAVA_HIGH_BYTES = (bytes.fromhex("ff80007ffe"), 768357719)


@pytest.fixture
def log(tmp_path: Path) -> PartitionedLog:
    return PartitionedLog(tmp_path / "log")


def _values(table: pa.Table) -> list[bytes]:
    return table.column("value").to_pylist()


# --------------------------------------------------------------------------- partitioner


@pytest.mark.parametrize(("key", "expected", "p3", "p7"), JAVA_VECTORS)
def test_murmur2_matches_kafka_java(key: bytes, expected: int, p3: int, p7: int) -> None:
    assert murmur2(key) == expected
    assert int(murmur2_many([key])[0]) == expected
    assert kafka_partition(key, 3) == p3
    assert kafka_partition(key, 7) == p7
    assert kafka_partitions([key], 7).tolist() == [p7]


def test_murmur2_bytes_above_127_are_unsigned() -> None:
    key, expected = JAVA_HIGH_BYTES
    assert murmur2(key) == expected
    assert int(murmur2_many([key])[0]) == expected


def test_to_positive_masks_sign_bit_not_abs() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-973932308) == 1173551340
    assert to_positive(5) == 5


def test_vectorised_murmur2_equals_scalar_on_random_keys() -> None:
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(70))) for _ in range(3000)]
    assert murmur2_many(keys).tolist() == [murmur2(k) for k in keys]
    sliced = pa.array(keys, pa.binary()).slice(100, 50)  # non-zero array offset
    assert murmur2_many(sliced).tolist() == [murmur2(k) for k in keys[100:150]]
    assert murmur2_many([]).tolist() == []
    with pytest.raises(ValueError, match="null keys"):
        murmur2_many(pa.array([b"a", None]))


# --------------------------------------------------------------------------- offsets


def test_offsets_contiguous_from_zero_across_appends(log: PartitionedLog) -> None:
    log.create_topic("t", 2)
    assert (log.earliest_offset("t", 0), log.latest_offset("t", 0)) == (0, 0)
    assert log.append("t", 0, [Record(b"a")]) == (0, 0)
    assert log.append("t", 0, [Record(b"b"), Record(b"c")]) == (1, 2)
    assert log.append("t", 0, pa.table({"value": [b"d", b"e", b"f"]})) == (3, 5)
    assert log.append("t", 1, [Record(b"x")]) == (0, 0)
    assert log.latest_offset("t", 0) == 6
    table = log.read("t", 0, 0, 5)
    assert table.column("offset").to_pylist() == list(range(6))
    assert _values(table) == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert table.schema == LOG_SCHEMA
    assert set(table.column("topic").to_pylist()) == {"t"}
    assert set(table.column("partition").to_pylist()) == {0}


def test_record_fields_roundtrip(log: PartitionedLog) -> None:
    log.create_topic("t", 1)
    recs = [
        Record(b"v1", key=b"k1", timestamp_ms=1_000, headers=[("h1", b"x"), ("h2", None)]),
        Record(b"", key=b"", timestamp_ms=2_000),
        Record(b"\x00\xff", key=None, timestamp_ms=-5, headers=[]),
    ]
    log.append("t", 0, recs)
    rows = log.read("t", 0, 0, 2).to_pylist()
    assert [r["value"] for r in rows] == [b"v1", b"", b"\x00\xff"]
    assert [r["key"] for r in rows] == [b"k1", b"", None]
    ts = log.read("t", 0, 0, 2).column("timestamp").cast(pa.int64()).to_pylist()
    assert ts == [1_000, 2_000, -5]
    assert rows[0]["headers"] == [{"key": "h1", "value": b"x"}, {"key": "h2", "value": None}]
    assert rows[1]["headers"] is None
    assert rows[2]["headers"] == []


def test_append_table_columns_and_defaults(log: PartitionedLog) -> None:
    log.create_topic("t", 1)
    before = time.time_ns() // 1_000_000
    table = pa.table(
        {
            "value": pa.array(["a", "b"], pa.large_string()),
            "key": pa.array(["k", None]),
            "timestamp_ms": pa.array([7, None], pa.int64()),
            "headers": pa.array([[{"key": "h", "value": b"1"}], None], HEADERS_TYPE),
        }
    )
    assert log.append("t", 0, table) == (0, 1)
    out = log.read("t", 0, 0, 1)
    assert _values(out) == [b"a", b"b"]
    assert out.column("key").to_pylist() == [b"k", None]
    stamps = out.column("timestamp").cast(pa.int64()).to_pylist()
    assert stamps[0] == 7
    assert stamps[1] >= before
    # A table read back can be appended again (topic/partition/offset are reassigned).
    assert log.append("t", 0, out) == (2, 3)
    assert log.read("t", 0, 2, 3).column("key").to_pylist() == [b"k", None]


def test_append_empty_returns_empty_range_and_writes_nothing(log: PartitionedLog) -> None:
    log.create_topic("t", 1)
    log.append("t", 0, [Record(b"a")])
    assert log.append("t", 0, []) == (1, 0)
    assert log.append("t", 0, pa.table({"value": pa.array([], pa.binary())})) == (1, 0)
    assert log.latest_offset("t", 0) == 1
    assert len(os.listdir(log.root / "t" / "00000")) == 3  # one segment, its .crc32, .lock


@pytest.mark.parametrize(
    ("records", "match"),
    [
        (pa.table({"key": [b"k"]}), "no 'value' column"),
        (pa.table({"value": [b"v"], "colour": [1]}), "unknown column"),
        (pa.table({"value": pa.array([b"v", None])}), "null value"),
        (pa.table({"value": [1, 2]}), "must be binary or string"),
        (pa.table({"value": [b"v"], "timestamp": ["yesterday"]}), "epoch ms"),
        (pa.table({"value": [b"v"], "headers": [1]}), "headers"),
        ([Record(value="text")], "invalid record"),  # type: ignore[arg-type]
        ([Record(value=None)], "value is None"),  # type: ignore[arg-type]
        ([b"raw"], "list of Record"),
        ("abc", "list of Record"),
    ],
)
def test_append_rejects_invalid_records(log: PartitionedLog, records: object, match: str) -> None:
    log.create_topic("t", 1)
    with pytest.raises(ConfigError, match=match):
        log.append("t", 0, records)  # type: ignore[arg-type]
    assert log.latest_offset("t", 0) == 0


# --------------------------------------------------------------------------- producers


def test_hash_producer_uses_kafka_partition_and_is_stable(log: PartitionedLog) -> None:
    log.create_topic("t", 7)
    keys = [k for k, *_ in JAVA_VECTORS]
    with log.producer("t") as producer:
        for k in keys:
            producer.send(b"v-" + k, key=k)
    with log.producer("t") as producer:  # a second producer: same placement
        for k in keys:
            producer.send(b"w-" + k, key=k)
    placed: dict[bytes, set[int]] = {}
    for p in range(7):
        latest = log.latest_offset("t", p)
        for row in log.read("t", p, 0, latest - 1).to_pylist():
            placed.setdefault(row["key"], set()).add(p)
    assert {k: p7 for k, _, _, p7 in JAVA_VECTORS} == {k: ps.pop() for k, ps in placed.items()}


def test_producer_order_within_partition_and_flush_result(log: PartitionedLog) -> None:
    log.create_topic("t", 3)
    producer = log.producer("t")
    for i in range(30):
        producer.send(f"{i}".encode(), key=b"same-key")
    assert producer.pending == 30
    result = producer.flush()
    p = kafka_partition(b"same-key", 3)
    assert result == {p: (0, 29)}
    assert producer.pending == 0
    assert producer.flush() == {}
    assert _values(log.read("t", p, 0, 29)) == [f"{i}".encode() for i in range(30)]


def test_null_keys_round_robin(log: PartitionedLog) -> None:
    log.create_topic("t", 3)
    producer = log.producer("t")
    for i in range(7):
        producer.send(f"a{i}".encode())
    producer.flush()
    for i in range(2):
        producer.send(f"b{i}".encode())
    producer.flush()
    # a0,a3,a6 -> 0; a1,a4 -> 1; a2,a5 -> 2; the counter continues: b0 -> 1, b1 -> 2.
    assert _values(log.read("t", 0, 0, 2)) == [b"a0", b"a3", b"a6"]
    assert _values(log.read("t", 1, 0, 2)) == [b"a1", b"a4", b"b0"]
    assert _values(log.read("t", 2, 0, 2)) == [b"a2", b"a5", b"b1"]


def test_round_robin_partitioner_ignores_keys(log: PartitionedLog) -> None:
    log.create_topic("t", 2)
    with log.producer("t", partitioner="round_robin") as producer:
        for i in range(4):
            producer.send(f"{i}".encode(), key=b"same")
    assert _values(log.read("t", 0, 0, 1)) == [b"0", b"2"]
    assert _values(log.read("t", 1, 0, 1)) == [b"1", b"3"]


def test_explicit_partition_overrides_partitioner(log: PartitionedLog) -> None:
    log.create_topic("t", 3)
    with log.producer("t") as producer:
        producer.send(b"x", key=b"21", partition=2)
        producer.send(b"y", partition=1)
    assert _values(log.read("t", 2, 0, 0)) == [b"x"]
    assert _values(log.read("t", 1, 0, 0)) == [b"y"]
    producer = log.producer("t")
    with pytest.raises(ConfigError, match=r"invalid partition 3 for topic 't'.*0\.\.2"):
        producer.send(b"z", partition=3)
    with pytest.raises(ConfigError, match="expected an int"):
        producer.send(b"z", partition=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="value must be bytes"):
        producer.send("text")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="key must be bytes"):
        producer.send(b"v", key="k")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="timestamp_ms must be an int"):
        producer.send(b"v", timestamp_ms=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="headers must be"):
        producer.send(b"v", headers=[("h", "text")])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="unknown partitioner"):
        log.producer("t", partitioner="sticky")  # type: ignore[arg-type]
    assert producer.pending == 0


def test_producer_auto_flush_and_no_flush_on_exception(log: PartitionedLog) -> None:
    log.create_topic("t", 1)
    producer = log.producer("t", max_buffered=3)
    for i in range(7):
        producer.send(f"{i}".encode())
    assert log.latest_offset("t", 0) == 6
    assert producer.pending == 1
    p2 = log.producer("t")

    def fail_inside() -> None:
        with p2:
            p2.send(b"lost?")
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail_inside()
    assert p2.pending == 1
    assert log.latest_offset("t", 0) == 6


def test_failed_flush_keeps_unwritten_records(log: PartitionedLog) -> None:
    log.create_topic("t", 2)
    producer = log.producer("t")
    producer.send(b"a")
    producer.send(b"b")
    log.delete_topic("t")
    with pytest.raises(UnknownTopicError):
        producer.flush()
    assert producer.pending == 2


# --------------------------------------------------------------------------- queries


def test_durable_across_instances(tmp_path: Path) -> None:
    first = PartitionedLog(tmp_path / "log")
    first.create_topic("t", 2)
    first.append("t", 1, [Record(b"a", key=b"k", timestamp_ms=5)])
    first.append("t", 1, [Record(b"b")])
    again = PartitionedLog(str(tmp_path / "log"))
    assert again.topics() == ["t"]
    assert again.partitions("t") == 2
    assert again.latest_offset("t", 1) == 2
    assert again.read("t", 1, 0, 1).equals(first.read("t", 1, 0, 1))
    assert again.append("t", 1, [Record(b"c")]) == (2, 2)


def test_offset_for_timestamp_is_first_offset_at_or_after(log: PartitionedLog) -> None:
    log.create_topic("t", 1)
    log.append("t", 0, [Record(b"a", timestamp_ms=100), Record(b"b", timestamp_ms=300)])
    log.append("t", 0, [Record(b"c", timestamp_ms=200), Record(b"d", timestamp_ms=400)])
    assert log.offset_for_timestamp("t", 0, 0) == 0
    assert log.offset_for_timestamp("t", 0, 100) == 0
    assert log.offset_for_timestamp("t", 0, 101) == 1  # b (300) precedes c (200) by offset
    assert log.offset_for_timestamp("t", 0, 300) == 1
    assert log.offset_for_timestamp("t", 0, 301) == 3
    assert log.offset_for_timestamp("t", 0, 400) == 3
    assert log.offset_for_timestamp("t", 0, 401) is None
    log.delete_records_before("t", 0, 2)
    assert log.offset_for_timestamp("t", 0, 0) == 2  # never below the log start
    assert log.offset_for_timestamp("t", 0, 250) == 3


def test_read_ranges_across_segment_boundaries(log: PartitionedLog) -> None:
    log.create_topic("t", 1)
    expected = []
    for size in (5, 1, 7, 3):
        batch = [Record(f"v{len(expected) + i}".encode()) for i in range(size)]
        expected += [r.value for r in batch]
        log.append("t", 0, batch)
    total = len(expected)
    for first in range(total):
        for last in range(first - 1, total):
            table = log.read("t", 0, first, last)
            assert _values(table) == expected[first : last + 1]
            assert table.column("offset").to_pylist() == list(range(first, last + 1))
    assert log.read("t", 0, total, total - 1).num_rows == 0  # empty range at the end
    files = log.segment_files("t", 0, 4, 6)
    assert [Path(f).name for f in files] == [
        f"{0:020d}-{4:020d}.parquet",
        f"{5:020d}-{5:020d}.parquet",
        f"{6:020d}-{12:020d}.parquet",
    ]
    assert log.segment_files("t", 0, 3, 2) == []


def test_large_segment_with_several_row_groups(log: PartitionedLog) -> None:
    log.create_topic("t", 1)
    n = 300_000  # > 2 row groups of 128Ki rows
    values = pa.array(np.arange(n).astype(str).astype(object), pa.string())
    log.append("t", 0, pa.table({"value": values}))
    table = log.read("t", 0, 131_000, 262_200)
    assert table.num_rows == 131_201
    assert table.column("offset")[0].as_py() == 131_000
    assert table.column("value")[-1].as_py() == b"262200"


def test_read_beyond_latest_or_malformed(log: PartitionedLog) -> None:
    log.create_topic("t", 1)
    log.append("t", 0, [Record(b"a"), Record(b"b")])
    with pytest.raises(BatchUnavailableError, match=r"'t' partition 0: offsets 1\.\.2 .*latest"):
        log.read("t", 0, 1, 2)
    with pytest.raises(BatchUnavailableError):
        log.read("t", 0, 5, 4)  # empty range past the end
    with pytest.raises(ConfigError, match="invalid offset range"):
        log.read("t", 0, 1, -1)
    with pytest.raises(ConfigError, match="invalid offset range"):
        log.read("t", 0, -1, 0)
    with pytest.raises(ConfigError, match="must be an int"):
        log.read("t", 0, "0", 1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="invalid partition 1"):
        log.read("t", 1, 0, 0)
    with pytest.raises(UnknownTopicError, match="does not exist"):
        log.read("nope", 0, 0, 0)


# --------------------------------------------------------------------------- retention


def test_retention_makes_old_ranges_unreadable(log: PartitionedLog) -> None:
    log.create_topic("t", 1)
    log.append("t", 0, [Record(f"{i}".encode()) for i in range(3)])  # 0..2
    log.append("t", 0, [Record(f"{i}".encode()) for i in range(3, 6)])  # 3..5
    assert log.delete_records_before("t", 0, 4) == 4
    assert log.earliest_offset("t", 0) == 4
    assert log.latest_offset("t", 0) == 6
    pdir = log.root / "t" / "00000"
    assert sorted(p.name for p in pdir.glob("*.parquet")) == [f"{3:020d}-{5:020d}.parquet"]
    for first, last in ((0, 2), (3, 5), (3, 3)):
        with pytest.raises(BatchUnavailableError) as info:
            log.read("t", 0, first, last)
        message = str(info.value)
        assert "'t' partition 0" in message
        assert f"offsets {first}..{last}" in message
        assert "earliest readable offset is 4" in message
        with pytest.raises(BatchUnavailableError):
            log.segment_files("t", 0, first, last)
    assert _values(log.read("t", 0, 4, 5)) == [b"4", b"5"]
    assert log.delete_records_before("t", 0, 2) == 4  # never moves backwards
    with pytest.raises(ConfigError, match="latest offset 6"):
        log.delete_records_before("t", 0, 7)
    # Delete everything: offsets continue where they were.
    assert log.delete_records_before("t", 0, 6) == 6
    assert list(pdir.glob("*.parquet")) == []
    assert (log.earliest_offset("t", 0), log.latest_offset("t", 0)) == (6, 6)
    assert log.append("t", 0, [Record(b"next")]) == (6, 6)
    assert PartitionedLog(log.root).earliest_offset("t", 0) == 6


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "a/b",
        "x'; drop table",
        "",
        "a" * 250,
        ".",
        "..",
        ".hidden",
        "-x",
        "a b",
        "a\n",
        "a\\b",
        'a"b',
        "é",
        "a\x00",
        "*",
    ],
)
def test_bad_topic_names_are_rejected(log: PartitionedLog, name: str) -> None:
    with pytest.raises(ConfigError, match="invalid topic name") as info:
        log.create_topic(name, 1)
    assert "letters, digits" in str(info.value) or "longer than 249" in str(info.value)
    with pytest.raises(ConfigError, match="invalid topic name"):
        log.append(name, 0, [Record(b"x")])
    with pytest.raises(ConfigError, match="invalid topic name"):
        log.read(name, 0, 0, 0)
    assert os.listdir(log.root) == []


def test_non_string_topic_and_bad_partition_counts(log: PartitionedLog) -> None:
    with pytest.raises(ConfigError, match="expected a string"):
        log.create_topic(7, 1)  # type: ignore[arg-type]
    for count in (0, -1, True, 1.5, 100_001):
        with pytest.raises(ConfigError, match="invalid partition count"):
            log.create_topic("t", count)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["a", "A.b_c-1", "0", "a" * 249, "a..b"])
def test_good_topic_names(log: PartitionedLog, name: str) -> None:
    log.create_topic(name, 1)
    assert log.topics() == [name]
    assert log.append(name, 0, [Record(b"x")]) == (0, 0)


# --------------------------------------------------------------------------- topics


def test_topic_lifecycle(log: PartitionedLog) -> None:
    log.create_topic("b", 1)
    log.create_topic("a", 2)
    assert log.topics() == ["a", "b"]
    with pytest.raises(TopicExistsError, match="'a' already exists"):
        log.create_topic("a", 3)
    with pytest.raises(UnknownTopicError, match="'zz' does not exist"):
        log.partitions("zz")
    with pytest.raises(UnknownTopicError):
        log.producer("zz")
    log.delete_topic("b")
    assert log.topics() == ["a"]
    with pytest.raises(UnknownTopicError):
        log.delete_topic("b")
    log.create_topic("b", 1)  # the name can be reused; offsets start again at 0
    assert log.latest_offset("b", 0) == 0
    assert not [p for p in os.listdir(log.root) if p.startswith(".")]


def test_add_partitions(log: PartitionedLog) -> None:
    log.create_topic("t", 2)
    log.append("t", 1, [Record(b"old")])
    producer = log.producer("t")
    log.add_partitions("t", 5)
    assert log.partitions("t") == 5
    assert [i.latest for i in log.partition_offsets("t")] == [0, 1, 0, 0, 0]
    producer.send(b"new", partition=4)  # the producer picks up the new count
    producer.send(b"keyed", key=b"hello")  # hashed with the count at flush time
    producer.flush()
    assert _values(log.read("t", 4, 0, 0))[0] == b"new"
    assert log.latest_offset("t", kafka_partition(b"hello", 5)) >= 1
    for total in (5, 3):
        with pytest.raises(ConfigError, match="can only be added"):
            log.add_partitions("t", total)
    with pytest.raises(UnknownTopicError):
        log.add_partitions("zz", 9)


# --------------------------------------------------------------------------- crash safety


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def test_stray_temp_files_are_ignored_then_removed(log: PartitionedLog) -> None:
    log.create_topic("t", 1)
    log.append("t", 0, [Record(b"a")])
    pdir = log.root / "t" / "00000"
    stray = pdir / ".tmp-99999-dead.parquet"
    stray.write_bytes(b"half a parquet file")
    (pdir / "garbage.parquet").write_bytes(b"not a segment name")
    assert log.latest_offset("t", 0) == 1
    assert _values(log.read("t", 0, 0, 0)) == [b"a"]
    assert log.append("t", 0, [Record(b"b")]) == (1, 1)
    assert not stray.exists()


def test_two_producer_processes_append_concurrently(log: PartitionedLog, tmp_path: Path) -> None:
    log.create_topic("t", 3)
    go = tmp_path / "go"
    count, flush_every = 2000, 7
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trident_assets_tests.log_child",
                "produce",
                str(log.root),
                "t",
                tag,
                str(count),
                str(flush_every),
                str(go),
            ],
            env=_child_env(),
            cwd=REPO,
        )
        for tag in ("A", "B")
    ]
    time.sleep(0.5)
    go.touch()
    assert [c.wait(timeout=300) for c in children] == [0, 0]
    seen: list[bytes] = []
    for p in range(3):
        latest = log.latest_offset("t", p)
        table = log.read("t", p, 0, latest - 1)
        assert table.column("offset").to_pylist() == list(range(latest))
        seen += _values(table)
        # each producer's records keep their send order within a partition
        for tag in ("A", "B"):
            mine = [int(v.split(b"-")[1]) for v in _values(table) if v.startswith(tag.encode())]
            assert mine == sorted(mine)
        for key in set(table.column("key").to_pylist()):
            assert kafka_partition(key, 3) == p
    expected = [f"{t}-{i}".encode() for t in ("A", "B") for i in range(count)]
    assert sorted(seen) == sorted(expected)
    assert len(seen) == len(set(seen)) == 2 * count


def test_producer_killed_mid_append_publishes_nothing(log: PartitionedLog, tmp_path: Path) -> None:
    log.create_topic("t", 1)
    log.append("t", 0, [Record(b"a"), Record(b"b"), Record(b"c")])
    ready = tmp_path / "ready"
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trident_assets_tests.log_child",
            "hang",
            str(log.root),
            "t",
            "0",
            "50",
            str(ready),
        ],
        env=_child_env(),
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert child.poll() is None, "child exited before reaching the hook"
            assert time.monotonic() < deadline, "child never reached the hook"
            time.sleep(0.02)
        time.sleep(0.05)
        tmp_file = Path(ready.read_text())
        assert tmp_file.exists()  # the whole segment is written, only the rename is missing
        assert log.latest_offset("t", 0) == 3  # ...and readers do not see it
        assert _values(log.read("t", 0, 0, 2)) == [b"a", b"b", b"c"]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    fresh = PartitionedLog(log.root)
    assert fresh.latest_offset("t", 0) == 3
    with pytest.raises(BatchUnavailableError):
        fresh.read("t", 0, 3, 3)
    # the lock died with the process; the next writer cleans up and continues contiguously
    assert fresh.append("t", 0, [Record(b"d")]) == (3, 3)
    assert not tmp_file.exists()
    table = fresh.read("t", 0, 0, 3)
    assert _values(table) == [b"a", b"b", b"c", b"d"]
    assert table.column("offset").to_pylist() == [0, 1, 2, 3]


def test_errors_are_trident_errors() -> None:
    assert issubclass(UnknownTopicError, ConfigError)
    assert issubclass(TopicExistsError, ConfigError)
    assert issubclass(BatchUnavailableError, TridentError)

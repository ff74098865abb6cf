"""Nothing in the log changes an answer unnoticed: checksums, metadata files, locks, topics.

Every segment has a CRC-32 checksum file written before the segment is published; Python reads,
Spark reads and ``trident log verify`` check it. Broken ``topic.json``/``log_start.json`` are
named, a LogSpout refuses bad or missing topics, and a writer facing a stuck lock holder fails
after its timeout naming the lock file and the holder's PID.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import sys
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest

from trident_assets import Count
from trident_assets.backends.state_store import open_state_store
from trident_assets.errors import (
    BatchUnavailableError,
    ConfigError,
    CorruptLogMetadataError,
    CorruptSegmentError,
    LogLockTimeoutError,
)
from trident_assets.log import PartitionedLog, Record
from trident_assets.log.files import UnknownTopicError
from trident_assets.log.verify import verify_log
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.log_reader import read_ranges
from trident_assets.spark.schemes import StringScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.coordinator import BatchCoordinator, TopicRecreatedWarning
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.graph import StateSpec
from trident_assets.stream.operations import Split
from trident_assets.stream.topology import TridentTopology
from trident_assets_tests.children import run_trident
from trident_assets_tests.memory_meta import MemorySpoutMetaStore

TRIDENT = Path(sys.executable).parent / "trident"
FLIPS = 200
SEG = f"{0:020d}-{9:020d}.parquet"


def _topic(root: Path) -> tuple[PartitionedLog, Path]:
    """Topic ``words`` with one partition holding one segment of offsets 0..9."""
    log = PartitionedLog(root)
    log.create_topic("words", 1)
    log.append("words", 0, [Record(f"word-{i}".encode(), key=b"k") for i in range(10)])
    return log, root / "words" / "00000" / SEG


def _flips(seg: Path) -> list[tuple[int, int]]:
    rng = random.Random(20261125)
    size = seg.stat().st_size
    return [(rng.randrange(size), rng.randrange(8)) for _ in range(FLIPS)]


def _crc(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}"


def _flip(data: bytes, at: int, bit: int) -> bytes:
    changed = bytearray(data)
    changed[at] ^= 1 << bit
    return bytes(changed)


def test_new_topics_have_an_id_and_checksums(tmp_path: Path) -> None:
    log, seg = _topic(tmp_path / "log")
    meta = json.loads((tmp_path / "log" / "words" / "topic.json").read_text())
    assert meta["checksum"] == "crc32"
    assert len(meta["topic_id"]) == 32
    assert log.topic_id("words") == meta["topic_id"]
    assert log.checksums_required("words") is True
    crc = seg.with_name(SEG + ".crc32").read_text()
    assert crc.startswith("crc32:")
    assert len(crc) == 15
    assert log.read("words", 0, 0, 9).column("value").to_pylist()[9] == b"word-9"


def test_every_single_bit_flip_is_detected_by_the_python_read(tmp_path: Path) -> None:
    log, seg = _topic(tmp_path / "log")
    good = seg.read_bytes()
    detected = 0
    for at, bit in _flips(seg):
        seg.write_bytes(_flip(good, at, bit))
        with pytest.raises(CorruptSegmentError) as info:
            log.read("words", 0, 0, 9)
        assert "checksum mismatch" in str(info.value)
        detected += 1
    assert detected == FLIPS
    seg.write_bytes(good)
    assert log.read("words", 0, 0, 9).num_rows == 10


def test_every_single_bit_flip_is_detected_by_the_spark_read(spark: Any, tmp_path: Path) -> None:
    log, seg = _topic(tmp_path / "log")
    good = seg.read_bytes()
    detected = 0
    for at, bit in _flips(seg):
        seg.write_bytes(_flip(good, at, bit))
        with pytest.raises(CorruptSegmentError, match="checksum mismatch"):
            read_ranges(spark, log, [("words", 0, 0, 9)])
        detected += 1
    assert detected == FLIPS
    seg.write_bytes(good)
    rows = read_ranges(spark, log, [("words", 0, 0, 9)]).orderBy("offset").collect()
    assert [bytes(r["value"]) for r in rows][:2] == [b"word-0", b"word-1"]


def test_a_segment_is_read_into_arrows_memory(tmp_path: Path) -> None:
    """The verified bytes are an Arrow allocation, not a Python object: Parquet's decode
    threads may release them after the read returned, even while the interpreter exits."""
    import pyarrow as pa

    from trident_assets.log.corruption import read_verified
    from trident_assets.log.segments import list_segments

    log, seg_path = _topic(tmp_path)
    (seg,) = list_segments(seg_path.parent)
    before = pa.total_allocated_bytes()
    data = read_verified("words", 0, seg, True)
    assert isinstance(data, pa.Buffer)
    assert data.to_pybytes() == seg_path.read_bytes()
    assert pa.total_allocated_bytes() - before >= seg_path.stat().st_size
    assert log.read("words", 0, 0, 9).column("value").to_pylist()[9] == b"word-9"


def test_a_mismatch_names_topic_partition_offsets_and_file(tmp_path: Path) -> None:
    log, seg = _topic(tmp_path / "log")
    seg.write_bytes(_flip(seg.read_bytes(), 100, 3))
    with pytest.raises(CorruptSegmentError) as info:
        log.read("words", 0, 2, 3)
    message = str(info.value)
    assert message.startswith(
        f"corrupt log segment: topic 'words' partition 0 offsets 0..9, file {str(seg)!r}: "
        "checksum mismatch: the file's CRC-32 is "
    )
    assert message.endswith(
        "(the file changed after it was written); restore the file from a copy of the log "
        "(segments never change once written); `trident log verify words` lists every "
        "damaged segment"
    )
    (report,) = verify_log(log, "words")
    assert not report.ok
    assert report.problems[0].startswith(f"{SEG} (offsets 0..9): checksum mismatch")


def test_a_missing_checksum_file_is_refused_for_a_new_topic(tmp_path: Path) -> None:
    log, seg = _topic(tmp_path / "log")
    side = seg.with_name(SEG + ".crc32")
    side.unlink()
    with pytest.raises(CorruptSegmentError, match=r"its checksum file '.*\.crc32' is missing"):
        log.read("words", 0, 0, 9)
    assert verify_log(log, "words")[0].problems == (
        f"{SEG} (offsets 0..9): its checksum file {str(side)!r} is missing",
    )


def test_a_topic_written_before_checksums_still_reads(tmp_path: Path) -> None:
    """Legacy topics (no "checksum" in topic.json) read unverified; new segments are checked."""
    log, seg = _topic(tmp_path / "log")
    seg.with_name(SEG + ".crc32").unlink()
    meta_path = tmp_path / "log" / "words" / "topic.json"
    meta = json.loads(meta_path.read_text())
    del meta["checksum"], meta["topic_id"]
    meta_path.write_text(json.dumps(meta))
    assert log.checksums_required("words") is False
    assert log.topic_id("words") is None
    assert log.read("words", 0, 0, 9).num_rows == 10
    assert verify_log(log, "words")[0].ok
    log.append("words", 0, [Record(b"new")])  # an append to an old topic gets a checksum
    new = seg.with_name(f"{10:020d}-{10:020d}.parquet")
    new.write_bytes(_flip(new.read_bytes(), 7, 0))
    with pytest.raises(CorruptSegmentError, match="checksum mismatch"):
        log.read("words", 0, 10, 10)


def test_retention_removes_checksum_files(tmp_path: Path) -> None:
    log, seg = _topic(tmp_path / "log")
    log.append("words", 0, [Record(b"x")])
    log.delete_records_before("words", 0, 10)
    assert sorted(os.listdir(seg.parent)) == [
        ".lock",
        f"{10:020d}-{10:020d}.parquet",
        f"{10:020d}-{10:020d}.parquet.crc32",
        "log_start.json",
    ]


def test_a_truncated_topic_json_is_named(tmp_path: Path) -> None:
    log, _ = _topic(tmp_path / "log")
    path = tmp_path / "log" / "words" / "topic.json"
    path.write_text(path.read_text()[:20])
    with pytest.raises(CorruptLogMetadataError) as info:
        log.read("words", 0, 0, 9)
    assert str(info.value).startswith(f"topic 'words': its metadata file {str(path)!r} is ")
    assert str(info.value).endswith("; restore it from a copy of the log")
    assert isinstance(info.value, CorruptSegmentError)


def test_a_truncated_log_start_json_is_named(tmp_path: Path) -> None:
    log, seg = _topic(tmp_path / "log")
    path = seg.parent / "log_start.json"
    path.write_text('{"log_sta')
    with pytest.raises(CorruptLogMetadataError) as info:
        log.read("words", 0, 0, 9)
    assert str(info.value).startswith(f"the retention start file {str(path)!r} is unreadable (")


def test_a_vanished_topic_json_is_named(tmp_path: Path) -> None:
    log, _ = _topic(tmp_path / "log")
    path = tmp_path / "log" / "words" / "topic.json"
    path.unlink()
    with pytest.raises(CorruptLogMetadataError) as info:
        LogSpout("words", StringScheme("s")).source(log).partitions()
    assert str(info.value).startswith(
        f"topic 'words': its metadata file {str(path)!r} is missing although the topic "
        "directory exists"
    )


def test_a_log_spout_refuses_an_invalid_topic_name() -> None:
    with pytest.raises(ConfigError, match=r"invalid topic name '\.\./etc'"):
        LogSpout("../etc", StringScheme("s"))
    with pytest.raises(ConfigError, match=r"invalid topic name 'a/b'"):
        LogSpout(["ok", "a/b"], StringScheme("s"))


def test_a_batch_over_a_missing_topic_fails_and_writes_nothing(spark: Any, tmp_path: Path) -> None:
    log = PartitionedLog(tmp_path / "log")
    topo = TridentTopology("wc_missing")
    spout = LogSpout("nosuch", StringScheme("sentence"), SpoutConfig(kind=SpoutKind.OPAQUE))
    (
        topo.new_stream("sentences", spout)
        .each("sentence", Split(), "word")
        .group_by("word")
        .persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "count")
    )
    store = open_state_store(str(tmp_path / "state.duckdb"))
    try:
        with pytest.raises(UnknownTopicError) as info:
            TopologyRunner(topo, spark, store, log).run_batch(1)
        assert str(info.value) == (
            f"topic 'nosuch' does not exist in log {str(log.root)!r}; create it first "
            "(`trident log create-topic nosuch PARTITIONS` or PartitionedLog.create_topic)"
        )
        assert store.last_committed("wc_missing") is None
    finally:
        store.close()


def test_a_writer_gives_up_on_a_stuck_lock_holder(tmp_path: Path) -> None:
    _, seg = _topic(tmp_path / "log")
    lock = seg.parent / ".lock"
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, b"4242\n", 0)
            held.set()
            release.wait(10)
        finally:
            os.close(fd)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10)
        quick = PartitionedLog(tmp_path / "log", lock_timeout_s=0.2)
        with pytest.raises(LogLockTimeoutError) as info:
            quick.append("words", 0, [Record(b"late")])
        assert str(info.value) == (
            f"timed out after 0.2 s waiting for the log lock {str(lock)!r}, held by process "
            "4242; if that process is stuck, stop it (the lock is released when it exits), or "
            "raise lock_timeout_s"
        )
    finally:
        release.set()
        thread.join()
    assert quick.append("words", 0, [Record(b"late")]) == (10, 10)
    assert lock.read_text() == f"{os.getpid()}\n"
    with pytest.raises(ConfigError, match="lock_timeout_s must be a positive number"):
        PartitionedLog(tmp_path / "log", lock_timeout_s=0)


@pytest.fixture(params=["memory", "duckdb"])
def spout_meta(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Spout metadata in memory and in a DuckDB state store."""
    if request.param == "memory":
        yield MemorySpoutMetaStore()
        return
    from trident_assets.backends.duckdb_spout_meta import DuckDBSpoutMetaStore
    from trident_assets.backends.duckdb_store import DuckDBStore

    store = DuckDBStore(tmp_path / "meta.duckdb")
    try:
        yield DuckDBSpoutMetaStore(store)
    finally:
        store.close()


def _recreate(log: PartitionedLog, records: int) -> str:
    log.delete_topic("words")
    log.create_topic("words", 1)
    log.append("words", 0, [Record(b"zebra") for _ in range(records)])
    topic_id = log.topic_id("words")
    assert topic_id is not None
    return topic_id


def _coordinator(log: PartitionedLog, kind: SpoutKind, meta: Any) -> BatchCoordinator:
    spout = LogSpout("words", StringScheme("s"))
    return BatchCoordinator("wc", "words", spout.source(log), SpoutConfig(kind=kind), meta)


def test_a_transactional_replay_on_a_recreated_topic_is_refused(
    tmp_path: Path, spout_meta: Any
) -> None:
    log, _ = _topic(tmp_path / "log")
    old = log.topic_id("words")
    coord = _coordinator(log, SpoutKind.TRANSACTIONAL, spout_meta)
    first = coord.emit(1)
    assert [(r.first_offset, r.next_offset, r.topic_id) for r in first.ranges] == [(0, 10, old)]
    coord.commit(first)
    log.append("words", 0, [Record(b"more")] * 2)
    second = coord.emit(2)
    assert [(r.first_offset, r.next_offset) for r in second.ranges] == [(10, 12)]
    new = _recreate(log, 12)
    with pytest.raises(BatchUnavailableError) as info:
        coord.emit(2)  # the replay of txid 2 would read the new topic's offsets 10..11
    assert str(info.value) == (
        "cannot replay txid 2 of spout 'words': it read words@0 offsets 10..11 of topic "
        f"'words' with ID {old}, but the topic was deleted and re-created (ID now {new}). A "
        "batch is never replayed with another topic's records; redeploy the topology with a "
        "fresh state."
    )
    coord.commit(second)
    with pytest.raises(BatchUnavailableError) as info:
        coord.emit(3)
    assert str(info.value) == (
        "cannot plan txid 3: topic 'words' was deleted and re-created after spout 'words' read "
        f"words@0 offsets up to 11 (topic ID then {old}, now {new}). A transactional spout "
        "never continues on another topic's offsets; redeploy the topology with a fresh state "
        "to read the new topic."
    )


def test_an_opaque_spout_resets_explicitly_on_a_recreated_topic(
    tmp_path: Path, spout_meta: Any
) -> None:
    log, _ = _topic(tmp_path / "log")
    old = log.topic_id("words")
    coord = _coordinator(log, SpoutKind.OPAQUE, spout_meta)
    first = coord.emit(1)
    coord.commit(first)
    assert first.recreated == ()
    new = _recreate(log, 14)
    with pytest.warns(TopicRecreatedWarning) as caught:
        second = coord.emit(2)
    assert str(caught[0].message) == (
        "txid 2: topic 'words' was deleted and re-created after spout 'words' read words@0 "
        f"offsets up to 9 (topic ID then {old}, now {new}); resuming words@0 at the new "
        "topic's earliest offset 0"
    )
    assert second.recreated == ("words@0",)
    assert [(r.first_offset, r.next_offset, r.topic_id) for r in second.ranges] == [(0, 14, new)]
    coord.commit(second)
    log.append("words", 0, [Record(b"x")])
    third = coord.emit(3)
    assert third.recreated == ()
    assert [(r.first_offset, r.next_offset) for r in third.ranges] == [(14, 15)]


def test_an_opaque_topology_counts_a_recreated_topic_from_its_start(
    spark: Any, tmp_path: Path
) -> None:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("sentences", 1)
    log.append("sentences", 0, [Record(b"the cow"), Record(b"the moon")])
    topo = TridentTopology("wc_recreated")
    spout = LogSpout("sentences", StringScheme("sentence"), SpoutConfig(kind=SpoutKind.OPAQUE))
    counts = (
        topo.new_stream("sentences", spout)
        .each("sentence", Split(), "word")
        .group_by("word")
        .persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "count")
    )
    store = open_state_store(str(tmp_path / "state.duckdb"))
    try:
        runner = TopologyRunner(topo, spark, store, log)
        assert runner.run_batch(1).applied
        log.delete_topic("sentences")
        log.create_topic("sentences", 1)
        log.append("sentences", 0, [Record(b"zebra zebra")] * 3)
        with pytest.warns(TopicRecreatedWarning, match="resuming sentences@0 at the new topic"):
            outcome = runner.run_batch(2)
        assert outcome.applied
        rows = store.scan(counts.table).to_pylist()
        assert {r["word"]: r["value"] for r in rows} == {
            "the": 2,
            "cow": 1,
            "moon": 1,
            "zebra": 6,
        }
    finally:
        store.close()


def test_log_verify_reports_a_checksum_mismatch_and_bad_metadata(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _, seg = _topic(home / "log")
    good = seg.read_bytes()
    seg.write_bytes(_flip(good, 40, 5))
    done = run_trident(tmp_path, "log", "verify", "words", "--home", str(home), "--format", "csv")
    assert done.returncode == 1
    (line,) = done.stdout.splitlines()[1:]
    assert line.startswith(f'words,0,1,0,10,CORRUPT,"{SEG} (offsets 0..9): checksum mismatch: ')
    assert line.endswith(".crc32 says " + _crc(good) + ' (the file changed after it was written)"')
    seg.write_bytes(good)
    meta = home / "log" / "words" / "topic.json"
    meta.write_text(meta.read_text()[:15])
    done = run_trident(tmp_path, "log", "verify", "words", "--home", str(home))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(
        f"error: topic 'words': its metadata file {str(meta)!r} is unreadable ("
    )
    assert "Traceback" not in done.stderr

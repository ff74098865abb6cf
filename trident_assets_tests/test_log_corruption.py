"""Damaged log segments and state files are detected and named (issue 17, item 1).

Segments are damaged by hand (truncated, wrong magic, renamed to a wrong range, replaced by
another range's rows, removed); every read then raises :class:`CorruptSegmentError` naming
topic, partition, offsets and file, ``trident log verify`` reports the partition, and the
Spark read path refuses the file before Spark opens it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.cli import app
from trident_assets.errors import CorruptSegmentError, CorruptStateError
from trident_assets.log import PartitionedLog, Record
from trident_assets.log.verify import check_segment_files, verify_log

TRIDENT = Path(sys.executable).parent / "trident"
REMEDY = (
    "restore the file from a copy of the log (segments never change once written); "
    "`trident log verify words` lists every damaged segment"
)


def _seg(first: int, last: int) -> str:
    return f"{first:020d}-{last:020d}.parquet"


def _log(root: Path) -> tuple[PartitionedLog, Path]:
    """Legacy topic ``words`` (2 partitions): partition 0 has segments 0..4, 5..9; 1 has 0..2."""
    log = PartitionedLog(root)
    log.create_topic("words", 2)
    for chunk in range(2):
        log.append("words", 0, [Record(f"w{chunk}-{i}".encode()) for i in range(5)])
    log.append("words", 1, [Record(b"x"), Record(b"y"), Record(b"z")])
    _as_legacy_topic(root, "words")
    return log, root / "words" / "00000"


def _as_legacy_topic(root: Path, topic: str) -> None:
    """Make ``topic`` look written before checksums: no checksum files, no flag in topic.json.

    These tests damage segments by hand and check the footer checks, which are what such
    segments rely on (checksummed segments are covered in test_log_checksums.py).
    """
    for crc in (root / topic).glob("*/*.crc32"):
        crc.unlink()
    meta_path = root / topic / "topic.json"
    meta = json.loads(meta_path.read_text())
    meta.pop("checksum")
    meta_path.write_text(json.dumps(meta))


def _message(path: Path, first: int, last: int, problem: str) -> str:
    return (
        f"corrupt log segment: topic 'words' partition 0 offsets {first}..{last}, file "
        f"{str(path)!r}: {problem}; {REMEDY}"
    )


def test_a_truncated_segment_is_named(tmp_path: Path) -> None:
    log, pdir = _log(tmp_path / "log")
    seg = pdir / _seg(5, 9)
    os.truncate(seg, seg.stat().st_size // 2)
    with pytest.raises(CorruptSegmentError) as info:
        log.read("words", 0, 3, 7)
    problem = (
        "the file cannot be read as Parquet (ArrowInvalid: Parquet magic bytes not found in "
        "footer. Either the file is corrupted or this is not a parquet file.)"
    )
    assert str(info.value) == _message(seg, 5, 9, problem)
    assert log.read("words", 0, 0, 4).num_rows == 5  # the sound segment still reads
    with pytest.raises(CorruptSegmentError, match=r"offsets 5\.\.9, "):
        check_segment_files("words", 0, [str(seg)], required=False)


def test_a_wrong_magic_is_named(tmp_path: Path) -> None:
    log, pdir = _log(tmp_path / "log")
    seg = pdir / _seg(0, 4)
    with open(seg, "r+b") as fh:
        fh.seek(-4, os.SEEK_END)
        fh.write(b"XXXX")
    with pytest.raises(CorruptSegmentError) as info:
        log.read("words", 0, 0, 0)
    assert str(info.value).startswith(
        f"corrupt log segment: topic 'words' partition 0 offsets 0..4, file {str(seg)!r}: "
        "the file cannot be read as Parquet (ArrowInvalid: Parquet magic bytes not found"
    )
    assert str(info.value).endswith(REMEDY)
    assert log.offset_for_timestamp("words", 1, 0) == 0  # other partitions unaffected
    with pytest.raises(CorruptSegmentError, match=r"offsets 0\.\.4, "):
        log.offset_for_timestamp("words", 0, 0)


def test_a_row_count_that_disagrees_with_the_name_is_named(tmp_path: Path) -> None:
    log, pdir = _log(tmp_path / "log")
    wrong = pdir / _seg(5, 10)
    os.rename(pdir / _seg(5, 9), wrong)
    with pytest.raises(CorruptSegmentError) as info:
        log.read("words", 0, 5, 6)
    assert str(info.value) == _message(wrong, 5, 10, "holds 5 rows, its name says 6")


def test_offsets_that_disagree_with_the_name_are_named(tmp_path: Path) -> None:
    log, pdir = _log(tmp_path / "log")
    seg = pdir / _seg(5, 9)
    shutil.copy(pdir / _seg(0, 4), seg)  # right row count, offsets 0..4
    with pytest.raises(CorruptSegmentError) as info:
        log.read("words", 0, 6, 8)
    problem = "rows 1..3 hold offsets 1..3, its name says 6..8"
    assert str(info.value) == _message(seg, 5, 9, problem)
    with pytest.raises(CorruptSegmentError) as info:
        check_segment_files("words", 0, [str(seg)], required=False)
    assert str(info.value) == _message(seg, 5, 9, "holds offsets 0..4, its name says 5..9")


def test_a_gap_between_segments_is_named(tmp_path: Path) -> None:
    log, pdir = _log(tmp_path / "log")
    log.append("words", 0, [Record(b"late")])  # offsets 10..10
    (pdir / _seg(5, 9)).unlink()
    with pytest.raises(CorruptSegmentError) as info:
        log.read("words", 0, 3, 10)
    assert str(info.value) == (
        "corrupt log: topic 'words' partition 0 offsets 5..9: no segment file holds them "
        f"(after file {str(pdir / _seg(0, 4))!r}, before file {str(pdir / _seg(10, 10))!r}); "
        f"{REMEDY}"
    )


def test_verify_reports_each_partition(tmp_path: Path) -> None:
    log, pdir = _log(tmp_path / "log")
    assert [r.ok for r in verify_log(log)] == [True, True]
    os.truncate(pdir / _seg(0, 4), 10)
    os.rename(pdir / _seg(5, 9), pdir / _seg(6, 10))
    report = verify_log(log, "words")[0]
    assert (report.segments, report.earliest, report.latest) == (2, 0, 11)
    assert report.problems == (
        f"{_seg(0, 4)} (offsets 0..4): the file cannot be read as Parquet (ArrowInvalid: "
        "Parquet magic bytes not found in footer. Either the file is corrupted or this is not "
        "a parquet file.)",
        f"offsets 5..5 are missing between {_seg(0, 4)} and {_seg(6, 10)}",
        f"{_seg(6, 10)} (offsets 6..10): holds offsets 5..9, its name says 6..10",
    )


def _cli(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_log_verify_command_in_every_format(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _, pdir = _log(home / "log")
    h = ["--home", str(home)]
    code, out, err = _cli(["log", "verify", "--format", "csv", *h])
    assert (code, err) == (0, "")
    assert out == (
        "topic,partition,segments,earliest,latest,status,problems\n"
        "words,0,2,0,10,ok,\n"
        "words,1,1,0,3,ok,\n"
    )
    (pdir / _seg(0, 4)).unlink()
    code, out, err = _cli(["log", "verify", "words", "--format", "json", *h])
    assert code == 1
    assert json.loads(out) == [
        {
            "topic": "words",
            "partition": 0,
            "segments": 1,
            "earliest": 0,
            "latest": 10,
            "status": "CORRUPT",
            "problems": f"offsets 0..4 are missing: the first segment {_seg(5, 9)} starts "
            "after the log start 0",
        },
        {
            "topic": "words",
            "partition": 1,
            "segments": 1,
            "earliest": 0,
            "latest": 3,
            "status": "ok",
            "problems": "",
        },
    ]
    assert err == (
        "error: 1 problem(s) in 1 partition(s) (words/0); reads of the damaged offsets fail "
        "until the files are restored from a copy of the log\n"
    )
    code, out, err = _cli(["log", "verify", "nope", *h])
    assert (code, out) == (1, "")
    assert err.startswith("error: topic 'nope' does not exist")


def test_log_verify_as_a_child_process(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _, pdir = _log(home / "log")
    os.truncate(pdir / _seg(5, 9), 100)
    env = {"HOME": str(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin"}
    done = subprocess.run(
        [str(TRIDENT), "log", "verify", "words", "--home", str(home), "--format", "csv"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout.splitlines()[1:] == [
        f"words,0,2,0,10,CORRUPT,{_seg(5, 9)} (offsets 5..9): the file cannot be read as "
        "Parquet (ArrowInvalid: Parquet magic bytes not found in footer. Either the file is "
        "corrupted or this is not a parquet file.)",
        "words,1,1,0,3,ok,",
    ]
    assert done.stderr == (
        "error: 1 problem(s) in 1 partition(s) (words/0); reads of the damaged offsets fail "
        "until the files are restored from a copy of the log\n"
    )


def test_spark_reads_refuse_a_damaged_segment_before_spark_opens_it(
    spark: object, tmp_path: Path
) -> None:
    from trident_assets.spark.log_reader import read_ranges

    log, pdir = _log(tmp_path / "log")
    assert read_ranges(spark, log, [("words", 0, 0, 9)]).count() == 10
    seg = pdir / _seg(5, 9)
    os.truncate(seg, seg.stat().st_size - 1)
    with pytest.raises(CorruptSegmentError) as info:
        read_ranges(spark, log, [("words", 0, 0, 9)])
    assert str(info.value).startswith(
        f"corrupt log segment: topic 'words' partition 0 offsets 5..9, file {str(seg)!r}: "
    )


def _state(path: Path) -> None:
    with DuckDBStore(path) as store:
        with store.transaction() as tx:
            counts = store.map("t__counts")
            counts.multi_put([(f"k{i}",) for i in range(20_000)], list(range(20_000)))
            tx.mark_committed("t", 1)
        store.checkpoint()


def test_a_truncated_state_file_is_named_not_recreated(tmp_path: Path) -> None:
    path = tmp_path / "state.duckdb"
    _state(path)
    size = path.stat().st_size
    os.truncate(path, 4096)
    with pytest.raises(CorruptStateError) as info:
        DuckDBStore(path, lock_timeout_s=0)
    assert str(info.value) == (
        f"state file {path} is corrupt or unreadable (IO Error: Could not read enough bytes "
        f'from file "{path}": attempted to read 4096 bytes from location 4096); it was left '
        "unchanged. Restore the last backup with `trident state restore BACKUP` (README, "
        "Guarantees)"
    )
    assert path.stat().st_size == 4096

    _state(tmp_path / "half.duckdb")
    half = tmp_path / "half.duckdb"
    os.truncate(half, size // 2)
    code, out, err = _cli(["state", "list", "--database", str(half)])
    assert (code, out) == (1, "")
    assert err.startswith(
        f"error: state file {half} is corrupt or unreadable (IO Error: Could not read enough "
        f'bytes from file "{half}"'
    )
    assert err.endswith(
        "it was left unchanged. Restore the last backup with `trident state restore BACKUP` "
        "(README, Guarantees)\n"
    )
    assert half.stat().st_size == size // 2
    with pytest.raises(duckdb.IOException):  # DuckDB itself opens it; the store names it
        duckdb.connect(str(half), read_only=True).execute("SELECT * FROM t__counts").fetchall()

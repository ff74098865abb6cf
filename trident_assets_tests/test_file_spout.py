"""FileSpout on Spark: word counts over JSON lines, CSV and Parquet folders, exactly once."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trident_assets import Count
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.errors import BatchUnavailableError, ConfigError
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.file_schemes import CsvScheme, ParquetScheme
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.file_spout import FileSpout
from trident_assets.stream.topology import StateSpec, TridentTopology
from trident_assets_tests.children import run_trident
from trident_assets_tests.faults import Crash, crash_at

T0 = 1_700_000_000


def _file(folder: Path, name: str, data: bytes, mtime_s: float) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    ns = int(mtime_s * 1e9)
    os.utime(path, ns=(ns, ns))
    return path


def _parquet(folder: Path, name: str, table: pa.Table, mtime_s: float) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    ns = int(mtime_s * 1e9)
    os.utime(path, ns=(ns, ns))
    return path


def _word_count(spout: FileSpout, name: str = "wc") -> tuple[TridentTopology, str]:
    topo = TridentTopology(name)
    counts = (
        topo.new_stream("files", spout)
        .group_by("word")
        .persistent_aggregate(StateSpec.transactional("counts"), "word", Count(), "count")
    )
    return topo, counts.table


def _counts(store: Any, table: str) -> dict[str, int]:
    return {r["word"]: r["value"] for r in store.scan(table).to_pylist()}


def _dead(store: Any) -> list[tuple[Any, ...]]:
    return store.fetch_rows(
        'SELECT txid, topic, partition, "offset", reason, value FROM _trident_dead_letters '
        'ORDER BY txid, topic, "offset"'
    )


def _run_all(runner: TopologyRunner, plans: list[Any] | None = None) -> list[list[str]]:
    """Run txids from 1 while files wait; each txid's files (names); its plans to ``plans``."""
    taken = []
    txid = 1
    while runner.backlog() > 0:
        outcome = runner.run_batch(txid)
        assert outcome.applied
        plan = outcome.plans["files"]
        spout = runner.topology.spouts["files"].args["spout"]
        taken.append([e.path for e in spout.files(runner.log, plan)])
        if plans is not None:
            plans.append(plan)
        txid += 1
    return taken


def _home(tmp_path: Path) -> tuple[PartitionedLog, DuckDBStore]:
    home = tmp_path / "home"
    return PartitionedLog(home / "log"), DuckDBStore(home / "state.duckdb")


JSON_A = b'{"word": "cow"}\n{"word": "moon"}\nnot json\n{"word": "cow"}\n'
JSON_B = b'{"word": "moon"}\r\n\n{"word": 3}\n{"word": "jumped"}'
JSON_C = b'{"word": "cow"}\n{"nope": 1}\n'


def test_word_count_over_json_lines_is_exact_with_malformed_lines_dead_lettered_by_file_and_line(
    spark: Any, tmp_path: Path
) -> None:
    land = tmp_path / "in"
    a = _file(land, "a.jsonl", JSON_A, T0)
    b = _file(land, "b.jsonl", JSON_B, T0 + 1)
    c = _file(land, "c.jsonl", JSON_C, T0 + 2)
    _file(land, "notes.txt", b"not a json lines file", T0)
    _file(land, ".d.jsonl", b'{"word": "hidden"}\n', T0)
    spout = FileSpout(
        f"{land}/*.jsonl", JsonScheme({"word": "string"}), max_files=2, stable_after=0
    )
    topo, table = _word_count(spout)
    log, store = _home(tmp_path)
    runner = TopologyRunner(topo, spark, store, log)
    plans: list[Any] = []
    assert _run_all(runner, plans) == [["a.jsonl", "b.jsonl"], ["c.jsonl"]]
    assert _counts(store, table) == {"cow": 3, "moon": 2, "jumped": 1}
    assert _dead(store) == [
        (1, f"file://{a}", 0, 3, "value is not valid JSON (RFC 8259)", b"not json"),
        (1, f"file://{b}", 0, 3, "member 'word' is an integer, declared string", b'{"word": 3}'),
        (2, f"file://{c}", 0, 2, "missing member 'word'", b'{"nope": 1}'),
    ]
    replayed = runner.run_batch(1)  # committed: final, nothing applied again
    assert not replayed.applied
    assert _counts(store, table) == {"cow": 3, "moon": 2, "jumped": 1}
    assert spout.plan_metadata(plans[0]) == {
        "files": [f"file://{a}", f"file://{b}"],
        "file_bytes": len(JSON_A) + len(JSON_B),
    }
    store.close()


def test_word_count_over_csv_with_header_and_typed_fields(spark: Any, tmp_path: Path) -> None:
    land = tmp_path / "in"
    one = _file(land, "one.csv", b'word,n\ncow,1\nmoon,x\n\n"the, cow",2\n', T0)
    two = _file(land, "two.csv", b"word,n\r\ncow,3\r\n,4\r\nmoon\r\ncow,1,9\r\n", T0 + 1)
    spout = FileSpout(str(land), CsvScheme({"word": "string", "n": "int"}), stable_after=0)
    topo = TridentTopology("csv")
    totals = (
        topo.new_stream("files", spout)
        .group_by("word")
        .persistent_aggregate(StateSpec.transactional("totals"), "word", Count(), "count")
    )
    log, store = _home(tmp_path)
    runner = TopologyRunner(topo, spark, store, log)
    assert _run_all(runner) == [["one.csv", "two.csv"]]
    assert _counts(store, totals.table) == {"cow": 2, "the, cow": 1}
    assert _dead(store) == [
        (1, f"file://{one}", 0, 3, "field 'n' is not a valid int", b"moon,x"),
        (1, f"file://{two}", 0, 3, "field 'word' is missing or empty", b",4"),
        (1, f"file://{two}", 0, 4, "field 'n' is missing or empty", b"moon"),
        (1, f"file://{two}", 0, 5, "line has more than 2 values", b"cow,1,9"),
    ]
    store.close()


def test_a_csv_file_whose_header_differs_refuses_the_txid_naming_it(
    spark: Any, tmp_path: Path
) -> None:
    land = tmp_path / "in"
    bad = _file(land, "a.csv", b"n,word\n1,cow\n", T0)
    spout = FileSpout(str(land), CsvScheme({"word": "string", "n": "int"}), stable_after=0)
    topo, _ = _word_count(spout)
    log, store = _home(tmp_path)
    with pytest.raises(ConfigError) as refused:
        TopologyRunner(topo, spark, store, log).run_batch(1)
    assert str(refused.value) == (
        f"txid 1: CSV file file://{bad} has the header 'n,word'; the scheme declares "
        "'word,n' (the fields in their order). Fix the file's header or the CsvScheme's fields."
    )
    assert store.last_committed("wc") is None
    store.close()


def test_word_count_over_parquet_files_and_a_schema_mismatch_refuses_naming_file_and_field(
    spark: Any, tmp_path: Path
) -> None:
    land = tmp_path / "in"
    _parquet(land, "a.parquet", pa.table({"word": ["cow", "moon", None], "x": [1, 2, 3]}), T0)
    _parquet(land, "b.parquet", pa.table({"word": ["cow"] * 3}), T0 + 1)
    spout = FileSpout(str(land), ParquetScheme({"word": "string"}), max_files=1, stable_after=0)
    topo, table = _word_count(spout)
    log, store = _home(tmp_path)
    runner = TopologyRunner(topo, spark, store, log)
    assert _run_all(runner) == [["a.parquet"], ["b.parquet"]]
    assert _counts(store, table) == {"cow": 4, "moon": 1}
    a = land / "a.parquet"
    assert _dead(store) == [(1, f"file://{a}", 0, 3, "field 'word' is null", None)]

    c = _parquet(land, "c.parquet", pa.table({"word": pa.array([1, 2], pa.int64())}), T0 + 2)
    with pytest.raises(ConfigError) as refused:
        runner.run_batch(3)
    assert str(refused.value) == (
        f"txid 3: Parquet file file://{c}: field 'word' is int64 in the file, declared string. "
        "Declare the file's type or rewrite the file."
    )
    other = tmp_path / "other"
    d = _parquet(other, "d.parquet", pa.table({"words": ["cow"]}), T0 + 3)
    fresh = FileSpout(str(other), ParquetScheme({"word": "string"}), stable_after=0)
    topo2, _ = _word_count(fresh, "wc2")
    with pytest.raises(ConfigError, match=f"Parquet file file://{d} has no column 'word'"):
        TopologyRunner(topo2, spark, store, log).run_batch(1)
    assert (store.last_committed("wc"), store.last_committed("wc2")) == (2, None)
    store.close()


@pytest.mark.parametrize("change", ["rewrite", "remove"])
def test_a_recorded_file_changed_or_removed_before_its_commit_refuses_the_replay(
    spark: Any, tmp_path: Path, change: str
) -> None:
    land = tmp_path / "in"
    _file(land, "a.jsonl", JSON_A, T0)
    b = _file(land, "b.jsonl", JSON_C, T0 + 1)
    spout = FileSpout(str(land), JsonScheme({"word": "string"}), stable_after=0)
    topo, table = _word_count(spout)
    log, store = _home(tmp_path)
    with pytest.raises(Crash):
        TopologyRunner(topo, spark, store, log, fault=crash_at("before_commit")).run_batch(1)
    if change == "rewrite":
        _file(land, "b.jsonl", JSON_C.replace(b"cow", b"dog"), T0 + 5)
        what = "has changed: recorded 28 bytes modified at 2023-11-14T22:13:21.000000+00:00, "
        what += "now 28 bytes modified at 2023-11-14T22:13:25.000000+00:00"
    else:
        b.unlink()
        what = "no longer exists"
    runner = TopologyRunner(topo, spark, store, log)
    with pytest.raises(BatchUnavailableError) as refused:
        runner.run_batch(1)
    assert str(refused.value) == (
        f"cannot read txid 1 of spout 'files': its file file://{b} {what}. A transactional "
        "batch is never read with other data; put the file back as it was, or redeploy the "
        "topology with a fresh state."
    )
    assert (store.last_committed("wc"), store.has_table(table)) == (None, False)
    _file(land, "b.jsonl", JSON_C, T0 + 1)  # put back as it was: the replay reads it
    assert runner.run_batch(1).applied
    assert _counts(store, table) == {"cow": 3, "moon": 1}
    store.close()


@pytest.mark.parametrize("point", ["after_state_write", "before_commit"])
def test_a_crash_between_write_and_commit_replays_exactly_the_recorded_files(
    spark: Any, tmp_path: Path, point: str
) -> None:
    land = tmp_path / "in"
    _file(land, "a.jsonl", JSON_A, T0)
    spout = FileSpout(str(land), JsonScheme({"word": "string"}), stable_after=0)
    topo, table = _word_count(spout)
    log, store = _home(tmp_path)
    with pytest.raises(Crash):
        TopologyRunner(topo, spark, store, log, fault=crash_at(point)).run_batch(1)
    _file(land, "late.jsonl", b'{"word": "late"}\n', T0 - 100)  # lands before the replay
    store.close()
    store = DuckDBStore(tmp_path / "home" / "state.duckdb")
    again = FileSpout(str(land), JsonScheme({"word": "string"}), stable_after=0)
    topo, table = _word_count(again)  # a new process: same topology, same files
    runner = TopologyRunner(topo, spark, store, log)
    first = runner.run_batch(1)
    assert first.plans["files"].replay
    assert again.plan_metadata(first.plans["files"])["files"] == [f"file://{land}/a.jsonl"]
    assert _counts(store, table) == {"cow": 2, "moon": 1}
    assert [e.path for e in again.files(log, runner.run_batch(2).plans["files"])] == ["late.jsonl"]
    assert _counts(store, table) == {"cow": 2, "moon": 1, "late": 1}
    assert runner.backlog() == 0
    store.close()


def test_trident_status_shows_the_files_and_bytes_waiting(spark: Any, tmp_path: Path) -> None:
    land = tmp_path / "in"
    sizes: Sequence[int] = []
    for i, data in enumerate((JSON_A, JSON_B, JSON_C)):
        _file(land, f"{i}.jsonl", data, T0 + i)
        sizes = [*sizes, len(data)]
    spout = FileSpout(str(land), JsonScheme({"word": "string"}), max_files=1, stable_after=0)
    topo, _ = _word_count(spout)
    log, store = _home(tmp_path)
    assert TopologyRunner(topo, spark, store, log).run_batch(1).applied
    store.close()
    _file(land, "3.jsonl", b'{"word": "new"}\n', T0 + 3)  # not numbered yet: counted too
    done = run_trident(tmp_path, "status", "--home", str(tmp_path / "home"), "--format", "json")
    assert (done.returncode, done.stderr) == (0, "")
    (row,) = json.loads(done.stdout)
    key = next((log.root / "_file_spouts").glob("*.sqlite")).stem
    waiting = sizes[1] + sizes[2] + len(b'{"word": "new"}\n')
    assert row == {
        "topology": "wc",
        "last_txid": 1,
        "lag": 3,
        "lag_by_partition": f"files-{key}@0=3 files/{waiting} bytes (file://{land})",
        "quarantined": 0,
        "last_error": None,
    }


def test_a_txids_materialization_lists_its_files_and_their_bytes(
    spark: Any, tmp_path: Path
) -> None:
    import dagster as dg

    from trident_assets.dagster.batch_events import batch_events
    from trident_assets.dagster.graph import asset_keys

    land = tmp_path / "in"
    a = _file(land, "a.jsonl", JSON_A, T0)
    _file(land, "b.jsonl", JSON_C, T0 + 1)
    spout = FileSpout(str(land), JsonScheme({"word": "string"}), max_files=1, stable_after=0)
    topo, _ = _word_count(spout)
    log, store = _home(tmp_path)
    outcome = TopologyRunner(topo, spark, store, log).run_batch(1)
    store.close()
    keys = asset_keys(topo)
    events = list(batch_events(topo, keys, outcome, 0, True, ()))
    meta = next(
        e.metadata
        for e in events
        if isinstance(e, dg.AssetMaterialization) and e.asset_key == keys["spout:files"]
    )
    assert meta["files"] == dg.MetadataValue.json([f"file://{a}"])
    assert meta["file_bytes"] == dg.MetadataValue.int(len(JSON_A))
    assert meta["dead_letters"] == dg.MetadataValue.int(1)
    partition = spout.source(log).partition
    assert meta["offsets"] == dg.MetadataValue.json({partition: [0, 0]})
    assert meta[f"lag {partition}"] == dg.MetadataValue.int(1)  # b.jsonl waits


def test_a_file_batch_generates_code_by_the_records_its_bytes_hold(
    spark: Any, tmp_path: Path
) -> None:
    from trident_assets.spark.codegen_conf import INTERPRETED, codegen_conf
    from trident_assets.spark.spout_reads import FILE_BYTES_PER_RECORD, records_of

    land = tmp_path / "in"
    line = b'{"word": "cow"}\n'
    _file(land, "small.jsonl", line * 10, T0)
    _file(land, "big.jsonl", line * 40_000, T0 + 1)
    spout = FileSpout(str(land), JsonScheme({"word": "string"}), max_files=1, stable_after=0)
    topo, table = _word_count(spout)
    log, store = _home(tmp_path)
    runner = TopologyRunner(topo, spark, store, log)
    plans = []
    assert _run_all(runner, plans) == [["small.jsonl"], ["big.jsonl"]]
    assert [p.record_count for p in plans] == [1, 1]  # offsets number files, not records
    estimates = [records_of(spout, log, p) for p in plans]
    assert estimates == [160 // FILE_BYTES_PER_RECORD, 640_000 // FILE_BYTES_PER_RECORD]
    assert codegen_conf(spark, estimates[0]) == INTERPRETED
    assert codegen_conf(spark, estimates[1]) == {}
    assert _counts(store, table) == {"cow": 40_010}
    store.close()

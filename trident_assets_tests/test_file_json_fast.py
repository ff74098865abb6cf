"""JSON lines decoded by Spark's JSON source in a chunk of several txids: the same as one by one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from trident_assets import Count
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.log.store import PartitionedLog
from trident_assets.spark import file_json
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.file_json import line_starts_clean
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.file_spout import FileSpout
from trident_assets.stream.topology import StateSpec, TridentTopology

T0 = 1_700_000_000

CLEAN = (
    b'{"word": "cow"}\n{"word": "moon"}\r\n\n\r\n{"word": 3}\n{"word": {"a": 1}}\n'
    b'{"word": "x"} trailing\n{"word": 1.50}\n{"word": [1, 2]}\n{"word": true}\n'
    b'{"word": -0.0e1}\n{"word": "caf\xc3\xa9 \\u00e9\\n"}\n{"word": "cut'
)
NULLS = b'{"nope": 1}\n{"word": null}\n'
"""Lines whose word is null: dead letters when the field is required."""
UNCLEAN = b'  {"word": "sp"}\n[{"word": "arr"}]\n\t{"word": "tab"}\n{"word": "ok"}\n \n[]\n7\n'
BAD_UTF8 = b'{"word": "caf\xc3"}\n{"word": "fine"}\n{"word": "\xed\xa0\x80"}\n'
CLEAN_TOO = b'{"word": "cow"}\n\r\n{"word": "moon"}'


@pytest.mark.parametrize(
    ("data", "clean"),
    [
        (b"", True),
        (b"\n\n", True),
        (b'{"a": 1}\n\r\n{"b": 2}\r\n', True),
        (b'{"a": 1}\n{', True),
        (b' {"a": 1}\n', False),
        (b'{"a": 1}\n\t{}\n', False),
        (b"[]\n", False),
        (b"\r\r\n", False),
        (b"{\0}\n", False),
        (b'{"a": "\xc3"}\n', False),
        (b'{"a": "\xed\xa0\x80"}\n', False),
        (b'{"a": "\xc0\xaf"}\n', False),
        (b'{"a": "caf\xc3\xa9"}\n', True),
    ],
)
def test_a_file_is_clean_only_if_utf8_without_nul_and_every_line_empty_or_an_object(
    data: bytes, clean: bool
) -> None:
    assert line_starts_clean(data) is clean


def _run(spark: Any, folder: Path, home: Path, scheme: JsonScheme, chunked: bool) -> Any:
    spout = FileSpout(str(folder), scheme, max_files=1, stable_after=0)
    topo = TridentTopology("fast_json")
    counts = (
        topo.new_stream("files", spout)
        .group_by("word")
        .persistent_aggregate(StateSpec.transactional("counts"), "word", Count(), "count")
    )
    store = DuckDBStore(home / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, PartitionedLog(home / "log"))
    if chunked:
        outcomes = list(runner.run_batches(range(1, 5)))
    else:
        outcomes = [runner.run_batch(t) for t in range(1, 5)]
    assert all(o.applied for o in outcomes)
    assert runner.backlog() == 0
    found = (
        sorted(store.scan(counts.table).to_pylist(), key=repr),
        store.fetch_rows(
            'SELECT txid, topic, partition, "offset", reason, value FROM _trident_dead_letters '
            'ORDER BY txid, topic, "offset"'
        ),
        [o.dead_letters for o in outcomes],
    )
    store.close()
    return found


@pytest.mark.parametrize("required", [(), ("word",)])
def test_a_lenient_json_chunk_decodes_and_dead_letters_as_txids_one_by_one(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, required: tuple[str, ...]
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    first = NULLS + CLEAN if required else CLEAN
    for i, data in enumerate((first, UNCLEAN, BAD_UTF8, CLEAN_TOO)):
        path = folder / f"{i}.jsonl"
        path.write_bytes(data)
        os.utime(path, ns=((T0 + i) * 10**9, (T0 + i) * 10**9))
    flags: list[list[bool]] = []
    clean_files = file_json.clean_files

    def spy(*args: Any) -> list[bool]:
        flags.append(clean_files(*args))
        return flags[-1]

    monkeypatch.setattr("trident_assets.spark.spout_reads.clean_files", spy)
    scheme = JsonScheme({"word": "string"}, strict=False, required=required)
    one_by_one = _run(spark, folder, tmp_path / "one", scheme, chunked=False)
    assert flags == []
    chunked = _run(spark, folder, tmp_path / "chunk", scheme, chunked=True)
    assert flags == [[True, False, False, True]]
    assert chunked == one_by_one
    counts, dead, per_txid = chunked
    assert sum(per_txid) == len(dead) == (10 if required else 8)
    assert {r["word"]: r["value"] for r in counts}["cow"] == 2

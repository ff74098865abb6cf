"""Trident windows over a spout with dead letters: each txid records exactly its own.

A window's Spark job counts its spout's dead letters, so a txid fetches them only when there
are any; these tests check that every dead letter is still recorded, in its txid, and none
is recorded twice, whichever path built the window's input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trident_assets as ta
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.core.aggregators import Sum
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.operations import PyMap
from trident_assets.stream.topology import TridentTopology

WRONG = "member 'n' is a string, declared bigint"
BATCHES: list[list[bytes]] = [
    [b'{"n": 1}', b'{"n": 2}'],
    [b'{"n": 3}', b'{"n": "x"}', b'{"n": 4}', b"[1]"],
    [],
    [b'{"n": 5}', b'{"n": 6}'],
]
"""Per txid, the records of partition 0: txid 2 has two dead letters (offsets 3 and 5)."""


def run_txids(spark: Any, root: Path, topo: TridentTopology) -> tuple[DuckDBStore, list[int]]:
    """Run ``BATCHES`` as txids 1-4 at 1, 2, 12 and 13 s; the dead letters of each txid."""
    log = PartitionedLog(root / "log")
    log.create_topic("nums", 1)
    store = DuckDBStore(root / "state.duckdb")
    now = [0.0]
    run = TopologyRunner(topo, spark, store, log, clock=lambda: now[0])
    counts = []
    for txid, (records, at) in enumerate(
        zip(BATCHES, [1.0, 2.0, 12.0, 13.0], strict=True), start=1
    ):
        producer = log.producer("nums")
        for value in records:
            producer.send(value, partition=0)
        producer.flush()
        now[0] = at
        counts.append(run.run_batch(txid).dead_letters)
    return store, counts


def dead_letters(store: DuckDBStore) -> list[tuple[Any, ...]]:
    return store.fetch_rows(
        'SELECT txid, spout, "offset", reason FROM _trident_dead_letters ORDER BY txid, "offset"'
    )


def fired(store: DuckDBStore, window: str, out: str) -> list[tuple[int, Any]]:
    table = f"w__{window}__new_values"
    return store.fetch_rows(f'SELECT txid, "{out}" FROM "{table}" ORDER BY txid, "{out}"')


def test_count_and_duration_windows_record_each_dead_letter_once(
    spark: Any, tmp_path: Path
) -> None:
    topo = TridentTopology("w")
    nums = topo.new_stream("nums", LogSpout("nums", JsonScheme({"n": "bigint"})))
    nums.tumbling_window("n", Sum(), "total", count=2, spec="win")
    nums.tumbling_window("n", Sum(), "total", duration=10, spec="dur")
    store, counts = run_txids(spark, tmp_path, topo)
    assert counts == [0, 2, 0, 0]
    invalid = "value is not a JSON object"
    assert dead_letters(store) == [(2, "nums", 3, WRONG), (2, "nums", 5, invalid)]
    assert fired(store, "win", "total") == [(1, 3), (2, 7), (4, 11)]
    assert fired(store, "dur", "total") == [(3, 10)]  # [0, 10) fires at 12 s
    store.close()


def test_a_duration_window_after_map_records_its_dead_letters(spark: Any, tmp_path: Path) -> None:
    """The window's input is not row-wise from the spout: the dead letters take their own job."""
    topo = TridentTopology("w")
    nums = topo.new_stream("nums", LogSpout("nums", JsonScheme({"n": "bigint"})))
    nums.map(PyMap(lambda n: n * 10)).tumbling_window("n", ta.Max(), "top", duration=10, spec="dur")
    store, counts = run_txids(spark, tmp_path, topo)
    assert counts == [0, 2, 0, 0]
    assert [row[:3] for row in dead_letters(store)] == [(2, "nums", 3), (2, "nums", 5)]
    assert fired(store, "dur", "top") == [(3, 40)]
    store.close()

"""Corner batches commit like any other, on both schedules: alone and inside a chunk.

A batch whose only records are dead letters, a batch whose aggregated values are all null,
and an empty batch (no record at all) each commit their txid, with exact state, dead letters
and outcome counts, whether the txid runs on its own (``max_spout_pending=1``) or shares one
Spark job with its neighbours (``max_spout_pending=3``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trident_assets import Count, Sum
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.config import SpoutConfig
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.topology import StateSpec, TridentTopology
from trident_assets_tests.test_executor import _counts, _log, _send

GOOD = [b'{"word": "a", "n": 1}', b'{"word": "b", "n": 2}']
CORNERS: dict[str, list[bytes]] = {
    "dead_only": [b"not json", b'{"word": "a", "n": "many"}'],
    "nulls_only": [b'{"word": "a", "n": null}', b'{"word": "c"}'],
    "empty": [],
}
"""The corner batch's records (``empty``: none, so the batch has no record)."""


def _topology(name: str) -> tuple[TridentTopology, Any, Any, Any]:
    topo = TridentTopology(name)
    scheme = JsonScheme({"word": "string", "n": "bigint"}, optional=("n",))
    stream = topo.new_stream("events", LogSpout("events", scheme, SpoutConfig(max_batch_size=2)))
    sums = stream.group_by("word").persistent_aggregate(StateSpec.opaque("sums"), "n", Sum(), "sum")
    total = stream.persistent_aggregate(StateSpec.opaque("total"), "n", Sum(), "sum")
    counts = stream.group_by("word").persistent_aggregate(
        StateSpec.opaque("counts"), "word", Count(), "count"
    )
    return topo, sums, total, counts


def _expected(corner: str, with_neighbours: bool) -> dict[str, Any]:
    good = 2 if with_neighbours else 0
    counts = {"a": good, "b": good} if with_neighbours else {}
    if corner == "nulls_only":
        counts = {**counts, "a": counts.get("a", 0) + 1, "c": 1}
    return {
        "sums": {"a": 2, "b": 4} if with_neighbours else {},
        "total": 6 if with_neighbours else 0,
        "counts": counts,
    }


@pytest.mark.parametrize("corner", sorted(CORNERS))
@pytest.mark.parametrize("pending", [1, 3])
def test_a_corner_batch_between_good_ones_commits(
    spark: Any, tmp_path: Path, corner: str, pending: int
) -> None:
    log = _log(tmp_path, {"events": 1})
    for values in (GOOD, CORNERS[corner], GOOD):
        _send(log, "events", values)
    topo, sums, total, counts = _topology("corners")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log, max_spout_pending=pending)
    outcomes = list(runner.run_batches([1, 2, 3]))
    assert [(o.txid, o.applied) for o in outcomes] == [(1, True), (2, True), (3, True)]
    dead = 2 if corner == "dead_only" else 0
    assert [o.dead_letters for o in outcomes] == [0, dead, 0]
    if corner == "empty":  # the empty batch is the one after the records: txid 3
        assert [sum(p.record_count for p in o.plans.values()) for o in outcomes] == [2, 2, 0]
    expected = _expected(corner, with_neighbours=True)
    if corner == "empty":
        expected = {"sums": {"a": 2, "b": 4}, "total": 6, "counts": {"a": 2, "b": 2}}
    assert _counts(store, sums.table) == expected["sums"]
    assert [r["value"] for r in store.scan(total.table).to_pylist()] == [expected["total"]]
    assert _counts(store, counts.table) == expected["counts"]
    assert runner.last_committed() == 3
    rows = store.fetch_rows('SELECT txid, reason FROM _trident_dead_letters ORDER BY "offset"')
    assert [txid for txid, _ in rows] == [2] * dead
    store.close()


@pytest.mark.parametrize("corner", sorted(CORNERS))
@pytest.mark.parametrize("pending", [1, 3])
def test_a_corner_batch_alone_commits(
    spark: Any, tmp_path: Path, corner: str, pending: int
) -> None:
    log = _log(tmp_path, {"events": 1})
    _send(log, "events", CORNERS[corner])
    topo, sums, total, counts = _topology("alone")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log, max_spout_pending=pending)
    outcomes = list(runner.run_batches([1, 2]))
    assert [(o.txid, o.applied) for o in outcomes] == [(1, True), (2, True)]
    dead = 2 if corner == "dead_only" else 0
    assert [o.dead_letters for o in outcomes] == [dead, 0]
    expected = _expected(corner, with_neighbours=False)
    assert _counts(store, sums.table) == expected["sums"]
    assert [r["value"] for r in store.scan(total.table).to_pylist()] == [expected["total"]]
    assert _counts(store, counts.table) == expected["counts"]
    assert runner.last_committed() == 2
    store.close()

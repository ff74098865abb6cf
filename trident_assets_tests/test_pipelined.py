"""Pipelined batches (max spout pending): one Spark job per chunk, exact per-txid commits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trident_assets import ConfigError, Count
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.log.store import PartitionedLog
from trident_assets.planner import chunk_pipelinable, pipelinable
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import StringScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.operations import FilterNull, Split
from trident_assets.stream.queries import MapGet
from trident_assets.stream.topology import StateSpec, TridentTopology
from trident_assets_tests.conftest import OpenStore
from trident_assets_tests.test_executor import (
    Boom,
    _counts,
    _fail_at,
    _log,
    _out_rows,
    _send,
    _spout_rows,
    _word_count,
    _words,
)

ROUNDS = [
    ["a b c", "a a", "b d", "e"],
    ["c c c", "\udcff", "a e", "f g"],
    ["g", "h h", "a", "b"],
    ["x y", "y z", "z z z", "a"],
    ["q", "r", "s", "t"],
]
"""Four records per batch (``max_batch_size=4``); the lone surrogate is a malformed record."""


def _encoded(values: list[str]) -> list[bytes]:
    return [v.encode("utf-8", "surrogateescape") for v in values]


def _valid(values: list[str]) -> list[str]:
    return [v for v in values if "\udcff" not in v]


def _fill(log: PartitionedLog) -> None:
    for values in ROUNDS:
        _send(log, "sentences", _encoded(values))


def _new_values(store: DuckDBStore, table: str, txid: int) -> list[tuple[Any, ...]]:
    return _out_rows(store, table, txid)


def _dead(store: Any) -> list[tuple[Any, ...]]:
    return store.fetch_rows(
        'SELECT txid, spout, "offset", reason FROM _trident_dead_letters '
        'ORDER BY txid, spout, "offset", reason'
    )


@pytest.mark.parametrize("kind", [SpoutKind.OPAQUE, SpoutKind.TRANSACTIONAL])
def test_pipelined_chunks_commit_exactly_what_one_by_one_commits(
    spark: Any, tmp_path: Path, kind: SpoutKind
) -> None:
    log = _log(tmp_path, {"sentences": 1})
    _fill(log)
    results = {}
    for pending in (1, 3):
        topo, counts = _word_count("wc", kind=kind)
        store = DuckDBStore(tmp_path / f"state-{pending}.duckdb")
        runner = TopologyRunner(topo, spark, store, log, max_spout_pending=pending)
        outcomes = list(runner.run_batches(range(1, 7)))
        assert [o.txid for o in outcomes] == [1, 2, 3, 4, 5, 6]
        assert all(o.applied for o in outcomes)
        results[pending] = (
            [o.pipelined for o in outcomes],
            [o.tuples_in for o in outcomes],
            [o.dead_letters for o in outcomes],
            _counts(store, counts.table),
            _spout_rows(store),
            [_new_values(store, "wc__counts__new_values", t) for t in range(1, 7)],
            _dead(store),
        )
        store.close()
    assert results[1][0] == [1] * 6
    assert results[3][0] == [3, 3, 3, 3, 3, 3]
    assert results[3][1:] == results[1][1:]
    _, tuples_in, dead, counts, _, new_values, dead_rows = results[3]
    assert tuples_in == [{"sentences": 4}] * 5 + [{"sentences": 0}]
    assert dead == [0, 1, 0, 0, 0, 0]
    assert dead_rows == [(2, "sentences", 5, "value is not valid UTF-8")]
    assert counts == dict(_words([s for r in ROUNDS for s in _valid(r)]))
    # txid 2's new values: the running totals of the words it touched
    after_2 = _words(_valid(ROUNDS[0] + ROUNDS[1]))
    assert new_values[1] == sorted((w, after_2[w]) for w in _words(_valid(ROUNDS[1])))
    assert new_values[5] == []


def test_transactional_crash_inside_a_chunk_replays_the_recorded_ranges(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"sentences": 1})
    _fill(log)
    topo, counts = _word_count("wc", kind=SpoutKind.TRANSACTIONAL)
    store = open_store()
    calls = {"n": 0}

    def fault(point: str) -> None:  # fails the second commit of the chunk
        if point == "before_commit":
            calls["n"] += 1
            if calls["n"] == 2:
                raise Boom(point)

    crashing = TopologyRunner(topo, spark, store, log, fault=fault, max_spout_pending=4)
    done = []

    def drive() -> None:
        done.extend(outcome.txid for outcome in crashing.run_batches(range(1, 5)))

    with pytest.raises(Boom):
        drive()
    assert done == [1]
    assert store.last_committed("wc") == 1
    recorded = {
        txid: [(r[4], r[5], r[7]) for r in _spout_rows(store) if r[2] == txid] for txid in (2, 3, 4)
    }
    # txids 2..4 were planned and recorded at their first emission, before any commit
    assert recorded == {2: [(4, 8, False)], 3: [(8, 12, False)], 4: [(12, 16, False)]}
    _send(log, "sentences", ["late arrival"])
    runner = TopologyRunner(topo, spark, store, log, max_spout_pending=4)
    outcomes = list(runner.run_batches(range(2, 7)))
    assert [(o.txid, o.applied, o.pipelined) for o in outcomes] == [
        (2, True, 4),
        (3, True, 4),
        (4, True, 4),
        (5, True, 4),
        (6, True, 1),
    ]
    assert [o.plans["sentences"].replay for o in outcomes] == [True, True, True, False, False]
    assert outcomes[-1].tuples_in == {"sentences": 1}
    assert _counts(store, counts.table) == dict(
        _words([s for r in ROUNDS for s in _valid(r)] + ["late arrival"])
    )


def test_opaque_crash_inside_a_chunk_replans_from_the_last_commit(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"sentences": 2})
    _fill(log)
    topo, counts = _word_count("wc", kind=SpoutKind.OPAQUE, max_batch_size=6)
    store = open_store()
    crashing = TopologyRunner(
        topo, spark, store, log, fault=_fail_at("after_state_write"), max_spout_pending=3
    )
    with pytest.raises(Boom):
        list(crashing.run_batches(range(1, 4)))
    assert store.last_committed("wc") is None
    assert _spout_rows(store) == []  # opaque: nothing is recorded before a commit
    extra = ["m n", "n o p"]
    _send(log, "sentences", extra)
    runner = TopologyRunner(topo, spark, store, log, max_spout_pending=3)
    outcomes = list(runner.run_batches(range(1, 6)))
    assert [o.pipelined for o in outcomes] == [3, 3, 3, 2, 2]
    assert sum(o.tuples_in["sentences"] for o in outcomes) == 22
    assert sum(o.dead_letters for o in outcomes) == 1
    assert _counts(store, counts.table) == dict(
        _words([s for r in ROUNDS for s in _valid(r)] + extra)
    )
    # replaying committed txids changes nothing
    again = list(runner.run_batches(range(1, 6)))
    assert [o.applied for o in again] == [False] * 5
    assert _counts(store, counts.table) == dict(
        _words([s for r in ROUNDS for s in _valid(r)] + extra)
    )


def test_a_live_state_query_ends_the_chunk_and_reads_the_state_before_its_batch(
    spark: Any, tmp_path: Path
) -> None:
    log = _log(tmp_path, {"sentences": 1, "queries": 1})
    topo, counts = _word_count("drpc", max_batch_size=4)
    (
        topo.new_stream("queries", LogSpout("queries", StringScheme("args")))
        .each("args", Split(), "word")
        .group_by("word")
        .state_query(counts, "word", MapGet(), "count")
        .each("count", FilterNull())
        .project("count")
        .as_output("found")
    )
    assert pipelinable(topo)
    assert chunk_pipelinable(topo, {"sentences"})
    assert not chunk_pipelinable(topo, {"sentences", "queries"})
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log, max_spout_pending=5)
    _fill(log)
    first = list(runner.run_batches(range(1, 3)))
    assert [o.pipelined for o in first] == [2, 2]
    assert [o.outputs for o in first] == [{"found": 0}, {"found": 0}]
    _send(log, "queries", ["a c nosuch"])
    rest = list(runner.run_batches(range(3, 7)))
    # txid 3 has a query: it runs alone; 4..6 share a job again
    assert [(o.txid, o.pipelined) for o in rest] == [(3, 1), (4, 3), (5, 3), (6, 3)]
    before_3 = _words(_valid(ROUNDS[0] + ROUNDS[1]))
    assert _out_rows(store, "drpc__out_found", 3) == sorted([(before_3["a"],), (before_3["c"],)])
    assert _out_rows(store, "drpc__out_found", 4) == []
    assert _counts(store, counts.table) == dict(_words([s for r in ROUNDS for s in _valid(r)]))


def test_global_count_gets_one_row_per_txid_including_empty_ones(
    spark: Any, tmp_path: Path
) -> None:
    log = _log(tmp_path, {"sentences": 1, "other": 1})
    topo = TridentTopology("totals")
    config = SpoutConfig(max_batch_size=2)
    total = (
        topo.new_stream("sentences", LogSpout("sentences", StringScheme("sentence"), config))
        .each("sentence", Split(), "word")
        .persistent_aggregate(StateSpec.opaque("total"), "word", Count(), "n")
    )
    other = topo.new_stream("other", LogSpout("other", StringScheme("w"), config))
    other.persistent_aggregate(StateSpec.opaque("others"), "w", Count(), "n")
    total.new_values_stream  # noqa: B018 (declared, not consumed: the topology stays pipelinable)
    assert pipelinable(topo)
    _send(log, "sentences", ["a b", "c", "d e f"])
    _send(log, "other", ["x"])
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log, max_spout_pending=4)
    outcomes = list(runner.run_batches(range(1, 5)))
    assert [o.pipelined for o in outcomes] == [4] * 4
    assert [o.tuples_in for o in outcomes] == [
        {"sentences": 2, "other": 1},
        {"sentences": 1, "other": 0},
        {"sentences": 0, "other": 0},
        {"sentences": 0, "other": 0},
    ]
    new = [_out_rows(store, "totals__total__new_values", t) for t in range(1, 5)]
    assert new == [[(3,)], [(6,)], [(6,)], [(6,)]]
    others = [_out_rows(store, "totals__others__new_values", t) for t in range(1, 5)]
    assert others == [[(1,)], [(1,)], [(1,)], [(1,)]]
    assert store.scan(total.table).to_pylist()[0]["value"] == 6


def test_max_spout_pending_is_validated(spark: Any, tmp_path: Path) -> None:
    topo, _ = _word_count("wc")
    store = DuckDBStore(tmp_path / "state.duckdb")
    with pytest.raises(ConfigError, match="max_spout_pending must be >= 1, got 0"):
        TopologyRunner(topo, spark, store, _log(tmp_path, {"sentences": 1}), max_spout_pending=0)


def test_next_chunk_is_planned_while_the_previous_one_commits(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path, {"sentences": 1})
    _fill(log)
    topo, counts = _word_count("wc", kind=SpoutKind.TRANSACTIONAL)
    store = DuckDBStore(tmp_path / "state.duckdb")
    commits = {"n": 0}

    def fault(point: str) -> None:  # fails txid 2's commit, when chunk (3, 4) is in flight
        if point == "before_commit":
            commits["n"] += 1
            if commits["n"] == 2:
                raise Boom(point)

    crashing = TopologyRunner(topo, spark, store, log, fault=fault, max_spout_pending=2)
    with pytest.raises(Boom):
        list(crashing.run_batches(range(1, 5)))
    assert store.last_committed("wc") == 1
    planned = [(r[2], r[4], r[5], r[7]) for r in _spout_rows(store) if r[2] > 1]
    assert planned == [(2, 4, 8, False), (3, 8, 12, False), (4, 12, 16, False)]
    runner = TopologyRunner(topo, spark, store, log, max_spout_pending=2)
    outcomes = list(runner.run_batches(range(2, 7)))
    assert [(o.txid, o.pipelined, o.plans["sentences"].replay) for o in outcomes] == [
        (2, 2, True),
        (3, 2, True),
        (4, 2, True),
        (5, 2, False),
        (6, 1, False),
    ]
    assert [o.tuples_in["sentences"] for o in outcomes] == [4, 4, 4, 4, 0]
    assert _counts(store, counts.table) == dict(_words([s for r in ROUNDS for s in _valid(r)]))


def test_only_topologies_that_never_work_per_partition_read_small_batches_inline() -> None:
    from trident_assets import Sum
    from trident_assets.examples.word_count import build_word_count
    from trident_assets.planner import partition_free

    assert partition_free(build_word_count())
    topo, _ = _word_count("wc")
    topo.new_stream("more", LogSpout("more", StringScheme("n"))).partition_aggregate(
        "n", Sum(), "total"
    ).as_output("per_partition")
    assert not partition_free(topo)

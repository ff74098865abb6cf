"""The rest of Trident's stream API: TupleCollectionGet, min_by/max_by/min/max, repartitioning,
peek, chained_agg and name, with exact outputs through TopologyRunner and declaration errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trident_assets import (
    CombinerAggregator,
    ConfigError,
    Count,
    FieldNotFoundError,
    Max,
    ReducerAggregator,
    Sum,
)
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.log.store import PartitionedLog
from trident_assets.spark import state_query as tuple_collection
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.partitioning import repartition_frame
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.partitioning import Partitioning
from trident_assets.stream.queries import TupleCollectionGet
from trident_assets.stream.static_state import StaticTable
from trident_assets.stream.topology import StateSpec, StateUpdater, TridentTopology

EVENTS = JsonScheme({"user": "string", "n": "bigint"})
DEVICES = JsonScheme({"device_id": "bigint", "count": "bigint"}, optional=("count",))
TICKS = JsonScheme({"tick": "bigint"})


def _log(tmp_path: Path) -> PartitionedLog:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("events", 2)
    log.create_topic("devices", 3)
    log.create_topic("ticks", 1)
    return log


def _send(log: PartitionedLog, topic: str, by_partition: dict[int, list[dict[str, Any]]]) -> None:
    producer = log.producer(topic)
    for partition, rows in by_partition.items():
        for row in rows:
            producer.send(json.dumps(row).encode(), partition=partition)
    producer.flush()


def _events(log: PartitionedLog, by_partition: dict[int, list[tuple[str, int]]]) -> None:
    _send(
        log,
        "events",
        {p: [{"user": u, "n": n} for u, n in rows] for p, rows in by_partition.items()},
    )


def _rows(store: DuckDBStore, topo: TridentTopology, output: str, txid: int) -> list[Any]:
    found = store.conn.execute(
        f'SELECT * EXCLUDE (txid) FROM "{topo.name}__out_{output}" WHERE txid = ?', [txid]
    ).fetchall()
    return sorted(found, key=repr)


def _cmp(a: Any, b: Any) -> int:
    return (a > b) - (a < b)


# -- 1. min_by / max_by / min / max ---------------------------------------------------------------

# Trident API overview: "minBy" / "maxBy" over three partitions of [device-id, count]
OVERVIEW = {
    0: [[123, 2], [113, 54], [23, 28], [237, 37], [12, 23], [62, 17], [98, 42]],
    1: [[64, 18], [72, 54], [2, 28], [742, 71], [98, 45], [62, 12], [19, 174]],
    2: [[27, 94], [82, 23], [9, 86], [53, 71], [74, 37], [51, 49], [37, 98]],
}


@pytest.fixture
def file_per_partition(spark: Any) -> Iterator[None]:
    """One Spark partition per log segment file, as Trident's one task per spout partition.

    Spark packs small files into one task (``openCostInBytes`` per file against a split size
    that grows with the data); an open cost as large as the split keeps each file alone.
    """
    key = "spark.sql.files.openCostInBytes"
    before = spark.conf.get(key, None)
    spark.conf.set(key, str(128 * 1024 * 1024))
    yield
    if before is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, before)


@pytest.mark.usefixtures("file_per_partition")
def test_min_by_max_by_per_partition_as_trident_documents(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    topo = TridentTopology("cmp")
    dev = topo.new_stream("devices", LogSpout("devices", DEVICES))
    dev.min_by("count").as_output("min_by")
    dev.max_by("count").as_output("max_by")
    dev.min_by("count", lambda a, b: _cmp(a, b)).as_output("min_by_cmp")
    dev.max_by("device_id", lambda a, b: _cmp(a, b)).as_output("max_id_cmp")
    dev.min(lambda a, b: _cmp(a[1], b[1])).as_output("min_tuple")
    dev.max(lambda a, b: _cmp(a[1], b[1])).as_output("max_tuple")
    dev.global_().min_by("count").as_output("global_min")
    dev.partition_aggregate("count", Count(), "tuples").as_output("partition_sizes")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log)

    _send(
        log,
        "devices",
        {p: [{"device_id": d, "count": c} for d, c in rows] for p, rows in OVERVIEW.items()},
    )
    assert runner.run_batch(1).applied
    assert _rows(store, topo, "partition_sizes", 1) == [(7,), (7,), (7,)]
    documented_min = sorted([(123, 2), (62, 12), (82, 23)], key=repr)
    documented_max = sorted([(113, 54), (19, 174), (37, 98)], key=repr)
    assert _rows(store, topo, "min_by", 1) == documented_min
    assert _rows(store, topo, "max_by", 1) == documented_max
    assert _rows(store, topo, "min_by_cmp", 1) == documented_min
    assert _rows(store, topo, "min_tuple", 1) == documented_min
    assert _rows(store, topo, "max_tuple", 1) == documented_max
    assert _rows(store, topo, "max_id_cmp", 1) == sorted([(237, 37), (742, 71), (82, 23)], key=repr)
    assert _rows(store, topo, "global_min", 1) == [(123, 2)]

    # an empty batch: no partition has a tuple, so nothing is emitted (and no Spark job)
    empty = runner.run_batch(2)
    assert empty.outputs == dict.fromkeys(topo.outputs, 0)
    store.close()


@pytest.mark.usefixtures("file_per_partition")
def test_ties_go_to_the_later_tuple_and_nulls_are_skipped(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    topo = TridentTopology("ties")
    dev = topo.new_stream("devices", LogSpout("devices", DEVICES))
    dev.max_by("count").as_output("max_by")
    dev.min_by("count").as_output("min_by")
    dev.max_by("count", _cmp).as_output("max_by_cmp")
    dev.min_by("count", _cmp).as_output("min_by_cmp")
    dev.max(lambda a, b: _cmp(a[1] or 0, b[1] or 0)).as_output("max_tuple")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log)

    rows = [(1, 5), (2, None), (3, 5), (4, 1), (5, 1), (6, None)]
    _send(log, "devices", {0: [{"device_id": d, "count": c} for d, c in rows]})
    _send(log, "devices", {1: [{"device_id": 7, "count": None}]})  # only nulls: nothing
    assert runner.run_batch(1).applied
    assert _rows(store, topo, "max_by", 1) == [(3, 5)]  # not (1, 5): the later tie wins
    assert _rows(store, topo, "min_by", 1) == [(5, 1)]
    assert _rows(store, topo, "max_by_cmp", 1) == [(3, 5)]
    assert _rows(store, topo, "min_by_cmp", 1) == [(5, 1)]
    # a whole-tuple comparator sees null values (it decides); partition 1 emits its one tuple
    assert _rows(store, topo, "max_tuple", 1) == [(3, 5), (7, None)]
    store.close()


def test_a_failing_comparator_fails_the_batch_naming_the_step(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    topo = TridentTopology("bad_cmp")
    dev = topo.new_stream("devices", LogSpout("devices", DEVICES))
    dev.name("loudest").max(lambda a, b: 1 // 0).as_output("out")
    store = DuckDBStore(tmp_path / "state.duckdb")
    _send(log, "devices", {0: [{"device_id": 1, "count": 2}, {"device_id": 3, "count": 4}]})
    with pytest.raises(Exception, match=r"comparison 'loudest': .*ZeroDivisionError"):
        TopologyRunner(topo, spark, store, log).run_batch(1)
    assert store.last_committed("bad_cmp") is None
    store.close()


# -- 2. repartitioning -----------------------------------------------------------------------------


@pytest.mark.usefixtures("file_per_partition")
def test_repartitioning_semantics(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    topo = TridentTopology("parts")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    # two log partitions: a grouped partition_aggregate sees ann in both
    ev.group_by("user").partition_aggregate("n", Sum(), "total").as_output("as_read")
    (
        ev.partition_by("user")
        .group_by("user")
        .partition_aggregate("n", Sum(), "total")
        .as_output("by_user")
    )
    (
        ev.partition_by("user")
        .group_by("user")
        .partition_aggregate("n", Count(), "c")
        .parallelism_hint(3)
        .as_output("by_user_hinted")
    )
    ev.global_().partition_aggregate("n", Sum(), "total").as_output("global")
    ev.batch_global().partition_aggregate("n", Count(), "c").as_output("batch_global")
    ev.broadcast().partition_aggregate("n", Count(), "c").as_output("broadcast")
    ev.local_or_shuffle().partition_aggregate("n", Sum(), "total").as_output("local")
    ev.identity_partition().partition_aggregate("n", Sum(), "total").as_output("identity")
    ev.shuffle().parallelism_hint(3).project(["user", "n"]).as_output("shuffled")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log)

    _events(log, {0: [("ann", 3), ("bob", 1)], 1: [("ann", 2), ("cy", 5)]})
    assert runner.run_batch(1).applied
    assert _rows(store, topo, "as_read", 1) == [("ann", 2), ("ann", 3), ("bob", 1), ("cy", 5)]
    assert _rows(store, topo, "by_user", 1) == [("ann", 5), ("bob", 1), ("cy", 5)]
    assert _rows(store, topo, "by_user_hinted", 1) == [("ann", 2), ("bob", 1), ("cy", 1)]
    assert _rows(store, topo, "global", 1) == [(11,)]
    assert _rows(store, topo, "batch_global", 1) == [(4,)]
    assert _rows(store, topo, "broadcast", 1) == [(4,)]
    assert _rows(store, topo, "local", 1) == [(4,), (7,)]
    assert _rows(store, topo, "identity", 1) == [(4,), (7,)]
    assert _rows(store, topo, "shuffled", 1) == [("ann", 2), ("ann", 3), ("bob", 1), ("cy", 5)]

    empty = runner.run_batch(2)
    assert empty.applied
    assert empty.outputs == dict.fromkeys(topo.outputs, 0)
    store.close()


def test_repartition_frame_partition_counts(spark: Any) -> None:
    df = spark.createDataFrame([(i % 3, i) for i in range(12)], "k bigint, v bigint")
    df = df.repartition(2)

    def parts(how: Partitioning, fields: tuple[str, ...] = (), n: int | None = None) -> list[Any]:
        out = repartition_frame(df, how, fields, n)
        return out.rdd.glom().map(lambda rows: sorted({r.k for r in rows})).collect()

    shuffle_partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert len(parts(Partitioning.SHUFFLE)) == shuffle_partitions
    assert len(parts(Partitioning.SHUFFLE, n=3)) == 3
    keyed = parts(Partitioning.PARTITION_BY, ("k",), 5)
    assert len(keyed) == 5
    assert sorted(k for p in keyed for k in p) == [0, 1, 2]  # each key in exactly one partition
    for how in (Partitioning.GLOBAL, Partitioning.BATCH_GLOBAL, Partitioning.BROADCAST):
        assert parts(how, n=4) == [[0, 1, 2]]  # one partition whatever the hint
    assert len(parts(Partitioning.LOCAL_OR_SHUFFLE)) == 2
    assert len(parts(Partitioning.LOCAL_OR_SHUFFLE, n=3)) == 3
    assert len(parts(Partitioning.IDENTITY, n=3)) == 2


def test_parallelism_hint_sets_the_group_of_the_last_repartitioning() -> None:
    topo = TridentTopology("hints")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    keyed = ev.partition_by("user")
    agg = keyed.group_by("user").partition_aggregate("n", Sum(), "total")
    assert agg.parallelism_hint(4) is agg
    assert keyed.node.args["parallelism"] == 4
    agg.project(["total"]).parallelism_hint(2)  # the group's parallelism is the max of its hints
    assert keyed.node.args["parallelism"] == 4
    ev.parallelism_hint(3)  # no repartitioning upstream: recorded only
    assert ev.node.args["parallelism_hint"] == 3
    with pytest.raises(ConfigError, match=r"parallelism_hint needs a positive number .* got 0"):
        ev.parallelism_hint(0)


# -- 3. TupleCollectionGet -------------------------------------------------------------------------


def test_tuple_collection_get_reads_every_state_tuple(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    real = tuple_collection.read_all_tuples

    def counting(store: Any, state: Any, outputs: Any) -> Any:
        reads.append(state.spec.name)
        return real(store, state, outputs)

    monkeypatch.setattr(tuple_collection, "read_all_tuples", counting)
    log = _log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    store.conn.execute("CREATE TABLE people (name VARCHAR, age INTEGER)")
    store.conn.execute("INSERT INTO people VALUES ('ann', 31), ('bob', 40)")
    topo = TridentTopology("all_tuples")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    totals = ev.group_by("user").persistent_aggregate(StateSpec.opaque("totals"), "n", Sum(), "s")
    pairs = ev.group_by(["user", "n"]).persistent_aggregate(
        StateSpec.opaque("pairs"), "n", Count(), "times"
    )
    everything = ev.persistent_aggregate(StateSpec.opaque("everything"), "n", Count(), "c")
    ages = topo.new_static_state("ages", StaticTable("people", "name", "age"))
    ticks = topo.new_stream("ticks", LogSpout("ticks", TICKS)).broadcast()
    ticks.state_query(totals, [], TupleCollectionGet(), ["who", "total"]).as_output("all_totals")
    ticks.state_query(pairs, "tick", TupleCollectionGet(), ["u", "v", "k"]).as_output("all_pairs")
    ticks.state_query(everything, [], TupleCollectionGet(), "count").as_output("global")
    ticks.global_().state_query(ages, [], TupleCollectionGet(), ["name", "age"]).as_output("ages")
    runner = TopologyRunner(topo, spark, store, log)

    # txid 1 reads the states as committed before it: empty (no table yet); static: its rows
    _events(log, {0: [("ann", 3), ("bob", 1)], 1: [("ann", 2), ("cy", 5)]})
    _send(log, "ticks", {0: [{"tick": 1}]})
    assert runner.run_batch(1).outputs == {"all_totals": 0, "all_pairs": 0, "global": 0, "ages": 2}
    assert _rows(store, topo, "ages", 1) == [(1, "ann", 31), (1, "bob", 40)]
    types = store.conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = 'all_tuples__out_all_totals' ORDER BY ordinal_position"
    ).fetchall()
    assert types == [
        ("txid", "BIGINT"),
        ("tick", "BIGINT"),
        ("who", "VARCHAR"),
        ("total", "BIGINT"),
    ]
    assert sorted(reads) == ["ages", "everything", "pairs", "totals"]  # one read per query

    # txid 2: every input tuple meets every tuple committed by txid 1 (not txid 2's)
    _events(log, {0: [("bob", 4)]})
    _send(log, "ticks", {0: [{"tick": 7}, {"tick": 8}]})
    reads.clear()
    assert runner.run_batch(2).applied
    assert sorted(reads) == ["ages", "everything", "pairs", "totals"]
    totals_after_1 = [("ann", 5), ("bob", 1), ("cy", 5)]
    assert _rows(store, topo, "all_totals", 2) == sorted(
        [(t, *kv) for t in (7, 8) for kv in totals_after_1], key=repr
    )
    pairs_after_1 = [("ann", 2, 1), ("ann", 3, 1), ("bob", 1, 1), ("cy", 5, 1)]
    assert _rows(store, topo, "all_pairs", 2) == sorted(
        [(t, *p) for t in (7, 8) for p in pairs_after_1], key=repr
    )
    assert _rows(store, topo, "global", 2) == [(7, 4), (8, 4)]

    # txid 3: no ticks, so no tuples and no read; txid 4 sees bob's 4 from txid 2
    _events(log, {1: [("dan", 1)]})
    reads.clear()
    assert runner.run_batch(3).outputs == {"all_totals": 0, "all_pairs": 0, "global": 0, "ages": 0}
    assert reads == []
    _send(log, "ticks", {0: [{"tick": 9}]})
    assert runner.run_batch(4).applied
    assert _rows(store, topo, "all_totals", 4) == [
        (9, "ann", 5),
        (9, "bob", 5),
        (9, "cy", 5),
        (9, "dan", 1),
    ]
    assert _rows(store, topo, "global", 4) == [(9, 6)]
    store.close()


class Keep(StateUpdater):
    """A StateUpdater that stores nothing."""

    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> Any:
        return None


def test_tuple_collection_get_declaration_errors() -> None:
    topo = TridentTopology("tcg_decl")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    totals = ev.group_by("user").persistent_aggregate(StateSpec.opaque("totals"), "n", Sum(), "s")
    kept = ev.partition_persist(StateSpec.opaque("kept"), ["user"], Keep())
    with pytest.raises(
        ConfigError,
        match=r"TupleCollectionGet over state 'totals' emits 2 fields \(its keys and value "
        r"\['user', 's'\]\), got 1 output fields \['who'\]",
    ):
        ev.state_query(totals, [], TupleCollectionGet(), "who")
    with pytest.raises(ConfigError, match="state 'kept' is not a map state"):
        ev.state_query(kept, [], TupleCollectionGet(), ["a", "b"])
    with pytest.raises(ConfigError, match=r"state_query: output field 'user' already exists"):
        ev.state_query(totals, [], TupleCollectionGet(), ["user", "s"])
    with pytest.raises(FieldNotFoundError, match=r"non-existent field 'tick' from stream"):
        ev.state_query(totals, "tick", TupleCollectionGet(), ["who", "s"])
    with pytest.raises(ConfigError, match="only state_query runs it"):
        TupleCollectionGet().batch_retrieve(None, [])  # type: ignore[arg-type]


# -- 4. peek, chained_agg, name --------------------------------------------------------------------


class PyTotal(ReducerAggregator[int]):
    """Sums n in Python (a reducer)."""

    output_type = "bigint"

    def init(self) -> int:
        return 0

    def reduce(self, acc: int, values: tuple[Any, ...]) -> int:
        return acc + values[0]


class Longest(CombinerAggregator[int]):
    """The longest user name (a Python combiner)."""

    output_type = "bigint"

    def init(self, values: tuple[Any, ...]) -> int:
        return len(values[0])

    def combine(self, a: int, b: int) -> int:
        return max(a, b)

    def zero(self) -> int:
        return 0


@pytest.mark.usefixtures("file_per_partition")
def test_chained_agg_global_grouped_and_per_partition(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    topo = TridentTopology("chains")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    ev.chained_agg().aggregate("n", Count(), "c").aggregate("n", Sum(), "s").chain_end().as_output(
        "global"
    )
    (
        ev.group_by("user")
        .chained_agg()
        .aggregate("n", Count(), "c")
        .aggregate("n", Sum(), "s")
        .aggregate("n", Max(), "m")
        .chain_end()
        .as_output("grouped")
    )
    (
        ev.chained_agg()
        .partition_aggregate("n", Count(), "c")
        .partition_aggregate("n", Max(), "m")
        .chain_end()
        .as_output("per_partition")
    )
    (
        ev.chained_agg()
        .aggregate("n", PyTotal(), "t")
        .aggregate("user", Longest(), "longest")
        .aggregate("n", Count(), "c")
        .chain_end()
        .as_output("py_global")
    )
    (
        ev.group_by("user")
        .chained_agg()
        .aggregate("n", PyTotal(), "t")
        .aggregate("n", Count(), "c")
        .chain_end()
        .as_output("py_grouped")
    )
    (
        ev.chained_agg()
        .partition_aggregate("n", PyTotal(), "t")
        .partition_aggregate("user", Longest(), "longest")
        .chain_end()
        .as_output("py_per_partition")
    )
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log)

    _events(log, {0: [("ann", 3), ("bob", 1)], 1: [("ann", 2), ("cy", 5)]})
    assert runner.run_batch(1).applied
    assert _rows(store, topo, "global", 1) == [(4, 11)]
    assert _rows(store, topo, "grouped", 1) == [("ann", 2, 5, 3), ("bob", 1, 1, 1), ("cy", 1, 5, 5)]
    assert _rows(store, topo, "per_partition", 1) == [(2, 3), (2, 5)]
    assert _rows(store, topo, "py_global", 1) == [(11, 3, 4)]
    assert _rows(store, topo, "py_grouped", 1) == [("ann", 5, 2), ("bob", 1, 1), ("cy", 5, 1)]
    assert _rows(store, topo, "py_per_partition", 1) == [(4, 3), (7, 3)]

    # an empty batch: a global chain still emits exactly one tuple of zeros
    assert runner.run_batch(2).outputs == {
        "global": 1,
        "grouped": 0,
        "per_partition": 0,
        "py_global": 1,
        "py_grouped": 0,
        "py_per_partition": 0,
    }
    assert _rows(store, topo, "global", 2) == [(0, 0)]
    assert _rows(store, topo, "py_global", 2) == [(0, 0, 0)]
    store.close()


def test_peek_runs_on_each_tuple_and_keeps_batches_pipelined(spark: Any, tmp_path: Path) -> None:
    seen = tmp_path / "peeked.txt"

    def record(user: str, n: int) -> None:
        with seen.open("a") as f:
            f.write(f"{user} {n}\n")

    log = _log(tmp_path)
    topo = TridentTopology("peeking")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    ev.peek(record).group_by("user").persistent_aggregate(
        StateSpec.opaque("counts"), "n", Count(), "c"
    )
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log)
    assert runner.pipelinable

    _events(log, {0: [("ann", 3)], 1: [("bob", 1)]})
    runner.run_batch(1)
    _events(log, {0: [("ann", 2)], 1: [("cy", 5)]})
    outcomes = list(runner.run_batches([2, 3]))
    assert [o.applied for o in outcomes] == [True, True]
    assert [o.pipelined for o in outcomes] == [2, 2]  # peek is row-wise: one Spark job
    assert sorted(seen.read_text().splitlines()) == ["ann 2", "ann 3", "bob 1", "cy 5"]
    assert store.scan("peeking__counts", "c").to_pylist() == [
        {"user": "ann", "c": 2},
        {"user": "bob", "c": 1},
        {"user": "cy", "c": 1},
    ]
    store.close()


def test_peek_output_and_a_failing_peek_named(spark: Any, tmp_path: Path) -> None:
    seen = tmp_path / "peeked.txt"

    def record(user: str, n: int) -> None:
        with seen.open("a") as f:
            f.write(f"{user} {n}\n")

    def boom(user: str, n: int) -> None:
        if user == "bob":
            raise ValueError("no bob")

    log = _log(tmp_path)
    topo = TridentTopology("peek_out")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    ev.peek(record).project("user").as_output("users")
    store = DuckDBStore(tmp_path / "state.duckdb")
    _events(log, {0: [("ann", 3), ("bob", 1)], 1: [("cy", 5)]})
    assert TopologyRunner(topo, spark, store, log).run_batch(1).applied
    assert _rows(store, topo, "users", 1) == [("ann",), ("bob",), ("cy",)]
    assert sorted(seen.read_text().splitlines()) == ["ann 3", "bob 1", "cy 5"]

    bad = TridentTopology("peek_bad")
    bad.new_stream("events", LogSpout("events", EVENTS)).name("audit").peek(boom).as_output("o")
    with pytest.raises(Exception, match=r"peek 'audit': .*boom failed on input tuple \('bob', 1\)"):
        TopologyRunner(bad, spark, store, log).run_batch(1)
    assert store.last_committed("peek_bad") is None
    store.close()


def test_name_labels_the_following_operations() -> None:
    topo = TridentTopology("names")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    named = ev.name("keep big")
    assert named.node is ev.node  # name declares no node
    big = named.partition_by("user").min_by("n")
    assert big.node.args["name"] == "keep big"
    assert big.node.parents[0].args["name"] == "keep big"
    assert big.node.label == "comparison 'keep big'"
    later = big.name("last").peek(print)
    assert later.node.label == "peek 'last'"
    assert "name" not in ev.project("user").node.args  # the unnamed stream is unchanged
    for label in ("", "two\nlines", "x" * 101, 3):
        with pytest.raises(ConfigError, match="name needs a non-empty one-line label"):
            ev.name(label)  # type: ignore[arg-type]


# -- 5. declaration errors -------------------------------------------------------------------------


def test_declaration_errors_name_the_field_and_the_fields_that_exist() -> None:
    topo = TridentTopology("decl")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    missing = (
        r"{}: trying to select non-existent field 'age' from stream containing fields "
        r"\['user', 'n'\]"
    )

    with pytest.raises(FieldNotFoundError, match=missing.format("partition_by")):
        ev.partition_by(["user", "age"])
    with pytest.raises(FieldNotFoundError, match=missing.format("min_by")):
        ev.min_by("age")
    with pytest.raises(FieldNotFoundError, match=missing.format("max_by")):
        ev.max_by("age", _cmp)
    with pytest.raises(FieldNotFoundError, match=missing.format("chained_agg aggregate")):
        ev.chained_agg().aggregate("age", Sum(), "s")
    with pytest.raises(FieldNotFoundError, match=missing.format("chained_agg partition_aggregate")):
        ev.group_by("user").chained_agg().partition_aggregate("age", Sum(), "s")

    with pytest.raises(ConfigError, match="partition_by needs at least one field"):
        ev.partition_by([])
    with pytest.raises(ConfigError, match="max: the comparator must be a callable"):
        ev.max("n")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="peek needs a callable"):
        ev.peek(None)
    chain = ev.chained_agg().aggregate("n", Count(), "c").aggregate("n", Sum(), "c")
    with pytest.raises(
        ConfigError, match=r"Output fields for chained aggregators must be distinct: \['c', 'c'\]"
    ):
        chain.chain_end()
    with pytest.raises(ConfigError, match=r"chained_agg: output field 'user' already exists"):
        ev.group_by("user").chained_agg().aggregate("n", Count(), "user").chain_end()
    with pytest.raises(ConfigError, match="tried to chain different types of aggregation"):
        ev.chained_agg().aggregate("n", Count(), "c").partition_aggregate("n", Sum(), "s")
    with pytest.raises(ConfigError, match="needs at least one aggregator before chain_end"):
        ev.chained_agg().chain_end()
    with pytest.raises(ConfigError, match=r"combiner aggregators take a single input field"):
        ev.chained_agg().aggregate(["user", "n"], Sum(), "s")
    with pytest.raises(ConfigError, match=r"emits one field per aggregator, got \['a', 'b'\]"):
        ev.chained_agg().aggregate("n", Sum(), ["a", "b"])

"""map, flat_map, partition_aggregate, FirstN, merge, join and static states on Spark: exact outputs
through TopologyRunner, declaration errors, empty batches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trident_assets import (
    CombinerAggregator,
    ConfigError,
    Count,
    FieldNotFoundError,
    ReducerAggregator,
    StateLayoutError,
    Sum,
    UserCodeError,
)
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spark.stream_ops import partition_aggregate_frame
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.assemblies import FirstN
from trident_assets.stream.batch_join import JoinType
from trident_assets.stream.operations import (
    PandasFlatMap,
    PandasMap,
    PyFlatMap,
    PyMap,
    Split,
    SqlFlatMap,
    SqlMap,
)
from trident_assets.stream.queries import MapGet, QueryFunction, SnapshotGet
from trident_assets.stream.static_state import StaticFile, StaticTable
from trident_assets.stream.topology import PersistedState, StateSpec, TridentTopology
from trident_assets_tests.conftest import OpenStore

EVENTS = JsonScheme({"user": "string", "n": "bigint"})
PROFILES = JsonScheme({"user": "string", "city": "string"})


def _log(tmp_path: Path) -> PartitionedLog:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("events", 2)
    log.create_topic("profiles", 1)
    return log


def _events(log: PartitionedLog, by_partition: dict[int, list[tuple[str, int]]]) -> None:
    producer = log.producer("events")
    for partition, rows in by_partition.items():
        for user, n in rows:
            producer.send(json.dumps({"user": user, "n": n}).encode(), partition=partition)
    producer.flush()


def _profiles(log: PartitionedLog, rows: list[tuple[str, str]]) -> None:
    producer = log.producer("profiles")
    for user, city in rows:
        producer.send(json.dumps({"user": user, "city": city}).encode())
    producer.flush()


def _rows(store: Any, topo: TridentTopology, output: str, txid: int) -> list[Any]:
    found = store.fetch_arrow(
        f'SELECT * FROM "{topo.name}__out_{output}" WHERE txid = ?', [txid]
    ).drop_columns(["txid"])
    return sorted(zip(*(c.to_pylist() for c in found.columns), strict=True), key=repr)


# -- 1. map, flat_map, partition_aggregate, FirstN ------------------------------------------------


class Users(ReducerAggregator[str]):
    """Joins the users of a partition in arrival order (a Python reducer)."""

    output_type = "string"

    def init(self) -> str:
        return ""

    def reduce(self, acc: str, values: tuple[Any, ...]) -> str:
        return f"{acc},{values[0]}" if acc else values[0]


class Longest(CombinerAggregator[int]):
    """The longest user name (a Python combiner)."""

    output_type = "bigint"

    def init(self, values: tuple[Any, ...]) -> int:
        return len(values[0])

    def combine(self, a: int, b: int) -> int:
        return max(a, b)

    def zero(self) -> int:
        return 0


def test_map_flat_map_partition_aggregate_first_n(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    topo = TridentTopology("ops")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    (
        ev.map(PyMap(lambda u, n: (u[::-1], n + 1)))
        .map(PandasMap(lambda pdf: pdf.assign(n=pdf["n"] * 2)))
        .map(SqlMap("upper({user})", "{n} * 10"), ["user", "n10"])
        .as_output("maps")
    )
    (
        ev.flat_map(SqlFlatMap("array_repeat(struct({user}, {n}), CAST({n} AS INT))"))
        .flat_map(SqlFlatMap("sequence(1, {n})"), "k")
        .as_output("flat_sql")
    )
    (
        ev.flat_map(PyFlatMap(lambda u, n: [(u, i) for i in range(n)], {"u": "string", "i": "int"}))
        .flat_map(PandasFlatMap(lambda pdf: pdf[pdf["i"] % 2 == 1]))
        .as_output("flat_py")
    )
    ev.partition_aggregate("n", Sum(), "total").as_output("p_sum")
    ev.group_by("user").partition_aggregate("n", Count(), "c").as_output("p_count")
    ev.apply_assembly(FirstN(2, "n", reverse=True)).as_output("top2")
    ev.group_by("user").apply_assembly(FirstN(1, "n")).as_output("least_per_user")
    ev.apply_assembly(FirstN(3)).as_output("any3")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log)

    # log partition 0 and 1 are separate segment files: two Spark partitions of the batch
    _events(log, {0: [("ann", 3), ("bob", 1)], 1: [("ann", 2), ("cy", 5)]})
    first = runner.run_batch(1)
    assert first.applied
    rows = {name: _rows(store, topo, name, 1) for name in topo.outputs}
    moved = [("ann", 3), ("bob", 1), ("ann", 2), ("cy", 5)]
    # reversed and n + 1, then n * 2, then upper and n * 10
    assert rows["maps"] == [("BOB", 40), ("NNA", 60), ("NNA", 80), ("YC", 120)]
    assert rows["flat_sql"] == sorted(
        (k,) for _, n in moved for _ in range(n) for k in range(1, n + 1)
    )
    assert rows["flat_py"] == [("ann", 1), ("ann", 1), ("cy", 1), ("cy", 3)]
    # one tuple per Spark partition (per group), not per batch: aggregate would give 11 / ann 2
    assert rows["p_sum"] == [(4,), (7,)]
    assert rows["p_count"] == [("ann", 1), ("ann", 1), ("bob", 1), ("cy", 1)]
    assert rows["top2"] == [("ann", 3), ("cy", 5)]
    assert rows["least_per_user"] == [("ann", 2), ("bob", 1), ("cy", 5)]
    assert len(rows["any3"]) == 3
    assert set(rows["any3"]) <= {("ann", 3), ("bob", 1), ("ann", 2), ("cy", 5)}
    kinds = store.conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = 'ops__out_flat_py' ORDER BY ordinal_position"
    ).fetchall()
    assert kinds == [("txid", "BIGINT"), ("u", "VARCHAR"), ("i", "INTEGER")]

    empty = runner.run_batch(2)
    assert empty.applied
    assert empty.tuples_in == {"events": 0}
    assert empty.outputs == dict.fromkeys(topo.outputs, 0)
    store.close()


def test_partition_aggregate_folds_each_spark_partition(spark: Any) -> None:
    rows = [("ann", 3), ("bob", 1), ("ann", 2), ("cy", 5), ("dora", 4)]
    df = spark.sparkContext.parallelize(rows, 2).toDF("user string, n bigint")
    parts = df.rdd.glom().map(len).collect()
    assert parts == [2, 3]  # [ann, bob], [ann, cy, dora]

    def run(group: tuple[str, ...], inputs: tuple[str, ...], agg: Any) -> list[Any]:
        out = partition_aggregate_frame(df, group, inputs, agg, "out").toArrow()
        return sorted(tuple(r.values()) for r in out.to_pylist())

    assert run((), ("n",), Sum()) == [(4,), (11,)]
    assert run((), ("n",), Count()) == [(2,), (3,)]
    assert run((), ("user",), Longest()) == [(3,), (4,)]
    assert run((), ("user",), Users()) == [("ann,bob",), ("ann,cy,dora",)]
    assert run(("user",), ("n",), Sum()) == [
        ("ann", 2),
        ("ann", 3),
        ("bob", 1),
        ("cy", 5),
        ("dora", 4),
    ]
    assert run(("user",), ("user",), Longest()) == [
        ("ann", 3),
        ("ann", 3),
        ("bob", 3),
        ("cy", 2),
        ("dora", 4),
    ]
    empty = df.where("n < 0")
    assert partition_aggregate_frame(empty, (), ("user",), Users(), "out").toArrow().num_rows == 0
    assert partition_aggregate_frame(empty, (), ("n",), Sum(), "out").toArrow().num_rows == 0


# -- 2. merge and join within a batch ------------------------------------------------------------


def test_merge_and_join_with_empty_sides(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    topo = TridentTopology("mj")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    prof = topo.new_stream("profiles", LogSpout("profiles", PROFILES))
    out = ["user", "n", "city"]
    topo.merge(ev.project("user"), prof.project("user")).as_output("users")
    topo.merge(prof, prof.project(["city", "user"]), fields=["a", "b"]).as_output("by_position")
    topo.join([ev, prof], "user", out).as_output("inner")
    topo.join([ev, prof], "user", out, how="outer").as_output("outer")
    topo.join([ev, prof], ["user"], out, how=[JoinType.INNER, "outer"]).as_output("left")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log)

    _events(log, {0: [("ann", 3), ("bob", 1)], 1: [("ann", 2), ("cy", 5)]})
    _profiles(log, [("ann", "Oslo"), ("bob", "Rome"), ("eve", "Lima")])
    assert runner.run_batch(1).applied
    assert _rows(store, topo, "users", 1) == sorted(
        [("ann",), ("bob",), ("ann",), ("cy",), ("ann",), ("bob",), ("eve",)]
    )
    assert _rows(store, topo, "by_position", 1) == [
        ("Lima", "eve"),
        ("Oslo", "ann"),
        ("Rome", "bob"),
        ("ann", "Oslo"),
        ("bob", "Rome"),
        ("eve", "Lima"),
    ]
    inner = [("ann", 2, "Oslo"), ("ann", 3, "Oslo"), ("bob", 1, "Rome")]
    assert _rows(store, topo, "inner", 1) == inner
    assert _rows(store, topo, "left", 1) == [*inner, ("cy", 5, None)]
    assert _rows(store, topo, "outer", 1) == [*inner, ("cy", 5, None), ("eve", None, "Lima")]

    # the profiles side is empty in txid 2: inner joins nothing, outer sides are null-filled
    _events(log, {0: [("bob", 7)]})
    assert runner.run_batch(2).outputs == {
        "users": 1,
        "by_position": 0,
        "inner": 0,
        "outer": 1,
        "left": 1,
    }
    assert _rows(store, topo, "left", 2) == [("bob", 7, None)]
    assert _rows(store, topo, "outer", 2) == [("bob", 7, None)]

    # both sides empty: every merge and join is empty, and the batch still commits
    empty = runner.run_batch(3)
    assert empty.applied
    assert empty.outputs == dict.fromkeys(topo.outputs, 0)
    assert store.last_committed("mj") == 3
    store.close()


# -- 3. static states ------------------------------------------------------------------------------


class CityOf(QueryFunction):
    """Looks users up in the static table with one statement; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[Any, ...]]] = []

    def batch_retrieve(self, state: Any, args: Any) -> list[Any]:
        assert isinstance(state, PersistedState)
        self.calls.append(sorted(args))
        keys = pa.table({"user": [a[0] for a in args], "i": list(range(len(args)))})
        with state.store.staged(keys) as name:
            found = state.store.fetch_rows(
                f'SELECT t.city FROM "{name}" AS k LEFT JOIN "{state.table}" AS t '
                'ON k."user" = t.name ORDER BY k.i'
            )
        return [r[0] for r in found]


def test_static_states_table_parquet_and_csv(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path)
    store = open_store()
    store.execute("CREATE TABLE people (name VARCHAR, city VARCHAR, age INTEGER)")
    store.execute(
        "INSERT INTO people VALUES ('ann', 'Oslo', 31), ('bob', 'Rome', 40), ('cy', NULL, 22)"
    )
    pq.write_table(pa.table({"user": ["ann", "cy"], "score": [1.5, 2.5]}), tmp_path / "s.parquet")
    (tmp_path / "tiers.csv").write_text("user,tier\nbob,gold\ncy,silver\n")

    topo = TridentTopology("static")
    ages = topo.new_static_state("ages", StaticTable("people", "name", "age"))
    cities = topo.new_static_state("cities", StaticTable("people", "name", "city"))
    scores = topo.new_static_state("scores", StaticFile(tmp_path / "s.parquet", "user", "score"))
    tiers = topo.new_static_state("tiers", StaticFile(tmp_path / "tiers.csv", "user", "tier"))
    query = CityOf()
    (
        topo.new_stream("events", LogSpout("events", EVENTS))
        .state_query(ages, "user", MapGet(), "age")
        .state_query(scores, "user", MapGet(), "score")
        .state_query(tiers, "user", MapGet(), "tier")
        .state_query(cities, "user", query, "city")
        .as_output("enriched")
    )
    assert topo.states == {}  # nothing writes a static state
    runner = TopologyRunner(topo, spark, store, log)

    _events(log, {0: [("ann", 1), ("zed", 2)], 1: [("cy", 3), ("ann", 4)]})
    assert runner.run_batch(1).applied
    assert _rows(store, topo, "enriched", 1) == [
        ("ann", 1, 31, 1.5, None, "Oslo"),
        ("ann", 4, 31, 1.5, None, "Oslo"),
        ("cy", 3, 22, 2.5, "silver", None),
        ("zed", 2, None, None, None, None),
    ]
    assert query.calls == [[("ann",), ("cy",), ("zed",)]]
    assert store.fetch_rows('SELECT count(*) FROM "static__scores"') == [(2,)]

    # a static table is read as it is now; a loaded file is not reloaded
    store.execute("UPDATE people SET age = 32 WHERE name = 'ann'")
    (tmp_path / "s.parquet").unlink()
    _events(log, {0: [("ann", 5)]})
    assert runner.run_batch(2).applied
    assert _rows(store, topo, "enriched", 2) == [("ann", 5, 32, 1.5, None, "Oslo")]
    assert len(query.calls) == 2

    # an empty batch: no rows and, as in Trident, no batch_retrieve call
    assert runner.run_batch(3).outputs == {"enriched": 0}
    assert len(query.calls) == 2

    # a key held twice is refused before anything commits
    store.execute("INSERT INTO people VALUES ('ann', 'Bergen', 33)")
    _events(log, {1: [("ann", 6)]})
    with pytest.raises(StateLayoutError, match=r"holds key \{'user': 'ann'\} 2 times"):
        runner.run_batch(4)
    assert store.last_committed("static") == 3
    store.close()


def test_static_state_missing_table_and_snapshot_get(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    topo = TridentTopology("missing")
    gone = topo.new_static_state("gone", StaticTable("nowhere", "user", "city"))
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    ev.state_query(gone, "user", MapGet(), "city").as_output("out")
    with pytest.raises(StateLayoutError, match="'nowhere' does not exist"):
        TopologyRunner(topo, spark, store, log).run_batch(1)
    store.conn.execute("CREATE TABLE nowhere (user VARCHAR, town VARCHAR)")
    with pytest.raises(StateLayoutError, match=r"has no column 'city'; it has \['user', 'town'\]"):
        TopologyRunner(topo, spark, store, log).run_batch(1)

    snap = TridentTopology("snap")
    people = snap.new_static_state("people", StaticTable("nowhere", "user", "town"))
    snap.new_stream("events", LogSpout("events", EVENTS)).state_query(
        people, "user", SnapshotGet(), "v"
    ).as_output("out")
    with pytest.raises(ConfigError, match="SnapshotGet reads a global value"):
        TopologyRunner(snap, spark, store, log).run_batch(1)
    assert store.last_committed("missing") is None
    assert store.last_committed("snap") is None
    store.close()


def test_python_map_contract_violation_fails_the_batch(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    topo = TridentTopology("bad_map")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    ev.map(PyMap(lambda u, n: (u, n, "extra"))).as_output("out")
    store = DuckDBStore(tmp_path / "state.duckdb")
    _events(log, {0: [("ann", 1)]})
    with pytest.raises(
        UserCodeError,
        match=r"^map -> user, n \[PyMap\]: trident_assets_tests\.test_stream_ops\."
        r"test_python_map_contract_violation_fails_the_batch\.<locals>\.<lambda> failed on "
        r"input tuple \('ann', 1\): expected 2 output values, got 3: \('ann', 1, 'extra'\)$",
    ):
        TopologyRunner(topo, spark, store, log).run_batch(1)
    assert store.last_committed("bad_map") is None
    store.close()


# -- 4. declaration errors -----------------------------------------------------------------------


def test_declaration_errors_name_the_field_and_the_fields_that_exist() -> None:
    topo = TridentTopology("decl")
    ev = topo.new_stream("events", LogSpout("events", EVENTS))
    prof = topo.new_stream("profiles", LogSpout("profiles", PROFILES))
    missing = r"non-existent field '{}' from stream containing fields \['user', 'n'\]"

    with pytest.raises(FieldNotFoundError, match=missing.format("age")):
        ev.map(SqlMap("{age} + 1", "{user}"))
    with pytest.raises(FieldNotFoundError, match=missing.format("words")):
        ev.flat_map(SqlFlatMap("split({words}, ' ')"), "w")
    with pytest.raises(FieldNotFoundError, match=missing.format("size")):
        ev.partition_aggregate("size", Sum(), "total")
    with pytest.raises(FieldNotFoundError, match=missing.format("size")):
        ev.group_by("user").partition_aggregate("size", Count(), "c")
    with pytest.raises(FieldNotFoundError, match=missing.format("score")):
        ev.apply_assembly(FirstN(3, "score"))
    with pytest.raises(FieldNotFoundError, match=r"join \(stream 1\).*'n' from stream containing"):
        topo.join([ev, prof], "n", ["n", "user", "city"])

    with pytest.raises(ConfigError, match="SqlMap has 1 expressions for 2 output fields"):
        ev.map(SqlMap("upper({user})"))
    with pytest.raises(ConfigError, match=r"map needs a MapFunction, got .*PyFlatMap"):
        ev.map(PyFlatMap(lambda u, n: [(u, n)]))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"PyMap outputs \['a'\] must match .* \['b'\]"):
        ev.map(PyMap(lambda u, n: u, {"b": "string"}), "a")
    with pytest.raises(ConfigError, match="without output_types keeps the input field types"):
        ev.map(PandasMap(lambda pdf: pdf), ["only_one"])
    with pytest.raises(ConfigError, match="output field 'user' already exists"):
        ev.map(SqlMap("{user}", "{user}"), ["user", "user"])
    with pytest.raises(ConfigError, match="set its class attribute output_type"):
        ev.partition_aggregate("user", _Untyped(), "x")
    with pytest.raises(ConfigError, match="combiner aggregators take a single input field"):
        ev.partition_aggregate(["user", "n"], Count(), "c")
    with pytest.raises(ConfigError, match="positive number"):
        FirstN(0)
    with pytest.raises(ConfigError, match=r"stream 1 has fields \['user', 'city'\] but stream 0"):
        topo.merge(ev, prof)
    with pytest.raises(ConfigError, match=r"stream 1 has 1 fields \['user'\], the output has 2"):
        topo.merge(ev, prof.project("user"), fields=["a", "b"])
    with pytest.raises(ConfigError, match=r"join emits 3 fields .*out_fields names 2"):
        topo.join([ev, prof], "user", ["user", "n"])
    with pytest.raises(ConfigError, match="join needs at least two streams"):
        topo.join([ev], "user", ["user", "n"])
    with pytest.raises(ConfigError, match="join how='sideways'"):
        topo.join([ev, prof], "user", ["user", "n", "city"], how="sideways")
    with pytest.raises(ConfigError, match=r"one JoinType per stream \(2\)"):
        topo.join([ev, prof], "user", ["user", "n", "city"], how=["inner", "sideways"])
    left = topo.join([ev, prof], "user", ["user", "n", "city"], how="left")
    assert left.node.args["plan"].types == (JoinType.INNER, JoinType.OUTER)
    other = TridentTopology("other").new_stream("events", LogSpout("events", EVENTS))
    with pytest.raises(ConfigError, match="is not a stream of topology 'decl'"):
        topo.merge(ev, other)

    words = ev.flat_map(SqlFlatMap("split({user}, 'n')"), "part")
    assert words.fields == ("part",)
    assert ev.map(PyMap(lambda u, n: (u, n))).fields == ("user", "n")
    assert ev.map(PyMap(lambda u, n: n, {"len": "bigint"})).fields == ("len",)
    assert ev.group_by("user").partition_aggregate("n", Sum(), "s").fields == ("user", "s")
    assert topo.join([ev, prof], "user", ["u", "n", "c"]).fields == ("u", "n", "c")

    static = topo.new_static_state("people", StaticTable("people", "user", "city"))
    with pytest.raises(ConfigError, match="already has a state 'people'"):
        topo.new_static_state("people", StaticTable("people", "user", "city"))
    with pytest.raises(ConfigError, match="already has a state 'people'"):
        ev.each("user", Split(), "w").partition_persist(
            StateSpec.opaque("people"), "w", _NoUpdater()
        )
    with pytest.raises(ConfigError, match="not written by the topology"):
        static.new_values_stream()
    with pytest.raises(ConfigError, match="parquet or csv"):
        StaticFile("x.json", "user", "city")
    assert ev.state_query(static, "user", MapGet(), "city").fields == ("user", "n", "city")


class _Untyped(CombinerAggregator[str]):
    def init(self, values: tuple[Any, ...]) -> str:
        return values[0]

    def combine(self, a: str, b: str) -> str:
        return a + b

    def zero(self) -> str:
        return ""


class _NoUpdater:
    """Never runs: the declaration fails first."""

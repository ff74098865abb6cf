"""A single join whose pending halves live in a Redis Cluster or memcached, exactly once.

One 3-master Redis Cluster (1 replica each) and 3 memcached servers for the module. Each test
runs the same topology over one log with its halves in the key-value stores and in DuckDB
(the reference), and compares every txid's joined tuples and expired halves (in order) and
the state's outcome. The test that kills a Redis master comes last.
"""

from __future__ import annotations

import datetime
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import trident_assets as ta
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.join_batch_columns import ORD_COLUMN, SIDE_COLUMN, value_column
from trident_assets.backends.join_pending_table import read_meta
from trident_assets.backends.kv_backing import open_backing
from trident_assets.backends.kv_join_clock import advance_clock, due_txids
from trident_assets.backends.kv_join_records import SHARD_COLUMN, JoinPartition, join_targets
from trident_assets.backends.state_store import open_state_store
from trident_assets.core.join import DuplicateJoinSideError
from trident_assets.core.values import OpaqueValue
from trident_assets.errors import ConfigError, KeyValueStoreError, StateLayoutError
from trident_assets.log.store import PartitionedLog
from trident_assets.planner import pipelinable
from trident_assets.runtime.backfill_plans import replay_refusal
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spouts.config import SpoutKind
from trident_assets.stream.state_kinds import KeyValueJoinKind, state_kind
from trident_assets.stream.topology import TridentTopology
from trident_assets_tests.faults import Crash, crash_at
from trident_assets_tests.kv_servers import (
    MemcachedServers,
    RedisClusterServers,
    servers_installed,
)

pytestmark = pytest.mark.skipif(
    not servers_installed(), reason="needs memcached and redis-server (scripts/setup.sh)"
)


def _spec(store: str, servers: list[str], **options: Any) -> Any:
    cls = ta.RedisClusterState if store == "redis" else ta.MemcachedState
    return cls.opaque("people", servers, **options)


def _topology(name: str, state: Any = None, **join: Any) -> TridentTopology:
    """genders (id bigint) and ages (id int) joined on id into ``joined``; ``people_expired``."""
    topo = ta.TridentTopology(name)
    config = ta.SpoutConfig(kind=SpoutKind.OPAQUE, max_batch_size=join.pop("batch", 5))
    gender = ta.JsonScheme({"id": "bigint", "gender": "string", "ts": "double"})
    age = ta.JsonScheme({"id": "int", "age": "int", "ts": "double"})
    genders = topo.new_stream("g", ta.LogSpout("genders", gender, config))
    ages = topo.new_stream("a", ta.LogSpout("ages", age, config))
    options = {"timeout_batches": 2, "num_buckets": 2, "on_duplicate": "keep_latest"} | join
    topo.single_join(
        "people",
        [genders, ages],
        out_fields=["id", "gender", "age"],
        join_fields=["id"],
        sides=["gender", "age"],
        state=state,
        **options,
    ).as_output("joined")
    return topo


def _log(root: Path) -> PartitionedLog:
    log = PartitionedLog(root / "log")
    log.create_topic("genders", 2)
    log.create_topic("ages", 2)
    return log


def _send(log: PartitionedLog, topic: str, rows: list[dict[str, Any]]) -> None:
    producer = log.producer(topic, partitioner="round_robin")
    for row in rows:
        producer.send(json.dumps(row).encode())
    producer.flush()


def _seed(log: PartitionedLog, seed: int = 7, ids: int = 30) -> None:
    """Halves of ``ids`` ids in random order: some ids twice a side, some one side only."""
    rng = random.Random(seed)
    genders = [{"id": i, "gender": rng.choice("mf"), "ts": float(i)} for i in range(ids)]
    ages = [{"id": i, "age": 20 + i, "ts": float(i)} for i in range(ids) if i % 5 != 0]
    genders += [{"id": i, "gender": "x", "ts": float(i)} for i in range(0, ids, 7)]
    rng.shuffle(genders)
    rng.shuffle(ages)
    _send(log, "genders", genders)
    _send(log, "ages", ages)


def _rows(store: Any, topo: TridentTopology, output: str, txid: int) -> list[Any]:
    """Output ``output``'s rows of ``txid``, as written (DuckDB or PostgreSQL)."""
    table = topo.output_table(output)
    if not store.has_table(table):
        return []
    columns = ", ".join(f'"{f}"' for f in topo.outputs[output].fields)
    return store.fetch_rows(f'SELECT {columns} FROM "{table}" WHERE txid = ?', [txid])


def _result(store: Any, topo: TridentTopology, outcome: Any) -> tuple[Any, ...]:
    """What one txid did: the joined tuples and expired halves in order, the state's counts."""
    state = outcome.states["people"]
    return (
        outcome.txid,
        _rows(store, topo, "joined", outcome.txid),
        _rows(store, topo, "people_expired", outcome.txid),
        (state.keys_in, state.keys_updated, state.size),
        outcome.outputs,
    )


class _Runs:
    """One log; the join with its halves in each key-value store given, and in DuckDB."""

    def __init__(self, spark: Any, root: Path, name: str, specs: dict[str, Any], **join: Any):
        self.spark = spark
        self.log = _log(root)
        locations = join.pop("stores", {})  # a label's topology store (default: DuckDB)
        self.topos = {
            label: _topology(f"{name}_{label}", spec, **join) for label, spec in specs.items()
        }
        self.topos["ref"] = _topology(f"{name}_ref", None, **join)
        self.stores = {
            label: open_state_store(locations.get(label, str(root / f"{label}.duckdb")))
            for label in self.topos
        }

    def runner(self, label: str, fault: Any = None) -> TopologyRunner:
        topo, store = self.topos[label], self.stores[label]
        return TopologyRunner(topo, self.spark, store, self.log, fault=fault)

    def result(self, label: str, outcome: Any) -> tuple[Any, ...]:
        return _result(self.stores[label], self.topos[label], outcome)

    def run(self, txid: int) -> tuple[Any, ...]:
        """Run ``txid`` everywhere; check every key-value run gave the reference's result."""
        results = {
            label: self.result(label, self.runner(label).run_batch(txid)) for label in self.topos
        }
        ref = results.pop("ref")
        for label, result in results.items():
            assert result == ref, label
        return ref

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


@pytest.fixture
def runs(spark: Any, tmp_path: Path) -> Iterator[Any]:
    made: list[_Runs] = []

    def make(name: str, specs: dict[str, Any], **join: Any) -> _Runs:
        made.append(_Runs(spark, tmp_path / name, name, specs, **join))
        return made[-1]

    yield make
    for run in made:
        run.close()


def _both(redis: RedisClusterServers, memcached: MemcachedServers) -> dict[str, Any]:
    return {
        "redis": _spec("redis", redis.servers),
        "memcached": _spec("memcached", memcached.servers),
    }


# -- the same joins as in DuckDB ------------------------------------------------------------------


def test_joined_and_expired_per_txid_match_duckdb_across_a_crash_and_a_replay(
    runs: Any, redis_cluster: RedisClusterServers, memcached: MemcachedServers
) -> None:
    """Txid 2 is killed between the executors' writes and the marker; its re-run reads more
    records than the killed attempt (an opaque spout's batch may differ)."""
    run = runs("join_exact", _both(redis_cluster, memcached), batch=12, timeout_batches=1)
    _seed(run.log, ids=24)
    results = [run.run(1)]
    for label in ("redis", "memcached"):
        with pytest.raises(Crash):
            run.runner(label, crash_at("after_state_write")).run_batch(2)
        assert run.stores[label].last_committed(run.topos[label].name) == 1
    _send(run.log, "ages", [{"id": 40, "age": 2, "ts": 0.0}, {"id": 0, "age": 1, "ts": 0.0}])
    _send(run.log, "genders", [{"id": 40, "gender": "f", "ts": 1.0}])
    results += [run.run(txid) for txid in range(2, 6)]  # records, then expiries
    assert [len(r[1]) for r in results] == [7, 9, 2, 0, 0]  # joined tuples
    assert [len(r[2]) for r in results] == [0, 0, 4, 5, 3]  # expired halves
    assert [r[3] for r in results] == [  # (keys in, keys updated, pending after)
        (17, 17, 10),
        (16, 16, 11),
        (5, 5, 8),
        (0, 0, 3),
        (0, 0, 0),
    ]
    assert {row[0] for r in results for row in r[2]} >= {5, 10, 15, 20}  # never had an age
    for label in ("redis", "memcached"):
        store, topo = run.stores[label], run.topos[label]
        before = (_rows(store, topo, "joined", 2), store.last_committed(topo.name))
        assert not run.runner(label).run_batch(2).applied  # a committed txid is final
        assert (_rows(store, topo, "joined", 2), store.last_committed(topo.name)) == before


def test_event_time_expiry_matches_duckdb_with_the_marker_in_postgresql(
    runs: Any, memcached: MemcachedServers, pg_dsn: str
) -> None:
    """The topology's store (marker, clock, outputs) is PostgreSQL; the reference's DuckDB."""
    run = runs(
        "join_time",
        {"memcached": _spec("memcached", memcached.servers)},
        stores={"memcached": pg_dsn},
        timeout_batches=None,
        timeout_s=4.0,
        num_buckets=3,
        event_time="ts",
    )
    results = []
    for wave in range(3):  # ids 10*wave.. at event time 5*wave; odd ids get no age
        ids = range(10 * wave, 10 * wave + 4)
        _send(run.log, "genders", [{"id": i, "gender": "m", "ts": 5.0 * wave} for i in ids])
        _send(run.log, "ages", [{"id": i, "age": i, "ts": 5.0 * wave} for i in ids if i % 2 == 0])
        results.append(run.run(wave + 1))
    assert [len(r[1]) for r in results] == [2, 2, 2]
    assert [r[2] for r in results][:2] == [[], []]
    assert results[2][2] == [  # rotations every 2 s: arrivals at 0 and 5 expire at 10
        (1, "gender", 1, 0.0, "timeout_s", '{"id":1,"gender":"m","ts":0.0}'),
        (3, "gender", 1, 0.0, "timeout_s", '{"id":3,"gender":"m","ts":0.0}'),
        (11, "gender", 2, 5.0, "timeout_s", '{"id":11,"gender":"m","ts":5.0}'),
        (13, "gender", 2, 5.0, "timeout_s", '{"id":13,"gender":"m","ts":5.0}'),
    ]


def test_a_side_arriving_twice_raises_as_in_duckdb(
    runs: Any, redis_cluster: RedisClusterServers
) -> None:
    run = runs("join_dup", {"redis": _spec("redis", redis_cluster.servers)}, on_duplicate="error")
    _send(run.log, "genders", [{"id": i, "gender": "m", "ts": 0.0} for i in range(4)])
    run.run(1)
    _send(run.log, "genders", [{"id": 3, "gender": "f", "ts": 0.0}])
    errors = []
    for label in ("redis", "ref"):
        with pytest.raises(DuplicateJoinSideError) as info:
            run.runner(label).run_batch(2)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert errors[0].startswith(
        "join key (3,) received side 'gender' twice: it is still pending since txid 1 and "
        "batch 2 brings it again"
    )
    assert run.stores["redis"].last_committed(run.topos["redis"].name) == 1


# -- the executors' side alone: a re-run over fewer keys than its failed attempt ---------------


def _partition_rows(ids: list[int], side: int = 0) -> pa.RecordBatch:
    """The job's input rows of one partition (all in shard 0): ``ids`` on side ``side``."""
    gender = pa.struct([("id", pa.int64()), ("gender", pa.string()), ("ts", pa.float64())])
    age = pa.struct([("id", pa.int32()), ("age", pa.int32()), ("ts", pa.float64())])
    values = [{"id": i, "gender": "m", "ts": 0.0} for i in ids]
    ages = [{"id": i, "age": 30, "ts": 0.0} for i in ids]
    n = len(ids)
    return pa.record_batch(
        {
            SIDE_COLUMN: pa.array([side] * n, pa.int32()),
            value_column(0): pa.array(values if side == 0 else [None] * n, gender),
            value_column(1): pa.array(ages if side == 1 else [None] * n, age),
            ORD_COLUMN: pa.array(range(n), pa.int64()),
            SHARD_COLUMN: pa.array([0] * n, pa.int32()),
        }
    )


def test_a_rerun_restores_the_keys_only_its_failed_attempt_wrote(
    memcached: MemcachedServers,
) -> None:
    """The index lists every key an attempt writes before it writes them, so a re-run of
    the txid over other records puts those keys back as they were before the txid."""
    topo = _topology("join_rerun", _spec("memcached", memcached.servers))
    state = topo.states["people"]
    spec, targets = state.node.args["single_join"], join_targets(state)

    def attempt(txid: int, batch: pa.RecordBatch, previous: int | None) -> dict[str, Any]:
        job = JoinPartition(targets, spec, txid, None, previous, (), ())
        (out,) = job(iter([batch]))
        return dict(zip(out.column("__kind").to_pylist(), out.to_pylist(), strict=True))

    counts = attempt(1, _partition_rows([1, 2]), None)["n"]
    assert (counts["__keys_in"], counts["__delta"]) == (2, 2)
    attempt(2, _partition_rows([1, 3], side=1), 1)  # joins 1, adds 3: then "fails"
    rerun = attempt(2, _partition_rows([2], side=1), 1)  # the re-run reads only id 2
    assert rerun["j"]["__v0"] == {"id": 2, "gender": "m", "ts": 0.0}
    assert (rerun["n"]["__keys_in"], rerun["n"]["__delta"]) == (1, -1)
    backing = open_backing(targets.records)
    try:
        stored = backing.multi_get([(1,), (2,), (3,)])
    finally:
        backing.close()
    gender_1 = {"arrived_txid": 1, "arrived_ts": None, "gender": [1, "m", 0.0]}
    assert stored == [
        OpaqueValue(2, gender_1, gender_1),  # back to its value before txid 2
        OpaqueValue(2, None, {**gender_1, "gender": [2, "m", 0.0]}),  # joined by the re-run
        None,  # only the failed attempt created it
    ]


def test_a_half_json_cannot_store_is_refused_before_any_write(
    memcached: MemcachedServers,
) -> None:
    topo = ta.TridentTopology("join_dates")
    days = ta.JsonScheme({"id": "int", "day": "date"})
    ages = ta.JsonScheme({"id": "int", "age": "int"})
    topo.single_join(
        "people",
        [
            topo.new_stream("d", ta.LogSpout("days", days)),
            topo.new_stream("a", ta.LogSpout("ages", ages)),
        ],
        out_fields=["id", "day", "age"],
        state=_spec("memcached", memcached.servers),
    )
    state = topo.states["people"]
    targets = join_targets(state)
    day = pa.struct([("id", pa.int32()), ("day", pa.date32())])
    batch = pa.record_batch(
        {
            SIDE_COLUMN: pa.array([0], pa.int32()),
            value_column(0): pa.array([{"id": 1, "day": datetime.date(2024, 1, 2)}], day),
            value_column(1): pa.array([None], pa.struct([("id", pa.int32()), ("age", pa.int32())])),
            ORD_COLUMN: pa.array([0], pa.int64()),
            SHARD_COLUMN: pa.array([0], pa.int32()),
        }
    )
    job = JoinPartition(targets, state.node.args["single_join"], 1, None, None, (), ())
    with pytest.raises(StateLayoutError) as info:
        list(job(iter([batch])))
    assert str(info.value) == (
        "memcached single join 'people' of topology 'join_dates': a pending half "
        "{'arrived_txid': 1, 'arrived_ts': None, 'd': [1, datetime.date(2024, 1, 2)]} holds a "
        "value JSON cannot store (Object of type date is not JSON serializable); cast the "
        "sides' fields to numbers, strings or booleans before the join, or keep its halves in "
        "the topology's store (leave out state=)"
    )
    backing = open_backing(targets.index)
    try:
        assert backing.multi_get([(0, 1)]) == [None]  # not even the index was written
    finally:
        backing.close()


def test_the_clock_names_the_txids_expiring_and_those_to_drop(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "clock.duckdb") as store:
        assert due_txids(store, "t", 1, 0, None) == ([], [])
        assert read_meta(store, "t") == (None, None, 0)
        with store.transaction():
            advance_clock(store, "t", 1, 0.0, [], 3)
            advance_clock(store, "t", 2, 5.0, [], 4)
        assert due_txids(store, "t", 3, 1, None) == ([1], [])  # by arrival txid
        with store.transaction():
            advance_clock(store, "t", 3, 7.0, [1], 2)
        assert due_txids(store, "t", 4, 0, 6.0) == ([2], [1])  # by event time; 1 expired at 3
        with store.transaction():  # entries arriving at 4 never expire
            advance_clock(store, "t", 4, None, [2], 1, expires=False)
        assert due_txids(store, "t", 5, 4, 100.0) == ([3], [2, 4])
        assert read_meta(store, "t") == (4, None, 1)
        assert due_txids(store, "other", 5, 4, 100.0) == ([], [])


# -- declarations -----------------------------------------------------------------------------


def test_declaration_kind_and_refusals() -> None:
    spec = _spec("memcached", ["127.0.0.1:11211"])
    topo = _topology("join_kind", spec)
    state = topo.states["people"]
    kind = state_kind(state.node)
    assert isinstance(kind, KeyValueJoinKind)
    assert state.spec is spec
    assert not pipelinable(topo)
    assert replay_refusal(state) == (
        "it is a single join kept in a key-value store: its pending halves and expiries "
        "depend on the state as it was at each txid, not on the log alone"
    )
    assert sorted(topo.outputs) == ["joined", "people_expired"]
    with pytest.raises(ConfigError) as info:
        _topology("join_tx", ta.RedisClusterState.transactional("people", ["127.0.0.1:7000"]))
    assert str(info.value) == (
        "single_join 'people': its pending halves take an opaque redis-cluster state named "
        "like the join (RedisClusterState.opaque('people', servers)), got a transactional "
        "state named 'people'"
    )
    with pytest.raises(ConfigError, match="got a opaque state named 'halves'"):
        _topology("join_name", ta.MemcachedState.opaque("halves", ["127.0.0.1:11211"]))


# -- servers failing --------------------------------------------------------------------------


def test_memcached_restart_is_detected_for_the_join(spark: Any, tmp_path: Path) -> None:
    servers = MemcachedServers(tmp_path / "memcached")
    try:
        log = _log(tmp_path)
        _seed(log, ids=6)
        topo = _topology("join_mc_restart", _spec("memcached", servers.servers))
        with DuckDBStore(tmp_path / "state.duckdb") as store:
            runner = TopologyRunner(topo, spark, store, log)
            assert runner.run_batch(1).applied
            servers.restart(1)
            with pytest.raises(KeyValueStoreError) as info:
                runner.run_batch(2)
            assert str(info.value).startswith(
                "memcached single join 'people' of topology 'join_mc_restart': memcached "
                f"server(s) {servers.servers[1]} lost the state's keys"
            )
            assert store.last_committed(topo.name) == 1
    finally:
        servers.stop()


def test_redis_master_killed_mid_batch_and_replica_promoted_then_exact(
    runs: Any, redis_cluster: RedisClusterServers
) -> None:
    """Runs last: it leaves the module's cluster with other masters than it started with."""
    run = runs("join_failover", {"redis": _spec("redis", redis_cluster.servers)}, batch=8)
    _seed(run.log, ids=16)
    run.run(1)
    victim = redis_cluster.masters()[0]

    def kill(where: str) -> None:  # the executors wrote and waited for the replicas
        if where == "after_state_write":
            redis_cluster.kill(victim)
            raise Crash(where)

    with pytest.raises(Crash):
        run.runner("redis", kill).run_batch(2)
    redis_cluster.wait_promoted(victim)  # its replica took over (cluster-node-timeout 1 s)
    redis_cluster.start_node(victim)  # comes back as the new master's replica
    redis_cluster.wait_ok()
    redis_cluster.wait_synced()
    results = [run.run(txid) for txid in range(2, 5)]
    print("FAILOVER", [(len(r[1]), len(r[2]), r[3]) for r in results])

"""States in a Redis Cluster and in memcached, updated on the Spark executors, exactly once.

One 3-master Redis Cluster (1 replica each) and 3 memcached servers for the module, on free
127.0.0.1 ports under tmp; each test uses its own topology name (so its own key prefix).
Counts are checked against the log read directly (the ground truth). The tests that kill a
Redis master or restart a memcached server come last (or use servers of their own).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from dagster._core.types.dagster_type import resolve_dagster_type

import trident_assets as ta
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.kv_backing import state_size
from trident_assets.backends.kv_target import target_of
from trident_assets.dagster.batch_events import batch_events
from trident_assets.dagster.graph import asset_keys, topology_graph
from trident_assets.errors import ConfigError, KeyValueStoreError
from trident_assets.examples.word_count import SENTENCES
from trident_assets.log.store import PartitionedLog
from trident_assets.planner import pipelinable, recomputable
from trident_assets.runtime.backfill_plans import replay_refusal
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.kv_state import close_kv_map, kv_map, read_kv_state
from trident_assets.spark.spilled import spillable
from trident_assets.spark.state_apply import read_state
from trident_assets.spouts.config import SpoutKind
from trident_assets.stream.state_kinds import KeyValueKind, state_kind
from trident_assets.stream.topology import StateSpec, TridentTopology
from trident_assets_tests.faults import Crash, crash_at
from trident_assets_tests.kv_servers import (
    MemcachedServers,
    RedisClusterServers,
    servers_installed,
)

pytestmark = pytest.mark.skipif(
    not servers_installed(), reason="needs memcached and redis-server (scripts/setup.sh)"
)

MORE = (
    "the quick brown fox jumps over the lazy dog",
    "a stitch in time saves nine",
    "the early bird catches the worm",
)


@pytest.fixture(params=["redis", "memcached"])
def servers(request: pytest.FixtureRequest) -> tuple[str, list[str]]:
    """``(store, servers)`` of each kind (the module's servers)."""
    if request.param == "redis":
        return "redis", request.getfixturevalue("redis_cluster").servers
    return "memcached", request.getfixturevalue("memcached").servers


def _spec(store: str, state_type: str, servers: Sequence[str]) -> Any:
    cls = ta.RedisClusterState if store == "redis" else ta.MemcachedState
    return getattr(cls, state_type)("word_counts", servers)


def _topology(
    name: str, spec: Any, kind: SpoutKind = SpoutKind.OPAQUE, batch: int = 2
) -> TridentTopology:
    topo = ta.TridentTopology(name)
    config = ta.SpoutConfig(kind=kind, max_batch_size=batch)
    counts = (
        topo.new_stream("sentences", ta.LogSpout("sentences", ta.StringScheme("sentence"), config))
        .each("sentence", ta.Split(), "word")
        .group_by("word")
        .persistent_aggregate(spec, "word", ta.Count(), "count")
    )
    queries = ta.LogSpout("word_queries", ta.StringScheme("args"), config)
    (
        topo.new_stream("queries", queries)
        .each("args", ta.Split(), "word")
        .group_by("word")
        .state_query(counts, "word", ta.MapGet(), "count")
        .each("count", ta.FilterNull())
        .aggregate("count", ta.Sum(), "sum")
        .as_output("words")
    )
    return topo


def _log(root: Path, sentences: Sequence[str] = SENTENCES) -> PartitionedLog:
    log = PartitionedLog(root / "log")
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    _send(log, sentences)
    return log


def _send(log: PartitionedLog, values: Sequence[str], topic: str = "sentences") -> None:
    producer = log.producer(topic, partitioner="round_robin")
    for v in values:
        producer.send(v.encode())
    producer.flush()


def _truth(log: PartitionedLog) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for p in range(log.partitions("sentences")):
        end = log.latest_offset("sentences", p)
        for value in log.read("sentences", p, 0, end - 1).column("value").to_pylist():
            counts.update(w for w in value.decode().split(" ") if w)
    return dict(counts)


def _counts(topo: TridentTopology, words: Sequence[str]) -> dict[str, int]:
    """The state's values of ``words`` (and of a word never sent), read from the servers."""
    state = topo.states["word_counts"]
    mstate = read_state(None, state)  # type: ignore[arg-type]
    try:
        keys = [(w,) for w in [*words, "never-sent"]]
        found = mstate.multi_get(keys)
    finally:
        close_kv_map(mstate)
    return {k[0]: v for k, v in zip(keys, found, strict=True) if v is not None}


def _size(topo: TridentTopology, state: str = "word_counts") -> int | None:
    """The keys the state holds, read from its servers (None: memcached cannot count them)."""
    return state_size(target_of(topo.states[state]))


def _drain(runner: TopologyRunner) -> int:
    while runner.backlog() > 0:
        last = runner.last_committed() or 0
        assert runner.run_batch(last + 1).applied
    return runner.last_committed() or 0


# -- the word count, several txids ----------------------------------------------------------


def test_word_count_is_exact_and_a_committed_replay_changes_nothing(
    spark: Any, tmp_path: Path, servers: tuple[str, list[str]]
) -> None:
    store_kind, addresses = servers
    log = _log(tmp_path)
    truth = _truth(log)
    topo = _topology(f"wc_exact_{store_kind}", _spec(store_kind, "opaque", addresses))
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        first = runner.run_batch(1)
        assert first.states["word_counts"].keys_in == first.states["word_counts"].keys_updated
        assert first.states["word_counts"].keys_skipped == 0
        assert _drain(runner) == 3  # 5 sentences, 2 per txid
        assert _counts(topo, list(truth)) == truth
        replay = runner.run_batch(2)
        assert not replay.applied
        assert _counts(topo, list(truth)) == truth
        assert _size(topo) == (len(truth) if store_kind == "redis" else None)
        assert store.last_committed(topo.name) == 3
        # the query stream reads the state as committed before its batch
        _send(log, ["the cow", "moon nothing"], topic="word_queries")
        assert runner.run_batch(4).applied
        rows = store.fetch_rows(f'SELECT sum FROM "{topo.output_table("words")}" WHERE txid = 4')
        assert rows == [(truth["the"] + truth["cow"] + truth["moon"],)]


def test_non_transactional_state_counts_a_rerun_twice(
    spark: Any, tmp_path: Path, memcached: MemcachedServers
) -> None:
    """At-least-once, as declared: a txid re-run after its writes counts again."""
    log = _log(tmp_path, SENTENCES[:1])
    with pytest.warns(ta.ExactlyOnceWarning, match="counts replays twice"):
        topo = _topology("wc_nontx", _spec("memcached", "non_transactional", memcached.servers))
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        crashing = TopologyRunner(topo, spark, store, log, fault=crash_at("after_state_write"))
        with pytest.raises(Crash):
            crashing.run_batch(1)
        assert TopologyRunner(topo, spark, store, log).run_batch(1).applied
    assert _counts(topo, ["the", "cow"]) == {"the": 4, "cow": 2}


# -- killed between the executors' writes and the commit marker ---------------------------------


# each server kind once and each state type once in `make test` (both server kinds store every
# state type through one encoding, backends/kv_target.py): the other two pairs in `make soak`
@pytest.mark.parametrize(
    ("servers", "state_type"),
    [
        pytest.param("redis", "opaque", marks=pytest.mark.slow),
        ("redis", "transactional"),
        ("memcached", "opaque"),
        pytest.param("memcached", "transactional", marks=pytest.mark.slow),
    ],
    indirect=["servers"],
)
def test_killed_after_executor_writes_then_rerun_is_exact(
    spark: Any, tmp_path: Path, servers: tuple[str, list[str]], state_type: str
) -> None:
    store_kind, addresses = servers
    log = _log(tmp_path)
    kind = SpoutKind.OPAQUE if state_type == "opaque" else SpoutKind.TRANSACTIONAL
    topo = _topology(
        f"wc_crash_{store_kind}_{state_type}", _spec(store_kind, state_type, addresses), kind
    )
    truth = _truth(log)
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        assert runner.run_batch(1).applied
        crashing = TopologyRunner(topo, spark, store, log, fault=crash_at("after_state_write"))
        with pytest.raises(Crash):
            crashing.run_batch(2)
        assert store.last_committed(topo.name) == 1  # the servers hold txid 2's writes
        rerun = runner.run_batch(2)
        assert rerun.applied
        outcome = rerun.states["word_counts"]
        if state_type == "transactional":  # every key already at txid 2: skipped
            assert (outcome.keys_updated, outcome.keys_skipped) == (0, outcome.keys_in)
        else:  # recomputed from prev
            assert (outcome.keys_updated, outcome.keys_skipped) == (outcome.keys_in, 0)
        assert outcome.keys_in > 0
        assert _drain(runner) == 3
        assert _counts(topo, list(truth)) == truth
        assert _size(topo) == (len(truth) if store_kind == "redis" else None)


def test_opaque_rerun_with_different_batch_counts_once(
    spark: Any, tmp_path: Path, servers: tuple[str, list[str]]
) -> None:
    """Trident's opaque guarantee: a failed txid re-run over other records counts them once."""
    store_kind, addresses = servers
    log = _log(tmp_path, SENTENCES[:2])
    topo = _topology(f"wc_opaque_{store_kind}", _spec(store_kind, "opaque", addresses), batch=50)
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        assert runner.run_batch(1).applied
        _send(log, SENTENCES[2:4])
        crashing = TopologyRunner(topo, spark, store, log, fault=crash_at("after_state_write"))
        with pytest.raises(Crash):
            crashing.run_batch(2)  # wrote SENTENCES[2:4]'s counts under txid 2
        _send(log, MORE)  # the re-run of txid 2 reads these too: a different batch
        rerun = runner.run_batch(2)
        assert rerun.tuples_in["sentences"] == 2 + len(MORE)
        truth = _truth(log)
        assert _counts(topo, list(truth)) == truth
        assert store.last_committed(topo.name) == 2
        # the failed attempt's keys were counted once, when written
        assert rerun.states["word_counts"].size == (len(truth) if store_kind == "redis" else None)


def test_global_state_and_snapshot_query(
    spark: Any, tmp_path: Path, memcached: MemcachedServers
) -> None:
    log = _log(tmp_path)
    topo = ta.TridentTopology("wc_global")
    config = ta.SpoutConfig(max_batch_size=2)
    words = topo.new_stream(
        "sentences", ta.LogSpout("sentences", ta.StringScheme("sentence"), config)
    ).each("sentence", ta.Split(), "word")
    total = words.persistent_aggregate(
        ta.MemcachedState.opaque("total", memcached.servers), "word", ta.Count(), "n"
    )
    (
        topo.new_stream("queries", ta.LogSpout("word_queries", ta.StringScheme("args"), config))
        .state_query(total, "args", ta.SnapshotGet(), "n")
        .as_output("totals")
    )
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        assert _drain(runner) == 3
        _send(log, ["how many"], topic="word_queries")
        assert runner.run_batch(4).applied
        rows = store.fetch_rows(f'SELECT n FROM "{topo.output_table("totals")}" WHERE txid = 4')
    assert rows == [(sum(_truth(log).values()),)]


# -- reads ----------------------------------------------------------------------------------------


def test_reads_scan_redis_and_refuse_memcached_scans(
    spark: Any, tmp_path: Path, redis_cluster: RedisClusterServers, memcached: MemcachedServers
) -> None:
    log = _log(tmp_path)
    truth = _truth(log)
    for store_kind, addresses in (
        ("redis", redis_cluster.servers),
        ("memcached", memcached.servers),
    ):
        topo = _topology(f"wc_reads_{store_kind}", _spec(store_kind, "opaque", addresses), batch=50)
        with DuckDBStore(tmp_path / f"{store_kind}.duckdb") as store:
            assert TopologyRunner(topo, spark, store, log).run_batch(1).applied
        state = topo.states["word_counts"]
        label = f"{'redis-cluster' if store_kind == 'redis' else 'memcached'} state 'word_counts'"
        with pytest.raises(KeyValueStoreError, match=f"{label} .* cannot be read as of txid 1: "):
            read_kv_state(state, as_of=1)
        meta = topology_graph(topo)["state:word_counts"].metadata
        context = dg.build_input_context(
            upstream_output=dg.build_output_context(definition_metadata=meta),
            dagster_type=resolve_dagster_type(pa.Table),
        )
        manager = ta.TridentIOManager(home=str(tmp_path / "home"))
        if store_kind == "redis":
            latest = read_kv_state(state)
            assert dict(zip(*latest.to_pydict().values(), strict=True)) == truth
            assert latest.column_names == ["word", "count"]
            assert manager.load_input(context).equals(latest)
        else:
            with pytest.raises(KeyValueStoreError, match="memcached cannot list its keys"):
                read_kv_state(state)
            with pytest.raises(KeyValueStoreError, match="memcached cannot list its keys"):
                manager.load_input(context)


# -- declarations refused before any write ------------------------------------------------------


def test_bad_declarations_are_refused() -> None:
    with pytest.raises(ConfigError, match="needs a non-empty list of 'host:port' servers"):
        ta.MemcachedState.opaque("counts", [])
    with pytest.raises(ConfigError, match="server 'localhost' is not 'host:port'"):
        ta.RedisClusterState.opaque("counts", ["localhost"])
    with pytest.raises(ConfigError, match=r"has port 70000, outside 1\.\.65535"):
        ta.RedisClusterState.opaque("counts", ["127.0.0.1:70000"])
    with pytest.raises(ConfigError, match="min_replicas must be an integer >= 0"):
        ta.RedisClusterState.opaque("counts", ["127.0.0.1:7000"], min_replicas=-1)
    topo = ta.TridentTopology("wc_refused")
    stream = topo.new_stream(
        "s", ta.LogSpout("sentences", ta.StringScheme("sentence"), ta.SpoutConfig())
    ).each("sentence", ta.Split(), "word")
    spec = ta.MemcachedState.opaque("counts", ["127.0.0.1:11211"])

    class Longest(ta.ReducerAggregator):
        def init(self) -> int:
            return 0

        def reduce(self, acc: int, values: tuple[Any, ...]) -> int:
            return max(acc, len(values[0]))

    with pytest.raises(ConfigError, match=r"takes a combiner aggregator .* got Longest"):
        stream.group_by("word").persistent_aggregate(spec, "word", Longest(), "longest")
    with pytest.raises(ConfigError, match="partition_persist cannot keep its state"):
        stream.partition_persist(spec, "word", ta.StateUpdater())
    state = stream.group_by("word").persistent_aggregate(spec, "word", ta.Count(), "count")
    with pytest.raises(ConfigError, match="has no new values stream"):
        state.new_values_stream()


def test_kind_answers_and_contract() -> None:
    topo = _topology("wc_kind", _spec("redis", "opaque", ["127.0.0.1:7000"]))
    state = topo.states["word_counts"]
    kind = state_kind(state.node)
    assert isinstance(kind, KeyValueKind)
    assert (kind.map_state, kind.sql_combiner, kind.order_refusal) == (False, False, None)
    assert not pipelinable(topo)
    assert not recomputable(state)
    assert not spillable(state, topo)
    assert replay_refusal(state) == (
        "it is kept in a key-value store: building it from the log is not supported "
        "(declare it before the topology's first txid)"
    )
    contract = state.contract()
    assert (contract.aggregator, contract.state_type) == (
        "trident_assets.core.aggregators.Count",
        "opaque",
    )


# -- the batch's preview (the UI's) -------------------------------------------------------------


def test_preview_of_a_small_batch_is_exact(
    spark: Any, tmp_path: Path, servers: tuple[str, list[str]]
) -> None:
    """The executors return the keys they wrote; the outcome keeps the highest values first."""
    store_kind, addresses = servers
    log = _log(tmp_path, ["the cow the moon", "a cow"])
    topo = _topology(f"wc_preview_{store_kind}", _spec(store_kind, "opaque", addresses), batch=50)
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        first = runner.run_batch(1)
        assert first.previews["state:word_counts"].to_pydict() == {
            "word": ["cow", "the", "a", "moon"],
            "count": [2, 2, 1, 1],
        }
        outcome = first.states["word_counts"]
        assert (outcome.keys_in, outcome.keys_updated, outcome.keys_skipped) == (4, 4, 0)
        _send(log, ["the end"] + [f"w{i:02d}" for i in range(12)])
        second = runner.run_batch(2)
        assert second.previews["state:word_counts"].to_pydict() == {  # 10 rows of 14 keys
            "word": ["the", "end", *(f"w{i:02d}" for i in range(8))],
            "count": [3, 1, *[1] * 8],
        }
        outcome = second.states["word_counts"]
        assert (outcome.keys_in, outcome.keys_updated, outcome.keys_skipped) == (14, 14, 0)


# -- the CLI: `trident state get / scan` read the servers the declaration names -----------------

CLI_MODULE = """
import trident_assets as ta

def word_count(name, spec):
    topo = ta.TridentTopology(name)
    config = ta.SpoutConfig(max_batch_size=50)
    (
        topo.new_stream("sentences", ta.LogSpout("sentences", ta.StringScheme("sentence"), config))
        .each("sentence", ta.Split(), "word")
        .group_by("word")
        .persistent_aggregate(spec, "word", ta.Count(), "count")
    )
    return topo

REDIS = word_count("wc_cli_redis", ta.RedisClusterState.opaque("word_counts", {redis}))
MEMCACHED = word_count("wc_cli_mc", ta.MemcachedState.opaque("word_counts", {memcached}))
"""


def test_cli_reads_key_value_states_from_their_servers(
    spark: Any, tmp_path: Path, redis_cluster: RedisClusterServers, memcached: MemcachedServers
) -> None:
    import importlib.util
    import json

    from trident_assets_tests.children import run_trident

    project = tmp_path / "project"
    project.mkdir()
    source = CLI_MODULE.format(redis=redis_cluster.servers, memcached=memcached.servers)
    (project / "kv_defs.py").write_text(source)
    spec = importlib.util.spec_from_file_location("kv_defs_cli", project / "kv_defs.py")
    assert spec is not None
    assert spec.loader is not None
    defs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(defs)
    log = _log(tmp_path, ["the cow the moon", "a cow"])
    home = tmp_path / "home"
    home.mkdir()
    with DuckDBStore(home / "state.duckdb") as store:
        for topo in (defs.REDIS, defs.MEMCACHED):
            assert TopologyRunner(topo, spark, store, log).run_batch(1).applied

    def trident(*args: str) -> Any:
        return run_trident(project, "state", *args, "--home", str(home))

    done = trident("get", "wc_cli_redis", "word_counts", "cow", "--module", "kv_defs")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "wc_cli_redis.word_counts (redis-cluster state 'word_counts' of topology "
        "'wc_cli_redis', latest value)",
        "┏━━━━━━┳━━━━━━━┓",
        "┃ word ┃ count ┃",
        "┡━━━━━━╇━━━━━━━┩",
        "│ cow  │     2 │",
        "└──────┴───────┘",
    ]
    done = trident("get", "wc_cli_mc", "word_counts", "the", "--module", "kv_defs", "--format=json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"word": "the", "count": 2}]
    done = trident("get", "wc_cli_mc", "word_counts", "nope", "--module", "kv_defs")
    assert (done.returncode, done.stderr.strip()) == (
        1,
        "error: key 'nope' is not in wc_cli_mc.word_counts (read from its servers)",
    )
    done = trident("scan", "wc_cli_redis", "word_counts", "--module", "kv_defs", "--format=json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {"word": "cow", "count": 2},
        {"word": "the", "count": 2},
        {"word": "a", "count": 1},
        {"word": "moon", "count": 1},
    ]
    done = trident("scan", "wc_cli_mc", "word_counts", "--module", "kv_defs")
    assert done.returncode == 1
    assert done.stderr.startswith(
        "error: memcached state 'word_counts' of topology 'wc_cli_mc': memcached cannot list "
        "its keys, so the state cannot be read whole"
    )
    done = trident("scan", "wc_cli_mc", "word_counts")  # no --module: the store says where
    assert (done.returncode, done.stderr.strip()) == (
        1,
        "error: state 'word_counts' of 'wc_cli_mc' has a contract but no values in the state "
        "file: a state kept in a key-value store (a RedisClusterState or MemcachedState) has "
        "its values on its servers, which its declaration names; pass --module MODULE (the "
        "code location declaring topology 'wc_cli_mc', or set TRIDENT_MODULE) to read them",
    )


# -- the batch's size and nulls, as a state in the topology's store ------------------------------

NULLS_BATCHES = [
    [("a", 1), ("a", None), ("b", 2), ("c", None), ("c", ...)],
    [("a", 5), ("d", None), ("d", 4), ("e", None), ("c", 7)],
    [("f", 1), ("g", None), ("b", None), ("h", 2)],
]
"""One txid each (``...``: the field left out, read as null). Keys whose values are all null
in a batch (c in txid 1, e in txid 2, g in txid 3) are not created."""


def _nulls_topology(name: str, store_kind: str, addresses: Sequence[str]) -> TridentTopology:
    """A grouped Sum and a global Max of nullable values, in the servers and in DuckDB."""
    cls = ta.RedisClusterState if store_kind == "redis" else ta.MemcachedState
    topo = ta.TridentTopology(name)
    scheme = ta.JsonScheme({"k": "string", "n": "bigint"}, optional=("n",))
    config = ta.SpoutConfig(kind=SpoutKind.OPAQUE, max_batch_size=50)
    events = topo.new_stream("events", ta.LogSpout("events", scheme, config))
    events.group_by("k").persistent_aggregate(cls.opaque("sums", addresses), "n", ta.Sum(), "v")
    events.group_by("k").persistent_aggregate(StateSpec.opaque("sums_db"), "n", ta.Sum(), "v")
    events.persistent_aggregate(cls.opaque("gmax", addresses), "n", ta.Max(), "v")
    events.persistent_aggregate(StateSpec.opaque("gmax_db"), "n", ta.Max(), "v")
    return topo


def _send_events(log: PartitionedLog, batch: Sequence[tuple[str, Any]]) -> None:
    import json

    _send(
        log,
        [json.dumps({"k": k} if n is ... else {"k": k, "n": n}) for k, n in batch],
        topic="events",
    )


def test_size_and_nulls_match_a_state_in_the_store(
    spark: Any, tmp_path: Path, servers: tuple[str, list[str]]
) -> None:
    """Exact per txid: new keys, updated keys, a committed replay, a crash before the marker."""
    store_kind, addresses = servers
    redis = store_kind == "redis"

    def kv(size: int) -> int | None:  # memcached: unknown
        return size if redis else None

    log = PartitionedLog(tmp_path / "log")
    log.create_topic("events", 1)
    topo = _nulls_topology(f"kv_nulls_{store_kind}", store_kind, addresses)
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        _send_events(log, NULLS_BATCHES[0])
        outcomes = [runner.run_batch(1)]
        _send_events(log, NULLS_BATCHES[1])
        outcomes.append(runner.run_batch(2))
        assert not runner.run_batch(2).applied  # a committed replay: nothing changes
        assert _size(topo, "sums") == kv(4)
        _send_events(log, NULLS_BATCHES[2])
        crashing = TopologyRunner(topo, spark, store, log, fault=crash_at("after_state_write"))
        with pytest.raises(Crash):
            crashing.run_batch(3)
        assert store.last_committed(topo.name) == 2
        assert _size(topo, "sums") == kv(6)  # the attempt's new keys f and h, counted once
        outcomes.append(runner.run_batch(3))
        assert store.last_committed(topo.name) == 3
    got = [
        {n: (s.keys_in, s.keys_updated, s.size, s.null_values_skipped) for n, s in o.states.items()}
        for o in outcomes
    ]
    assert got == [
        {
            "sums": (2, 2, kv(2), 3),
            "sums_db": (2, 2, 2, 3),
            "gmax": (1, 1, kv(1), 3),
            "gmax_db": (1, 1, 1, 3),
        },
        {
            "sums": (3, 3, kv(4), 2),
            "sums_db": (3, 3, 4, 2),
            "gmax": (1, 1, kv(1), 2),
            "gmax_db": (1, 1, 1, 2),
        },
        {
            "sums": (2, 2, kv(6), 2),
            "sums_db": (2, 2, 6, 2),
            "gmax": (1, 1, kv(1), 2),
            "gmax_db": (1, 1, 1, 2),
        },
    ]
    mstate = kv_map(topo.states["sums"])
    try:
        keys = [(k,) for k in "abcdefgh"]
        values = dict(zip("abcdefgh", mstate.multi_get(keys), strict=True))
    finally:
        close_kv_map(mstate)
    assert values == {
        "a": 6, "b": 2, "c": 7, "d": 4, "e": None, "f": 1, "g": None, "h": 2
    }  # fmt: skip
    if redis:  # the counters are not keys of the state
        assert read_kv_state(topo.states["sums"]).num_rows == 6
    meta = {
        e.asset_key: e.metadata
        for e in batch_events(topo, asset_keys(topo), outcomes[-1], 0, True, ())
        if isinstance(e, dg.AssetMaterialization)
    }
    state_meta = meta[asset_keys(topo)["state:sums"]]
    assert state_meta["null_values_skipped"] == dg.MetadataValue.int(2)
    if redis:
        assert state_meta["state_size"] == dg.MetadataValue.int(6)
        assert state_meta["dagster/row_count"] == dg.MetadataValue.int(6)
    else:  # memcached: unknown, never a wrong 0
        assert state_meta["state_size"] == dg.MetadataValue.text("unknown")
        assert "dagster/row_count" not in state_meta


# -- servers failing ------------------------------------------------------------------------------


def test_memcached_restart_is_detected(spark: Any, tmp_path: Path) -> None:
    servers = MemcachedServers(tmp_path / "memcached")
    try:
        log = _log(tmp_path)
        topo = _topology("wc_mc_restart", _spec("memcached", "opaque", servers.servers))
        with DuckDBStore(tmp_path / "state.duckdb") as store:
            runner = TopologyRunner(topo, spark, store, log)
            assert runner.run_batch(1).applied
            servers.restart(1)
            with pytest.raises(KeyValueStoreError) as info:
                runner.run_batch(2)
            assert f"memcached server(s) {servers.servers[1]} lost the state's keys" in str(
                info.value
            )
            assert "declare the state under a new name" in str(info.value)
            assert store.last_committed(topo.name) == 1
    finally:
        servers.stop()


def test_redis_master_killed_and_replica_promoted_then_exact(
    spark: Any, tmp_path: Path, redis_cluster: RedisClusterServers
) -> None:
    """Runs last: it leaves the module's cluster with other masters than it started with."""
    log = _log(tmp_path)
    spec = ta.RedisClusterState.opaque("word_counts", redis_cluster.servers, wait_timeout_ms=300)
    topo = _topology("wc_failover", spec)
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        assert runner.run_batch(1).applied
        assert runner.run_batch(2).applied
        before = redis_cluster.masters()
        victim = before[0]
        redis_cluster.kill(victim)
        redis_cluster.wait_promoted(victim)  # its replica took over (cluster-node-timeout 1 s)
        _send(log, MORE)
        # the promoted master has no replica yet: a batch writing there is refused
        with pytest.raises(KeyValueStoreError, match=r"on 0 replica\(s\) within 300 ms"):
            runner.run_batch(3)
        assert store.last_committed(topo.name) == 2
        redis_cluster.start_node(victim)  # comes back as the new master's replica
        redis_cluster.wait_ok()
        redis_cluster.wait_synced()
        assert _drain(runner) >= 4
        truth = _truth(log)
        assert _counts(topo, list(truth)) == truth


def test_redis_master_killed_after_the_writes_fails_the_txid_with_the_store_error(
    spark: Any, tmp_path: Path
) -> None:
    """A master dead when the driver reads the state's size after the executors' writes.

    The txid's words all live on the other masters (their writes are acknowledged), so only
    the size read reaches the dead master: the txid fails with a ``KeyValueStoreError``
    naming the state, the txid and what to do, the marker stays, and the re-run once the
    master is back is exact. Its own cluster, with a node timeout no test reaches (no
    failover while the txid runs).
    """
    from redis.crc import key_slot

    cluster = RedisClusterServers(tmp_path / "redis", node_timeout_ms=120_000)
    try:
        log = _log(tmp_path)
        topo = _topology("wc_size_read", _spec("redis", "opaque", cluster.servers), batch=100)
        target = target_of(topo.states["word_counts"])
        victim = cluster.ports[2]  # master of the last third of the slots
        safe = [
            w for w in (f"w{i}" for i in range(200))
            if key_slot(target.encode((w,)).encode()) < 16384 * 2 // 3
        ][:6]  # fmt: skip
        with DuckDBStore(tmp_path / "state.duckdb") as store:
            runner = TopologyRunner(topo, spark, store, log)
            assert runner.run_batch(1).applied
            _send(log, [" ".join(safe[:3]), " ".join(safe[2:])])
            cluster.kill(victim)
            with pytest.raises(KeyValueStoreError) as info:
                runner.run_batch(2)
            assert str(info.value) == (
                "redis-cluster state 'word_counts' of topology 'wc_size_read': the Redis "
                "Cluster did not answer while reading its key count (ConnectionError: Error "
                f"111 connecting to 127.0.0.1:{victim}. Connection refused.; 4 tries); txid 2 "
                "is not committed. Bring the node back (or wait until a replica takes its "
                "place), then run the txid again: its re-run writes the same values"
            )
            assert store.last_committed(topo.name) == 1
            cluster.start_node(victim)
            cluster.wait_ok()
            assert runner.run_batch(2).applied
            assert store.last_committed(topo.name) == 2
        truth = _truth(log)
        assert {w: truth[w] for w in safe} == {w: 2 if w == safe[2] else 1 for w in safe}
        assert _counts(topo, list(truth)) == truth
    finally:
        cluster.stop()

"""``DistinctCount``: the distinct values per key, each counted once, on DuckDB and PostgreSQL.

Runs real Spark batches over the embedded log into each store, replays a txid after a crash
between its state write and its commit, reads the state through the replica with the
TridentIOManager and with ``trident state scan`` in a child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

import trident_assets as ta
from trident_assets.backends.distinct_values import add_values
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.backends.state_store import open_state_store
from trident_assets.dagster.graph import topology_graph
from trident_assets.dagster.io_manager import TridentIOManager
from trident_assets.dagster.partitions import txid_key
from trident_assets.errors import ConfigError
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spouts.config import SpoutKind
from trident_assets.stream.state_kinds import DistinctCountKind, state_kind
from trident_assets_tests.faults import Crash, crash_at

BATCHES = [
    [("home", "ann"), ("home", "bob"), ("home", "ann"), ("about", "ann"), ("home", None)],
    [("home", "ann"), ("home", "cid"), ("about", "ann"), ("about", "bob")],
    [("pricing", "dan"), ("home", "bob")],
]
"""Page views (page, user) of txids 1, 2 and 3 (a null user is not counted)."""
AFTER = [
    {"home": 2, "about": 1},
    {"home": 3, "about": 2},
    {"home": 3, "about": 2, "pricing": 1},
]
"""Distinct users per page after each txid."""


def _topology(name: str = "visits") -> tuple[ta.TridentTopology, ta.TridentState]:
    topo = ta.TridentTopology(name)
    scheme = ta.JsonScheme({"page": "string", "user": "string"})
    spout = ta.LogSpout("views", scheme, ta.SpoutConfig(max_batch_size=None))
    users = (
        topo.new_stream("views", spout)
        .group_by("page")
        .persistent_aggregate(ta.StateSpec.opaque("users"), "user", ta.DistinctCount(), "users")
    )
    users.new_values_stream().as_output("changes")
    return topo, users


def _send(log: PartitionedLog, views: list[tuple[str, str | None]]) -> None:
    producer = log.producer("views")
    for page, user in views:
        producer.send(json.dumps({"page": page, "user": user}).encode())
    producer.flush()


def _log(root: Path) -> PartitionedLog:
    log = PartitionedLog(root / "log")
    log.create_topic("views", 1)
    return log


def _state(store: Any) -> dict[str, int]:
    return {r["page"]: r["users"] for r in store.scan("visits__users", "users").to_pylist()}


def test_a_distinct_count_is_its_own_kind() -> None:
    _, users = _topology()
    kind = state_kind(users.node)
    assert type(kind) is DistinctCountKind
    assert (kind.map_state, kind.keeps_partials, kind.sql_combiner) == (True, True, False)
    assert not kind.shares_chunk_job()
    assert users.contract().aggregator == "trident_assets.core.aggregators.DistinctCount"
    assert users.contract().value_type == "bigint"


def test_declarations_a_distinct_count_cannot_keep_exactly_are_refused() -> None:
    topo = ta.TridentTopology("refused")
    scheme = ta.JsonScheme({"page": "string", "user": "string"})
    views = topo.new_stream("views", ta.LogSpout("views", scheme)).group_by("page")
    with pytest.raises(ConfigError, match=r"DistinctCount state 'u' must be opaque or transac"):
        views.persistent_aggregate(
            ta.StateSpec.non_transactional("u"), "user", ta.DistinctCount(), "n"
        )
    with pytest.raises(ConfigError, match=r"DistinctCount takes a single input field, got"):
        views.persistent_aggregate(
            ta.StateSpec.opaque("u"), ["user", "page"], ta.DistinctCount(), "n"
        )
    with pytest.raises(ConfigError, match=r"partition_aggregate needs a CombinerAggregator"):
        views.stream.partition_aggregate("user", ta.DistinctCount(), "n")


def test_counts_each_value_once_per_key_on_both_stores(
    spark: Any, tmp_path: Path, open_store: Any
) -> None:
    log = _log(tmp_path)
    topo, _ = _topology()
    store = open_store()
    runner = TopologyRunner(topo, spark, store, log)
    for txid, views in enumerate(BATCHES, 1):
        _send(log, views)
        outcome = runner.run_batch(txid)
        assert outcome.applied
        assert _state(store) == AFTER[txid - 1]
    changes = store.fetch_rows(
        'SELECT txid, page, users FROM "visits__out_changes" ORDER BY txid, page'
    )
    assert changes == [
        (1, "about", 1), (1, "home", 2),
        (2, "about", 2), (2, "home", 3),
        (3, "home", 3), (3, "pricing", 1),
    ]  # fmt: skip
    partials = store.fetch_rows(
        'SELECT txid, page, users FROM "visits__users__partials" ORDER BY txid, page'
    )
    assert partials == [(2, "about", 1), (2, "home", 1), (3, "home", 0), (3, "pricing", 1)]
    seen = store.fetch_rows(
        'SELECT page, _trident_value, txid FROM "visits__users__seen" ORDER BY page, 2'
    )
    assert seen == [
        ("about", "ann", 1), ("about", "bob", 2),
        ("home", "ann", 1), ("home", "bob", 1), ("home", "cid", 2),
        ("pricing", "dan", 3),
    ]  # fmt: skip


def test_a_replayed_txid_counts_nothing_twice(open_store: Any) -> None:
    """The apply of a txid run again (its write kept, its commit lost) returns the same."""
    store = open_store()
    pairs = pa.table({"page": ["home", "home", "about"], "user": ["ann", "bob", "ann"]})
    again = pa.table({"page": ["home", "home"], "user": ["ann", "cid"]})
    with store.transaction():
        first = add_values(store, "t__s", pairs, ["page"], "user", "n", 1)
    for _ in range(2):  # txid 2 applied, then applied again
        with store.transaction():
            second = add_values(store, "t__s", again, ["page"], "user", "n", 2)
        assert second.to_pylist() == [{"page": "home", "n": 1}]
    assert first.to_pylist() == [{"page": "about", "n": 1}, {"page": "home", "n": 2}]
    rows = store.fetch_rows('SELECT page, _trident_value, txid FROM "t__s__seen" ORDER BY 1, 2')
    assert rows == [("about", "ann", 1), ("home", "ann", 1), ("home", "bob", 1), ("home", "cid", 2)]


def test_a_crash_between_write_and_commit_replays_exactly(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    topo, _ = _topology()
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        _send(log, BATCHES[0])
        assert runner.run_batch(1).applied
        _send(log, BATCHES[1])
        with pytest.raises(Crash):
            TopologyRunner(topo, spark, store, log, fault=crash_at("after_state_write")).run_batch(
                2
            )
        assert _state(store) == AFTER[0]
        assert runner.run_batch(2).applied
        assert _state(store) == AFTER[1]
        assert not runner.run_batch(2).applied  # committed: applies nothing
        _send(log, BATCHES[2])
        assert runner.run_batch(3).applied
        assert _state(store) == AFTER[2]


def test_a_global_distinct_count(spark: Any, tmp_path: Path) -> None:
    log = _log(tmp_path)
    topo = ta.TridentTopology("everyone")
    scheme = ta.JsonScheme({"page": "string", "user": "string"})
    config = ta.SpoutConfig(kind=SpoutKind.TRANSACTIONAL, max_batch_size=None)
    spout = ta.LogSpout("views", scheme, config)
    topo.new_stream("views", spout).persistent_aggregate(
        ta.StateSpec.transactional("users"), "user", ta.DistinctCount(), "users"
    )
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        totals = []
        for txid, views in enumerate(BATCHES, 1):
            _send(log, views)
            assert runner.run_batch(txid).applied
            totals.append(store.scan("everyone__users", "users").column("users").to_pylist())
    assert totals == [[2], [3], [4]]


def test_the_io_manager_and_the_cli_read_it(spark: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    log = _log(home)
    topo, _ = _topology()
    with open_state_store(str(home / "state.duckdb")) as store:
        runner = TopologyRunner(topo, spark, store, log, replica=Replica(home / "replica"))
        for txid, views in enumerate(BATCHES[:2], 1):
            _send(log, views)
            assert runner.run_batch(txid).applied
    meta = topology_graph(topo)["state:users"].metadata
    manager = TridentIOManager(home=str(home))
    for partition, expected in ((txid_key(1), AFTER[0]), (None, AFTER[1])):
        context = dg.build_input_context(
            upstream_output=dg.build_output_context(definition_metadata=meta),
            dagster_type=dg.DagsterType(lambda _, __: True, name="arrow", typing_type=pa.Table),
            asset_key=dg.AssetKey("downstream"),
            partition_key=partition,
            asset_partitions_def=dg.StaticPartitionsDefinition([partition]) if partition else None,
        )
        table = manager.load_input(context)
        assert dict(zip(*table.select(["page", "users"]).to_pydict().values(), strict=True)) == (
            expected
        )
    done = subprocess.run(
        [
            *(str(Path(sys.executable).parent / "trident"), "state", "scan", "visits", "users"),
            *("--home", str(home), "--format", "json"),
        ],
        cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"page": "home", "users": 3}, {"page": "about", "users": 2}]

"""The chaos soak's Redis Cluster mode (``bench.chaos_soak --store redis-cluster``).

The fast test runs the soak's topology (its word count, the counts in a real 3-master Redis
Cluster with a replica each) on the session's Spark and checks the soak's own end-of-soak
comparison: exact when the cluster holds the log's counts, and naming the damage when a count
is changed or a key removed on the servers. The slow one runs the soak itself, with SIGKILLs
of the batch worker and one Redis master killed and restarted.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import chaos_soak
from bench.chaos_kv import start_cluster, state_spec
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.kv_backing import open_backing
from trident_assets.backends.kv_target import target_of
from trident_assets.core.values import OpaqueValue
from trident_assets.examples.word_count import build_word_count
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spouts.config import SpoutKind
from trident_assets_tests.kv_servers import RedisClusterServers, servers_installed
from trident_assets_tests.soaks import run_soak, soak_env

pytestmark = pytest.mark.skipif(
    not servers_installed(), reason="needs memcached and redis-server (scripts/setup.sh)"
)

SENTENCES = ("the cow jumped over the moon", "café naïve 日本 zoë the", "to be or not to be")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisClusterServers]:
    with start_cluster(tmp_path / "redis") as servers:
        yield servers


def _args(**changes: Any) -> argparse.Namespace:
    args = {"kind": "opaque", "seed": 3, "kill_master": False, "batch_size": 500, "publish": None}
    return argparse.Namespace(**(args | changes))


def test_soak_comparison_reads_the_cluster_exactly(
    spark: Any, tmp_path: Path, cluster: RedisClusterServers
) -> None:
    """Counts applied on the executors compare exactly; a changed or lost key is named."""
    root = tmp_path / "soak"
    root.mkdir()
    driver = chaos_soak.Driver(_args(), root, str(root / "state.duckdb"), cluster)
    log = PartitionedLog(root / "log")
    producer = log.producer(chaos_soak.TOPIC, partitioner="round_robin")
    for value in [s.encode() for s in SENTENCES * 4] + list(chaos_soak.MALFORMED):
        producer.send(value)
    producer.flush()
    name = chaos_soak.topology_name("opaque")
    topo = build_word_count(
        name, kind=SpoutKind.OPAQUE, max_batch_size=500, state=state_spec(cluster.servers)
    )
    with DuckDBStore(root / "state.duckdb") as store:
        outcome = TopologyRunner(topo, spark, store, log).run_batch(1)
    assert outcome.applied
    assert sum(outcome.tuples_in.values()) == 16
    driver.committed[name][1] = chaos_soak._plans(outcome.plans)

    exact = driver.compare(name)
    assert exact.ok is True
    assert (exact.keys_truth, exact.keys_state, exact.words_truth) == (13, 13, 68)
    assert (exact.lost, exact.double_counted, exact.keys_mismatched) == (0, 0, 0)
    assert exact.dead_letters == exact.malformed_in_log == 4
    assert (exact.ranges_ok, exact.last_txid, exact.replica_checked) == (True, 1, False)

    backing = open_backing(target_of(topo.states["word_counts"]))
    try:  # "the" counted 12 becomes 13; "moon" (4) disappears
        backing.multi_put([("the",)], [OpaqueValue(1, 13, None)])
        backing.client.delete(backing.target.encode(("moon",)))
    finally:
        backing.close()
    damaged = driver.compare(name)
    assert damaged.ok is False
    assert (damaged.keys_truth, damaged.keys_state, damaged.keys_mismatched) == (13, 12, 2)
    assert (damaged.lost, damaged.double_counted, damaged.words_state) == (4, 1, 65)


def test_kill_master_needs_the_redis_store(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        chaos_soak.main(["--kill-master", "--batches", "1"])
    assert "--kill-master needs --store redis-cluster" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_redis_soak_with_kills_and_a_master_failover_is_exact(tmp_path: Path) -> None:
    """Worker SIGKILLs and one Redis master SIGKILLed mid-soak: 0 lost, 0 double-counted."""
    result = run_soak(
        tmp_path, "--batches", "4", "--kills", "2", "--kind", "both", "--seed", "11",
        "--store", "redis-cluster", "--kill-master", "--rate", "10", "--tick", "1.0",
        env=soak_env(),
    )  # fmt: skip
    assert (result["ok"], result["store"], result["kills"], result["problems"]) == (
        True, "redis-cluster", 2, [],
    )  # fmt: skip
    assert result["master_kill"]["batches_refused"] >= 1
    assert (
        "acknowledged the batch's writes on 0 replica(s)" in result["master_kill"]["first_refusal"]
    )
    for fig, cmp in zip(result["figures"], result["comparisons"], strict=True):
        assert fig["batches"] >= 4
        assert (cmp["lost"], cmp["double_counted"], cmp["keys_mismatched"]) == (0, 0, 0)
        assert cmp["keys_truth"] == cmp["keys_state"] > 0
        assert cmp["ranges_ok"] is True

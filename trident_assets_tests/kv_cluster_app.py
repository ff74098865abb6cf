"""The word count and a single join with their state in a Redis Cluster and in memcached.

Usage: ``python kv_cluster_app.py HOME SPARK_URL --redis HOST:PORT,... --memcached
HOST:PORT,... [--worker-python PY]``; prints one JSON object (its last stdout line). For each
store, in one session: txid 1 runs; txid 2 fails after the executors wrote and before the
commit marker moved (a fault on the driver); txid 2 runs again, then every txid left; txid 2
runs once more (already committed: nothing changes). The counts are read from the servers
(the state's keys) and from the log (the truth). The single join (Storm's SingleJoinExample:
genders and ages by id) keeps its pending halves on the same servers and runs the same way;
its joined tuples are read from the join's output table.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import trident_assets as ta
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.examples.word_count import SENTENCES
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.kv_state import close_kv_map, kv_map

SPECS = {"redis": ta.RedisClusterState, "memcached": ta.MemcachedState}


class Crash(RuntimeError):
    """The driver dies between the executors' writes and the commit marker."""


def crash_after_write(where: str) -> None:
    if where == "after_state_write":
        raise Crash(where)


def word_count(spark: Any, home: Path, store_kind: str, servers: list[str]) -> dict[str, Any]:
    """Run the word count as the module says; the counts on the servers and in the log."""
    log = PartitionedLog(home / f"log_{store_kind}")
    log.create_topic("sentences", 2)
    producer = log.producer("sentences", partitioner="round_robin")
    for sentence in SENTENCES:
        producer.send(sentence.encode())
    producer.flush()
    topo = ta.TridentTopology(f"wc_cluster_{store_kind}")
    config = ta.SpoutConfig(kind=ta.SpoutKind.OPAQUE, max_batch_size=2)
    (
        topo.new_stream("sentences", ta.LogSpout("sentences", ta.StringScheme("sentence"), config))
        .each("sentence", ta.Split(), "word")
        .group_by("word")
        .persistent_aggregate(
            SPECS[store_kind].opaque("word_counts", servers), "word", ta.Count(), "count"
        )
    )
    with DuckDBStore(home / f"{store_kind}.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        runner.run_batch(1)
        try:
            TopologyRunner(topo, spark, store, log, fault=crash_after_write).run_batch(2)
        except Crash:
            crashed_at = store.last_committed(topo.name)
        rerun = runner.run_batch(2)
        while runner.backlog() > 0:
            runner.run_batch((runner.last_committed() or 0) + 1)
        replay = runner.run_batch(2)
        last = store.last_committed(topo.name)
    truth: Counter[str] = Counter(w for s in SENTENCES for w in s.split())
    mstate = kv_map(topo.states["word_counts"])
    try:
        keys = sorted(truth)
        found = mstate.multi_get([(w,) for w in keys])
    finally:
        close_kv_map(mstate)
    outcome = rerun.states["word_counts"]
    return {
        "counts": dict(zip(keys, found, strict=True)),
        "truth": dict(truth),
        "committed_when_crashed": crashed_at,
        "rerun": [outcome.keys_in, outcome.keys_updated, outcome.keys_skipped],
        "replay_applied": replay.applied,
        "last": last,
    }


JOIN_IDS = 12


def people(spark: Any, home: Path, store_kind: str, servers: list[str]) -> dict[str, Any]:
    """Genders and ages joined on id, its halves on the servers; the joined rows and the truth."""
    log = PartitionedLog(home / f"log_join_{store_kind}")
    for topic in ("genders", "ages"):
        log.create_topic(topic, 2)
    genders = log.producer("genders", partitioner="round_robin")
    ages = log.producer("ages", partitioner="round_robin")
    for i in range(JOIN_IDS):  # the ages in reverse: most halves wait some txids
        genders.send(json.dumps({"id": i, "gender": "mf"[i % 2]}).encode())
        ages.send(json.dumps({"id": JOIN_IDS - 1 - i, "age": 20 + JOIN_IDS - 1 - i}).encode())
    genders.flush()
    ages.flush()
    topo = ta.TridentTopology(f"people_cluster_{store_kind}")
    config = ta.SpoutConfig(kind=ta.SpoutKind.OPAQUE, max_batch_size=2)
    gender = ta.JsonScheme({"id": "bigint", "gender": "string"})
    age = ta.JsonScheme({"id": "bigint", "age": "int"})
    topo.single_join(
        "people",
        [
            topo.new_stream("g", ta.LogSpout("genders", gender, config)),
            topo.new_stream("a", ta.LogSpout("ages", age, config)),
        ],
        out_fields=["id", "gender", "age"],
        join_fields=["id"],
        sides=["gender", "age"],
        state=SPECS[store_kind].opaque("people", servers),
    ).as_output("joined")
    with DuckDBStore(home / f"join_{store_kind}.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        runner.run_batch(1)
        try:
            TopologyRunner(topo, spark, store, log, fault=crash_after_write).run_batch(2)
        except Crash:
            crashed_at = store.last_committed(topo.name)
        runner.run_batch(2)
        while runner.backlog() > 0:
            runner.run_batch((runner.last_committed() or 0) + 1)
        replay = runner.run_batch(2)
        last = store.last_committed(topo.name)
        joined = store.fetch_rows(
            f'SELECT id, gender, age FROM "{topo.output_table("joined")}" ORDER BY id'
        )
    truth = [[i, "mf"[i % 2], 20 + i] for i in range(JOIN_IDS)]
    return {
        "joined": [list(row) for row in joined],
        "truth": truth,
        "committed_when_crashed": crashed_at,
        "replay_applied": replay.applied,
        "last": last,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("home", type=Path)
    parser.add_argument("url")
    parser.add_argument("--redis", required=True)
    parser.add_argument("--memcached", required=True)
    parser.add_argument("--worker-python")
    args = parser.parse_args()
    conf = {"spark.master": args.url, "spark.executor.memory": "1g"}
    if args.worker_python:
        conf["spark.pyspark.python"] = args.worker_python
    spark = ta.build_spark_session(conf)
    args.home.mkdir(parents=True, exist_ok=True)
    result = {
        "master": spark.sparkContext.master,
        "redis": word_count(spark, args.home, "redis", args.redis.split(",")),
        "memcached": word_count(spark, args.home, "memcached", args.memcached.split(",")),
        "join_redis": people(spark, args.home, "redis", args.redis.split(",")),
        "join_memcached": people(spark, args.home, "memcached", args.memcached.split(",")),
    }
    spark.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()

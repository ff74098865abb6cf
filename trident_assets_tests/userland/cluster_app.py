"""Three user topologies in one Spark application; prints their results as one JSON object.

Usage: ``python cluster_app.py HOME SPARK_URL --kafka HOST:PORT --topics SENTENCES,QUERIES
[--worker-python PY] [--transfer-rows N] [--pg-dsn DSN]``, SPARK_URL ``sc://...`` (Spark Connect),
``spark://...`` (a standalone master, executors running ``PY``) or ``local``. In one session:

- ``probe``: whether the workers import trident_assets by themselves (before it is shipped)
  and whether they see ``HOME/marker``;
- ``word_count``: app.py's topology with every kind of user function (embedded log in
  ``HOME/log``);
- ``join``: Storm's gender/age single join over the same log (the seed's ids 0..9);
- ``kafka``: the Kafka-fed word count with its query stream, over two Kafka topics this
  script fills: :data:`KAFKA_FIRST` (one batch), then :data:`KAFKA_LATER` with the query
  ``the moon`` (one more batch);
- ``kernel``: a built-in word count (StringScheme, Split, Count) over the same sentences in
  chunks of 3 txids, its partials computed by the Arrow kernel on the workers (no size
  threshold), with the counts read straight from the log to compare.

- ``spilled`` (with ``--pg-dsn DSN``): the same built-in word count with
  ``trident.partials.spill`` into PostgreSQL: the workers ``COPY`` the partials into staging
  tables themselves; the staging tables left afterwards are counted (none).

``--transfer-rows N`` sends every driver-side table to Spark in slices of N rows.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import app as word_count_app  # the user's other script, next to this one

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.examples.gender_age import build_gender_age, produce_seed
from trident_assets.examples.word_count import SENTENCES, build_word_count
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.arrow_transfer import MAX_ROWS_CONF
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.kernel_plan import ARROW_KERNEL_CONF, MIN_RECORDS_CONF

KAFKA_FIRST = [f"{SENTENCES[i % len(SENTENCES)]} n{i % 7}" for i in range(24)]
KAFKA_LATER = [f"{SENTENCES[i % len(SENTENCES)]} n{i % 7}" for i in range(24, 30)]
KAFKA_QUERY = "the moon"
KAFKA_BATCH = 50
"""Records per Kafka batch: each stage fits in one batch."""


def probe(spark: Any, home: Path) -> dict[str, bool]:
    """Can the workers import trident_assets by themselves; do they see ``home/marker``?"""
    import pyarrow as pa

    marker = str(home / "marker")

    def look(batches: Any) -> Any:
        import importlib.util

        for _ in batches:
            try:
                found = importlib.util.find_spec("trident_assets") is not None
            except ModuleNotFoundError:
                found = False
            sees = os.path.exists(marker)
            yield pa.RecordBatch.from_pydict({"found": [found], "sees": [sees]})

    row = spark.range(1).mapInArrow(look, "found boolean, sees boolean").collect()[0]
    return {"found": row.found, "sees": row.sees}


def _run_all(runner: TopologyRunner) -> int:
    """Run batches until the spouts have nothing left; return the last txid."""
    txid = runner.last_committed() or 0
    while runner.backlog():
        txid += 1
        runner.run_batch(txid)
    return txid


def gender_age(spark: Any, home: Path) -> dict[str, Any]:
    """The single join over the seed: joined rows per txid, expired and pending halves."""
    log = PartitionedLog(home / "log")
    produce_seed(log)
    with DuckDBStore(home / "join.duckdb") as store:
        last = _run_all(TopologyRunner(build_gender_age(), spark, store, log))
        sql = store.conn.execute
        people = {
            txid: [
                list(r)
                for r in sql(
                    "SELECT id, gender, age FROM gender_age__out_people WHERE txid = ? ORDER BY id",
                    [txid],
                ).fetchall()
            ]
            for txid in range(1, last + 1)
        }
        expired = sql("SELECT count(*) FROM gender_age__out_join_expired").fetchone()
        pending = sql("SELECT count(*) FROM gender_age__join").fetchone()
    return {"people": people, "expired": expired[0], "pending": pending[0]}


def _produce(bootstrap: str, topic: str, values: list[str]) -> None:
    """Send ``values`` round-robin over the topic's partitions (value i to i % n)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    partitions = len(producer.list_topics(topic, timeout=10).topics[topic].partitions)
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % partitions)
    if producer.flush(30):
        raise RuntimeError(f"could not deliver to {topic}")


def kafka_word_count(spark: Any, home: Path, bootstrap: str, topics: list[str]) -> dict[str, Any]:
    """The Kafka-fed word count: final counts, query answers, batches run."""
    sentences, queries = topics
    topo = build_word_count(
        "kafka_wc",
        topic=sentences,
        query_topic=queries,
        max_batch_size=KAFKA_BATCH,
        source="kafka",
        bootstrap_servers=bootstrap,
    )  # tasks: Spark's default parallelism, also under Spark Connect
    with DuckDBStore(home / "kafka.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, None)
        _produce(bootstrap, sentences, KAFKA_FIRST)
        _run_all(runner)
        _produce(bootstrap, sentences, KAFKA_LATER)
        _produce(bootstrap, queries, [KAFKA_QUERY])
        last = _run_all(runner)
        counts = {r["word"]: r["value"] for r in store.scan("kafka_wc__word_counts").to_pylist()}
        answers = store.conn.execute(
            'SELECT txid, "sum" FROM kafka_wc__out_words ORDER BY txid'
        ).fetchall()
    for node in topo.spouts.values():
        node.args["spout"].close()
    return {"counts": counts, "answers": [list(a) for a in answers], "batches": last}


def kernel_word_count(spark: Any, home: Path) -> dict[str, Any]:
    """The built-in word count by the Arrow kernel; the log's own counts; the kernel's flag."""
    log = PartitionedLog(home / "log")
    topo = _builtin_word_count("kernel_wc")
    spark.conf.set(MIN_RECORDS_CONF, "0")
    with DuckDBStore(home / "kernel.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log, max_spout_pending=3)
        txids = _in_chunks(runner)
        counts = {r["word"]: r["value"] for r in store.scan("kernel_wc__counts").to_pylist()}
    return {
        "counts": counts,
        "log_counts": _log_counts(log),
        "txids": txids,
        "kernel_still_on": spark.conf.get(ARROW_KERNEL_CONF, "true"),
    }


def spilled_word_count(spark: Any, home: Path, dsn: str) -> dict[str, Any]:
    """The built-in word count into PostgreSQL, its partials copied there by the workers."""
    from trident_assets.backends.postgres_store import PostgresStore
    from trident_assets.spark.spilled import SPILL_CONF, STAGING_PREFIX

    log = PartitionedLog(home / "log")
    topo = _builtin_word_count("spilled_wc")
    with PostgresStore(dsn) as store:
        spark.conf.set(SPILL_CONF, "true")
        try:
            runner = TopologyRunner(topo, spark, store, log, max_spout_pending=3)
        finally:
            spark.conf.unset(SPILL_CONF)
        txids = _in_chunks(runner)
        counts = {r["word"]: r["value"] for r in store.scan("spilled_wc__counts").to_pylist()}
        left = store.fetch_rows(
            "SELECT count(*) FROM pg_tables WHERE position(? in tablename) = 1", [STAGING_PREFIX]
        )[0][0]
    return {"counts": counts, "log_counts": _log_counts(log), "txids": txids, "left": left}


def _builtin_word_count(name: str) -> Any:
    """StringScheme -> Split -> group_by(word) -> opaque Count, 2 records per txid."""
    from trident_assets import Count
    from trident_assets.spark.schemes import StringScheme
    from trident_assets.spouts.config import SpoutConfig
    from trident_assets.spouts.log_spout import LogSpout
    from trident_assets.stream.operations import Split
    from trident_assets.stream.topology import StateSpec, TridentTopology

    topo = TridentTopology(name)
    spout = LogSpout("sentences", StringScheme("sentence"), SpoutConfig(max_batch_size=2))
    topo.new_stream("sentences", spout).each("sentence", Split(), "word").group_by(
        "word"
    ).persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "value")
    return topo


def _in_chunks(runner: TopologyRunner) -> int:
    """Run the backlog 3 txids at a time (chunks of several txids); how many txids ran."""
    txids = 0
    while runner.backlog():
        txids = len(list(runner.run_batches(range(txids + 1, txids + 4)))) + txids
    return txids


def _log_counts(log: PartitionedLog) -> dict[str, int]:
    """The words of every decodable record of ``sentences``, counted in plain Python."""
    from collections import Counter

    words: Counter[str] = Counter()
    for partition in range(log.partitions("sentences")):
        last = log.latest_offset("sentences", partition) - 1
        for value in log.read("sentences", partition, 0, last).column("value").to_pylist():
            try:
                text = value.decode()
            except UnicodeDecodeError:  # a dead letter
                continue
            words.update(w for w in text.split(" ") if w)
    return dict(words)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("home", type=Path)
    parser.add_argument("url")
    parser.add_argument("--kafka", required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--worker-python")
    parser.add_argument("--transfer-rows", type=int)
    parser.add_argument("--pg-dsn")
    args = parser.parse_args()
    spark = word_count_app.session(None if args.url == "local" else args.url, args.worker_python)
    if args.transfer_rows:
        spark.conf.set(MAX_ROWS_CONF, str(args.transfer_rows))
    result = {"probe": probe(spark, args.home)}
    result["word_count"] = word_count_app.run(args.home, spark=spark)
    result["join"] = gender_age(spark, args.home)
    result["kafka"] = kafka_word_count(spark, args.home, args.kafka, args.topics.split(","))
    result["kernel"] = kernel_word_count(spark, args.home)
    if args.pg_dsn:
        result["spilled"] = spilled_word_count(spark, args.home, args.pg_dsn)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

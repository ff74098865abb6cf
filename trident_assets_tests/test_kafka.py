"""Kafka spouts and sink against a real Kafka-protocol broker (librdkafka's mock cluster).

The broker runs in a child process on 127.0.0.1 (``kafka_broker.MockKafkaBroker``). Features
that broker lacks are tested another way, said at each test: timestamp lookup uses the
``scan`` mode; partitions added while running are a new topic's partitions appearing; a range
deleted by retention uses the mock's bounded log (it deletes its oldest segments).
"""

from __future__ import annotations

import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.core.aggregators import Count
from trident_assets.core.retry import ExponentialBackoff
from trident_assets.errors import BatchUnavailableError, ConfigError, OutOfOrderCommitError
from trident_assets.examples.word_count import SENTENCES, build_word_count
from trident_assets.kafka import (
    FieldTopicSelector,
    KafkaDeliveryError,
    KafkaSpout,
    KafkaUpdater,
    SinkMode,
    backoff_for,
)
from trident_assets.kafka.reader import read_kafka_ranges
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import StringScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind, StartPosition
from trident_assets.stream.operations import Function, Split
from trident_assets.stream.topology import ExactlyOnceWarning, StateSpec, TridentTopology
from trident_assets_tests.kafka_broker import AUTO_PARTITIONS, MockKafkaBroker, produce


@pytest.fixture(scope="module")
def broker() -> Iterator[MockKafkaBroker]:
    """One mock Kafka cluster for the module; every test uses fresh topic names."""
    b = MockKafkaBroker()
    yield b
    b.stop()


@pytest.fixture(autouse=True)
def _close_kafka_clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every spout's consumer and sink's producer a test made, when the test ends.

    Topologies hold their spouts in reference cycles, so without this their consumers live
    until a cyclic garbage collection and keep reconnecting to stopped brokers meanwhile.
    """
    made: list[Any] = []
    for cls in (KafkaSpout, KafkaUpdater):
        original = cls.__init__

        def init(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> None:
            __original(self, *args, **kwargs)
            made.append(self)

        monkeypatch.setattr(cls, "__init__", init)
    yield
    for client in made:
        client.close()


def _topic(broker: MockKafkaBroker, values: list[str] | None = None) -> str:
    name = f"t_{uuid.uuid4().hex[:10]}"
    broker.create_topic(name)
    if values:
        produce(broker.bootstrap_servers, name, [v.encode() for v in values])
    return name


def _spout(broker: MockKafkaBroker, topic: str | list[str], **config: Any) -> KafkaSpout:
    options = {k: config.pop(k) for k in ("on_gap", "timestamp_lookup", "tasks") if k in config}
    return KafkaSpout(
        topic,
        StringScheme("sentence"),
        SpoutConfig(**config),
        bootstrap_servers=broker.bootstrap_servers,
        timeout_s=10.0,
        **options,
    )


def _word_count(spout: KafkaSpout, name: str = "wc") -> TridentTopology:
    topo = TridentTopology(name)
    (
        topo.new_stream("sentences", spout)
        .each("sentence", Split(), "word")
        .group_by("word")
        .persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "count")
    )
    return topo


def _counts(store: DuckDBStore, table: str = "wc__counts") -> dict[str, int]:
    if store.layout(table) is None:
        return {}
    return {r["word"]: r["value"] for r in store.scan(table).to_pylist()}


def _words(sentences: list[str]) -> dict[str, int]:
    return dict(Counter(w for s in sentences for w in s.split(" ") if w))


def _run_all(runner: TopologyRunner, first: int = 1) -> int:
    txid = first
    while runner.backlog() > 0:
        runner.run_batch(txid)
        txid += 1
    return txid


def _fail_at(point: str) -> Any:
    def fault(where: str) -> None:
        if where == point:
            raise RuntimeError(f"injected failure at {where}")

    return fault


def _consume_all(bootstrap: str, topic: str, partitions: int = AUTO_PARTITIONS) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "check",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof = [], set()
    while len(eof) < partitions:
        msg = consumer.poll(5)
        assert msg is not None, "the broker stopped answering"
        if msg.error():
            eof.add(msg.partition())
            continue
        out.append(msg)
    consumer.close()
    return out


# -- source and parallel reader -------------------------------------------------------------------


def test_source_reports_partitions_and_exact_offsets(broker: MockKafkaBroker) -> None:
    topic = _topic(broker, [f"s{i}" for i in range(10)])
    spout = _spout(broker, [topic, "no_such_topic"])
    source = spout.source(None)
    assert source.partitions() == [f"{topic}@{p}" for p in range(4)]
    assert [source.earliest(f"{topic}@{p}") for p in range(4)] == [0, 0, 0, 0]
    assert [source.latest(f"{topic}@{p}") for p in range(4)] == [3, 3, 2, 2]
    spout.close()


def test_parallel_read_returns_exactly_the_ranges_in_the_log_schema(
    spark: Any, broker: MockKafkaBroker
) -> None:
    from trident_assets.log.records import log_spark_schema

    topic = _topic(broker)
    produce(
        broker.bootstrap_servers,
        topic,
        [f"v{i}".encode() for i in range(40)],
        timestamps=[1_700_000_000_000 + i for i in range(40)],
    )
    ranges = [(topic, 0, 2, 7), (topic, 1, 0, 10), (topic, 2, 9, 9), (topic, 3, 5, 10)]
    df = read_kafka_ranges(spark, {"bootstrap.servers": broker.bootstrap_servers}, ranges, tasks=2)
    assert df.schema == log_spark_schema()
    assert df.rdd.getNumPartitions() == 2  # two Spark tasks, one consumer each
    rows = df.orderBy("partition", "offset").toArrow().to_pylist()
    got = [(r["partition"], r["offset"], r["value"].decode()) for r in rows]
    expected = [
        (p, o, f"v{o * 4 + p}")
        for p, f, n in [(0, 2, 7), (1, 0, 10), (3, 5, 10)]
        for o in range(f, n)
    ]
    assert got == expected
    assert rows[0]["timestamp"].timestamp() * 1000 == 1_700_000_000_000 + 2 * 4
    assert rows[0]["topic"] == topic
    assert rows[0]["headers"] is None


# -- spout kinds ----------------------------------------------------------------------------------


def test_pipelined_chunk_reads_every_batch_from_kafka_exactly_once(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    topic = _topic(broker, list(SENTENCES))
    produce(broker.bootstrap_servers, topic, [b"\xff"])
    spout = _spout(broker, topic, kind=SpoutKind.OPAQUE, max_batch_size=2)
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(_word_count(spout), spark, store, None, max_spout_pending=4)
    outcomes = list(runner.run_batches(range(1, 5)))
    assert [o.pipelined for o in outcomes] == [4, 4, 4, 4]
    assert [o.tuples_in["sentences"] for o in outcomes] == [2, 2, 2, 0]
    assert sum(o.dead_letters for o in outcomes) == 1
    dead = store.conn.execute("SELECT reason, value FROM _trident_dead_letters").fetchall()
    assert dead == [("value is not valid UTF-8", b"\xff")]
    assert _counts(store) == _words(list(SENTENCES))
    spout.close()


def test_transactional_spout_replays_the_identical_batch(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    topic = _topic(broker, list(SENTENCES))
    spout = _spout(broker, topic, kind=SpoutKind.TRANSACTIONAL, max_batch_size=3)
    store = DuckDBStore(tmp_path / "state.duckdb")
    topo = _word_count(spout)
    with pytest.raises(RuntimeError, match="injected failure at before_commit"):
        TopologyRunner(topo, spark, store, None, fault=_fail_at("before_commit")).run_batch(1)
    first_ranges = TopologyRunner(topo, spark, store, None).meta.ranges("wc", "sentences", 1)
    assert first_ranges is not None
    assert first_ranges[1] is False
    produce(broker.bootstrap_servers, topic, [b"extra words arrive"] * 4)
    runner = TopologyRunner(topo, spark, store, None)
    outcome = runner.run_batch(1)
    assert outcome.plans["sentences"].replay is True
    assert set(outcome.plans["sentences"].ranges) == set(first_ranges[0])
    assert outcome.tuples_in == {"sentences": 3}
    with pytest.raises(OutOfOrderCommitError):
        runner.run_batch(3)
    _run_all(runner, 2)
    assert _counts(store) == _words([*SENTENCES, *["extra words arrive"] * 4])
    spout.close()


def test_opaque_spout_replay_reads_from_last_commit_and_counts_once(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    topic = _topic(broker, list(SENTENCES[:2]))
    spout = _spout(broker, topic, kind=SpoutKind.OPAQUE)
    store = DuckDBStore(tmp_path / "state.duckdb")
    topo = _word_count(spout)
    runner = TopologyRunner(topo, spark, store, None)
    runner.run_batch(1)
    produce(broker.bootstrap_servers, topic, [s.encode() for s in SENTENCES[2:]])
    with pytest.raises(RuntimeError, match="injected"):
        TopologyRunner(topo, spark, store, None, fault=_fail_at("after_state_write")).run_batch(2)
    produce(broker.bootstrap_servers, topic, [b"late sentence"])
    outcome = runner.run_batch(2)  # the replay takes everything after txid 1, late data included
    assert outcome.tuples_in == {"sentences": len(SENTENCES) - 2 + 1}
    assert _counts(store) == _words([*SENTENCES, "late sentence"])
    assert runner.run_batch(2).applied is False
    spout.close()


def test_non_transactional_spout_reads_onward(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    topic = _topic(broker, list(SENTENCES))
    spout = _spout(broker, topic, kind=SpoutKind.NON_TRANSACTIONAL, max_batch_size=3)
    store = DuckDBStore(tmp_path / "state.duckdb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExactlyOnceWarning)
        topo = _word_count(spout)
    runner = TopologyRunner(topo, spark, store, None)
    assert _run_all(runner) == 3  # 5 records, 3 per batch
    assert _counts(store) == _words(list(SENTENCES))
    spout.close()


# -- start positions and deploy-only resets ------------------------------------------------------


def test_latest_start_skips_existing_records_then_reads_new_ones(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    topic = _topic(broker, ["old news here"] * 4)
    spout = _spout(broker, topic, start=StartPosition.LATEST, deployment_id="d1")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(_word_count(spout), spark, store, None)
    assert runner.run_batch(1).tuples_in == {"sentences": 0}
    produce(broker.bootstrap_servers, topic, [b"fresh"] * 4)
    runner.run_batch(2)
    assert _counts(store) == {"fresh": 4}


def test_deploy_only_reset_and_ignore_stored_offsets(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    topic = _topic(broker, ["a b"] * 4)
    store = DuckDBStore(tmp_path / "state.duckdb")
    d1 = _spout(broker, topic, start=StartPosition.EARLIEST, deployment_id="d1")
    _run_all(TopologyRunner(_word_count(d1), spark, store, None))
    assert _counts(store) == {"a": 4, "b": 4}
    # same deployment: EARLIEST does not re-apply, stored offsets win
    produce(broker.bootstrap_servers, topic, [b"c"] * 4)
    runner = TopologyRunner(_word_count(d1), spark, store, None)
    assert runner.run_batch(2).tuples_in == {"sentences": 4}
    # a new deployment with EARLIEST re-reads from the beginning (deploy-only reset)
    d2 = _spout(broker, topic, start=StartPosition.EARLIEST, deployment_id="d2")
    assert TopologyRunner(_word_count(d2), spark, store, None).run_batch(3).tuples_in == {
        "sentences": 8
    }
    assert _counts(store) == {"a": 8, "b": 8, "c": 8}
    # UNCOMMITTED_EARLIEST on a new deployment resumes from stored offsets...
    produce(broker.bootstrap_servers, topic, [b"d"] * 4)
    d3 = _spout(broker, topic, deployment_id="d3")
    assert TopologyRunner(_word_count(d3), spark, store, None).run_batch(4).tuples_in == {
        "sentences": 4
    }
    # ...unless ignore_stored_offsets (Storm's ignoreZkOffsets) is set
    d4 = _spout(broker, topic, deployment_id="d4", ignore_stored_offsets=True)
    assert TopologyRunner(_word_count(d4), spark, store, None).run_batch(5).tuples_in == {
        "sentences": 12
    }


def test_timestamp_start_with_scan_lookup(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    """The mock broker answers ListOffsets-by-time with -1, so the scan lookup is tested."""
    topic = _topic(broker)
    base = 1_700_000_000_000
    produce(
        broker.bootstrap_servers,
        topic,
        [f"w{i}".encode() for i in range(16)],
        timestamps=[base + i * 1000 for i in range(16)],
    )
    spout = _spout(
        broker,
        topic,
        start=StartPosition.TIMESTAMP,
        start_timestamp_ms=base + 9_500,
        timestamp_lookup="scan",
    )
    source = spout.source(None)
    assert [source.offset_for_timestamp(f"{topic}@{p}", base + 9_500) for p in range(4)] == [
        3,
        3,
        2,
        2,
    ]
    assert source.offset_for_timestamp(f"{topic}@0", base + 99_000) is None
    store = DuckDBStore(tmp_path / "state.duckdb")
    TopologyRunner(_word_count(spout), spark, store, None).run_batch(1)
    assert _counts(store) == {f"w{i}": 1 for i in range(10, 16)}


def test_partitions_that_appear_while_running_join_the_next_batch(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    """CreatePartitions is not in the mock broker; a second topic appearing is the same path."""
    first = _topic(broker, ["one"] * 4)
    later = f"t_{uuid.uuid4().hex[:10]}"
    spout = _spout(broker, [first, later])
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(_word_count(spout), spark, store, None)
    assert set(runner.run_batch(1).plans["sentences"].offsets_metadata()) == {
        f"{first}@{p}" for p in range(4)
    }
    broker.create_topic(later)
    produce(broker.bootstrap_servers, later, [b"two"] * 8)
    outcome = runner.run_batch(2)
    assert outcome.plans["sentences"].offsets_metadata() == {
        **{f"{first}@{p}": [1, 0] for p in range(4)},
        **{f"{later}@{p}": [0, 1] for p in range(4)},
    }
    assert _counts(store) == {"one": 4, "two": 8}


# -- ranges gone, gaps ----------------------------------------------------------------------------


def test_transactional_replay_of_range_deleted_by_retention_stops_with_clear_error(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    """The mock broker keeps a bounded log per partition and deletes its oldest segments
    (its log start offset moves), which is size-based retention: it deletes the range here."""
    topic = _topic(broker, ["x"] * 12)
    store = DuckDBStore(tmp_path / "state.duckdb")
    spout = _spout(broker, topic, kind=SpoutKind.TRANSACTIONAL)
    with pytest.raises(RuntimeError, match="injected"):
        TopologyRunner(
            _word_count(spout), spark, store, None, fault=_fail_at("after_emit")
        ).run_batch(1)
    source = spout.source(None)
    filler = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    while source.earliest(f"{topic}@0") <= 2:
        for _ in range(50_000):
            try:
                filler.produce(topic, value=b"f" * 50, partition=0)
            except BufferError:
                filler.poll(0.05)
        assert filler.flush(30) == 0
    low, high = source.earliest(f"{topic}@0"), source.latest(f"{topic}@0")
    with pytest.raises(BatchUnavailableError) as err:
        TopologyRunner(_word_count(spout), spark, store, None).run_batch(1)
    assert str(err.value) == (
        f"cannot replay txid 1 of spout 'sentences': it needs {topic}@0 offsets 0..2, but the "
        f"log now holds {low}..{high - 1} (retention deleted them). A transactional batch is "
        "never replayed with other data; raise retention or use an opaque spout."
    )
    assert store.last_committed("wc") is None
    spout.close()


def _transactional_writes(bootstrap: str, topic: str) -> None:
    """Partition 0: 3 records and a commit marker (offsets 0-2 data, 3 marker), then 'tail'."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": uuid.uuid4().hex})
    producer.init_transactions(10)
    producer.begin_transaction()
    for word in ("alpha", "beta", "gamma"):
        producer.produce(topic, value=word.encode(), partition=0)
    producer.commit_transaction(10)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, value=b"tail", partition=0)
    assert plain.flush(10) == 0


def test_gap_in_a_range_fails_the_batch_by_default(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    """A transaction marker leaves a hole in the offsets, as compaction does."""
    topic = _topic(broker)
    _transactional_writes(broker.bootstrap_servers, topic)
    store = DuckDBStore(tmp_path / "state.duckdb")
    spout = _spout(broker, topic, kind=SpoutKind.TRANSACTIONAL)
    with pytest.raises(BatchUnavailableError) as err:
        TopologyRunner(_word_count(spout), spark, store, None).run_batch(1)
    assert str(err.value) == (
        f"txid 1 of spout 'sentences': the batch overshot its planned ranges; 1 run(s) of "
        f"offsets are missing: {topic}@0 offsets 3..3: missing (compaction, transaction markers "
        "or retention). A batch is never filled with other data. Disable log compaction on the "
        "topic, or use on_gap='dead_letter' for topics written by transactional producers."
    )
    assert store.last_committed("wc") is None


def test_gap_recorded_as_dead_letter_when_asked(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    topic = _topic(broker)
    _transactional_writes(broker.bootstrap_servers, topic)
    store = DuckDBStore(tmp_path / "state.duckdb")
    spout = _spout(broker, topic, on_gap="dead_letter")
    outcome = TopologyRunner(_word_count(spout), spark, store, None).run_batch(1)
    assert outcome.dead_letters == 1
    assert _counts(store) == {"alpha": 1, "beta": 1, "gamma": 1, "tail": 1}
    rows = store.conn.execute(
        'SELECT topic, partition, "offset", reason, value FROM _trident_dead_letters'
    ).fetchall()
    assert rows == [(topic, 0, 3, "value is null", None)]


def test_bad_record_goes_to_dead_letters(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    topic = _topic(broker)
    produce(broker.bootstrap_servers, topic, [b"good one", b"\xff\xfe", b"good two", b"ok"])
    store = DuckDBStore(tmp_path / "state.duckdb")
    outcome = TopologyRunner(_word_count(_spout(broker, topic)), spark, store, None).run_batch(1)
    assert outcome.dead_letters == 1
    assert _counts(store) == {"good": 2, "one": 1, "two": 1, "ok": 1}
    assert store.conn.execute(
        'SELECT partition, "offset", reason, value FROM _trident_dead_letters'
    ).fetchall() == [(1, 0, "value is not valid UTF-8", b"\xff\xfe")]


# -- the sink -------------------------------------------------------------------------------------


def _sink_topology(
    broker: MockKafkaBroker, source: str, updater: KafkaUpdater, name: str = "sinker"
) -> TridentTopology:
    topo = TridentTopology(name)
    spout = KafkaSpout(source, StringScheme("message"), bootstrap_servers=broker.bootstrap_servers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExactlyOnceWarning)
        (
            topo.new_stream("lines", spout)
            .each("message", Split(), "key")
            .partition_persist(StateSpec.non_transactional("to_kafka"), ["key", "message"], updater)
        )
    return topo


@pytest.mark.parametrize("mode", list(SinkMode))
def test_sink_writes_key_and_message_in_every_mode(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path, mode: SinkMode
) -> None:
    source = _topic(broker, ["a b", "c"])
    out = _topic(broker)
    updater = KafkaUpdater(
        broker.bootstrap_servers, out, mode=mode, producer_config={"linger.ms": 5}
    )
    store = DuckDBStore(tmp_path / "state.duckdb")
    TopologyRunner(_sink_topology(broker, source, updater), spark, store, None).run_batch(1)
    got = sorted(
        (m.key(), m.value(), m.headers()) for m in _consume_all(broker.bootstrap_servers, out)
    )
    header = [("trident.txid", b"1")]
    assert got == [(b"a", b"a b", header), (b"b", b"a b", header), (b"c", b"c", header)]
    updater.close()


def test_sink_topic_chosen_per_tuple_by_field(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    left, right = _topic(broker), _topic(broker)
    source = _topic(broker, [f"{left} x", f"{right} y", f"{left} z"])
    topo = TridentTopology("routed")
    spout = KafkaSpout(source, StringScheme("line"), bootstrap_servers=broker.bootstrap_servers)
    updater = KafkaUpdater(
        broker.bootstrap_servers,
        FieldTopicSelector("dest"),
        key_field="k",
        message_field="line",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExactlyOnceWarning)
        (
            topo.new_stream("lines", spout)
            .each("line", _SplitTwo(), ["dest", "k"])
            .partition_persist(StateSpec.non_transactional("out"), ["dest", "k", "line"], updater)
        )
    TopologyRunner(topo, spark, DuckDBStore(tmp_path / "s.duckdb"), None).run_batch(1)
    assert sorted(m.value() for m in _consume_all(broker.bootstrap_servers, left)) == [
        f"{left} x".encode(),
        f"{left} z".encode(),
    ]
    assert [m.key() for m in _consume_all(broker.bootstrap_servers, right)] == [b"y"]


class _SplitTwo(Function):
    """``"a b"`` -> one tuple ``("a", "b")``."""

    def apply(self, df: Any, inputs: Any, outputs: Any) -> Any:
        from pyspark.sql import functions as F

        parts = F.split(F.col(inputs[0]), " ")
        return df.withColumn(outputs[0], parts[0]).withColumn(outputs[1], parts[1])

    def validate(self, inputs: Any, outputs: Any) -> None:
        """Two outputs."""


def test_sink_delivery_failure_fails_the_batch_and_nothing_commits(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    source = _topic(broker, ["a", "b"])
    dead = MockKafkaBroker()
    dead_servers = dead.bootstrap_servers
    dead.stop()  # nothing listens there any more
    updater = KafkaUpdater(
        dead_servers, "out", producer_config={"message.timeout.ms": 1500}, flush_timeout_s=10
    )
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(_sink_topology(broker, source, updater), spark, store, None)
    with pytest.raises(KafkaDeliveryError, match=r"2 record\(s\) failed and 0 were not ackn"):
        runner.run_batch(1)
    assert store.last_committed("sinker") is None
    assert runner.meta.ranges("sinker", "lines", 1) is None


def test_sink_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="transactional_id"):
        KafkaUpdater(
            "127.0.0.1:1",
            "t",
            mode=SinkMode.TRANSACTIONAL,
            producer_config={"transactional.id": "x"},
        )
    with pytest.raises(ConfigError, match=r"needs enable\.idempotence"):
        KafkaUpdater(
            "127.0.0.1:1",
            "t",
            mode=SinkMode.IDEMPOTENT,
            producer_config={"enable.idempotence": False},
        )
    with pytest.raises(ConfigError, match="may not set"):
        KafkaSpout("t", StringScheme(), bootstrap_servers="x:1", consumer_config={"group.id": "g"})
    with pytest.raises(ConfigError, match="on_gap"):
        KafkaSpout("t", StringScheme(), bootstrap_servers="x:1", on_gap="skip")  # type: ignore[arg-type]


# -- word count by configuration, retry ------------------------------------------------------------


def test_word_count_from_kafka_over_several_batches(
    spark: Any, broker: MockKafkaBroker, tmp_path: Path
) -> None:
    sentences = [SENTENCES[i % len(SENTENCES)] + f" n{i % 7}" for i in range(60)]
    topic = _topic(broker, sentences[:40])
    queries = _topic(broker)
    topo = build_word_count(
        "wc",
        topic=topic,
        query_topic=queries,
        max_batch_size=15,
        source="kafka",
        bootstrap_servers=broker.bootstrap_servers,
        kafka_options={"tasks": 2},
    )
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, None)
    txid = _run_all(runner)
    assert txid - 1 == 3  # 40 records, 15 per batch
    produce(broker.bootstrap_servers, topic, [s.encode() for s in sentences[40:]])
    produce(broker.bootstrap_servers, queries, [b"the moon"])
    txid = _run_all(runner, txid)
    assert _counts(store, "wc__word_counts") == _words(sentences)
    before = _words(sentences[:40])  # the query reads the state committed before its batch
    total = before["the"] + before["moon"]
    answers = store.conn.execute('SELECT "sum" FROM wc__out_words WHERE "sum" > 0').fetchall()
    assert answers == [(total,)]


def test_word_count_source_option_is_validated() -> None:
    with pytest.raises(ConfigError, match="source must be"):
        build_word_count(source="kafka")


T = TypeVar("T")


def run_with_retries(
    run: Callable[[int], T],
    txid: int,
    backoff: ExponentialBackoff,
    *,
    sleep: Callable[[float], None],
) -> T:
    """Run batch ``txid``, replaying it after failures as the coordinator sensor does.

    Failure ``n`` (1, 2, ...) waits ``backoff.delay(n)`` before replay ``n``; once
    ``backoff.should_retry(n)`` is False the last error is raised. Failures a replay cannot
    fix (bad configuration, a batch run out of order) are raised at once.
    """
    failures = 0
    while True:
        try:
            return run(txid)
        except (ConfigError, OutOfOrderCommitError):
            raise
        except Exception:
            failures += 1
            if not backoff.should_retry(failures):
                raise
            sleep(backoff.delay(failures))


def test_retry_uses_storms_backoff_for_replays() -> None:
    spout = KafkaSpout(
        "t",
        StringScheme(),
        bootstrap_servers="x:1",
        retry=ExponentialBackoff(
            initial_delay_s=0.5, delay_period_s=1.0, max_retries=3, max_delay_s=3.0
        ),
    )
    topo = TridentTopology("r")
    topo.new_stream("s", spout)
    policy = backoff_for(topo)
    assert policy is spout.retry
    attempts: list[int] = []
    slept: list[float] = []

    def run(txid: int) -> str:
        attempts.append(txid)
        if len(attempts) < 4:
            raise BatchUnavailableError(f"attempt {len(attempts)}")
        return "done"

    assert run_with_retries(run, 5, policy, sleep=slept.append) == "done"
    assert attempts == [5, 5, 5, 5]
    assert slept == [0.5, 2.0, 3.0]  # initial, period*2^1, period*2^2=4 capped at 3
    attempts.clear()
    slept.clear()

    def always(txid: int) -> str:
        attempts.append(txid)
        raise BatchUnavailableError("gone")

    with pytest.raises(BatchUnavailableError, match="gone"):
        run_with_retries(always, 1, policy, sleep=slept.append)
    assert len(attempts) == 4
    assert slept == [0.5, 2.0, 3.0]
    with pytest.raises(ConfigError):
        run_with_retries(
            lambda _t: (_ for _ in ()).throw(ConfigError("bad")), 1, policy, sleep=slept.append
        )
    assert backoff_for(TridentTopology("empty")) is None
    assert KafkaSpout("t", StringScheme(), bootstrap_servers="x:1").retry == ExponentialBackoff(
        0.0, 0.002, None, 10.0
    )

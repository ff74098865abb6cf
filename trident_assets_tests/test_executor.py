"""TopologyRunner end to end on Spark, on DuckDB and on PostgreSQL state: exact counts, replays,
order, crashes, queries (every test that opens a store runs on both, through ``open_store``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from trident_assets import (
    CombinerAggregator,
    ConfigError,
    Count,
    FieldNotFoundError,
    OutOfOrderCommitError,
    ReducerAggregator,
    Sum,
)
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import JsonScheme, StringScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.spouts.ranges import BatchPlan
from trident_assets.stream.operations import FilterNull, Split
from trident_assets.stream.queries import MapGet, QueryFunction
from trident_assets.stream.topology import (
    ExactlyOnceWarning,
    StateSpec,
    StateUpdater,
    TridentState,
    TridentTopology,
)
from trident_assets_tests.conftest import OpenStore

SENTENCES = [
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
]
MORE = ["the moon is made of cheese", "apples and candy and cheese"]


# -- helpers ------------------------------------------------------------------------------------


def _log(tmp_path: Path, topics: dict[str, int]) -> PartitionedLog:
    log = PartitionedLog(tmp_path / "log")
    for topic, partitions in topics.items():
        log.create_topic(topic, partitions)
    return log


def _send(log: PartitionedLog, topic: str, values: Sequence[str | bytes]) -> None:
    producer = log.producer(topic, partitioner="round_robin")
    for v in values:
        producer.send(v if isinstance(v, bytes) else v.encode())
    producer.flush()


def _word_count(
    name: str,
    *,
    kind: SpoutKind = SpoutKind.OPAQUE,
    state: StateSpec | None = None,
    max_batch_size: int | None = 4,
) -> tuple[TridentTopology, TridentState]:
    topo = TridentTopology(name)
    spout = LogSpout(
        "sentences",
        StringScheme("sentence"),
        SpoutConfig(kind=kind, max_batch_size=max_batch_size),
    )
    counts = (
        topo.new_stream("sentences", spout)
        .each("sentence", Split(), "word")
        .group_by("word")
        .persistent_aggregate(state or StateSpec.opaque("counts"), "word", Count(), "count")
    )
    return topo, counts


def _counts(store: Any, table: str) -> dict[str, Any]:
    return {r["word"]: r["value"] for r in store.scan(table).to_pylist()}


def _words(sentences: Sequence[str]) -> Counter[str]:
    return Counter(w for s in sentences for w in s.split(" ") if w)


def _plan_values(log: PartitionedLog, plan: BatchPlan) -> list[str]:
    """The record values a plan covers, read directly from the log (not through Spark)."""
    out: list[str] = []
    for r in plan.non_empty():
        table = log.read(r.topic, r.partition_number, r.first_offset, r.last_offset)
        out.extend(v.decode() for v in table.column("value").to_pylist())
    return out


def _spout_rows(store: Any) -> list[tuple[Any, ...]]:
    return store.fetch_rows(
        "SELECT * FROM _trident_spout_ranges ORDER BY topology, spout, txid, partition"
    )


def _snapshot(store: Any, topo: TridentTopology, table: str) -> tuple[Any, ...]:
    """Everything a failed or refused batch must leave unchanged."""
    return (
        store.scan(table).to_pylist(),
        store.last_committed(topo.name),
        _spout_rows(store),
    )


def _out_rows(store: Any, table: str, txid: int) -> list[tuple[Any, ...]]:
    rows = store.fetch_arrow(f'SELECT * FROM "{table}" WHERE txid = ?', [txid])
    rows = rows.drop_columns(["txid"])
    return sorted(zip(*(c.to_pylist() for c in rows.columns), strict=True))


class Boom(RuntimeError):
    pass


def _fail_at(point: str) -> Any:
    def fault(where: str) -> None:
        if where == point:
            raise Boom(where)

    return fault


# -- 1. word count, new values --------------------------------------------------------------------


def test_word_count_over_batches_is_exact_and_new_values_hold_touched_words(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"sentences": 2})
    produced = SENTENCES * 2 + MORE
    _send(log, "sentences", produced)
    topo, counts = _word_count("wc")
    counts.new_values_stream().as_output("changes")
    store = open_store()
    runner = TopologyRunner(topo, spark, store, log)

    running: Counter[str] = Counter()
    txid = 0
    while runner.backlog() > 0:
        txid += 1
        outcome = runner.run_batch(txid)
        assert outcome.applied
        values = _plan_values(log, outcome.plans["sentences"])
        assert 0 < len(values) <= 4
        assert outcome.tuples_in == {"sentences": len(values)}
        running.update(_words(values))
        touched = set(_words(values))
        expected = sorted((w, running[w]) for w in touched)
        assert _out_rows(store, "wc__out_changes", txid) == expected
        assert outcome.outputs["changes"] == len(expected)
        assert outcome.states["counts"].keys_in == len(touched)
        assert store.last_committed("wc") == txid
    assert txid == 3  # 12 sentences, at most 4 per batch
    assert _counts(store, counts.table) == dict(_words(produced))
    assert running == _words(produced)


# -- 2. and 3. replay of a committed txid, out-of-order commit ----------------------------------


def test_replay_is_a_noop_and_out_of_order_changes_nothing(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"sentences": 2})
    _send(log, "sentences", SENTENCES)
    for kind, state in (
        (SpoutKind.OPAQUE, StateSpec.opaque("counts")),
        (SpoutKind.TRANSACTIONAL, StateSpec.transactional("counts")),
    ):
        topo, counts = _word_count(f"wc_{kind.value}", kind=kind, state=state)
        store = open_store()
        runner = TopologyRunner(topo, spark, store, log)
        first = runner.run_batch(1)
        assert first.applied
        before = _snapshot(store, topo, counts.table)
        assert before[1] == 1
        assert _counts(store, counts.table) == dict(
            _words(_plan_values(log, first.plans["sentences"]))
        )

        replay = runner.run_batch(1)
        assert replay.applied is False
        assert replay.states == {}
        assert replay.plans["sentences"].ranges == first.plans["sentences"].ranges
        assert _snapshot(store, topo, counts.table) == before

        with pytest.raises(OutOfOrderCommitError, match="txid 2 must commit first"):
            runner.run_batch(3)
        assert _snapshot(store, topo, counts.table) == before

        # the order is still intact: 2 then 3 run; replaying 1 after them is still a no-op
        assert runner.run_batch(2).applied
        after_2 = _snapshot(store, topo, counts.table)
        assert runner.run_batch(1).applied is False
        assert runner.run_batch(2).applied is False
        assert _snapshot(store, topo, counts.table) == after_2
        assert runner.last_committed() == 2
        store.close()


# -- 4. a crash between the state write and the commit --------------------------------------------


def test_crash_before_commit_opaque_retry_reads_new_data_exactly_once(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"sentences": 2})
    _send(log, "sentences", SENTENCES[:2])
    topo, counts = _word_count("wc_crash_opaque", max_batch_size=None)
    store = open_store()
    assert TopologyRunner(topo, spark, store, log).run_batch(1).applied
    _send(log, "sentences", SENTENCES[2:])
    before = _snapshot(store, topo, counts.table)
    backlog = 3

    for point in ("after_emit", "after_state_write", "before_commit"):
        crashing = TopologyRunner(topo, spark, store, log, fault=_fail_at(point))
        with pytest.raises(Boom, match=point):
            crashing.run_batch(2)
        assert _snapshot(store, topo, counts.table) == before, point
        assert not store.in_transaction

    # the retry of an opaque batch reads from where txid 1 ended, including newer records
    _send(log, "sentences", MORE)
    retry = TopologyRunner(topo, spark, store, log).run_batch(2)
    assert retry.applied
    assert retry.plans["sentences"].record_count == backlog + len(MORE)
    assert retry.plans["sentences"].replay is False
    assert _counts(store, counts.table) == dict(_words(SENTENCES + MORE))
    assert store.last_committed(topo.name) == 2
    store.close()


def test_crash_before_commit_transactional_retry_reads_the_same_ranges(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"sentences": 2})
    _send(log, "sentences", SENTENCES)
    topo, counts = _word_count(
        "wc_crash_tx",
        kind=SpoutKind.TRANSACTIONAL,
        state=StateSpec.transactional("counts"),
        max_batch_size=2,
    )
    store = open_store()
    first = TopologyRunner(topo, spark, store, log).run_batch(1)
    committed_rows = _spout_rows(store)
    before = _snapshot(store, topo, counts.table)

    crashing = TopologyRunner(topo, spark, store, log, fault=_fail_at("after_state_write"))
    with pytest.raises(Boom):
        crashing.run_batch(2)
    state, marker, rows = _snapshot(store, topo, counts.table)
    assert (state, marker) == before[:2]
    # the committed ranges are untouched; txid 2's ranges were recorded at first emission
    assert [r for r in rows if r[2] == 1] == committed_rows
    pending = sorted((r[3], r[4], r[5]) for r in rows if r[2] == 2)
    assert all(r[7] is False for r in rows if r[2] == 2)
    assert sum(n - f for _, f, n in pending) == 2

    _send(log, "sentences", MORE)  # new data must not leak into the replayed batch
    retry = TopologyRunner(topo, spark, store, log).run_batch(2)
    assert retry.applied
    assert retry.plans["sentences"].replay is True
    ranges = retry.plans["sentences"].ranges
    assert sorted((r.partition, r.first_offset, r.next_offset) for r in ranges) == pending
    done = [first, retry]
    txid = 2
    runner = TopologyRunner(topo, spark, store, log)
    while runner.backlog() > 0:
        txid += 1
        done.append(runner.run_batch(txid))
    values = [v for o in done for v in _plan_values(log, o.plans["sentences"])]
    assert sorted(values) == sorted(SENTENCES + MORE)  # no overlap, nothing skipped
    assert _counts(store, counts.table) == dict(_words(SENTENCES + MORE))
    store.close()


# -- 5. a real process kill -----------------------------------------------------------------------

CHILD = """
import os, signal, sys
from trident_assets import Count
from trident_assets.backends.state_store import open_state_store
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import StringScheme
from trident_assets.spark.session import build_spark_session
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.operations import Split
from trident_assets.stream.topology import StateSpec, TridentTopology

root = sys.argv[1]
topo = TridentTopology("wc_kill")
spout = LogSpout("sentences", StringScheme("sentence"), SpoutConfig(kind=SpoutKind.OPAQUE))
(topo.new_stream("sentences", spout).each("sentence", Split(), "word").group_by("word")
    .persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "count"))
spark = build_spark_session({"spark.local.dir": os.path.join(root, "spark-child")})
store = open_state_store(sys.argv[3])
log = PartitionedLog(os.path.join(root, "log"))

def fault(point):
    if point == "after_state_write":
        print("KILLING at", point, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

TopologyRunner(topo, spark, store, log, fault=fault).run_batch(int(sys.argv[2]))
print("NOT KILLED", flush=True)
"""


# a child process and its Spark JVM per store: PostgreSQL in `make soak`; `make test` SIGKILLs
# a PostgreSQL-backed runner after its state write in test_lakehouse_crash
@pytest.mark.parametrize(
    "open_store", ["duckdb", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True
)
def test_sigkill_between_state_write_and_commit_leaves_old_state(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"sentences": 2})
    _send(log, "sentences", SENTENCES[:2])
    topo, counts = _word_count("wc_kill", max_batch_size=None)
    store = open_store()
    assert TopologyRunner(topo, spark, store, log).run_batch(1).applied
    before = _snapshot(store, topo, counts.table)
    store.close()
    _send(log, "sentences", SENTENCES[2:])

    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "2", open_store.location],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    assert proc.returncode == -9, proc.stdout + proc.stderr[-3000:]
    assert "KILLING at after_state_write" in proc.stdout
    assert "NOT KILLED" not in proc.stdout

    store = open_store()
    assert _snapshot(store, topo, counts.table) == before
    assert store.last_committed("wc_kill") == 1
    outcome = TopologyRunner(topo, spark, store, log).run_batch(2)
    assert outcome.applied
    assert outcome.plans["sentences"].record_count == len(SENTENCES) - 2
    assert _counts(store, counts.table) == dict(_words(SENTENCES))
    assert store.last_committed("wc_kill") == 2
    store.close()


# -- 6. dead letters ------------------------------------------------------------------------------


def test_dead_letters_are_kept_with_reason_and_good_records_counted(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"events": 2})
    p0 = [b'{"word": "a", "n": 1}', b"not json", b'{"word": "b", "n": 2}', b'{"word": "a"}']
    p1 = [b'{"word": "b", "n": "many"}', b'{"word": "c", "n": 3}', b"\xff\xfe", b'{"word": "a"']
    producer = log.producer("events")
    for partition, values in ((0, p0), (1, p1)):
        for v in values:
            producer.send(v, partition=partition)
    producer.flush()

    topo = TridentTopology("dl")
    scheme = JsonScheme({"word": "string", "n": "bigint"})
    counts = (
        topo.new_stream("events", LogSpout("events", scheme))
        .group_by("word")
        .persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "count")
    )
    store = open_store()
    outcome = TopologyRunner(topo, spark, store, log).run_batch(1)
    assert outcome.applied
    assert outcome.tuples_in == {"events": 8}
    assert outcome.dead_letters == 5
    invalid = "value is not valid JSON (RFC 8259)"
    many = "member 'n' is a string, declared bigint"
    rows = store.fetch_rows(
        'SELECT topology, spout, txid, topic, partition, "offset", reason, value '
        'FROM _trident_dead_letters ORDER BY partition, "offset"'
    )
    assert rows == [
        ("dl", "events", 1, "events", 0, 1, invalid, b"not json"),
        ("dl", "events", 1, "events", 0, 3, "missing member 'n'", b'{"word": "a"}'),
        ("dl", "events", 1, "events", 1, 0, many, b'{"word": "b", "n": "many"}'),
        ("dl", "events", 1, "events", 1, 2, "value is not valid UTF-8", b"\xff\xfe"),
        ("dl", "events", 1, "events", 1, 3, invalid, b'{"word": "a"'),
    ]
    assert _counts(store, counts.table) == {"a": 1, "b": 1, "c": 1}
    store.close()


def test_sum_treats_a_null_the_same_alone_or_mixed_in_a_batch(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"events": 1})
    topo = TridentTopology("nulls")
    scheme = JsonScheme({"word": "string", "n": "bigint"}, optional=("n",))
    stream = topo.new_stream("events", LogSpout("events", scheme))
    sums = stream.group_by("word").persistent_aggregate(StateSpec.opaque("sums"), "n", Sum(), "sum")
    total = stream.persistent_aggregate(StateSpec.opaque("total"), "n", Sum(), "sum")
    store = open_store()
    runner = TopologyRunner(topo, spark, store, log)
    # txid 1: a null mixed with a value; txid 2: a null alone; txid 3: only nulls
    batches = [
        [b'{"word": "a", "n": 5}', b'{"word": "a", "n": null}'],
        [b'{"word": "b", "n": null}'],
        [b'{"word": "a"}', b'{"word": "b", "n": null}'],
    ]
    for txid, values in enumerate(batches, start=1):
        _send(log, "events", values)
        outcome = runner.run_batch(txid)
        assert outcome.applied
        assert outcome.dead_letters == 0
    assert runner.last_committed() == 3
    assert _counts(store, sums.table) == {"a": 5}  # b's values were all null: no update
    assert [r["value"] for r in store.scan(total.table).to_pylist()] == [5]
    store.close()


# -- 7. a global persistent aggregate, empty batch ------------------------------------------------


def test_global_persistent_aggregate_and_empty_batch(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"sentences": 2})
    _send(log, "sentences", SENTENCES)
    topo = TridentTopology("total_words")
    total = (
        topo.new_stream("sentences", LogSpout("sentences", StringScheme("sentence")))
        .each("sentence", Split(), "word")
        .persistent_aggregate(StateSpec.opaque("total"), "word", Count(), "n")
    )
    total.new_values_stream().as_output("changes")
    store = open_store()
    runner = TopologyRunner(topo, spark, store, log)

    def value() -> Any:
        (row,) = store.scan(total.table).to_pylist()
        return row["value"]

    n = sum(_words(SENTENCES).values())
    assert runner.run_batch(1).applied
    assert value() == n
    empty = runner.run_batch(2)
    assert empty.applied
    assert empty.tuples_in == {"sentences": 0}
    assert store.last_committed("total_words") == 2
    assert value() == n
    assert _out_rows(store, "total_words__out_changes", 2) == [(n,)]
    _send(log, "sentences", MORE)
    assert runner.run_batch(3).applied
    assert value() == n + sum(_words(MORE).values())
    assert runner.run_batch(2).applied is False
    assert value() == n + sum(_words(MORE).values())
    store.close()


# -- 8. DRPC-style state query --------------------------------------------------------------------


def test_state_query_reads_counts_committed_before_the_batch(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"sentences": 2, "queries": 1})
    _send(log, "sentences", SENTENCES)
    topo, counts = _word_count("drpc", max_batch_size=None)
    queries = topo.new_stream("queries", LogSpout("queries", StringScheme("args")))
    (
        queries.each("args", Split(), "word")
        .group_by("word")
        .state_query(counts, "word", MapGet(), "count")
        .each("count", FilterNull())
        .aggregate("count", Sum(), "sum")
        .as_output("words")
    )
    store = open_store()
    runner = TopologyRunner(topo, spark, store, log)

    # txid 1: nothing committed yet and no query: the sum of nothing is 0
    assert runner.run_batch(1).outputs == {"words": 1}
    assert _out_rows(store, "drpc__out_words", 1) == [(0,)]
    after_1 = _words(SENTENCES)

    # txid 2: the query reads the counts of txid 1, not those txid 2 adds
    _send(log, "sentences", MORE)
    _send(log, "queries", ["the cow nosuchword the", "apples"])
    outcome = runner.run_batch(2)
    assert outcome.tuples_in == {"sentences": 2, "queries": 2}
    expected = 2 * after_1["the"] + after_1["cow"] + after_1["apples"]
    assert _out_rows(store, "drpc__out_words", 2) == [(expected,)]
    assert store.fetch_arrow('SELECT "sum" FROM drpc__out_words').schema.types == [pa.int64()]

    # txid 3: a query only; now it sees txid 2's counts
    _send(log, "queries", ["the cheese"])
    runner.run_batch(3)
    after_2 = _words(SENTENCES + MORE)
    assert _out_rows(store, "drpc__out_words", 3) == [(after_2["the"] + after_2["cheese"],)]
    assert _counts(store, counts.table) == dict(after_2)
    store.close()


# -- 9. a reducer and a Python combiner through persistent_aggregate ------------------------------


class DistinctSorted(ReducerAggregator[list[str]]):
    """Collects the distinct values of a group into a sorted list."""

    def init(self) -> list[str]:
        return []

    def reduce(self, acc: list[str], values: tuple[Any, ...]) -> list[str]:
        return sorted({*acc, values[0]})


class MaxLen(CombinerAggregator[int]):
    """The length of the longest string."""

    output_type = "bigint"

    def init(self, values: tuple[Any, ...]) -> int:
        return len(values[0])

    def combine(self, a: int, b: int) -> int:
        return max(a, b)

    def zero(self) -> int:
        return 0


def test_reducer_and_python_combiner(spark: Any, tmp_path: Path, open_store: OpenStore) -> None:
    log = _log(tmp_path, {"visits": 2})
    topo = TridentTopology("visits")
    stream = topo.new_stream(
        "visits", LogSpout("visits", JsonScheme({"user": "string", "page": "string"}))
    )
    pages = stream.group_by("user").persistent_aggregate(
        StateSpec.opaque("pages"), "page", DistinctSorted(), "pages"
    )
    longest = stream.group_by("user").persistent_aggregate(
        StateSpec.opaque("longest"), "page", MaxLen(), "maxlen"
    )
    pages.new_values_stream().as_output("page_changes")
    store = open_store()
    runner = TopologyRunner(topo, spark, store, log)

    def visits(rows: list[tuple[str, str]]) -> None:
        _send(log, "visits", [json.dumps({"user": u, "page": p}) for u, p in rows])

    def state() -> tuple[dict[str, Any], dict[str, Any]]:
        p = {r["user"]: json.loads(r["value"]) for r in store.scan(pages.table).to_pylist()}
        m = {r["user"]: r["value"] for r in store.scan(longest.table).to_pylist()}
        return p, m

    visits([("ann", "home"), ("bob", "about"), ("ann", "products"), ("ann", "home")])
    assert runner.run_batch(1).applied
    assert state() == ({"ann": ["home", "products"], "bob": ["about"]}, {"ann": 8, "bob": 5})

    visits([("bob", "a"), ("cy", "contact"), ("ann", "blog"), ("bob", "about")])
    second = runner.run_batch(2)
    assert second.applied
    expected = (
        {"ann": ["blog", "home", "products"], "bob": ["a", "about"], "cy": ["contact"]},
        {"ann": 8, "bob": 5, "cy": 7},
    )
    assert state() == expected
    changes = {
        u: json.loads(v) if isinstance(v, str) else v
        for u, v in _out_rows(store, "visits__out_page_changes", 2)
    }
    assert changes == expected[0]
    assert second.states["pages"].keys_in == 3

    assert runner.run_batch(2).applied is False
    assert runner.run_batch(1).applied is False
    assert state() == expected
    store.close()


# -- 10. partition_persist with a bulk StateUpdater, custom QueryFunction -------------------------


class LocationDB(StateUpdater):
    """Trident's LocationDB: (userid, location) rows written with one bulk statement."""

    def __init__(self) -> None:
        self.statements = 0

    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> Any:
        store.execute(
            f'CREATE TABLE IF NOT EXISTS "{table}" (userid VARCHAR PRIMARY KEY, location VARCHAR)'
        )
        with store.staged(batch) as name:  # DuckDB and PostgreSQL alike
            store.execute(
                f'INSERT INTO "{table}" SELECT userid, location FROM "{name}" '
                "ON CONFLICT (userid) DO UPDATE SET location = excluded.location"
            )
        self.statements += 1
        return None


class QueryLocation(QueryFunction):
    """Looks up each user's location with ONE query per batch."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[Any, ...]]] = []

    def batch_retrieve(self, state: Any, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        self.calls.append(list(args))
        store, table = state.store, state.table
        if not store.has_table(table):
            return [None] * len(args)
        keys = pa.table({"userid": [a[0] for a in args]})
        with store.staged(keys) as name:
            found = dict(
                store.fetch_rows(
                    f'SELECT k.userid, t.location FROM "{name}" AS k JOIN "{table}" AS t '
                    "ON k.userid = t.userid"
                )
            )
        return [found.get(a[0]) for a in args]


def test_partition_persist_and_custom_query_function(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"locations": 2, "lookups": 1})
    topo = TridentTopology("loc")
    updater = LocationDB()
    locations = topo.new_stream(
        "locations",
        LogSpout("locations", JsonScheme({"userid": "string", "location": "string"})),
    ).partition_persist(StateSpec.opaque("locations"), ["userid", "location"], updater)
    query = QueryLocation()
    (
        topo.new_stream("lookups", LogSpout("lookups", StringScheme("userid")))
        .state_query(locations, "userid", query, "location")
        .project(["userid", "location"])
        .as_output("found")
    )
    store = open_store()
    runner = TopologyRunner(topo, spark, store, log)

    def moves(rows: list[tuple[str, str]]) -> None:
        _send(log, "locations", [json.dumps({"userid": u, "location": c}) for u, c in rows])

    moves([("u1", "Paris"), ("u2", "Oslo"), ("u3", "Lima")])
    _send(log, "lookups", ["u1", "u9"])
    assert runner.run_batch(1).applied
    # the lookup ran before this batch's locations were written
    assert _out_rows(store, "loc__out_found", 1) == [("u1", None), ("u9", None)]
    assert updater.statements == 1
    assert len(query.calls) == 1

    moves([("u1", "Rome"), ("u4", "Kyiv")])
    _send(log, "lookups", ["u1", "u2", "u4", "u2"])
    outcome = runner.run_batch(2)
    assert outcome.applied
    assert outcome.states["locations"].keys_in == 2
    assert _out_rows(store, "loc__out_found", 2) == [
        ("u1", "Paris"),
        ("u2", "Oslo"),
        ("u2", "Oslo"),
        ("u4", None),
    ]
    assert len(query.calls) == 2
    assert sorted(query.calls[1]) == [("u1",), ("u2",), ("u4",)]
    rows = store.fetch_rows('SELECT * FROM "loc__locations" ORDER BY userid')
    assert rows == [("u1", "Rome"), ("u2", "Oslo"), ("u3", "Lima"), ("u4", "Kyiv")]
    assert runner.run_batch(2).applied is False
    assert updater.statements == 2
    assert len(query.calls) == 2
    store.close()


# -- 11. declaration-time validation --------------------------------------------------------------


def test_declaration_validation() -> None:
    topo = TridentTopology("decl")
    stream = topo.new_stream("sentences", LogSpout("sentences", StringScheme("sentence")))
    with pytest.raises(FieldNotFoundError) as err:
        stream.each("nope", Split(), "w")
    assert "'nope'" in str(err.value)
    assert "['sentence']" in str(err.value)

    with pytest.warns(ExactlyOnceWarning, match="transactional state with an opaque spout"):
        stream.each("sentence", Split(), "word").group_by("word").persistent_aggregate(
            StateSpec.transactional("counts"), "word", Count(), "count"
        )

    strict = TridentTopology("decl_strict", strict=True)
    opaque = strict.new_stream("sentences", LogSpout("sentences", StringScheme("sentence")))
    with pytest.raises(ConfigError, match="not exactly-once"):
        opaque.each("sentence", Split(), "word").group_by("word").persistent_aggregate(
            StateSpec.transactional("counts"), "word", Count(), "count"
        )
    assert strict.states == {}


def test_runner_compacts_a_state_log_when_superseded_rows_pass_the_policy(
    tmp_path: Path, spark: Any, open_store: OpenStore
) -> None:
    from trident_assets.backends.compaction import CompactionPolicy

    log = _log(tmp_path, {"sentences": 1})
    _send(log, "sentences", ["a b", "a b", "a b", "a c"])
    topo, _ = _word_count("compacting", max_batch_size=1)
    policy = CompactionPolicy(ratio=1.0, min_rows=4)
    table = "compacting__counts"
    with open_store() as store:
        runner = TopologyRunner(topo, spark, store, log, compaction=policy)
        rows, compacted = [], []
        for txid in range(1, 5):
            compacted.append(runner.run_batch(txid).compacted)
            rows.append(store.fetch_rows(f"SELECT count(*) FROM _trident_log_{table}")[0][0])
        # txid 2 and 3 rewrite a and b again: 4 rows, 2 superseded >= 1.0 x 2 live -> compact;
        # txid 4 writes a and c: 4 rows, 1 superseded < 3 live -> kept
        assert compacted == [{}, {table: 2}, {table: 2}, {}]
        assert rows == [2, 2, 2, 4]
        assert _counts(store, table) == {"a": 4, "b": 3, "c": 1}
        assert not runner.run_batch(4).applied
        assert _counts(store, table) == {"a": 4, "b": 3, "c": 1}
        opaque = store.fetch_rows(f"SELECT word, txid, curr, prev FROM {table} ORDER BY word")
        assert opaque == [("a", 4, 4, 3), ("b", 3, 3, 2), ("c", 4, 1, None)], (
            "compaction keeps each key's latest [txid, curr, prev]"
        )


def test_compaction_policy_thresholds() -> None:
    from trident_assets.backends.compaction import CompactionPolicy

    policy = CompactionPolicy(ratio=0.5, min_rows=10)
    assert not policy.due(9, 1), "below min_rows"
    assert policy.due(15, 10)
    assert not policy.due(14, 10)
    with pytest.raises(ConfigError, match="ratio > 0"):
        CompactionPolicy(ratio=0)

"""State contracts checked when a TopologyRunner is created, before anything runs or is written."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trident_assets.backends.state_contracts import stored_contracts, write_contracts
from trident_assets.backends.state_store import open_state_store
from trident_assets.core.aggregators import Count, Max, Sum
from trident_assets.core.contracts import StateContract
from trident_assets.errors import StateContractError
from trident_assets.log.store import PartitionedLog
from trident_assets.names import CONTRACTS_TABLE
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import StringScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.operations import PyFunction, Split
from trident_assets.stream.topology import StateSpec, TridentState, TridentTopology
from trident_assets_tests.conftest import OpenStore, new_database

SENTENCES = ["a b a", "b c", "a c c", "d", "a b", "c d"]


def _log(tmp_path: Path) -> PartitionedLog:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("sentences", 1)
    producer = log.producer("sentences", partitioner="round_robin")
    for s in SENTENCES:
        producer.send(s.encode())
    producer.flush()
    return log


def _topology(
    *,
    agg: Any = None,
    group: str = "word",
    spec: StateSpec | None = None,
    extra: bool = False,
) -> tuple[TridentTopology, TridentState]:
    topo = TridentTopology("wc")
    spout = LogSpout(
        "sentences",
        StringScheme("sentence"),
        SpoutConfig(kind=SpoutKind.TRANSACTIONAL, max_batch_size=2),
    )
    words = topo.new_stream("sentences", spout).each("sentence", Split(), "word")
    counts = words.group_by(group).persistent_aggregate(
        spec or StateSpec.opaque("counts"), group, agg or Count(), "count"
    )
    if extra:
        words.group_by("word").persistent_aggregate(StateSpec.opaque("seen"), "word", Count(), "n")
    return topo, counts


def _snapshot(store: Any) -> tuple[Any, ...]:
    return (
        store.last_committed("wc"),
        sorted(store.fetch_rows('SELECT word, value FROM "wc__counts__latest"'))
        if store.has_table("wc__counts__latest")
        else sorted((r["word"], r["value"]) for r in store.scan("wc__counts").to_pylist()),
        store.fetch_rows(
            "SELECT spout, txid, partition, first_offset, next_offset, committed "
            "FROM _trident_spout_ranges ORDER BY spout, txid, partition"
        ),
        store.fetch_rows(f"SELECT topology, state, table_name, contract FROM {CONTRACTS_TABLE}"),
    )


def _run_two(spark: Any, tmp_path: Path, store: Any) -> tuple[PartitionedLog, TridentState]:
    log = _log(tmp_path)
    topo, counts = _topology()
    runner = TopologyRunner(topo, spark, store, log)
    assert not store.has_table(CONTRACTS_TABLE)  # nothing written before the first commit
    assert runner.run_batch(1).applied
    assert stored_contracts(store) == [counts.contract()]
    assert runner.run_batch(2).applied
    return log, counts


def _words(sentences: list[str]) -> dict[str, int]:
    return dict(Counter(w for s in sentences for w in s.split()))


def _counts(store: Any) -> dict[str, int]:
    return {r["word"]: r["value"] for r in store.scan("wc__counts").to_pylist()}


def test_identical_declaration_runs_on(spark: Any, tmp_path: Path, open_store: OpenStore) -> None:
    store = open_store()
    log, _ = _run_two(spark, tmp_path, store)
    topo, counts = _topology()
    runner = TopologyRunner(topo, spark, store, log)
    assert runner.run_batch(3).applied
    assert _counts(store) == _words(SENTENCES)
    assert stored_contracts(store) == [counts.contract()]


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def two_committed(
    request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, PartitionedLog]]:
    """A store of each kind where ``wc`` committed txids 1 and 2 (:func:`_run_two`), and its
    log: made once for the module, read by the tests whose changed declaration is refused
    (each checks that nothing was written)."""
    tmp = tmp_path_factory.mktemp(f"two-{request.param}")
    if request.param == "duckdb":
        location = str(tmp / "state.duckdb")
    else:
        location = new_database(request.getfixturevalue("postgres_server"))
    with open_state_store(location) as store:
        log, _ = _run_two(spark, tmp, store)
        yield store, log


REFUSED_TAIL = (
    "Nothing was run or written: the stored values would be mixed with values of another "
    "meaning. Ways out: restore the stored declaration; rename the state (a new state is built "
    "from the retained log before it joins the topology); remove the state from the topology, "
    "drop its stored values (`trident state drop wc counts`, refused while a topology declares "
    "it) and declare it again (it is then built anew from the retained log); or, keeping its "
    "keys and state type, recompute it under the new declaration (`trident state rebuild wc "
    "counts --module MODULE`)"
)


@pytest.mark.parametrize(
    ("change", "difference"),
    [
        (
            {"agg": Sum()},
            "aggregator: stored 'trident_assets.core.aggregators.Count', "
            "declared 'trident_assets.core.aggregators.Sum'",
        ),
        ({"group": "sentence"}, "key_fields: stored ('word'), declared ('sentence')"),
        (
            {"spec": StateSpec.transactional("counts")},
            "state_type: stored 'opaque', declared 'transactional'",
        ),
    ],
    ids=["aggregator", "keys", "state_type"],
)
def test_incompatible_change_is_refused_before_anything_runs(
    spark: Any,
    two_committed: tuple[Any, PartitionedLog],
    change: dict[str, Any],
    difference: str,
) -> None:
    store, log = two_committed
    before = _snapshot(store)
    topo, _ = _topology(**change)
    with pytest.raises(StateContractError) as err:
        TopologyRunner(topo, spark, store, log)
    assert str(err.value) == (
        "state 'counts' of topology 'wc' (table 'wc__counts') is declared differently from "
        f"how its stored values were made ({difference}). {REFUSED_TAIL}"
    )
    after = _snapshot(store)
    assert after == before
    assert max(r[1] for r in after[2]) == 2  # no spout ranges recorded for txid 3


def test_new_state_after_committed_txids_is_built_from_the_log(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    store = open_store()
    log, counts = _run_two(spark, tmp_path, store)
    before = _snapshot(store)
    topo, _ = _topology(extra=True)
    runner = TopologyRunner(topo, spark, store, log)
    assert _snapshot(store) == before  # planned at creation, nothing written
    assert not store.has_table("wc__seen")
    assert runner.run_batch(3).applied  # txids 1..2 built first (test_backfill.py), then 3
    assert {r["word"]: r["value"] for r in store.scan("wc__seen").to_pylist()} == _words(SENTENCES)
    assert stored_contracts(store) == [counts.contract(), topo.states["seen"].contract()]


def test_store_without_contracts_adopts_the_declaration(
    spark: Any,
    tmp_path: Path,
    open_store: OpenStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = open_store()
    log, _ = _run_two(spark, tmp_path, store)
    store.execute(f"DROP TABLE {CONTRACTS_TABLE}")  # as a store created before contracts existed
    topo, counts = _topology()
    with caplog.at_level(logging.WARNING, "trident_assets.backends.state_contracts"):
        runner = TopologyRunner(topo, spark, store, log)
    assert [r.getMessage() for r in caplog.records] == [
        "topology 'wc' has committed txids 1..2 but no state contracts (a store created before "
        "contracts existed): adopting the current declaration of state(s) 'counts' as their "
        "contract without checking it against how the stored values were made"
    ]
    assert not store.has_table(CONTRACTS_TABLE)
    assert runner.run_batch(3).applied
    assert stored_contracts(store) == [counts.contract()]
    assert _counts(store) == _words(SENTENCES)
    with pytest.raises(StateContractError):
        TopologyRunner(_topology(agg=Sum())[0], spark, store, log)


def test_table_owned_by_another_state_is_refused(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    store = open_store()
    log = _log(tmp_path)
    with store.transaction():
        write_contracts(store, [StateContract("other", "x", "wc__counts", "opaque")])
    topo, _ = _topology()
    with pytest.raises(StateContractError) as err:
        TopologyRunner(topo, spark, store, log)
    assert str(err.value) == (
        "state 'counts' of topology 'wc' would write table 'wc__counts', which belongs to "
        "state 'x' of topology 'other'. Nothing was run or written. Rename the state or the "
        "topology so that their tables differ"
    )
    assert store.last_committed("wc") is None
    assert not store.has_table("wc__counts")


def _typed_topology(agg: Any, field_type: str) -> TridentTopology:
    """Word -> ``agg`` over field ``n`` (the word's length), typed ``field_type``."""
    convert = {
        "bigint": lambda w: [(len(w),)],
        "double": lambda w: [(float(len(w)),)],
        "string": lambda w: [(str(len(w)),)],
    }[field_type]
    topo = TridentTopology("wc")
    spout = LogSpout(
        "sentences",
        StringScheme("sentence"),
        SpoutConfig(kind=SpoutKind.TRANSACTIONAL, max_batch_size=2),
    )
    words = topo.new_stream("sentences", spout).each("sentence", Split(), "word")
    lengths = words.each("word", PyFunction(convert, {"n": field_type}), "n")
    lengths.group_by("word").persistent_aggregate(StateSpec.opaque("counts"), "n", agg, "v")
    return topo


def _spark_jobs(spark: Any) -> list[int]:
    return sorted(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


@pytest.mark.parametrize(
    ("agg", "field_type", "declared"),
    [
        (Sum(), "string", "DOUBLE"),  # Spark sums a string field as a double
        (Sum(), "double", "DOUBLE"),
        (Max(), "string", "VARCHAR"),
    ],
    ids=["sum-string", "sum-double", "max-string"],
)
def test_value_type_of_an_input_typed_state_is_checked_before_anything_runs(
    spark: Any,
    tmp_path: Path,
    open_store: OpenStore,
    agg: Any,
    field_type: str,
    declared: str,
) -> None:
    store = open_store()
    log = _log(tmp_path)
    runner = TopologyRunner(_typed_topology(type(agg)(), "bigint"), spark, store, log)
    assert runner.run_batch(1).applied
    assert runner.run_batch(2).applied
    before, jobs = _snapshot(store), _spark_jobs(spark)
    with pytest.raises(StateContractError) as err:
        TopologyRunner(_typed_topology(agg, field_type), spark, store, log)
    assert str(err.value) == (
        "state 'counts' of topology 'wc' (table 'wc__counts') is declared differently from "
        f"how its stored values were made (value_type: stored 'BIGINT', declared '{declared}' "
        f"({type(agg).__name__} over field 'n', which is {field_type})). {REFUSED_TAIL}"
    )
    assert _spark_jobs(spark) == jobs  # typed by analysis only
    assert _snapshot(store) == before
    again = TopologyRunner(_typed_topology(type(agg)(), "bigint"), spark, store, log)
    assert again.run_batch(3).applied  # the stored declaration runs on

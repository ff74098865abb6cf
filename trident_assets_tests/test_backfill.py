"""A state added to a topology that committed txids is built from the log, exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.backends.state_contracts import stored_contracts
from trident_assets.core.aggregators import Count
from trident_assets.errors import CorruptStateError, StateContractError
from trident_assets.log.store import PartitionedLog
from trident_assets.names import CONTRACTS_TABLE
from trident_assets.runtime.backfill_plans import BackfillOutcome
from trident_assets.runtime.commit import PROGRESS_TABLE, progress
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import StringScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.operations import Split
from trident_assets.stream.queries import MapGet
from trident_assets.stream.topology import StateSpec, TridentTopology
from trident_assets_tests.test_state_contracts import SENTENCES, _log

REPO = Path(__file__).resolve().parents[1]
MORE = ["a e", "e f"]


def wc(
    seen: StateSpec | None = None,
    *,
    kind: SpoutKind = SpoutKind.TRANSACTIONAL,
    agg: Any = None,
    split: Split | None = None,
) -> Any:
    """Topology ``wc``: ``counts`` (``agg``, default Count, per word) and, if given, ``seen``
    (Count per word too, declared later). ``split``: the sentence splitter (default on spaces).

    Two sentences per txid, so SENTENCES (6) make txids 1..3.
    """
    topo = TridentTopology("wc")
    spout = LogSpout(
        "sentences", StringScheme("sentence"), SpoutConfig(kind=kind, max_batch_size=2)
    )
    words = topo.new_stream("sentences", spout).each("sentence", split or Split(), "word")
    counts = StateSpec.opaque("counts")
    words.group_by("word").persistent_aggregate(counts, "word", agg or Count(), "count")
    if seen is not None:
        words.group_by("word").persistent_aggregate(seen, "word", Count(), "n")
    return topo


def words(sentences: list[str]) -> dict[str, int]:
    """Word counts computed directly from the sentences."""
    return dict(Counter(w for s in sentences for w in s.split()))


def values(store: Any, state: str, as_of: int | None = None) -> dict[str, int]:
    """A state's values (as of a txid)."""
    rows = store.scan(f"wc__{state}", as_of=as_of).to_pylist()
    return {r["word"]: r["value"] for r in rows}


def raw(store: Any, state: str) -> list[tuple[Any, ...]]:
    """Every stored version of a state (sequence numbers included)."""
    return store.fetch_rows(f'SELECT * FROM "_trident_log_wc__{state}" ORDER BY ALL')


def committed_three(spark: Any, tmp_path: Path) -> tuple[PartitionedLog, DuckDBStore]:
    """The log of SENTENCES and a store where topology ``wc`` (counts only) committed 1..3."""
    log = _log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(wc(), spark, store, log)
    assert [o.txid for o in runner.run_batches([1, 2, 3]) if o.applied] == [1, 2, 3]
    return log, store


def send(log: PartitionedLog, sentences: list[str]) -> None:
    producer = log.producer("sentences", partitioner="round_robin")
    for s in sentences:
        producer.send(s.encode())
    producer.flush()


def test_new_state_is_built_from_the_log_then_joins(spark: Any, tmp_path: Path) -> None:
    log, store = committed_three(spark, tmp_path)
    counts_before = raw(store, "counts")
    ranges_before = store.fetch_rows("SELECT * FROM _trident_spout_ranges ORDER BY ALL")
    replica = Replica(tmp_path / "replica")
    runner = TopologyRunner(wc(StateSpec.opaque("seen")), spark, store, log, replica=replica)
    assert store.layout("wc__seen") is None  # planned, nothing written yet
    assert not store.has_table(PROGRESS_TABLE)

    assert runner.backfill() == [BackfillOutcome("seen", 1, 3, [1, 2, 3])]
    assert values(store, "seen") == words(SENTENCES)
    assert values(store, "seen", as_of=1) == words(SENTENCES[:2])  # txid by txid
    assert values(store, "seen", as_of=2) == words(SENTENCES[:4])
    assert raw(store, "counts") == counts_before  # the other state was not re-applied
    assert store.fetch_rows("SELECT * FROM _trident_spout_ranges ORDER BY ALL") == ranges_before
    assert store.last_committed("wc") == 3
    seen = {c.state: c for c in stored_contracts(store)}["seen"]
    assert seen.first_txid == 1
    assert progress(store, "wc") == {"seen": (1, 3)}
    assert runner.backfill() == []  # done
    published = replica.read_map("wc__seen", scope="wc", as_of=2).to_pylist()
    assert {r["word"]: r["value"] for r in published} == words(SENTENCES[:4])

    send(log, MORE)
    outcome = runner.run_batch(4)
    assert outcome.applied
    assert values(store, "seen") == words(SENTENCES + MORE)
    assert values(store, "counts") == words(SENTENCES + MORE)
    assert progress(store, "wc") == {}  # joined at txid 4
    published = replica.read_map("wc__seen", scope="wc").to_pylist()
    assert {r["word"]: r["value"] for r in published} == words(SENTENCES + MORE)
    again = TopologyRunner(wc(StateSpec.opaque("seen")), spark, store, log)
    assert again.backfill() == []
    store.close()


def test_retention_truncated_history_is_refused_or_built_from_retained(
    spark: Any, tmp_path: Path
) -> None:
    log, store = committed_three(spark, tmp_path)
    log.delete_records_before("sentences", 0, 2)  # the records txid 1 read
    contracts = store.fetch_rows(f"SELECT * FROM {CONTRACTS_TABLE} ORDER BY ALL")
    with pytest.raises(StateContractError) as err:
        TopologyRunner(wc(StateSpec.opaque("seen")), spark, store, log)
    assert str(err.value) == (
        "state 'seen' is new in topology 'wc', which has committed txids 1..3: it is built "
        "from the log of those txids before it joins, but txid(s) 1 can no longer be read "
        "(retention deleted records they read, or their topic or partition was re-created). "
        "Nothing was run or written. Declare it with StateSpec('seen', ..., "
        'backfill="from_retained") to build it from txid 2, the first txid from which the log '
        "is complete (its contract then records first_txid=2), or declare it in a new topology "
        "(a new topology name reads its spouts from their earliest retained offsets, into "
        "tables of its own)"
    )
    assert store.fetch_rows(f"SELECT * FROM {CONTRACTS_TABLE} ORDER BY ALL") == contracts
    assert store.layout("wc__seen") is None
    assert not store.has_table(PROGRESS_TABLE)

    spec = StateSpec("seen", backfill="from_retained")
    runner = TopologyRunner(wc(spec), spark, store, log)
    send(log, MORE)
    assert runner.run_batch(4).applied  # catches up 2..3 first, then joins
    assert values(store, "seen") == words(SENTENCES[2:] + MORE)
    assert values(store, "counts") == words(SENTENCES + MORE)
    seen = {c.state: c for c in stored_contracts(store)}["seen"]
    assert seen.first_txid == 2
    assert TopologyRunner(wc(spec), spark, store, log).backfill() == []
    store.close()


def test_unrecorded_ranges_and_unreplayable_states_are_refused(spark: Any, tmp_path: Path) -> None:
    log, store = committed_three(spark, tmp_path)
    store.execute("DELETE FROM _trident_spout_history WHERE txid = 3")  # as before history
    with pytest.raises(StateContractError) as err:
        TopologyRunner(wc(StateSpec.opaque("seen")), spark, store, log)
    assert str(err.value) == (
        "state 'seen' is new in topology 'wc', which has committed txids 1..3: it is built "
        "from the log of those txids before it joins, but the offset ranges of txid(s) 3 were "
        "not recorded (committed before this version kept them). Nothing was run or written. "
        "Declare it with StateSpec('seen', ..., backfill=\"from_retained\") to build it from "
        "txid 4, the next txid (no committed txid can be replayed) (its contract then records "
        "first_txid=4), or declare it in a new topology (a new topology name reads its spouts "
        "from their earliest retained offsets, into tables of its own)"
    )

    topo = wc()
    spout = topo.spouts["sentences"]
    counts = topo.states["counts"]
    from trident_assets.stream.streams import Stream

    (
        Stream(topo, spout)
        .each("sentence", Split(), "word")
        .state_query(counts, "word", MapGet(), "count")
        .group_by("word")
        .persistent_aggregate(StateSpec.opaque("queried"), "count", Count(), "n")
    )
    with pytest.raises(StateContractError) as err:
        TopologyRunner(topo, spark, store, log)
    assert str(err.value) == (
        "state 'queried' is new in topology 'wc', which has committed txids 1..3: it cannot "
        "be built from the log of those txids because it reads state 'counts' through a state "
        "query, whose values at each past txid are not kept. Nothing was run or written. "
        "Declare it in a new topology (a new topology name reads its spouts from the start, "
        "into tables of its own), or remove it from this topology"
    )
    assert store.layout("wc__queried") is None

    topo = wc()
    counts = topo.states["counts"]
    counts.new_values_stream().group_by("word").persistent_aggregate(
        StateSpec.opaque("changed"), "word", Count(), "n"
    )
    with pytest.raises(StateContractError) as err:
        TopologyRunner(topo, spark, store, log)
    assert str(err.value) == (
        "state 'changed' is new in topology 'wc', which has committed txids 1..3: it cannot "
        "be built from the log of those txids because it reads the new values of state "
        "'counts', which are kept for recent txids only. Nothing was run or written. Declare "
        "it in a new topology (a new topology name reads its spouts from the start, into "
        "tables of its own), or remove it from this topology"
    )
    store.close()


def test_new_state_after_a_quarantine_and_its_replay_counts_what_the_others_did(
    spark: Any, tmp_path: Path
) -> None:
    log = _log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(wc(), spark, store, log)
    assert runner.run_batch(1).applied
    assert runner.quarantine(2, "poison").quarantined == 2  # sentences 3-4 set aside
    assert runner.run_batch(3).applied
    assert values(store, "counts") == words(SENTENCES[:2] + SENTENCES[4:])
    assert runner.replay_quarantined().txid == 4
    assert values(store, "counts") == words(SENTENCES)
    built = TopologyRunner(wc(StateSpec.opaque("seen")), spark, store, log)
    assert built.backfill() == [BackfillOutcome("seen", 1, 4, [1, 2, 3, 4])]
    assert values(store, "seen", as_of=3) == values(store, "counts", as_of=3)
    assert values(store, "seen") == words(SENTENCES)
    store.close()


CHILD = """
import os, signal, sys
from pathlib import Path
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.session import build_spark_session
from trident_assets.stream.topology import StateSpec
from trident_assets_tests.test_backfill import wc

root = Path(sys.argv[1])
spark = build_spark_session(
    {{"spark.local.dir": str(root / "spark"), "spark.sql.warehouse.dir": str(root / "wh")}}
)
seen = []

def fault(point):
    seen.append(point)
    if seen.count({point!r}) == {nth}:
        os.kill(os.getpid(), signal.SIGKILL)

store = DuckDBStore(root / "state.duckdb")
runner = TopologyRunner(wc(StateSpec.opaque("seen")), spark, store, PartitionedLog(root / "log"),
                        fault=fault)
runner.backfill()
"""


@pytest.mark.parametrize(
    ("point", "nth", "done"),
    [("backfill_after_state_write", 2, 1), ("backfill_after_commit", 2, 2)],
    ids=["inside-txid-2", "after-txid-2"],
)
def test_sigkill_mid_backfill_resumes_exactly(
    spark: Any, tmp_path: Path, point: str, nth: int, done: int
) -> None:
    log, store = committed_three(spark, tmp_path)
    store.close()
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD.format(point=point, nth=nth)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], env=env, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL
    store = DuckDBStore(tmp_path / "state.duckdb")
    assert progress(store, "wc") == {"seen": (1, done)}
    assert values(store, "seen") == words(SENTENCES[: 2 * done])
    runner = TopologyRunner(wc(StateSpec.opaque("seen")), spark, store, log)
    resumed = runner.backfill()
    assert resumed == [BackfillOutcome("seen", 1, 3, list(range(done + 1, 4)))]
    assert values(store, "seen") == words(SENTENCES)
    assert values(store, "counts") == words(SENTENCES)
    store.close()


def with_extra(*, merged: bool) -> Any:
    """:func:`wc` plus spout ``extra`` (topic ``extra``, new to the topology) feeding state
    ``extra_words`` (``merged``: the words of both spouts; else of ``extra`` alone)."""
    topo = wc()
    sentences = topo.spouts["sentences"]
    spout = LogSpout(
        "extra", StringScheme("sentence"), SpoutConfig(kind=SpoutKind.OPAQUE, max_batch_size=10)
    )
    extra = topo.new_stream("extra", spout).each("sentence", Split(), "word")
    if merged:
        from trident_assets.stream.streams import Stream

        old = Stream(topo, sentences).each("sentence", Split(), "word")
        extra = topo.merge(old, extra)
    extra.group_by("word").persistent_aggregate(
        StateSpec.opaque("extra_words"), "word", Count(), "n"
    )
    return topo


@pytest.mark.parametrize("merged", [False, True], ids=["new-spout-only", "old-and-new-spouts"])
def test_new_state_on_a_spout_new_to_the_topology(spark: Any, tmp_path: Path, merged: bool) -> None:
    log, store = committed_three(spark, tmp_path)
    log.create_topic("extra", 1)
    extra = ["x y", "y z x"]
    producer = log.producer("extra")
    for s in extra:
        producer.send(s.encode())
    producer.flush()
    runner = TopologyRunner(with_extra(merged=merged), spark, store, log)
    built = runner.backfill()
    assert [(b.state, b.first_txid, b.applied) for b in built] == (
        [("extra_words", 1, [1, 2, 3])] if merged else [("extra_words", 4, [])]
    )
    if merged:  # txids 1..3 replayed the old spout; the new one read nothing then
        assert values(store, "extra_words") == words(SENTENCES)
    send(log, MORE)
    assert runner.run_batch(4).applied  # the new spout reads its topic from the start
    expected = words((SENTENCES if merged else []) + MORE * merged + extra)
    assert {r["word"]: r["value"] for r in store.scan("wc__extra_words").to_pylist()} == expected
    assert values(store, "counts") == words(SENTENCES + MORE)
    contract = {c.state: c for c in stored_contracts(store)}["extra_words"]
    assert contract.first_txid == (1 if merged else 4)
    store.close()


def test_a_spout_whose_positions_were_lost_is_refused_not_restarted(
    spark: Any, tmp_path: Path
) -> None:
    log, store = committed_three(spark, tmp_path)
    store.execute("DELETE FROM _trident_spout_ranges WHERE spout = 'sentences'")
    with pytest.raises(CorruptStateError) as err:
        TopologyRunner(wc(), spark, store, log)
    assert str(err.value) == (
        "spout 'sentences' of topology 'wc' read txids from 1 on (the store's spout history "
        "records them), but its committed positions are missing from the store, so its next "
        "batch cannot know where to start. Nothing was run or written. Restore the state store "
        "from a backup (`trident state restore`)"
    )
    assert store.last_committed("wc") == 3
    store.close()


def test_a_state_removed_then_declared_again_catches_up_the_txids_it_missed(
    spark: Any, tmp_path: Path
) -> None:
    log = _log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    with_seen = wc(StateSpec.opaque("seen"))
    runner = TopologyRunner(with_seen, spark, store, log)
    assert [o.txid for o in runner.run_batches([1, 2]) if o.applied] == [1, 2]
    assert values(store, "seen") == words(SENTENCES[:4])

    # txid 3 commits without `seen`: the commit records that it misses txids from 3 on
    assert TopologyRunner(wc(), spark, store, log).run_batch(3).applied
    assert store.fetch_rows("SELECT * FROM _trident_states_left") == [("wc", "seen", 2)]
    assert values(store, "seen") == words(SENTENCES[:4])

    send(log, MORE)
    again = TopologyRunner(with_seen, spark, store, log)
    assert again.backfill() == [BackfillOutcome("seen", 3, 3, [3])]
    assert values(store, "seen") == words(SENTENCES)
    assert again.run_batch(4).applied  # rejoins: the record that it had left goes
    assert values(store, "seen") == words(SENTENCES + MORE)
    assert values(store, "counts") == words(SENTENCES + MORE)
    assert store.fetch_rows("SELECT * FROM _trident_states_left") == []
    assert {c.state: c.first_txid for c in stored_contracts(store)} == {"counts": 1, "seen": 1}

    # gone for one (empty) txid, then back: that txid is replayed into it
    assert TopologyRunner(wc(), spark, store, log).run_batch(5).applied  # empty batch
    back = TopologyRunner(with_seen, spark, store, log)
    assert back.backfill() == [BackfillOutcome("seen", 5, 5, [5])]
    assert back.run_batch(6).applied
    assert store.fetch_rows("SELECT * FROM _trident_states_left") == []
    assert TopologyRunner(with_seen, spark, store, log).backfill() == []
    assert values(store, "seen") == words(SENTENCES + MORE)
    store.close()


def test_a_state_declared_again_is_refused_when_the_txids_it_missed_are_gone(
    spark: Any, tmp_path: Path
) -> None:
    log = _log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    with_seen = wc(StateSpec.opaque("seen"))
    assert TopologyRunner(with_seen, spark, store, log).run_batch(1).applied
    runner = TopologyRunner(wc(), spark, store, log)
    assert [o.txid for o in runner.run_batches([2, 3]) if o.applied] == [2, 3]
    log.delete_records_before("sentences", 0, 4)  # the records txids 1..2 read
    seen_before = raw(store, "seen")
    with pytest.raises(StateContractError) as err:
        TopologyRunner(with_seen, spark, store, log)
    assert str(err.value) == (
        "state 'seen' of topology 'wc' left the topology after txid 1 (txids 2..3 committed "
        "without it) and is declared again: it is caught up from the log of those txids before "
        "it rejoins, but txid(s) 2 can no longer be replayed (ranges not recorded, or records "
        "deleted by retention). Nothing was run or written. Rename it (a new state is built "
        "from the retained log), or take it out of the declaration, drop its stored values "
        "(`trident state drop wc seen`) and declare it again (it is then built anew)"
    )
    assert raw(store, "seen") == seen_before
    assert store.last_committed("wc") == 3
    store.close()

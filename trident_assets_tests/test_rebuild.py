"""Rebuilding a persistent aggregate from the log: exact, atomic, other states untouched."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.backends.state_batches import state_total
from trident_assets.backends.state_contracts import stored_contracts
from trident_assets.core.aggregators import Count, Sum
from trident_assets.errors import ConfigError, StateContractError
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.rebuild import RebuildOutcome, rebuild_state
from trident_assets.stream.operations import Split
from trident_assets.stream.topology import StateSpec
from trident_assets_tests.test_backfill import MORE, committed_three, raw, send, values, wc, words
from trident_assets_tests.test_state_contracts import SENTENCES, _log


def test_rebuild_after_changing_nothing_gives_the_same_values(spark: Any, tmp_path: Path) -> None:
    log, store = committed_three(spark, tmp_path)
    topo = wc()
    as_of = {t: values(store, "counts", as_of=t) for t in (1, 2, 3)}
    contracts = stored_contracts(store)
    outcome = rebuild_state(topo, "counts", spark, store, log)
    assert outcome == RebuildOutcome("wc", "counts", 1, 3, len(words(SENTENCES)))
    assert {t: values(store, "counts", as_of=t) for t in (1, 2, 3)} == as_of
    assert values(store, "counts") == words(SENTENCES)
    assert stored_contracts(store) == contracts
    assert store.layout("wc__counts__rebuild") is None  # the shadow is gone
    assert not store.has_table("wc__counts__rebuild__partials")
    store.close()


def test_rebuild_is_exact_leaves_other_states_and_the_topology_runs_on(
    spark: Any, tmp_path: Path
) -> None:
    log, store = committed_three(spark, tmp_path)
    topo = wc(StateSpec.opaque("seen"))
    TopologyRunner(topo, spark, store, log).backfill()
    seen_before = raw(store, "seen")
    ranges = store.fetch_rows("SELECT * FROM _trident_spout_ranges ORDER BY ALL")
    # a bug wrote wrong values
    store.execute('UPDATE "_trident_log_wc__counts" SET curr = curr + 100, prev = prev + 7')
    assert values(store, "counts") != words(SENTENCES)

    replica = Replica(tmp_path / "replica")
    TopologyRunner(topo, spark, store, log, replica=replica)  # publishes txids 1..3
    rebuild_state(topo, "counts", spark, store, log, replica=replica)
    assert values(store, "counts") == words(SENTENCES)
    published = replica.read_map("wc__counts", scope="wc", as_of=2).to_pylist()
    assert {r["word"]: r["value"] for r in published} == words(SENTENCES[:4])
    assert values(store, "counts", as_of=2) == words(SENTENCES[:4])
    assert raw(store, "seen") == seen_before
    assert store.fetch_rows("SELECT * FROM _trident_spout_ranges ORDER BY ALL") == ranges
    assert store.last_committed("wc") == 3

    send(log, MORE)
    runner = TopologyRunner(topo, spark, store, log, replica=replica)
    assert runner.run_batch(4).applied
    assert values(store, "counts") == words(SENTENCES + MORE)
    published = replica.read_map("wc__counts", scope="wc").to_pylist()
    assert {r["word"]: r["value"] for r in published} == words(SENTENCES + MORE)
    assert values(store, "seen") == words(SENTENCES + MORE)
    store.close()


def test_readers_during_a_rebuild_see_the_old_or_the_new_state(spark: Any, tmp_path: Path) -> None:
    log, store = committed_three(spark, tmp_path)
    store.execute('UPDATE "_trident_log_wc__counts" SET curr = curr * 10')
    query = 'SELECT word, curr FROM "wc__counts" ORDER BY word'
    old = store.fetch_rows(query)
    new = sorted(words(SENTENCES).items())
    assert old != new
    reader = store.conn.cursor()  # another connection to the same database
    seen: list[list[tuple[Any, ...]]] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.append([tuple(r) for r in reader.execute(query).fetchall()])

    at_swap: list[list[tuple[Any, ...]]] = []

    def fault(point: str) -> None:
        if point == "rebuild_before_swap":  # the shadow is complete, not yet swapped in
            at_swap.append([tuple(r) for r in store.conn.cursor().execute(query).fetchall()])

    thread = threading.Thread(target=read)
    thread.start()
    try:
        rebuild_state(wc(), "counts", spark, store, log, fault=fault)
    finally:
        stop.set()
        thread.join()
    assert at_swap == [old]
    assert seen, "the reader ran"
    assert {tuple(s) for s in seen} <= {tuple(old), tuple(new)}
    assert [tuple(r) for r in reader.execute(query).fetchall()] == new
    store.close()


def test_rebuild_refusals_change_nothing(spark: Any, tmp_path: Path) -> None:
    log, store = committed_three(spark, tmp_path)
    before = raw(store, "counts")
    with pytest.raises(ConfigError) as err:
        rebuild_state(wc(), "nope", spark, store, log)
    assert str(err.value) == (
        "cannot rebuild state 'nope' of topology 'wc': topology 'wc' declares no state 'nope'; "
        "its states: counts. Nothing was run or written"
    )
    regrouped = wc()
    regrouped.states.clear()
    from trident_assets.stream.streams import Stream

    (
        Stream(regrouped, regrouped.spouts["sentences"])
        .group_by("sentence")
        .persistent_aggregate(StateSpec.opaque("counts"), "sentence", Sum(), "count")
    )
    with pytest.raises(StateContractError) as err2:
        rebuild_state(regrouped, "counts", spark, store, log)
    assert str(err2.value) == (
        "cannot rebuild state 'counts' of topology 'wc': its key_fields is declared "
        "('sentence',) but stored as ('word',); a rebuild keeps the state's layout. Nothing was "
        "run or written. Rename the state (a new state is built from the log), or drop it "
        "(`trident state drop wc counts`) and run the topology to build it anew"
    )
    store.execute("DELETE FROM _trident_spout_history WHERE txid = 2")
    from trident_assets.errors import BatchUnavailableError

    with pytest.raises(BatchUnavailableError) as err3:
        rebuild_state(wc(), "counts", spark, store, log)
    assert str(err3.value) == (
        "cannot rebuild state 'counts' of topology 'wc': it covers txids 1..3, but txid(s) 2 "
        "can no longer be replayed (ranges not recorded, or records deleted by retention). "
        "Nothing was changed. Raise the log's retention before it deletes history you may need "
        'to rebuild from, or rename the state and declare it with backfill="from_retained"'
    )
    assert raw(store, "counts") == before
    assert store.layout("wc__counts__rebuild") is None
    store.close()


TOPOLOGIES = [wc()]
"""What ``--module trident_assets_tests.test_rebuild`` declares."""


def test_cli_state_rebuild(spark: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trident_assets.cli import app

    home = tmp_path / "home"
    _log, store = committed_three(spark, home)
    store.execute('UPDATE "_trident_log_wc__counts" SET curr = curr + 1')
    store.close()
    args = ["state", "rebuild", "wc", "counts", "--home", str(home)]
    # --module repeats, as for `state list` and `state drop`: wc is in the second location
    module = [
        "--module",
        "trident_assets.definitions",
        "--module",
        "trident_assets_tests.test_rebuild",
    ]
    done = CliRunner().invoke(app, [*args, *module])
    assert (done.exit_code, done.output) == (
        0,
        "state counts of wc rebuilt from txids 1..3: 4 keys\n",
    )
    with DuckDBStore(home / "state.duckdb") as store:
        assert values(store, "counts") == words(SENTENCES)
    refused = CliRunner().invoke(app, [*args[:3], "nope", *args[4:], *module])
    assert (refused.exit_code, refused.output) == (
        1,
        "error: cannot rebuild state 'nope' of topology 'wc': topology 'wc' declares no state "
        "'nope'; its states: counts. Nothing was run or written\n",
    )
    unknown = CliRunner().invoke(app, [*args[:2], "wx", *args[3:], module[0], module[1]])
    assert (unknown.exit_code, unknown.output.replace("\n", " ")) == (
        1,
        "error: module trident_assets.definitions declares no topology 'wx' (declared: "
        "gender_age, location_db, page_views, word_count); pass --module with the code "
        "location that declares it ",
    )


class FixedCount(Count):
    """Count after a bug fix: the same layout, a new version."""

    version = "2"


def test_rebuild_under_a_fixed_declaration_is_the_way_out_of_a_refusal(
    spark: Any, tmp_path: Path
) -> None:
    log, store = committed_three(spark, tmp_path)
    store.execute('UPDATE "_trident_log_wc__counts" SET curr = curr + 1')  # what the bug did
    fixed = wc(agg=FixedCount())
    with pytest.raises(StateContractError, match="`trident state rebuild wc counts --module"):
        TopologyRunner(fixed, spark, store, log)
    rebuild_state(fixed, "counts", spark, store, log)
    [contract] = stored_contracts(store)
    assert contract == fixed.states["counts"].contract()
    assert (contract.aggregator, contract.version) == (
        "trident_assets_tests.test_rebuild.FixedCount",
        "2",
    )
    send(log, MORE)
    assert TopologyRunner(fixed, spark, store, log).run_batch(4).applied
    assert values(store, "counts") == words(SENTENCES + MORE)
    store.close()


def test_a_rebuild_carries_the_total_of_the_rebuilt_values(spark: Any, tmp_path: Path) -> None:
    """A Count state's total (plotted per txid) follows its values through a rebuild."""
    log, store = _log(tmp_path), DuckDBStore(tmp_path / "state.duckdb")
    buggy = wc(split=Split("e"))  # the bug: sentences split on the wrong separator
    assert all(o.applied for o in TopologyRunner(buggy, spark, store, log).run_batches([1, 2, 3]))
    pieces = [p for s in SENTENCES for p in s.split("e") if p]
    assert state_total(store, "wc__counts") == len(pieces) != sum(words(SENTENCES).values())
    rebuild_state(wc(), "counts", spark, store, log)
    assert values(store, "counts") == words(SENTENCES)
    assert state_total(store, "wc__counts") == sum(words(SENTENCES).values())
    assert state_total(store, "wc__counts__rebuild") is None, "the shadow's total is gone"
    send(log, MORE)
    outcome = TopologyRunner(wc(), spark, store, log).run_batch(4)
    assert outcome.states["counts"].total == sum(words(SENTENCES + MORE).values())
    assert values(store, "counts") == words(SENTENCES + MORE)
    store.close()


def readers_wc() -> Any:
    """``wc`` with ``changed`` (Count per word of ``counts``'s new values) and ``again``
    (Count per word of ``changed``'s new values): states computed from ``counts``."""
    topo = wc()
    changed = (
        topo.states["counts"]
        .new_values_stream()
        .group_by("word")
        .persistent_aggregate(StateSpec.opaque("changed"), "word", Count(), "n")
    )
    changed.new_values_stream().group_by("word").persistent_aggregate(
        StateSpec.opaque("again"), "word", Count(), "n"
    )
    return topo


def test_a_rebuild_is_refused_while_states_computed_from_it_exist(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from trident_assets.cli import app

    home = tmp_path / "home"
    log, store = _log(home), DuckDBStore(home / "state.duckdb")
    topo = readers_wc()
    assert all(o.applied for o in TopologyRunner(topo, spark, store, log).run_batches([1, 2, 3]))
    readers = {s: raw(store, s) for s in ("changed", "again")}
    assert all(readers.values())
    store.execute('UPDATE "_trident_log_wc__counts" SET curr = curr + 100')  # a bug's values
    wrong = raw(store, "counts")
    with pytest.raises(ConfigError) as err:
        rebuild_state(topo, "counts", spark, store, log)
    assert str(err.value) == (
        "cannot rebuild state 'counts' of topology 'wc': state(s) 'again', 'changed' were "
        "computed from its values (through a state query or its new values), which the "
        "rebuild replaces, and cannot be recomputed from the log. Nothing was run or written. "
        "Rebuild with leave_dependents=True (`trident state rebuild --leave-dependents`) to "
        "keep them as they are, or declare the topology under a new name (a new topology name "
        "reads its spouts from the start, into tables of its own)"
    )
    assert raw(store, "counts") == wrong
    assert store.layout("wc__counts__rebuild") is None
    store.close()

    (tmp_path / "readers_defs.py").write_text(
        "from trident_assets_tests.test_rebuild import readers_wc\n\nTOPOLOGIES = [readers_wc()]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ["state", "rebuild", "wc", "counts", "--home", str(home), "--module", "readers_defs"]
    refused = CliRunner().invoke(app, args)
    assert (refused.exit_code, refused.output.replace("\n", " ")) == (
        1,
        f"error: {err.value} ",
    )
    done = CliRunner().invoke(app, [*args, "--leave-dependents"])
    assert (done.exit_code, done.output) == (
        0,
        f"state counts of wc rebuilt from txids 1..3: {len(words(SENTENCES))} keys\n",
    )
    with DuckDBStore(home / "state.duckdb") as store:
        assert values(store, "counts") == words(SENTENCES)
        assert {s: raw(store, s) for s in readers} == readers, "left as they were"


def test_declared_readers_that_never_ran_do_not_hold_up_a_rebuild(
    spark: Any, tmp_path: Path
) -> None:
    log, store = committed_three(spark, tmp_path)  # wc with counts only
    outcome = rebuild_state(readers_wc(), "counts", spark, store, log)
    assert outcome == RebuildOutcome("wc", "counts", 1, 3, len(words(SENTENCES)))
    assert store.layout("wc__changed") is None
    store.close()

"""The incremental ``exactly_once`` check: its checkpoint, what it finds, when it is full.

The word count reads 4 sentences per txid (2 per partition, round robin) of
``SENTENCES * 4``: txid t reads sentences ``4(t-1)..4t-1``, so each txid misses one of the
five sample sentences (txid 3 misses "four score ...", txid 5 "the cow jumped ...").
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from trident_assets.backends.state_contracts import stored_contracts
from trident_assets.backends.verified import read_checkpoint, values_table
from trident_assets.core.values import OpaqueValue
from trident_assets.dagster import checks
from trident_assets.dagster.check_specs import FULL_CHECK_TAG
from trident_assets.dagster.checks import CheckSettings
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.runs import materialize_batches
from trident_assets.errors import ConfigError
from trident_assets.examples.word_count import SENTENCES, build_word_count
from trident_assets.spark.executor import TopologyRunner

STATE = "word_count__word_counts"
ALL = SENTENCES * 4


def truth(txid: int) -> dict[str, int]:
    """The word counts once ``txid`` committed."""
    return dict(Counter(w for s in ALL[: 4 * txid] for w in s.split(" ")))


def words_of(txid: int) -> set[str]:
    return {w for s in ALL[4 * (txid - 1) : 4 * txid] for w in s.split(" ")}


@pytest.fixture(params=["duckdb"])
def world(request: pytest.FixtureRequest, tmp_path: Path, spark: Any) -> Iterator[Any]:
    if request.param == "postgres":
        trident = TridentResource(home=str(tmp_path), state_dsn=request.getfixturevalue("pg_dsn"))
    else:
        trident = TridentResource(home=str(tmp_path))
    log = trident.log()
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    producer = log.producer("sentences", partitioner="round_robin")
    for sentence in ALL:
        producer.send(sentence.encode())
    producer.flush()
    with dg.DagsterInstance.ephemeral() as instance:
        yield build_word_count(max_batch_size=4), trident, instance


def run(world: Any, txid: int, settings: CheckSettings, **kw: Any) -> dg.AssetCheckEvaluation:
    topo, trident, instance = world
    (result,) = materialize_batches(
        topo, trident, instance, [txid], catch_up=False, checks=settings, **kw
    )
    assert result.success
    (check,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "exactly_once"]
    return check


def meta(check: dg.AssetCheckEvaluation) -> dict[str, Any]:
    return {k: v.value for k, v in check.metadata.items()}


def stored(trident: TridentResource) -> dict[str, int]:
    with trident.store() as store:
        return {r["word"]: r["value"] for r in store.scan(STATE).to_pylist()}


def checkpoint(trident: TridentResource) -> tuple[Any, dict[str, int]]:
    with trident.store() as store:
        cp = read_checkpoint(store, "word_count", "word_counts")
        rows = store.fetch_rows(f'SELECT word, value FROM "{values_table(STATE)}"')
        return cp, {str(w): int(v) for w, v in rows}


def corrupt(trident: TridentResource, word: str, delta: int, txid: int | None = None) -> None:
    """Write a wrong value of ``word`` (stamped ``txid``; None: its stored txid)."""
    with trident.store() as store:
        counts = store.map(STATE)
        (old,) = counts.multi_get([(word,)])
        stamp = old.curr_txid if txid is None else txid
        counts.multi_put([(word,)], [OpaqueValue(stamp, old.curr + delta, old.prev)])


@pytest.mark.parametrize("world", ["duckdb", "postgres"], indirect=True)
def test_checkpoint_then_incremental_without_the_history(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _topo, trident, _instance = world
    settings = CheckSettings(full_every=50)
    first = run(world, 1, settings)
    assert first.passed
    assert meta(first) == {
        "first_txid": 1,
        "mode": "full",
        "full_because": "no checkpoint",
        "verified_from_txid": 1,
        "verified_through_txid": 1,
        "keys_in_state": len(truth(1)),
        "keys_recomputed": len(truth(1)),
        "mismatches": 0,
        "sample": [],
        "checkpoint_recorded": True,
    }
    cp, values = checkpoint(trident)
    with trident.store() as store:
        contracts = sorted(stored_contracts(store), key=lambda c: c.state)
    assert [c.state for c in contracts] == ["word_counts"]
    assert (cp.through_txid, cp.incremental_runs, cp.held) == (1, 0, "[]")
    assert (cp.table, cp.contract) == (STATE, json.dumps([c.to_json() for c in contracts]))
    assert values == truth(1) == stored(trident)

    reads: list[dg.AssetKey] = []
    real = checks._spout_history
    monkeypatch.setattr(checks, "_spout_history", lambda i, k: reads.append(k) or real(i, k))
    second = run(world, 2, settings)
    assert second.passed
    assert meta(second) == {
        "first_txid": 1,
        "mode": "incremental",
        "verified_from_txid": 2,
        "verified_through_txid": 2,
        "keys_in_state": len(truth(2)),
        "keys_recomputed": len(words_of(2)),
        "mismatches": 0,
        "sample": [],
        "checkpoint_recorded": True,
    }
    assert reads == [], "the incremental check reads no spout's whole history"
    cp, values = checkpoint(trident)
    assert (cp.through_txid, cp.incremental_runs) == (2, 1)
    assert values == truth(2) == stored(trident)


def test_untouched_corruption_is_found_by_the_periodic_full_recompute(world: Any) -> None:
    _topo, trident, _instance = world
    settings = CheckSettings(full_every=3)
    assert meta(run(world, 1, settings))["mode"] == "full"
    assert meta(run(world, 2, settings))["mode"] == "incremental"
    assert "four" not in words_of(3)
    corrupt(trident, "four", 1)  # txid 3 does not touch "four": the incremental check cannot see it
    third = run(world, 3, settings)
    assert third.passed
    assert meta(third)["mode"] == "incremental"
    assert checkpoint(trident)[0].incremental_runs == 2

    fourth = run(world, 4, settings)
    assert not fourth.passed
    assert meta(fourth) == {
        "first_txid": 1,
        "mode": "full",
        "full_because": "every 3 evaluations",
        "verified_from_txid": 1,
        "verified_through_txid": 4,
        "keys_in_state": len(truth(4)),
        "keys_recomputed": len(truth(4)),
        "mismatches": 1,
        "sample": [{"word": "four", "stored": truth(4)["four"] + 1, "expected": truth(4)["four"]}],
        "checkpoint_recorded": False,
    }
    assert checkpoint(trident)[0] is None, "a failure drops the checkpoint"
    fifth = run(world, 5, settings)
    assert not fifth.passed, "the corruption is still reported"
    assert (meta(fifth)["mode"], meta(fifth)["full_because"]) == ("full", "no checkpoint")
    assert meta(fifth)["sample"] == [
        {"word": "four", "stored": truth(5)["four"] + 1, "expected": truth(5)["four"]}
    ]


def test_incremental_finds_wrong_values_of_the_runs_own_txids(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _topo, trident, _instance = world
    settings = CheckSettings(full_every=50)
    assert run(world, 1, settings).passed
    assert run(world, 2, settings).passed
    assert "the" in words_of(3)
    assert "four" not in words_of(3)
    corrupt(trident, "the", -1)  # txid 3 adds to it: its stored value is 1 short
    real = TopologyRunner.run_batches

    def buggy(self: TopologyRunner, txids: Any) -> Iterator[Any]:
        for outcome in real(self, txids):
            # txid 3 also writes a key none of its records feed
            corrupt(trident, "four", 5, outcome.txid)
            yield outcome

    monkeypatch.setattr(TopologyRunner, "run_batches", buggy)
    third = run(world, 3, settings)
    assert not third.passed
    m = meta(third)
    assert (m["mode"], m["mismatches"], m["checkpoint_recorded"]) == ("incremental", 2, False)
    assert m["sample"] == [
        {"word": "four", "stored": truth(3)["four"] + 5, "expected": truth(3)["four"]},
        {"word": "the", "stored": truth(3)["the"] - 1, "expected": truth(3)["the"]},
    ]
    assert m["keys_recomputed"] == len(words_of(3) | {"four"})
    assert checkpoint(trident)[0] is None


def test_full_on_request_on_a_changed_contract_and_a_checkpoint_ahead(world: Any) -> None:
    _topo, trident, _instance = world
    settings = CheckSettings(full_every=50)
    assert run(world, 1, settings).passed
    requested = run(world, 2, settings, tags={FULL_CHECK_TAG: "full"})
    assert (meta(requested)["mode"], meta(requested)["full_because"]) == ("full", "requested")
    assert checkpoint(trident)[0].incremental_runs == 0

    with trident.store() as store:
        store.execute("UPDATE _trident_verified SET contract = ?", [json.dumps({"x": 1})])
    changed = run(world, 3, settings)
    assert changed.passed
    assert (meta(changed)["mode"], meta(changed)["full_because"]) == (
        "full",
        "the contract changed",
    )
    with trident.store() as store:
        store.execute("UPDATE _trident_verified SET through_txid = 9")
    ahead = run(world, 4, settings)
    assert ahead.passed
    assert meta(ahead)["full_because"] == "the checkpoint is ahead of the store"
    cp, values = checkpoint(trident)
    assert (cp.through_txid, cp.incremental_runs) == (4, 0)
    assert values == truth(4)
    incremental = run(world, 5, settings)
    assert (meta(incremental)["mode"], meta(incremental)["verified_from_txid"]) == (
        "incremental",
        5,
    )


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3"])
def test_full_every_is_validated(bad: Any) -> None:
    with pytest.raises(ConfigError) as err:
        CheckSettings(full_every=bad)
    assert str(err.value) == (
        "CheckSettings.full_every must be an integer >= 1 (1: every exactly_once evaluation "
        f"recomputes from scratch), got {bad!r}"
    )


def test_dropping_the_state_drops_its_checkpoint(world: Any) -> None:
    from trident_assets.backends.state_drop import drop_state

    _topo, trident, _instance = world
    assert run(world, 1, CheckSettings()).passed
    with trident.store() as store:
        dropped = drop_state(store, "word_count", "word_counts")
        assert values_table(STATE) in dropped.tables
        assert "_trident_verified" in dropped.rows
        assert read_checkpoint(store, "word_count", "word_counts") is None
        assert not store.has_table(values_table(STATE))
        assert store.fetch_rows("SELECT count(*) FROM _trident_verified") == [(0,)]


def test_a_txid_dagster_does_not_know_makes_the_check_full(world: Any, spark: Any) -> None:
    topo, trident, _instance = world
    settings = CheckSettings(full_every=50)
    assert run(world, 1, settings).passed
    with trident.store() as store:  # txid 2 committed outside Dagster: no materialization
        assert TopologyRunner(topo, spark, store, trident.log()).run_batch(2).applied
    third = run(world, 3, settings)
    assert not third.passed, "Dagster's history lacks txid 2's records, the state has them"
    m = meta(third)
    assert (m["mode"], m["full_because"]) == ("full", "a txid since the checkpoint is unknown")
    assert (m["verified_from_txid"], m["verified_through_txid"]) == (1, 3)
    assert m["keys_in_state"] == len(truth(3))
    assert m["mismatches"] == len(words_of(2)), "every word txid 2 counted"
    assert m["checkpoint_recorded"] is False
    assert checkpoint(trident)[0] is None


def test_a_rebuilt_state_is_checked_in_full(world: Any, spark: Any) -> None:
    from trident_assets.spark.rebuild import rebuild_state

    topo, trident, _instance = world
    settings = CheckSettings(full_every=50)
    assert run(world, 1, settings).passed
    assert checkpoint(trident)[0] is not None
    with trident.store() as store:
        rebuild_state(topo, "word_counts", spark, store, trident.log())
        assert read_checkpoint(store, "word_count", "word_counts") is None
    second = run(world, 2, settings)
    assert second.passed
    assert (meta(second)["mode"], meta(second)["full_because"]) == ("full", "no checkpoint")

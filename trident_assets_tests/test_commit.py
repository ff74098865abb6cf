"""The commit protocol: strict order, committed batches final, all-or-nothing."""

from __future__ import annotations

import pytest

from trident_assets import (
    ConfigError,
    Count,
    MemoryStore,
    OpaqueMap,
    OpaqueValue,
    OutOfOrderCommitError,
)
from trident_assets.core.aggregators import apply_combiner
from trident_assets.core.commit import CommitDecision, commit_batch, decide_commit


def test_decide_commit_table() -> None:
    assert decide_commit("s", None, 1) is CommitDecision.APPLY
    assert decide_commit("s", 3, 4) is CommitDecision.APPLY
    assert decide_commit("s", 3, 3) is CommitDecision.ALREADY_COMMITTED
    assert decide_commit("s", 3, 1) is CommitDecision.ALREADY_COMMITTED
    with pytest.raises(OutOfOrderCommitError, match="txid 4 must commit first"):
        decide_commit("s", 3, 5)
    with pytest.raises(OutOfOrderCommitError, match="committed no txid yet, so txid 1"):
        decide_commit("s", None, 2)
    for bad in (0, -1, True, "3"):
        with pytest.raises(ConfigError, match="txid must be an integer >= 1"):
            decide_commit("s", None, bad)  # type: ignore[arg-type]


def count_batch(store: MemoryStore, txid: int, words: dict[str, int], fail: bool = False):
    state = OpaqueMap(store.map("counts"))

    def apply(_tx):
        state.begin_commit(txid)
        new = apply_combiner(state, Count(), [(w,) for w in words], list(words.values()))
        if fail:
            raise RuntimeError("crash between write and commit")
        state.commit(txid)
        return new

    return commit_batch(store, "wordcount", txid, apply)


def test_in_order_commits_apply_and_replays_are_reported_no_ops() -> None:
    store = MemoryStore()
    first = count_batch(store, 1, {"a": 2})
    assert (first.applied, first.previous, first.result) == (True, None, [2])
    second = count_batch(store, 2, {"a": 1, "b": 1})
    assert (second.applied, second.previous) == (True, 1)
    replay = count_batch(store, 1, {"a": 100})
    assert not replay.applied  # already committed
    assert replay.previous == 2
    assert store.map("counts").data == {("a",): OpaqueValue(2, 3, 2), ("b",): OpaqueValue(2, 1)}


def test_out_of_order_commit_changes_nothing() -> None:
    store = MemoryStore()
    count_batch(store, 1, {"a": 1})
    before = dict(store.map("counts").data)
    with pytest.raises(OutOfOrderCommitError, match="refusing to commit txid 3"):
        count_batch(store, 3, {"a": 5})
    assert store.map("counts").data == before
    assert store.last_committed("wordcount") == 1


def test_failure_inside_apply_rolls_back_values_and_marker() -> None:
    store = MemoryStore()
    count_batch(store, 1, {"a": 1})
    with pytest.raises(RuntimeError, match="crash between write and commit"):
        count_batch(store, 2, {"a": 5, "z": 1}, fail=True)
    assert store.map("counts").data == {("a",): OpaqueValue(1, 1)}
    assert store.last_committed("wordcount") == 1
    retry = count_batch(store, 2, {"a": 2})
    assert retry.applied
    assert store.map("counts").data == {("a",): OpaqueValue(2, 3, 1)}


def test_null_txid_applies_without_touching_the_marker() -> None:
    store = MemoryStore()
    result = commit_batch(store, "s", None, lambda _tx: "ran")
    assert (result.applied, result.result) == (True, "ran")
    assert store.last_committed("s") is None

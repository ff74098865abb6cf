"""The map-state wrappers against Storm's StateTest sequences and the seeds' examples."""

from __future__ import annotations

import pytest

from trident_assets import (
    CombinerValueUpdater,
    Count,
    NonTransactionalMap,
    OpaqueMap,
    OpaqueValue,
    StaleTxidError,
    Sum,
    TransactionalMap,
    TransactionalValue,
)
from trident_assets.backends.memory import MemoryBackingMap
from trident_assets.core.aggregators import ReducerAggregator, apply_combiner, apply_reducer
from trident_assets_tests.memory_meta import CountingBackingMap


def single_get(state, key):
    return state.multi_get([(key,)])[0]


def single_update(state, key, amount):
    return state.multi_update([(key,)], [CombinerValueUpdater(Sum(), amount)])[0]


def test_opaque_map_storm_sequence() -> None:
    backing = MemoryBackingMap()
    state = OpaqueMap(backing)
    state.begin_commit(1)
    assert single_get(state, "a") is None
    assert single_update(state, "a", 1) == 1
    assert single_get(state, "a") == 1, "a key written in this batch reads its new value"
    assert single_update(state, "a", 2) == 3
    assert single_get(state, "a") == 3
    state.commit(1)
    state.begin_commit(1)
    assert single_get(state, "a") is None, "a replay of txid 1 sees the value before txid 1"
    assert single_update(state, "a", 2) == 2, "the replay recomputes from prev"
    state.commit(1)
    state.begin_commit(2)
    assert single_get(state, "a") == 2
    assert single_update(state, "a", 3) == 5
    assert single_update(state, "a", 1) == 6
    state.commit(2)
    assert backing.data == {("a",): OpaqueValue(2, 6, 2)}


def test_transactional_map_storm_sequence() -> None:
    backing = MemoryBackingMap()
    state = TransactionalMap(backing)
    state.begin_commit(1)
    assert single_get(state, "a") is None
    assert single_update(state, "a", 1) == 1
    assert single_update(state, "a", 2) == 3
    state.commit(1)
    state.begin_commit(1)
    assert single_get(state, "a") == 3
    assert single_update(state, "a", 1) == 3, "txid 1 is already applied: skipped"
    assert single_update(state, "a", 2) == 3, "skipped keys are not cached, so still skipped"
    state.commit(1)
    state.begin_commit(2)
    assert single_get(state, "a") == 3
    assert single_update(state, "a", 3) == 6
    assert single_get(state, "a") == 6
    assert single_update(state, "a", 1) == 7
    state.commit(2)
    assert backing.data == {("a",): TransactionalValue(2, 7)}


def test_non_transactional_map_double_counts_a_replay() -> None:
    state = NonTransactionalMap(MemoryBackingMap())
    for _ in range(2):
        state.begin_commit(1)
        single_update(state, "a", 5)
        state.commit(1)
    assert single_get(state, "a") == 10, "non-transactional state counts a replay twice"


def test_seed_transactional_man_dog_apple_under_txid_3() -> None:
    backing = MemoryBackingMap()
    backing.data = {
        ("man",): TransactionalValue(1, 3),
        ("dog",): TransactionalValue(3, 4),
        ("apple",): TransactionalValue(2, 10),
    }
    state = TransactionalMap(backing)
    state.begin_commit(3)
    new = apply_combiner(state, Count(), [("man",), ("dog",)], [2, 1])
    state.commit(3)
    assert new == [5, 4]
    assert backing.data == {
        ("man",): TransactionalValue(3, 5),
        ("dog",): TransactionalValue(3, 4),
        ("apple",): TransactionalValue(2, 10),
    }


def test_seed_opaque_partial_2_under_txid_3_then_2() -> None:
    for txid, expected in [(3, OpaqueValue(3, 6, 4)), (2, OpaqueValue(2, 3, 1))]:
        backing = MemoryBackingMap()
        backing.data = {("k",): OpaqueValue(2, 4, 1)}
        state = OpaqueMap(backing)
        state.begin_commit(txid)
        apply_combiner(state, Count(), [("k",)], [2])
        state.commit(txid)
        assert backing.data[("k",)] == expected


def test_opaque_reemission_with_different_content_counts_once() -> None:
    backing = MemoryBackingMap()
    state = OpaqueMap(backing)
    state.begin_commit(1)
    apply_combiner(state, Count(), [("the",)], [4])
    state.commit(1)
    state.begin_commit(2)
    apply_combiner(state, Count(), [("the",), ("cat",)], [3, 1])  # failed attempt, not final
    state.begin_commit(2)
    apply_combiner(state, Count(), [("the",), ("dog",)], [5, 2])  # the replay reads other data
    state.commit(2)
    assert state.multi_get([("the",), ("cat",), ("dog",)]) == [9, 1, 2]
    assert backing.data[("the",)] == OpaqueValue(2, 9, 4)
    assert backing.data[("cat",)] == OpaqueValue(2, 1, None), (
        "a key touched only by the failed attempt keeps its residue (Trident's documented caveat)"
    )


def test_opaque_map_refuses_a_batch_behind_the_state() -> None:
    backing = MemoryBackingMap()
    backing.data = {("a",): OpaqueValue(5, 1)}
    state = OpaqueMap(backing)
    state.begin_commit(4)
    with pytest.raises(StaleTxidError, match=r"Current batch \(4\) is behind"):
        single_update(state, "a", 1)
    assert backing.data == {("a",): OpaqueValue(5, 1)}, "nothing written"


def test_transactional_map_applies_when_stored_txid_is_ahead() -> None:
    backing = MemoryBackingMap()
    backing.data = {("a",): TransactionalValue(5, 1)}
    state = TransactionalMap(backing)
    state.begin_commit(4)
    assert single_update(state, "a", 1) == 2, "Trident: no behind check, txid regresses"
    assert backing.data[("a",)] == TransactionalValue(4, 2)


def test_duplicate_keys_in_one_update_last_write_wins() -> None:
    for wrapper in (OpaqueMap, TransactionalMap, NonTransactionalMap):
        backing = MemoryBackingMap()
        state = wrapper(backing)
        state.begin_commit(1)
        out = state.multi_update(
            [("a",), ("a",)], [CombinerValueUpdater(Sum(), 1), CombinerValueUpdater(Sum(), 2)]
        )
        state.commit(1)
        assert out == [1, 2], f"{wrapper.__name__}: both entries see the same stored value"
        assert state.multi_get([("a",)]) == [2], f"{wrapper.__name__}: last write wins"


def test_null_txid_batches() -> None:
    opaque_backing = MemoryBackingMap()
    opaque = OpaqueMap(opaque_backing)
    for _ in range(2):
        opaque.begin_commit(None)
        single_update(opaque, "a", 1)
        opaque.commit(None)
    assert opaque_backing.data[("a",)] == OpaqueValue(None, 2, 1), "null txid never dedups"
    tx_backing = MemoryBackingMap()
    tx = TransactionalMap(tx_backing)
    for _ in range(2):
        tx.begin_commit(None)
        single_update(tx, "a", 1)
        tx.commit(None)
    assert tx_backing.data[("a",)] == TransactionalValue(None, 2)


def test_multi_put_semantics() -> None:
    backing = MemoryBackingMap()
    opaque = OpaqueMap(backing)
    opaque.begin_commit(1)
    opaque.multi_put([("a",), ("b",)], [10, 20])
    opaque.commit(1)
    assert backing.data == {("a",): OpaqueValue(1, 10), ("b",): OpaqueValue(1, 20)}
    tbacking = MemoryBackingMap()
    tbacking.data = {("a",): TransactionalValue(3, 1)}
    tx = TransactionalMap(tbacking)
    tx.begin_commit(3)
    tx.multi_put([("a",)], [99])
    tx.commit(3)
    assert tbacking.data == {("a",): TransactionalValue(3, 99)}, "multi_put never skips"


def test_one_backing_call_per_update_and_only_changed_keys_written() -> None:
    backing = CountingBackingMap()
    backing.data = {("x",): TransactionalValue(2, 1)}
    state = TransactionalMap(backing)
    state.begin_commit(2)
    apply_combiner(state, Count(), [("x",), ("y",)], [1, 1])
    state.commit(2)
    assert (backing.get_calls, backing.put_calls) == (1, 1)
    assert backing.data == {("x",): TransactionalValue(2, 1), ("y",): TransactionalValue(2, 1)}
    state.begin_commit(2)
    apply_combiner(state, Count(), [("x",), ("y",)], [1, 1])
    state.commit(2)
    assert (backing.get_calls, backing.put_calls) == (2, 1), "a full replay writes nothing"


class Concat(ReducerAggregator[str]):
    def init(self) -> str:
        return ""

    def reduce(self, acc: str, values: tuple) -> str:
        return acc + values[0]


def test_reducer_groups_by_key_with_one_update() -> None:
    backing = CountingBackingMap()
    state = OpaqueMap(backing)
    state.begin_commit(1)
    keys, new = apply_reducer(state, Concat(), [("a",), ("b",), ("a",)], [("x",), ("y",), ("z",)])
    state.commit(1)
    assert keys == [("a",), ("b",)]
    assert new == ["xz", "y"]
    assert backing.get_calls == 1
    assert backing.put_calls == 1

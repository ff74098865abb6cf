"""Built-in aggregators, value updaters and the global state updaters."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from trident_assets import (
    CombinerValueUpdater,
    Count,
    Max,
    Min,
    OpaqueMap,
    ReducerValueUpdater,
    SnapshottableMap,
    Sum,
)
from trident_assets.backends.memory import MemoryBackingMap
from trident_assets.core.aggregators import (
    ReducerAggregator,
)


def apply_combiner_global(state: Any, agg: Any, partials: Sequence[Any]) -> Any:
    """The model of a global combiner state: a batch's partials (``zero()`` for an empty
    batch) combined into its value."""
    total = agg.zero()
    for p in partials:
        total = agg.combine(total, p)
    return state.update(CombinerValueUpdater(agg, total))


def apply_reducer_global(state: Any, agg: Any, tuples: Sequence[tuple[Any, ...]]) -> Any:
    """The model of a global reducer state: a batch's tuples reduced into its value."""
    return state.update(ReducerValueUpdater(agg, tuples))


def test_count_and_sum() -> None:
    assert Count().init(("x",)) == 1
    assert Count().combine(2, 3) == 5
    assert Count().zero() == 0
    assert Sum().init((4,)) == 4
    assert Sum().combine(1, 2.5) == 3.5
    assert Sum().combine(Decimal("1.1"), Decimal("2.2")) == Decimal("3.3")
    assert Sum().init((None,)) == 0  # a null adds nothing, whatever else the batch holds
    assert (Count.sql_combine, Sum.sql_combine, Min.sql_combine, Max.sql_combine) == (
        "sum",
        "sum",
        "min",
        "max",
    )


def test_min_max_skip_nulls() -> None:
    assert Min().combine(3, 1) == 1
    assert Min().combine(None, 2) == 2
    assert Min().combine(2, None) == 2
    assert Max().combine(3, 1) == 3
    assert Max().combine(None, None) is None
    assert Max().zero() is None


def test_combiner_value_updater_takes_arg_when_absent() -> None:
    assert CombinerValueUpdater(Count(), 3)(None) == 3
    assert CombinerValueUpdater(Count(), 3)(4) == 7


class Collect(ReducerAggregator[list]):
    def init(self) -> list:
        return []

    def reduce(self, acc: list, values: tuple) -> list:
        return [*acc, values[0]]


def test_reducer_value_updater() -> None:
    assert ReducerValueUpdater(Collect(), [("a",), ("b",)])(None) == ["a", "b"]
    assert ReducerValueUpdater(Collect(), [("c",)])(["a"]) == ["a", "c"]


def test_global_combiner_writes_zero_for_an_empty_batch() -> None:
    backing = MemoryBackingMap()
    snap = SnapshottableMap(OpaqueMap(backing))
    snap.begin_commit(1)
    assert apply_combiner_global(snap, Count(), [2, 3]) == 5
    snap.commit(1)
    snap.begin_commit(2)
    assert apply_combiner_global(snap, Count(), []) == 5, "empty batch combines zero()"
    snap.commit(2)
    assert len(backing.data) == 1
    assert next(iter(backing.data.values())).curr_txid == 2, "the empty batch was still written"


def test_global_reducer() -> None:
    snap = SnapshottableMap(OpaqueMap(MemoryBackingMap()))
    snap.begin_commit(1)
    assert apply_reducer_global(snap, Collect(), [("a",), ("b",)]) == ["a", "b"]
    snap.commit(1)


def test_sum_skips_nulls_the_same_alone_or_mixed() -> None:
    sum_ = Sum()

    def batch(values: list) -> object:
        total = sum_.zero()
        for v in values:
            total = sum_.combine(total, sum_.init((v,)))
        return total

    assert batch([5, None]) == 5
    assert batch([None]) == 0
    assert batch([None, None]) == 0
    assert batch([None, 2.5]) == 2.5
    assert CombinerValueUpdater(sum_, batch([None]))(7) == 7
    assert CombinerValueUpdater(sum_, batch([None]))(None) == 0

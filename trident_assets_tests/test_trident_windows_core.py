"""The window rules in the pure core: Storm's documented count and duration windows, exactly."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from trident_assets.core.aggregators import Count, ReducerAggregator, Sum
from trident_assets.core.trident_windows import (
    SlidingCountWindow,
    SlidingDurationWindow,
    TridentWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    count_keep_from,
    count_windows_fired,
    duration_candidates,
)
from trident_assets.errors import ConfigError, StaleTxidError
from trident_assets_tests.window_model import WindowModel


class Concat(ReducerAggregator[str]):
    """Joins the values in window order (shows the order a window holds its tuples in)."""

    output_type = "string"

    def init(self) -> str:
        return ""

    def reduce(self, acc: str, values: tuple[Any, ...]) -> str:
        return f"{acc}{values[0]}"


def batches(sizes: list[int]) -> list[list[tuple[int]]]:
    """Consecutive numbers 1, 2, 3... cut into batches of ``sizes``."""
    out, n = [], 0
    for size in sizes:
        out.append([(n + i + 1,) for i in range(size)])
        n += size
    return out


def run(model: WindowModel, txs: list[list[tuple[Any, ...]]], times: list[int] | None = None):
    """Per txid: ``[(tuples, value), ...]`` of the windows that fired."""
    fired = []
    for i, tuples in enumerate(txs):
        got = model.add_batch(i + 1, tuples, 0 if times is None else times[i])
        fired.append([(tuple(v[0] for v in w.tuples), w.value) for w in got])
    return fired


def test_tumbling_count_three_over_batches_of_2_4_1_5() -> None:
    model = WindowModel(TridentWindow(TumblingCountWindow(3), ("n",), Sum(), "total"))
    assert run(model, batches([2, 4, 1, 5])) == [
        [],
        [((1, 2, 3), 6), ((4, 5, 6), 15)],
        [],
        [((7, 8, 9), 24), ((10, 11, 12), 33)],
    ]
    assert model.held == []  # every window fired: nothing kept


def test_sliding_count_four_every_two() -> None:
    """Storm's CountTriggerPolicy(2) + CountEvictionPolicy(4): the first window holds 2."""
    model = WindowModel(TridentWindow(SlidingCountWindow(4, 2), ("n",), Concat(), "s"))
    assert run(model, batches([2, 4, 1, 5])) == [
        [((1, 2), "12")],
        [((1, 2, 3, 4), "1234"), ((3, 4, 5, 6), "3456")],
        [],
        [((5, 6, 7, 8), "5678"), ((7, 8, 9, 10), "78910"), ((9, 10, 11, 12), "9101112")],
    ]
    assert [h[0] for h in model.held] == [11, 12]  # the next window (13..14 -> 11..14)


def test_count_window_arithmetic() -> None:
    assert count_windows_fired(4, 2, 0, 1) == []
    assert count_windows_fired(4, 2, 1, 7) == [(1, 1, 2), (2, 1, 4), (3, 3, 6)]
    assert count_windows_fired(3, 3, 2, 6) == [(1, 1, 3), (2, 4, 6)]
    assert count_keep_from(4, 2, 7) == 5  # next window ends at 8: holds 5..8
    assert count_keep_from(3, 3, 6) == 7


TIMES = [1000, 4000, 12000, 13000, 35000, 36000, 41000]
"""The recorded time (ms) of txids 1..7."""
LETTERS = [["a"], ["b", "c"], ["d"], ["e"], ["f"], [], ["g"]]


def test_tumbling_duration_ten_seconds() -> None:
    model = WindowModel(TridentWindow(TumblingDurationWindow(10), ("w",), Count(), "n"))
    txs = [[(x,) for x in xs] for xs in LETTERS]
    assert run(model, txs, TIMES) == [
        [],
        [],
        [(("a", "b", "c"), 3)],  # [0 s, 10 s) fires in the first txid at or after 10 s
        [],
        [(("d", "e"), 2)],  # [10 s, 20 s); [20 s, 30 s) is empty: it never fires
        [],
        [(("f",), 1)],  # [30 s, 40 s)
    ]


def test_sliding_duration_ten_seconds_every_five() -> None:
    model = WindowModel(
        TridentWindow(SlidingDurationWindow(timedelta(seconds=10), 5), ("w",), Count(), "n")
    )
    txs = [[(x,) for x in xs] for xs in LETTERS]
    assert run(model, txs, TIMES) == [
        [],
        [],
        [(("a", "b", "c"), 3), (("a", "b", "c"), 3)],  # [-5, 5) and [0, 10)
        [],
        [(("d", "e"), 2), (("d", "e"), 2)],  # [5, 15) and [10, 20)
        [],
        [(("f",), 1)],  # [30, 40); [35, 45) fires at 45 s
    ]
    assert [v for _, _, v in model.held] == [("f",), ("g",)]


def test_duration_times_never_go_back() -> None:
    """A txid stamped earlier than the previous one takes the previous one's time."""
    model = WindowModel(TridentWindow(TumblingDurationWindow(1), ("w",), Count(), "n"))
    model.add_batch(1, [("a",)], 1500)
    assert model.add_batch(2, [("b",)], 900) == []
    assert model.prev_time == 1500
    fired = model.add_batch(3, [], 2000)
    assert [(w.start, w.end, w.value) for w in fired] == [(1000, 2000, 2)]


def test_duration_candidates_are_bounded_by_the_window() -> None:
    """After a long pause only windows that can hold an earlier tuple are looked at."""
    assert duration_candidates(10_000, 5_000, None, 50_000) == []
    assert duration_candidates(10_000, 5_000, 1_000, 10**12) == [(-5000, 5000), (0, 10000)]


def test_a_replayed_txid_is_refused() -> None:
    model = WindowModel(TridentWindow(TumblingCountWindow(2), ("n",), Sum(), "t"))
    model.add_batch(1, [(1,), (2,)])
    with pytest.raises(StaleTxidError, match="txid 1 is not after the last applied txid 1"):
        model.add_batch(1, [(1,), (2,)])


def test_the_store_stays_bounded() -> None:
    model = WindowModel(TridentWindow(SlidingCountWindow(5, 2), ("n",), Sum(), "t"))
    for txid in range(1, 41):
        model.add_batch(txid, [(txid,)] * 3)
        assert len(model.held) <= 5
    dur = WindowModel(TridentWindow(SlidingDurationWindow(10, 5), ("n",), Sum(), "t"))
    for txid in range(1, 41):
        dur.add_batch(txid, [(1,)] * 3, txid * 2000)
        assert len(dur.held) <= 15  # the txids of the last 10 s


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TumblingCountWindow(0), "TumblingCountWindow count must be an integer >= 1"),
        (lambda: SlidingCountWindow(3, 0), "SlidingCountWindow slide must be an integer >= 1"),
        (
            lambda: SlidingCountWindow(2, 3),
            r"SlidingCountWindow: the slide \(3 tuples\) must not be larger than the window "
            r"\(2 tuples\)",
        ),
        (lambda: TumblingCountWindow(True), "must be an integer >= 1, got True"),
        (lambda: TumblingDurationWindow(0), "TumblingDurationWindow duration must be positive"),
        (lambda: TumblingDurationWindow("5s"), "must be a timedelta or a number of seconds"),
        (lambda: TumblingDurationWindow(0.0001), "must be at least one millisecond"),
        (
            lambda: SlidingDurationWindow(5, 10),
            r"the slide \(10000 ms\) must not be larger than the window \(5000 ms\)",
        ),
    ],
)
def test_bad_configs_are_refused(make: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_the_contract_description_names_the_config() -> None:
    desc = TridentWindow(SlidingCountWindow(4, 2), ("n",), Sum(), "t").describe()
    assert desc["aggregator"] == "trident_assets.core.trident_windows.TridentWindow"
    assert desc["aggregator_params"]["window"] == "SlidingCountWindow(size=4, slide=2)"
    assert desc["aggregator_params"]["aggregator"] == "trident_assets.core.aggregators.Sum()"

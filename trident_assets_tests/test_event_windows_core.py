"""The pure core of event-time windows: durations, assignment, emission and lateness rules."""

from __future__ import annotations

from datetime import timedelta

import pytest

from trident_assets.core.event_windows import EventWindow, parse_duration
from trident_assets.errors import ConfigError
from trident_assets_tests.event_window_model import (
    is_final,
    reference_windows,
    sessionize,
    window_starts,
)

S = 1_000_000
M = 60 * S


def test_durations_parse_strictly() -> None:
    assert parse_duration("10 minutes", "size") == 10 * M
    assert parse_duration("500 ms", "size") == 500_000
    assert parse_duration("1h", "size") == 60 * M
    assert parse_duration(timedelta(seconds=90), "size") == 90 * S
    assert parse_duration("0 s", "allowed_lateness", allow_zero=True) == 0
    with pytest.raises(ConfigError, match=r"size: cannot read duration '10 mins'; give a "):
        parse_duration("10 mins", "size")
    with pytest.raises(ConfigError, match=r"cannot read duration '1.5 s'"):
        parse_duration("1.5 s", "size")
    with pytest.raises(ConfigError, match=r"size: expected a duration, got 10; give"):
        parse_duration(10, "size")
    with pytest.raises(ConfigError, match=r"size: duration '0 s' must be more than zero"):
        parse_duration("0 s", "size")
    with pytest.raises(ConfigError, match=r"must be zero or more"):
        parse_duration(timedelta(seconds=-1), "allowed_lateness", allow_zero=True)


def test_declarations_are_checked() -> None:
    w = EventWindow.sliding("10 s", "5 s", time_field="ts", allowed_lateness="2 s")
    assert (w.kind, w.size_us, w.slide_us, w.lateness_us) == ("sliding", 10 * S, 5 * S, 2 * S)
    with pytest.raises(ConfigError, match=r"slide 20 s is longer than size 10 s"):
        EventWindow.sliding("10 s", "20 s", time_field="ts")
    with pytest.raises(ConfigError, match=r"time_unit must be one of 'timestamp', 'ms', 's'"):
        EventWindow.tumbling("10 s", time_field="ts", time_unit="minutes")
    with pytest.raises(ConfigError, match=r"size 1500 ms is not a whole number of s"):
        EventWindow.tumbling("1500 ms", time_field="ts", time_unit="s")
    assert EventWindow.session("30 s", time_field="ts").describe() == {
        "kind": "session",
        "time_field": "ts",
        "time_unit": "timestamp",
        "gap_us": str(30 * S),
        "allowed_lateness_us": "0",
    }
    assert EventWindow.tumbling("1 s", time_field="t", time_unit="ms").to_micros(1500) == 1_500_000


def test_window_assignment() -> None:
    assert window_starts(7, 10, 10) == [0]
    assert window_starts(10, 10, 10) == [10]
    assert window_starts(-1, 10, 10) == [-10]
    assert window_starts(7, 10, 5) == [0, 5]
    assert window_starts(5, 10, 5) == [0, 5]
    assert window_starts(4, 10, 5) == [-5, 0]
    assert window_starts(7, 10, 3) == [0, 3, 6]
    assert not is_final(10, None)
    assert is_final(10, 10)
    assert not is_final(11, 10)
    add = lambda a, b: a + b  # noqa: E731
    assert sessionize([(0, 10, 1), (5, 15, 1), (15, 25, 1), (40, 50, 1)], add) == [
        (0, 15, 2),
        (15, 25, 1),
        (40, 50, 1),
    ]
    assert sessionize([(20, 30, 1), (0, 10, 1), (9, 19, 1)], add) == [(0, 19, 2), (20, 30, 1)]


def test_reference_tumbling_lateness_and_emission() -> None:
    w = EventWindow.tumbling("10 s", time_field="ts", allowed_lateness="5 s")
    batches = [
        [("a", 1 * S, None), ("a", 12 * S, None)],  # max 12 -> wm 7
        [("a", 3 * S, None), ("b", 16 * S, None)],  # 3 in [0,10), 10 > 7: added; wm 11
        [("a", 4 * S, None), ("a", 25 * S, None)],  # [0,10) final at 11: 4 is late; wm 20
    ]
    ref = reference_windows(w, batches)
    assert ref.watermarks == [7 * S, 11 * S, 20 * S]
    assert ref.late == [(3, "a", 4 * S)]
    assert ref.finals == [
        ("a", 0, 10 * S, 2, 2),
        ("a", 10 * S, 20 * S, 1, 3),
        ("b", 10 * S, 20 * S, 1, 3),
    ]
    assert ref.open == [("a", 20 * S, 30 * S, 1)]


def test_reference_sliding_partly_late_record() -> None:
    w = EventWindow.sliding("10 s", "5 s", time_field="ts")
    # txid 1: max 11 -> wm 11: [0,10) final. txid 2: t=7 is in [0,10) (final) and [5,15)
    # (open): added to [5,15) only, not a late record. t=2 in [-5,5) and [0,10): late.
    ref = reference_windows(
        w, [[("k", 1 * S, None), ("k", 11 * S, None)], [("k", 7 * S, None), ("k", 2 * S, None)]]
    )
    assert ref.late == [(2, "k", 2 * S)]
    assert ref.finals == [("k", -5 * S, 5 * S, 1, 1), ("k", 0, 10 * S, 1, 1)]
    assert ref.open == [("k", 5 * S, 15 * S, 2), ("k", 10 * S, 20 * S, 1)]


def test_reference_sessions_merge_across_txids() -> None:
    w = EventWindow.session("10 s", time_field="ts", allowed_lateness="30 s")
    ref = reference_windows(
        w,
        [
            [("u", 0, None), ("u", 25 * S, None)],  # two sessions [0,10) [25,35)
            [("u", 8 * S, None), ("u", 17 * S, None)],  # bridges them: [0, 35)
            [("u", 100 * S, None)],  # wm 70: [0,35) final
        ],
    )
    assert ref.finals == [("u", 0, 35 * S, 4, 3)]
    assert ref.open == [("u", 100 * S, 110 * S, 1)]
    late = reference_windows(
        w, [[("u", 100 * S, None)], [("u", 69 * S, None), ("u", 70 * S, None)]]
    )
    assert late.late == [(2, "u", 69 * S)]

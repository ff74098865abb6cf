"""ExponentialBackoff: Storm's KafkaSpoutRetryExponentialBackoff formula, exact values."""

from __future__ import annotations

import dataclasses
import math

import pytest

from trident_assets.core.retry import ExponentialBackoff
from trident_assets.errors import ConfigError


def next_attempt_at(b: ExponentialBackoff, num_fails: int, now: float) -> float | None:
    """The time of the next attempt after failure ``num_fails`` at ``now``; None: give up.

    The message is ready for retry at any time ``>= now + delay(num_fails)``; once the retries
    are used up (``should_retry`` is False) the caller gives up, as Storm acks the message.
    """
    if not b.should_retry(num_fails):
        return None
    return now + b.delay(num_fails)


def test_defaults_are_storms_default_retry_service() -> None:
    b = ExponentialBackoff()
    assert (b.initial_delay_s, b.delay_period_s, b.max_retries, b.max_delay_s) == (
        0.0,
        0.002,
        None,
        10.0,
    )
    assert [b.delay(n) for n in range(1, 6)] == [0.0, 0.004, 0.008, 0.016, 0.032]
    assert b.delay(13) == 8.192
    assert b.delay(14) == 10.0  # 16.384 capped
    assert b.delay(100) == 10.0
    assert b.should_retry(10**9)  # unlimited


def test_storm_test_expects_four_seconds_times_two_to_the_n_minus_one() -> None:
    # KafkaSpoutRetryExponentialBackoffTest.testExponentialBackoff: (0s, 4s, MAX, MAX) -> 8, 16, 32
    b = ExponentialBackoff(0.0, 4.0, 2**31 - 1, float(2**31 - 1))
    assert [b.delay(n) for n in (2, 3, 4)] == [8.0, 16.0, 32.0]
    now = 1000.0
    for n, expected in ((2, 8.0), (3, 16.0), (4, 32.0)):
        ready_at = next_attempt_at(b, n, now)
        assert ready_at == now + expected
        assert now + expected - 1 < ready_at  # not ready one second early
        now = ready_at


def test_first_failure_uses_the_initial_delay_and_is_capped_too() -> None:
    # testMaxDelay: initial 500 s, max delay 2 s -> ready after 2 s
    b = ExponentialBackoff(500.0, 0.0, 1, 2.0)
    assert b.delay(1) == 2.0
    assert next_attempt_at(b, 1, 10.0) == 12.0
    assert ExponentialBackoff(1.0, 0.0, 1, 1.0).delay(1) == 1.0
    assert ExponentialBackoff(0.25, 3.0, None, 100.0).delay(1) == 0.25


def test_period_zero_means_immediate_retries_after_the_first() -> None:
    b = ExponentialBackoff(5.0, 0.0, None, 10.0)
    assert [b.delay(n) for n in (1, 2, 3, 50)] == [5.0, 0.0, 0.0, 0.0]


def test_cap_holds_for_huge_failure_counts_without_overflow() -> None:
    b = ExponentialBackoff(0.0, 1.0, None, 60.0)
    assert [b.delay(n) for n in (6, 7, 8)] == [32.0, 60.0, 60.0]
    assert b.delay(2000) == 60.0
    assert b.delay(10**12) == 60.0
    tiny = ExponentialBackoff(0.0, 5e-324, None, 1e300)
    assert tiny.delay(2000) == 2.0**925  # 2**-1074 * 2**1999, exact
    assert tiny.delay(3000) == 1e300


def test_max_retries_gives_up_after_the_limit() -> None:
    # testMaxRetries: maxRetries 3 -> the 3rd failure is retried, the 4th is not
    b = ExponentialBackoff(0.0, 0.0, 3, 0.0)
    assert [b.should_retry(n) for n in (1, 2, 3, 4, 5)] == [True, True, True, False, False]
    assert next_attempt_at(b, 3, 7.0) == 7.0
    assert next_attempt_at(b, 4, 7.0) is None
    assert b.delay(4) == 0.0  # the delay itself ignores max_retries


def test_zero_retries_never_retries() -> None:
    b = ExponentialBackoff(max_retries=0)
    assert not b.should_retry(1)
    assert next_attempt_at(b, 1, 0.0) is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"initial_delay_s": -1.0}, "initial_delay_s must be a finite number of seconds >= 0"),
        ({"delay_period_s": math.nan}, "delay_period_s must be"),
        ({"max_delay_s": math.inf}, "max_delay_s must be"),
        ({"max_delay_s": True}, "max_delay_s must be"),
        ({"initial_delay_s": "1"}, "initial_delay_s must be"),
        ({"max_retries": -1}, "max_retries must be None"),
        ({"max_retries": True}, "max_retries must be None"),
        ({"max_retries": 2.0}, "max_retries must be None"),
    ],
)
def test_invalid_settings_raise_config_error(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ExponentialBackoff(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, True, 1.0])
def test_failure_numbers_count_from_one(bad: object) -> None:
    b = ExponentialBackoff()
    with pytest.raises(ConfigError, match="num_fails counts failures from 1"):
        b.delay(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="num_fails counts failures from 1"):
        b.should_retry(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="num_fails counts failures from 1"):
        next_attempt_at(b, bad, 0.0)  # type: ignore[arg-type]


def test_integer_settings_are_accepted_and_delays_are_floats() -> None:
    b = ExponentialBackoff(1, 2, 5, 100)
    assert b.delay(1) == 1.0
    assert isinstance(b.delay(1), float)
    assert b.delay(3) == 8.0
    assert isinstance(b.delay(3), float)


def test_backoff_is_immutable_and_comparable() -> None:
    b = ExponentialBackoff(0.0, 4.0, 3, 10.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.max_retries = 5  # type: ignore[misc]
    assert b == ExponentialBackoff(0.0, 4.0, 3, 10.0)
    assert b != ExponentialBackoff(0.0, 4.0, None, 10.0)

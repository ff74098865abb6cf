"""RotatingMap, TimeCacheMap (clock-driven), BatchExpiry and EventTimeExpiry: exact expiry rules."""

from __future__ import annotations

import math
import random
import threading

import pytest

from trident_assets.core.rotating import (
    BatchExpiry,
    EventTimeExpiry,
    RotatingMap,
    TimeCacheMap,
)
from trident_assets.errors import ConfigError


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------------- RotatingMap


@pytest.mark.parametrize("bad", [1, 0, -3, True, 2.0, "3"])
def test_rotating_map_rejects_fewer_than_two_buckets(bad: object) -> None:
    with pytest.raises(ConfigError, match="num_buckets must be >= 2"):
        RotatingMap(bad)  # type: ignore[arg-type]


def test_rotating_map_default_is_three_buckets() -> None:
    m: RotatingMap[str, int] = RotatingMap()
    assert m.num_buckets == 3
    m.put("a", 1)
    assert m.rotate() == {}
    assert m.rotate() == {}
    assert m.rotate() == {"a": 1}
    assert m.size() == 0


@pytest.mark.parametrize("buckets", [2, 3, 4, 7])
def test_entry_expires_on_the_num_buckets_th_rotation_after_put(buckets: int) -> None:
    m: RotatingMap[str, int] = RotatingMap(buckets)
    m.put("k", 9)
    for _ in range(buckets - 1):
        assert m.rotate() == {}
        assert m.get("k") == 9
    assert m.rotate() == {"k": 9}
    assert "k" not in m
    assert m.get("k") is None


def test_put_moves_the_key_to_the_newest_bucket_and_refreshes_it() -> None:
    m: RotatingMap[str, int] = RotatingMap(3)
    m.put("a", 1)
    m.rotate()
    m.rotate()
    m.put("a", 2)  # leaves the oldest bucket
    assert m.size() == 1
    assert m.rotate() == {}  # the old bucket would have held "a"
    assert m.rotate() == {}
    assert m.get("a") == 2
    assert m.rotate() == {"a": 2}


def test_get_contains_and_remove_do_not_refresh() -> None:
    m: RotatingMap[str, int] = RotatingMap(3)
    m.put("a", 1)
    m.put("b", 2)
    m.rotate()
    assert m.get("a") == 1
    assert m.contains("a")
    assert "b" in m
    m.rotate()
    assert m.get("missing", -1) == -1
    assert m.remove("b") == 2
    assert m.remove("b") is None
    assert m.rotate() == {"a": 1}  # the third rotation after the put, despite the reads
    assert len(m) == 0


def test_rotate_calls_on_expire_for_each_dropped_entry_in_insertion_order() -> None:
    seen: list[tuple[str, int]] = []
    m: RotatingMap[str, int] = RotatingMap(2, on_expire=lambda k, v: seen.append((k, v)))
    m.put("x", 1)
    m.put("y", 2)
    m.rotate()
    m.put("z", 3)
    assert seen == []
    assert m.size() == 3
    assert m.rotate() == {"x": 1, "y": 2}
    assert seen == [("x", 1), ("y", 2)]
    assert m.rotate() == {"z": 3}
    assert seen == [("x", 1), ("y", 2), ("z", 3)]
    assert m.rotate() == {}


def test_none_is_a_storable_value() -> None:
    m: RotatingMap[str, None] = RotatingMap(2)
    m.put("n", None)
    assert "n" in m
    assert m.get("n", 5) is None  # stored None, not the default
    assert m.size() == 1


# -------------------------------------------------------------------------------- TimeCacheMap


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True, "5"])
def test_time_cache_map_rejects_bad_expiration(bad: object) -> None:
    with pytest.raises(ConfigError, match="expiration_s must be a finite number of seconds > 0"):
        TimeCacheMap(bad)  # type: ignore[arg-type]


def test_time_cache_map_rejects_one_bucket() -> None:
    with pytest.raises(ConfigError, match="num_buckets must be >= 2"):
        TimeCacheMap(10.0, 1)


def test_time_cache_map_rotation_period_and_default_clock() -> None:
    m: TimeCacheMap[str, int] = TimeCacheMap(30)
    assert m.num_buckets == 3
    assert m.rotation_period_s == 15.0
    m.put("a", 1)
    assert m.get("a") == 1
    assert len(m) == 1


def test_expiry_window_bounds_with_three_buckets() -> None:
    # E = 2 s, B = 3: rotations every 1 s at 101, 102, 103, ... (the map starts at 100).
    clock = FakeClock(100.0)
    m: TimeCacheMap[str, str] = TimeCacheMap(2.0, 3, clock=clock)

    clock.now = 100.0  # right after a rotation point: the longest life, E*B/(B-1) = 3 s
    m.put("early", "e")
    clock.now = 100.75  # just before the next rotation: the shortest life, just over E
    m.put("late", "l")

    clock.now = 102.75  # age of "late" == E exactly: still present
    assert m.get("late") == "l"
    clock.now = 102.999
    assert m.contains("early")
    assert m.contains("late")
    assert m.rotations == 2

    clock.now = 103.0  # rotation 3 drops both: "late" at age 2.25, "early" at age 3.0 = 1.5*E
    assert m.get("late") is None
    assert "early" not in m
    assert m.rotations == 3


def test_a_put_exactly_on_a_rotation_time_lands_after_that_rotation() -> None:
    clock = FakeClock(0.0)
    m: TimeCacheMap[str, int] = TimeCacheMap(2.0, 3, clock=clock)
    clock.now = 1.0  # rotation 1 is due now and is performed before the put
    m.put("k", 1)
    clock.now = 3.999
    assert m.get("k") == 1
    clock.now = 4.0  # rotation 4 = the third after the put: age 3.0 = E*B/(B-1)
    assert m.get("k") is None


def test_re_put_restarts_the_age_but_get_does_not() -> None:
    clock = FakeClock(0.0)
    m: TimeCacheMap[str, int] = TimeCacheMap(1.0, 2, clock=clock)  # rotate every 1 s
    m.put("k", 1)
    clock.now = 1.5
    assert m.get("k") == 1  # no refresh
    clock.now = 2.0
    assert m.get("k") is None  # second rotation after the put at 0.0
    m.put("k", 2)
    clock.now = 3.5
    m.put("k", 3)  # refresh
    clock.now = 4.999
    assert m.get("k") == 3
    clock.now = 5.0
    assert m.get("k") is None


def test_on_expire_runs_once_per_entry_during_the_access_and_expire_due_returns_them() -> None:
    clock = FakeClock(0.0)
    expired: list[tuple[str, int]] = []
    m: TimeCacheMap[str, int] = TimeCacheMap(
        0.5, 3, on_expire=lambda k, v: expired.append((k, v)), clock=clock
    )
    m.put("a", 1)
    clock.now = 0.25
    m.put("b", 2)
    clock.now = 0.5
    m.put("c", 3)
    clock.now = 0.74
    assert m.expire_due() == {}
    clock.now = 0.75  # rotation 3: drops "a" (put before rotation 1)
    assert m.expire_due() == {"a": 1}
    assert expired == [("a", 1)]
    assert m.expire_due() == {}
    clock.now = 1.25  # rotations 4 and 5, caught up in order by one access
    assert m.size() == 0
    assert expired == [("a", 1), ("b", 2), ("c", 3)]
    assert m.rotations == 5


def test_a_long_pause_catches_up_every_rotation_without_looping_over_them() -> None:
    clock = FakeClock(0.0)
    m: TimeCacheMap[int, int] = TimeCacheMap(0.002, 3, clock=clock)
    m.put(1, 1)
    clock.now = 1_000_000.0
    assert m.expire_due() == {1: 1}
    assert m.rotations == 1_000_000_000
    m.put(2, 2)
    clock.now = 1_000_000.002
    assert m.get(2) == 2


def test_a_clock_going_backwards_rotates_nothing() -> None:
    clock = FakeClock(10.0)
    m: TimeCacheMap[str, int] = TimeCacheMap(1.0, 2, clock=clock)
    m.put("k", 1)
    clock.now = 5.0
    assert m.get("k") == 1
    assert m.rotations == 0
    clock.now = 12.0
    assert m.get("k") is None
    assert m.rotations == 2


def test_callback_may_reenter_the_map() -> None:
    clock = FakeClock(0.0)
    sizes: list[int] = []
    m: TimeCacheMap[str, int]

    def on_expire(key: str, value: int) -> None:
        sizes.append(m.size())
        m.put(key + "'", value)

    m = TimeCacheMap(1.0, 2, on_expire=on_expire, clock=clock)
    m.put("a", 1)
    clock.now = 2.0
    assert m.get("a") is None
    assert sizes == [0]
    assert m.get("a'") == 1


def test_time_cache_map_is_usable_from_threads() -> None:
    m: TimeCacheMap[int, int] = TimeCacheMap(60.0)

    def work(base: int) -> None:
        for i in range(500):
            m.put(base + i, i)

    threads = [threading.Thread(target=work, args=(n * 1000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.size() == 2000


@pytest.mark.parametrize(("expiration", "buckets"), [(1.0, 2), (2.0, 3), (3.0, 4), (0.5, 5)])
def test_randomized_window_matches_the_documented_bounds(expiration: float, buckets: int) -> None:
    rng = random.Random(7)
    clock = FakeClock(0.0)
    m: TimeCacheMap[int, float] = TimeCacheMap(expiration, buckets, clock=clock)
    longest = expiration * buckets / (buckets - 1)
    put_at: dict[int, float] = {}
    key = 0
    for _ in range(3000):
        clock.now += rng.randrange(0, 33) / 64  # dyadic steps: exact float arithmetic
        if rng.random() < 0.3:
            m.put(key, clock.now)
            put_at[key] = clock.now
            key += 1
        probe = rng.choice(list(put_at)) if put_at else None
        if probe is None:
            continue
        age = clock.now - put_at[probe]
        present = probe in m
        if age <= expiration:
            assert present, (probe, age)
        if age >= longest:
            assert not present, (probe, age)
        if not present:
            del put_at[probe]


# --------------------------------------------------------------------------------- BatchExpiry


@pytest.mark.parametrize(("timeout", "buckets"), [(0, 3), (-1, 3), (True, 3), (1.5, 3), (5, 1)])
def test_batch_expiry_rejects_bad_settings(timeout: object, buckets: int) -> None:
    with pytest.raises(ConfigError, match=r"timeout_batches must be|num_buckets must be >= 2"):
        BatchExpiry(timeout, buckets)  # type: ignore[arg-type]


def test_batch_expiry_exact_boundaries_for_ten_batches_three_buckets() -> None:
    e = BatchExpiry(10, 3)  # a rotation every 5 batches: at txids 5, 10, 15, ...
    assert [e.rotation(n) for n in (0, 4, 5, 9, 10, 14, 15)] == [0, 0, 1, 1, 2, 2, 3]
    # arrival just before a rotation: the shortest life, T + 1 batches
    assert e.expires_at(4) == 15
    assert not e.is_expired(4, 14)
    assert e.is_expired(4, 15)
    # arrival on a rotation: the longest life, T*B/(B-1) = 15 batches
    assert e.expires_at(5) == 20
    assert not e.is_expired(5, 19)
    assert e.is_expired(5, 20)
    assert e.expires_at(9) == 20
    assert e.expires_at(10) == 25
    assert e.last_expired_arrival(19) == 4
    assert e.last_expired_arrival(20) == 9
    assert e.last_expired_arrival(14) == -1  # nothing can be expired yet
    assert repr(e) == "BatchExpiry(10, 3)"


def test_batch_expiry_when_the_period_is_not_a_whole_number_of_batches() -> None:
    e = BatchExpiry(1, 3)  # two rotations per batch
    assert [e.rotation(n) for n in range(4)] == [0, 2, 4, 6]
    assert e.expires_at(1) == 3  # rotation 5 is due at 2.5, seen at the start of txid 3
    assert not e.is_expired(1, 2)
    e = BatchExpiry(5, 3)  # period 2.5 batches: rotations at 2.5, 5, 7.5, 10 -> txids 3, 5, 8, 10
    assert [e.rotation(n) for n in range(11)] == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4]
    assert e.expires_at(2) == 8
    assert e.expires_at(3) == 10


@pytest.mark.parametrize("timeout", range(1, 13))
@pytest.mark.parametrize("buckets", [2, 3, 4, 6])
def test_batch_expiry_invariants(timeout: int, buckets: int) -> None:
    e = BatchExpiry(timeout, buckets)
    longest = math.ceil(timeout * buckets / (buckets - 1))
    ages = set()
    for a in range(1, 60):
        first = e.expires_at(a)
        ages.add(first - a)
        assert timeout + 1 <= first - a <= longest
        for n in range(a, first + 3):
            assert e.is_expired(a, n) == (n >= first)
        for n in range(a, a + 3 * longest):
            assert e.is_expired(a, n) == (a <= e.last_expired_arrival(n))
    assert min(ages) == timeout + 1
    assert max(ages) == longest


@pytest.mark.parametrize(("timeout", "buckets"), [(4, 3), (5, 3), (6, 4), (1, 2), (2, 5)])
def test_batch_expiry_is_a_rotating_map_rotated_at_txid_boundaries(
    timeout: int, buckets: int
) -> None:
    e = BatchExpiry(timeout, buckets)
    m: RotatingMap[int, int] = RotatingMap(buckets)
    for n in range(1, 80):
        for _ in range(e.rotation(n) - e.rotation(n - 1)):
            m.rotate()
        for a in range(1, n):
            assert (a in m) == (not e.is_expired(a, n)), (a, n)
        m.put(n, n)


# ------------------------------------------------------------------------------ EventTimeExpiry


@pytest.mark.parametrize(("timeout", "buckets"), [(0.0, 3), (-2.0, 3), (math.inf, 3), (1.0, 1)])
def test_event_time_expiry_rejects_bad_settings(timeout: float, buckets: int) -> None:
    with pytest.raises(ConfigError, match=r"timeout_s must be|num_buckets must be >= 2"):
        EventTimeExpiry(timeout, buckets)


def test_event_time_expiry_exact_boundaries() -> None:
    e = EventTimeExpiry(3.0, 4)  # rotations every 1.0 s at 0, 1, 2, ...
    assert not e.is_expired(0.5, 3.5)  # age == timeout
    assert not e.is_expired(0.5, 3.999)
    assert e.is_expired(0.5, 4.0)  # age 3.5
    assert not e.is_expired(1.0, 4.999)
    assert e.is_expired(1.0, 5.0)  # age 4.0 = T*B/(B-1)
    assert e.expired_before(5.0) == 2.0
    assert e.is_expired(1.999, 5.0)
    assert not e.is_expired(2.0, 5.0)
    assert e.expired_before(-10.0) == -13.0
    assert repr(e) == "EventTimeExpiry(3.0, 4)"


def test_event_time_cutoff_is_exact_when_the_period_is_not_representable() -> None:
    e = EventTimeExpiry(0.3, 4)  # period 0.1 s, not a binary fraction
    rng = random.Random(3)
    for _ in range(2000):
        now = rng.uniform(0, 50)
        cutoff = e.expired_before(now)
        below = math.nextafter(cutoff, -math.inf)
        assert e.is_expired(below, now)
        assert not e.is_expired(cutoff, now)
        a = rng.uniform(now - 1, now)
        assert e.is_expired(a, now) == (a < cutoff)
        if now - a <= 0.3:
            assert not e.is_expired(a, now)
        if now - a >= 0.4:
            assert e.is_expired(a, now)

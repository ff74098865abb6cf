"""Bucket-rotation expiry: Storm's RotatingMap and TimeCacheMap, plus batch- and event-time forms.

Storm's ``RotatingMap`` (``SC/utils/RotatingMap.java``) keeps ``B`` buckets, newest first. A
``put`` goes into the newest bucket and leaves every other one; ``rotate`` drops the oldest
bucket. An entry therefore expires on the ``B``-th rotation after its last ``put``.

``TimeCacheMap`` (``SC/utils/TimeCacheMap.java``) rotates every ``E/(B-1)`` seconds, so an entry
lives for a time in ``(E, E*B/(B-1)]`` after its last ``put``. Storm rotates on a daemon thread;
here the rotations are driven by an injected clock and performed lazily on each access, which
makes the behaviour deterministic and testable.

:class:`BatchExpiry` and :class:`EventTimeExpiry` apply the same rotation rule to a clock that is
stored with the data (a batch txid, or an event timestamp), so an expiry decision can be
recomputed identically when a batch is replayed. The rule, for a period ``P = timeout/(B-1)``
measured from an origin of 0::

    rotation(t) = floor(t / P)                      # rotations that are due at time t
    expired(arrival, now) = rotation(now) - rotation(arrival) >= B

An entry is never expired while ``now - arrival <= timeout`` and always expired once
``now - arrival >= timeout * B / (B - 1)``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from fractions import Fraction
from typing import Generic, TypeVar

from trident_assets.errors import ConfigError

__all__ = [
    "DEFAULT_NUM_BUCKETS",
    "BatchExpiry",
    "EventTimeExpiry",
    "ExpiredCallback",
    "RotatingMap",
    "TimeCacheMap",
]

K = TypeVar("K", bound=Hashable)
"""The key type of a rotating map."""

V = TypeVar("V")
"""The value type of a rotating map."""

DEFAULT_NUM_BUCKETS = 3
"""Storm's default bucket count: entries live between E and 1.5*E."""

ExpiredCallback = Callable[[K, V], object]
"""Called as ``on_expire(key, value)`` once for each entry that a rotation drops."""

_MISSING = object()


def _check_num_buckets(num_buckets: int) -> int:
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, int) or num_buckets < 2:
        msg = f"num_buckets must be >= 2, got {num_buckets!r}"
        raise ConfigError(msg)
    return num_buckets


def _seconds(name: str, value: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        msg = f"{name} must be a finite number of seconds > 0, got {value!r}"
        raise ConfigError(msg)
    return float(value)


class RotatingMap(Generic[K, V]):
    """A map whose entries expire after ``num_buckets`` rotations (Storm's RotatingMap).

    Contract:

    * :meth:`put` writes into the newest bucket and removes the key from every older one,
      so a ``put`` restarts the entry's age;
    * :meth:`get`, :meth:`contains` (``in``) and :meth:`remove` search newest-first and do
      **not** refresh the entry;
    * :meth:`rotate` drops the oldest bucket, calls ``on_expire(k, v)`` for each of its
      entries (in insertion order) and returns them;
    * an entry last put between rotations ``r`` and ``r + 1`` is dropped by rotation
      ``r + num_buckets``.

    Not thread-safe on its own (:class:`TimeCacheMap` adds a lock).

    Example:
        >>> m = RotatingMap(2)
        >>> m.put("a", 1)
        >>> m.rotate()
        {}
        >>> m.rotate()
        {'a': 1}
    """

    def __init__(
        self,
        num_buckets: int = DEFAULT_NUM_BUCKETS,
        on_expire: ExpiredCallback[K, V] | None = None,
    ) -> None:
        """Create ``num_buckets`` empty buckets.

        Raises:
            ConfigError: ``num_buckets`` is not an integer >= 2 ("num_buckets must be >= 2").
        """
        self.num_buckets = _check_num_buckets(num_buckets)
        self.on_expire = on_expire
        self._buckets: deque[dict[K, V]] = deque({} for _ in range(num_buckets))

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key`` in the newest bucket; the key leaves all older buckets."""
        buckets = iter(self._buckets)
        next(buckets)[key] = value
        for bucket in buckets:
            bucket.pop(key, None)

    def get(self, key: K, default: V | None = None) -> V | None:
        """Return the value of ``key`` (``default`` if absent) without refreshing it."""
        for bucket in self._buckets:
            value = bucket.get(key, _MISSING)
            if value is not _MISSING:
                return value  # type: ignore[return-value]
        return default

    def contains(self, key: K) -> bool:
        """Return whether ``key`` is present, without refreshing it."""
        return any(key in bucket for bucket in self._buckets)

    __contains__ = contains

    def remove(self, key: K) -> V | None:
        """Remove ``key`` from the newest bucket that holds it; return its value or None."""
        for bucket in self._buckets:
            if key in bucket:
                return bucket.pop(key)
        return None

    def size(self) -> int:
        """Return the number of entries over all buckets."""
        return sum(len(bucket) for bucket in self._buckets)

    __len__ = size

    def rotate(self) -> dict[K, V]:
        """Drop the oldest bucket, add an empty newest one, and return the dropped entries.

        ``on_expire(k, v)`` is called for each dropped entry, after the rotation is complete.
        """
        dead = self._buckets.pop()
        self._buckets.appendleft({})
        if self.on_expire is not None:
            for key, value in dead.items():
                self.on_expire(key, value)
        return dead


class TimeCacheMap(Generic[K, V]):
    """A map whose entries expire ``expiration_s`` to ``expiration_s*B/(B-1)`` after their last put.

    This is Storm's TimeCacheMap without the cleaner thread. Rotations are due at
    ``t0 + k * expiration_s / (num_buckets - 1)`` for ``k = 1, 2, ...``, where ``t0`` is the
    clock reading at construction. Every public method first performs, in order, every rotation
    that is due at the current clock reading (``clock() >= due time``), and only then does its own
    work; :meth:`expire_due` does only the catching up.

    Exact expiry window: an entry last put at time ``t`` is still present at every access with
    ``clock() - t <= expiration_s``, and gone at every access with
    ``clock() - t >= expiration_s * B / (B - 1)``; the rotation that drops it happens at a time
    in ``(t + E, t + E*B/(B-1)]``. Due times are computed as ``t0 + k * period`` in floating
    point, so a reading that lands exactly on a due time counts as due.

    ``on_expire(k, v)`` runs synchronously, in the calling thread, during the access that
    catches up the rotation, before that access's own operation. All methods hold a re-entrant
    lock, so the map may be shared between threads and a callback may call back into it. A clock
    that goes backwards performs no rotation until it passes the next due time.
    """

    def __init__(
        self,
        expiration_s: float,
        num_buckets: int = DEFAULT_NUM_BUCKETS,
        on_expire: ExpiredCallback[K, V] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Start empty; the rotation schedule starts at the current ``clock()`` reading.

        Raises:
            ConfigError: ``expiration_s`` is not a finite number > 0, or ``num_buckets`` < 2.
        """
        self.expiration_s = _seconds("expiration_s", expiration_s)
        self.num_buckets = _check_num_buckets(num_buckets)
        self.rotation_period_s = self.expiration_s / (num_buckets - 1)
        self.on_expire = on_expire
        self._clock = clock
        self._map: RotatingMap[K, V] = RotatingMap(num_buckets)
        self._lock = threading.RLock()
        self._start = float(clock())
        self._rotations = 0

    @property
    def rotations(self) -> int:
        """How many rotations have been performed (caught up) so far."""
        return self._rotations

    def _catch_up(self) -> dict[K, V]:
        now = self._clock()
        if now < self._start + (self._rotations + 1) * self.rotation_period_s:
            return {}
        due = max(self._rotations + 1, math.floor((now - self._start) / self.rotation_period_s))
        # Guard against float rounding of the division in either direction.
        while self._start + due * self.rotation_period_s > now:
            due -= 1
        while self._start + (due + 1) * self.rotation_period_s <= now:
            due += 1
        dead: dict[K, V] = {}
        # After num_buckets rotations every bucket is empty; skip the rest.
        for _ in range(min(due - self._rotations, self.num_buckets)):
            dropped = self._map.rotate()
            dead.update(dropped)
            if self.on_expire is not None:
                for key, value in dropped.items():
                    self.on_expire(key, value)
        self._rotations = due
        return dead

    def expire_due(self) -> dict[K, V]:
        """Perform every rotation due now; return the entries they dropped, oldest first."""
        with self._lock:
            return self._catch_up()

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``; this restarts the entry's age."""
        with self._lock:
            self._catch_up()
            self._map.put(key, value)

    def get(self, key: K, default: V | None = None) -> V | None:
        """Return the value of ``key`` (``default`` if absent or expired) without refreshing it."""
        with self._lock:
            self._catch_up()
            return self._map.get(key, default)

    def contains(self, key: K) -> bool:
        """Return whether ``key`` is present and not expired, without refreshing it."""
        with self._lock:
            self._catch_up()
            return self._map.contains(key)

    __contains__ = contains

    def remove(self, key: K) -> V | None:
        """Remove ``key``; return its value, or None if absent or expired."""
        with self._lock:
            self._catch_up()
            return self._map.remove(key)

    def size(self) -> int:
        """Return the number of unexpired entries."""
        with self._lock:
            self._catch_up()
            return self._map.size()

    __len__ = size


class BatchExpiry:
    """Bucket-rotation expiry on the batch clock: txid ``n`` happens at time ``n``.

    With ``T = timeout_batches`` and ``B = num_buckets`` a rotation is due every ``T/(B-1)``
    batches, counted from txid 0 and aligned to txid boundaries: the rotations due when batch
    ``n`` starts are ``rotation(n) = floor(n * (B-1) / T)`` (exact integer arithmetic). An entry
    that arrived in batch ``a`` is expired at the start of batch ``n`` iff
    ``rotation(n) - rotation(a) >= B``.

    Consequences (the exact boundary):

    * never expired while ``n - a <= T``: a partner may arrive as late as batch ``a + T``;
    * always expired once ``n - a >= ceil(T*B/(B-1))``;
    * :meth:`expires_at` gives the exact first expired txid, which depends on where ``a`` falls
      between two rotations (e.g. ``T=10, B=3``: ``a=5`` -> 20, ``a=9`` -> 20, ``a=10`` -> 25).

    Example:
        >>> e = BatchExpiry(10, 3)
        >>> e.is_expired(9, 19), e.is_expired(9, 20)
        (False, True)
    """

    def __init__(self, timeout_batches: int, num_buckets: int = DEFAULT_NUM_BUCKETS) -> None:
        """Validate the timeout (a positive whole number of batches) and the bucket count.

        Raises:
            ConfigError: ``timeout_batches`` is not an integer >= 1, or ``num_buckets`` < 2.
        """
        if (
            isinstance(timeout_batches, bool)
            or not isinstance(timeout_batches, int)
            or timeout_batches < 1
        ):
            msg = f"timeout_batches must be an integer >= 1, got {timeout_batches!r}"
            raise ConfigError(msg)
        self.timeout_batches = timeout_batches
        self.num_buckets = _check_num_buckets(num_buckets)

    def __repr__(self) -> str:
        """Return ``BatchExpiry(timeout_batches, num_buckets)``."""
        return f"BatchExpiry({self.timeout_batches}, {self.num_buckets})"

    def rotation(self, txid: int) -> int:
        """Return the number of rotations due by the start of batch ``txid``."""
        return (txid * (self.num_buckets - 1)) // self.timeout_batches

    def is_expired(self, arrival_txid: int, current_txid: int) -> bool:
        """Return whether an entry from ``arrival_txid`` is expired when ``current_txid`` starts."""
        return self.rotation(current_txid) - self.rotation(arrival_txid) >= self.num_buckets

    def expires_at(self, arrival_txid: int) -> int:
        """Return the first txid at whose start an entry from ``arrival_txid`` is expired."""
        target = self.rotation(arrival_txid) + self.num_buckets
        return -(-(target * self.timeout_batches) // (self.num_buckets - 1))

    def last_expired_arrival(self, current_txid: int) -> int:
        """Return the largest arrival txid that is expired at ``current_txid``.

        Every arrival ``a <= last_expired_arrival(n)`` is expired at ``n`` and every later one
        is not, so a store can select expiry candidates with ``arrived_txid <= value``. The
        result may be below the first txid (nothing is expired yet).
        """
        limit = self.rotation(current_txid) - self.num_buckets + 1
        return -(-(limit * self.timeout_batches) // (self.num_buckets - 1)) - 1


class EventTimeExpiry:
    """Bucket-rotation expiry on an event-time clock (seconds, origin 0).

    Rotations are due at ``k * timeout_s / (B-1)`` for every integer ``k``; an entry that arrived
    at event time ``a`` is expired at event time ``now`` iff
    ``floor(now*(B-1)/timeout_s) - floor(a*(B-1)/timeout_s) >= B``. The arithmetic is exact
    (on the binary values of the floats), so the boundary does not depend on rounding. Never
    expired while ``now - a <= timeout_s``; always once ``now - a >= timeout_s*B/(B-1)``.
    """

    def __init__(self, timeout_s: float, num_buckets: int = DEFAULT_NUM_BUCKETS) -> None:
        """Validate the timeout and the bucket count.

        Raises:
            ConfigError: ``timeout_s`` is not a finite number > 0, or ``num_buckets`` < 2.
        """
        self.timeout_s = _seconds("timeout_s", timeout_s)
        self.num_buckets = _check_num_buckets(num_buckets)
        self._scale = Fraction(num_buckets - 1) / Fraction(self.timeout_s)

    def __repr__(self) -> str:
        """Return ``EventTimeExpiry(timeout_s, num_buckets)``."""
        return f"EventTimeExpiry({self.timeout_s!r}, {self.num_buckets})"

    def rotation(self, ts: float) -> int:
        """Return the index of the last rotation due at or before event time ``ts``."""
        return math.floor(Fraction(ts) * self._scale)

    def is_expired(self, arrival_ts: float, now_ts: float) -> bool:
        """Return whether an entry that arrived at ``arrival_ts`` is expired at ``now_ts``."""
        return self.rotation(now_ts) - self.rotation(arrival_ts) >= self.num_buckets

    def expired_before(self, now_ts: float) -> float:
        """Return the cutoff ``c``: arrivals with ``arrival_ts < c`` are expired at ``now_ts``.

        Arrivals at or after ``c`` are not. ``c`` is a rotation time, rounded up to a float if
        it is not exactly representable (so a float arrival below ``c`` is truly expired).
        """
        limit = Fraction(self.rotation(now_ts) - self.num_buckets + 1) / self._scale
        cutoff = float(limit)
        if Fraction(cutoff) < limit:
            cutoff = math.nextafter(cutoff, math.inf)
        return cutoff

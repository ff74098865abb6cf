"""Trident's windows (``tumblingWindow``, ``slidingWindow``, ``window``) as replayable rules.

Storm's ``WindowTridentProcessor`` adds each batch's tuples to a window manager whose trigger
and eviction policies decide when a window fires and what it holds; a fired window's
aggregate is emitted in the batch being processed. Storm stamps tuples and fires duration
windows by the wall clock, so a replay can differ. Here every rule is a function of the
committed history alone:

* **Order.** Tuples are numbered ``1, 2, 3, ...`` across txids in the order
  ``(txid, source topic, source partition, offset, position within the record)``.
* **Count windows** (``size`` tuples, every ``slide`` tuples): window ``k`` fires when tuple
  number ``k * slide`` arrives and holds tuples ``max(1, k*slide - size + 1) .. k*slide``
  (Storm's ``CountTriggerPolicy`` + ``CountEvictionPolicy``: the first windows of a sliding
  window hold fewer than ``size`` tuples). It fires in the txid that brought that tuple.
* **Duration windows** (``size`` ms, every ``slide`` ms): every tuple of txid N carries the
  txid's time ``t_N`` (recorded with its commit, never earlier than ``t_{N-1}``). Windows end
  at the multiples ``e = k * slide`` of the epoch and hold the tuples with time in
  ``[e - size, e)``. Window ``e`` fires in the first txid whose time reaches it
  (``t_{N-1} < e <= t_N``), if it holds a tuple: like Storm's timer, whose results are
  emitted in the next batch. An empty window never fires.

Nothing here imports Spark or a store; :mod:`trident_assets.backends.window_tuples` applies
the same rules with set-based SQL (its in-memory reference model lives with the tests).
"""

from __future__ import annotations

import math
from abc import ABC
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

from trident_assets.core.aggregators import Aggregator, CombinerAggregator
from trident_assets.core.contracts import describe_aggregator
from trident_assets.errors import ConfigError

__all__ = [
    "SlidingCountWindow",
    "SlidingDurationWindow",
    "TridentWindow",
    "TumblingCountWindow",
    "TumblingDurationWindow",
    "WindowConfig",
    "count_keep_from",
    "count_windows_fired",
    "duration_candidates",
    "duration_keep_after",
    "fold_window",
]


def to_millis(value: object, what: str) -> int:
    """A duration (``timedelta`` or seconds) as whole milliseconds >= 1.

    Raises:
        ConfigError: not a positive duration of at least one millisecond.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        msg = f"{what} must be a timedelta or a number of seconds, got {value!r}"
        raise ConfigError(msg)
    if not math.isfinite(seconds) or seconds <= 0:
        msg = f"{what} must be positive, got {value!r}"
        raise ConfigError(msg)
    millis = round(seconds * 1000)
    if millis < 1:
        msg = f"{what} must be at least one millisecond, got {value!r}"
        raise ConfigError(msg)
    return millis


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        msg = f"{what} must be an integer >= 1, got {value!r}"
        raise ConfigError(msg)
    return value


class WindowConfig(ABC):
    """A window's size and slide: in tuples (count windows) or milliseconds (duration)."""

    size: int
    slide: int

    by_count: ClassVar[bool]
    """True for count windows, False for duration windows."""

    def _check_slide(self) -> None:
        if self.slide > self.size:
            unit = "tuples" if self.by_count else "ms"
            msg = (
                f"{type(self).__name__}: the slide ({self.slide} {unit}) must not be larger "
                f"than the window ({self.size} {unit})"
            )
            raise ConfigError(msg)

    def describe(self) -> str:
        """The config as recorded in the window's contract, e.g. ``SlidingCountWindow(4, 2)``."""
        return f"{type(self).__name__}(size={self.size}, slide={self.slide})"


@dataclass(frozen=True)
class TumblingCountWindow(WindowConfig):
    """Every ``count`` tuples, a window of those tuples (Storm's ``TumblingCountWindow``)."""

    by_count: ClassVar[bool] = True

    count: int
    size: int = field(init=False)
    slide: int = field(init=False)

    def __post_init__(self) -> None:
        """Validate; size and slide are both ``count``."""
        n = _count(self.count, "TumblingCountWindow count")
        object.__setattr__(self, "size", n)
        object.__setattr__(self, "slide", n)


@dataclass(frozen=True)
class SlidingCountWindow(WindowConfig):
    """Every ``slide`` tuples, a window of the last ``count`` tuples (``SlidingCountWindow``)."""

    by_count: ClassVar[bool] = True

    count: int
    slide_count: int
    size: int = field(init=False)
    slide: int = field(init=False)

    def __post_init__(self) -> None:
        """Validate: both >= 1, slide <= count."""
        object.__setattr__(self, "size", _count(self.count, "SlidingCountWindow count"))
        object.__setattr__(self, "slide", _count(self.slide_count, "SlidingCountWindow slide"))
        self._check_slide()


@dataclass(frozen=True)
class TumblingDurationWindow(WindowConfig):
    """Windows of ``duration`` (timedelta or seconds), back to back (``TumblingDurationWindow``)."""

    by_count: ClassVar[bool] = False

    duration: Any
    size: int = field(init=False)
    slide: int = field(init=False)

    def __post_init__(self) -> None:
        """Validate; size and slide are both the duration in ms."""
        ms = to_millis(self.duration, "TumblingDurationWindow duration")
        object.__setattr__(self, "size", ms)
        object.__setattr__(self, "slide", ms)


@dataclass(frozen=True)
class SlidingDurationWindow(WindowConfig):
    """Every ``slide``, a window of the last ``duration`` (``SlidingDurationWindow``)."""

    by_count: ClassVar[bool] = False

    duration: Any
    slide_duration: Any
    size: int = field(init=False)
    slide: int = field(init=False)

    def __post_init__(self) -> None:
        """Validate: both positive durations, slide <= duration."""
        object.__setattr__(self, "size", to_millis(self.duration, "SlidingDurationWindow duration"))
        object.__setattr__(
            self, "slide", to_millis(self.slide_duration, "SlidingDurationWindow slide")
        )
        self._check_slide()


@dataclass(frozen=True)
class TridentWindow:
    """A declared window: its config, input fields, aggregator and output field.

    ``describe()`` is what the window's contract records: a different config, inputs,
    aggregator or output under the same window name is an incompatible change.
    """

    config: WindowConfig
    inputs: tuple[str, ...]
    aggregator: Aggregator
    output: str

    def describe(self) -> dict[str, Any]:
        """``{"aggregator", "aggregator_params", "version"}`` for the contract."""
        inner = describe_aggregator(self.aggregator)
        params = ", ".join(f"{k}={v}" for k, v in inner["aggregator_params"])
        return {
            "aggregator": f"{__name__}.TridentWindow",
            "aggregator_params": {
                "window": self.config.describe(),
                "inputs": ",".join(self.inputs),
                "aggregator": f"{inner['aggregator']}({params})",
                "aggregator_version": str(inner["version"]),
                "output": self.output,
            },
            "version": "1",
        }


# -- count windows --------------------------------------------------------------------------------


def count_windows_fired(
    size: int, slide: int, seen_before: int, seen_after: int
) -> list[tuple[int, int, int]]:
    """The count windows that fire when tuples ``seen_before+1 .. seen_after`` arrive.

    Returns ``(k, first, last)`` per window, ascending: window ``k`` holds tuple numbers
    ``first..last`` (``last = k * slide``, ``first = max(1, last - size + 1)``).
    """
    first_k = seen_before // slide + 1
    last_k = seen_after // slide
    return [(k, max(1, k * slide - size + 1), k * slide) for k in range(first_k, last_k + 1)]


def count_keep_from(size: int, slide: int, seen: int) -> int:
    """The first tuple number a window not fired yet (after ``seen`` tuples) can hold."""
    next_end = (seen // slide + 1) * slide
    return max(1, next_end - size + 1)


# -- duration windows -----------------------------------------------------------------------------


def duration_candidates(
    size: int, slide: int, prev_time: int | None, time: int
) -> list[tuple[int, int]]:
    """The duration windows ``(start, end)`` due at ``time`` that may hold earlier tuples.

    Ends ``e = k * slide`` with ``prev_time < e <= time``, limited to ``e <= prev_time + size``
    (a later window cannot hold a tuple stamped ``prev_time`` or earlier). None before the
    first txid. Whether a window holds a tuple is for the caller to check (empty windows do
    not fire).
    """
    if prev_time is None:
        return []
    last_end = min(time, prev_time + size)
    first_k = prev_time // slide + 1
    return [(k * slide - size, k * slide) for k in range(first_k, last_end // slide + 1)]


def duration_keep_after(size: int, time: int) -> int:
    """Tuples stamped ``<=`` this are in no window still to fire after ``time``."""
    return time - size


# -- aggregation ----------------------------------------------------------------------------------


def fold_window(agg: Aggregator, rows: Sequence[tuple[Any, ...]]) -> Any:
    """Aggregate one window's tuples (input values, in order).

    A combiner: ``zero()`` combined with ``init(t)`` of each tuple; a reducer: ``init()``
    folded with ``reduce``.
    """
    if isinstance(agg, CombinerAggregator):
        acc = agg.zero()
        for values in rows:
            acc = agg.combine(acc, agg.init(values))
        return acc
    acc = agg.init()
    for values in rows:
        acc = agg.reduce(acc, values)
    return acc


def combine_partials(agg: CombinerAggregator[Any], partials: Sequence[Any]) -> Any:
    """``zero()`` combined with each partial, in order."""
    acc = agg.zero()
    for partial in partials:
        acc = agg.combine(acc, partial)
    return acc

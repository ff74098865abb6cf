"""Event-time windows: declarations, duration parsing, window assignment and emission rules.

Pure: no Spark, DuckDB or Dagster imports. Every instant is an integer count of microseconds
since the Unix epoch (UTC); a window is the half-open interval ``[start, end)``.

**Kinds.**

* tumbling(size): the windows ``[k*size, (k+1)*size)`` (aligned to the epoch); each record
  is in exactly one.
* sliding(size, slide): the windows ``[k*slide, k*slide + size)``; a record is in every
  window that contains it (``ceil(size / slide)`` of them when ``slide`` divides ``size``).
* session(gap): per key, a record at ``t`` opens the session ``[t, t + gap)``; sessions that
  overlap (a record before the current end, i.e. within ``gap`` of the last one) merge into
  one ``[first event, last event + gap)``, also across txids.

**Watermark.** After txid T, the watermark of a windowed state is the largest event time of
every record it saw in txids ``<= T`` minus ``allowed_lateness`` (None before any record).

**Emission.** A window is *final* when ``end <= watermark``: it leaves the open windows and
is emitted, once, in the commit of the txid whose watermark first reached its end.

**Late records** (decided against the watermark *before* the txid, ``wm``):

* tumbling and sliding: a window with ``end <= wm`` is final and never changes again; a
  record adds to each of its windows that is still open, and is a late record (a dead
  letter, counted) only when *all* its windows are final. A sliding-window record with some
  windows final and some open is added to the open ones only (and counted as a partly late
  record).
* session: a record with ``t < wm`` is late. (Every session whose end is ``<= wm`` is final;
  a record at ``t >= wm`` can neither touch nor extend one of them.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from trident_assets.errors import ConfigError

__all__ = ["EventWindow", "parse_duration"]

MICROS = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}
MICROS["d"] = 24 * MICROS["h"]
_UNIT_WORDS = {
    "us": "us",
    "microsecond": "us",
    "microseconds": "us",
    "ms": "ms",
    "millisecond": "ms",
    "milliseconds": "ms",
    "s": "s",
    "sec": "s",
    "second": "s",
    "seconds": "s",
    "m": "m",
    "min": "m",
    "minute": "m",
    "minutes": "m",
    "h": "h",
    "hour": "h",
    "hours": "h",
    "d": "d",
    "day": "d",
    "days": "d",
}
_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")
DURATION_FORM = (
    "a datetime.timedelta, or a string '<whole number> <unit>' with unit one of us, ms, s, "
    "second(s), m, min, minute(s), h, hour(s), d, day(s) (e.g. '10 minutes', '500 ms')"
)

TIME_UNITS = ("timestamp", "ms", "s")
"""How a time field holds its event time: a TIMESTAMP (or an ISO-8601 string), integer
epoch milliseconds, or integer epoch seconds."""


def parse_duration(value: object, what: str, *, allow_zero: bool = False) -> int:
    """``value`` (a timedelta or ``'<n> <unit>'``) in microseconds.

    Raises:
        ConfigError: naming ``what``, the value and the accepted form; also a negative
            duration, a zero one (unless ``allow_zero``) or one finer than a microsecond.
    """
    if isinstance(value, timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    elif isinstance(value, str):
        match = _DURATION.match(value.lower())
        unit = _UNIT_WORDS.get(match.group(2)) if match else None
        if match is None or unit is None:
            msg = f"{what}: cannot read duration {value!r}; give {DURATION_FORM}"
            raise ConfigError(msg)
        micros = int(match.group(1)) * MICROS[unit]
    else:
        msg = f"{what}: expected a duration, got {value!r}; give {DURATION_FORM}"
        raise ConfigError(msg)
    if micros < 0 or (micros == 0 and not allow_zero):
        need = "zero or more" if allow_zero else "more than zero"
        msg = f"{what}: duration {value!r} must be {need}"
        raise ConfigError(msg)
    return micros


def _show(micros: int) -> str:
    """A duration in its largest whole unit, e.g. ``10 m`` / ``1500 ms``."""
    for unit in ("d", "h", "m", "s", "ms"):
        if micros and micros % MICROS[unit] == 0:
            return f"{micros // MICROS[unit]} {unit}"
    return f"{micros} us"


@dataclass(frozen=True, slots=True)
class EventWindow:
    """A window declaration over event time field ``time_field``.

    Build it with :meth:`tumbling`, :meth:`sliding` or :meth:`session`. Durations are
    microseconds here; the constructors take timedeltas or strings.
    """

    kind: str
    time_field: str
    size_us: int
    slide_us: int
    gap_us: int
    lateness_us: int
    time_unit: str = "timestamp"

    def __post_init__(self) -> None:
        """Check the kind, the time unit and that durations fit the unit."""
        if self.kind not in ("tumbling", "sliding", "session"):
            msg = f"unknown window kind {self.kind!r}"
            raise ConfigError(msg)
        if not isinstance(self.time_field, str) or not self.time_field:
            msg = f"an event window needs a time_field name, got {self.time_field!r}"
            raise ConfigError(msg)
        if self.time_unit not in TIME_UNITS:
            units = ", ".join(repr(u) for u in TIME_UNITS)
            msg = f"time_unit must be one of {units}, got {self.time_unit!r}"
            raise ConfigError(msg)
        step = MICROS[self.time_unit] if self.time_unit != "timestamp" else 1
        for name in ("size_us", "slide_us", "gap_us", "lateness_us"):
            if getattr(self, name) % step:
                msg = (
                    f"{name[:-3]} {_show(getattr(self, name))} is not a whole number of "
                    f"{self.time_unit} (time field {self.time_field!r} holds epoch "
                    f"{self.time_unit}); use a multiple of 1 {self.time_unit}"
                )
                raise ConfigError(msg)
        if self.kind == "sliding" and self.slide_us > self.size_us:
            msg = (
                f"sliding window: slide {_show(self.slide_us)} is longer than size "
                f"{_show(self.size_us)}; records between windows would belong to none"
            )
            raise ConfigError(msg)

    @classmethod
    def tumbling(
        cls,
        size: timedelta | str,
        *,
        time_field: str,
        allowed_lateness: timedelta | str = timedelta(0),
        time_unit: str = "timestamp",
    ) -> EventWindow:
        """Fixed, non-overlapping windows of ``size``, aligned to the epoch."""
        s = parse_duration(size, "tumbling window size")
        late = parse_duration(allowed_lateness, "allowed_lateness", allow_zero=True)
        return cls("tumbling", time_field, s, s, 0, late, time_unit)

    @classmethod
    def sliding(
        cls,
        size: timedelta | str,
        slide: timedelta | str,
        *,
        time_field: str,
        allowed_lateness: timedelta | str = timedelta(0),
        time_unit: str = "timestamp",
    ) -> EventWindow:
        """Windows of ``size`` starting every ``slide`` (a record is in each that holds it)."""
        s = parse_duration(size, "sliding window size")
        sl = parse_duration(slide, "sliding window slide")
        late = parse_duration(allowed_lateness, "allowed_lateness", allow_zero=True)
        return cls("sliding", time_field, s, sl, 0, late, time_unit)

    @classmethod
    def session(
        cls,
        gap: timedelta | str,
        *,
        time_field: str,
        allowed_lateness: timedelta | str = timedelta(0),
        time_unit: str = "timestamp",
    ) -> EventWindow:
        """Per key, sessions of records less than ``gap`` apart: ``[first, last + gap)``."""
        g = parse_duration(gap, "session gap")
        late = parse_duration(allowed_lateness, "allowed_lateness", allow_zero=True)
        return cls("session", time_field, 0, 0, g, late, time_unit)

    def describe(self) -> dict[str, Any]:
        """What fixes the meaning of the windows (part of the state's contract)."""
        params = {"kind": self.kind, "time_field": self.time_field, "time_unit": self.time_unit}
        if self.kind == "session":
            params["gap_us"] = str(self.gap_us)
        else:
            params["size_us"] = str(self.size_us)
            params["slide_us"] = str(self.slide_us)
        params["allowed_lateness_us"] = str(self.lateness_us)
        return params

    def to_micros(self, value: int) -> int:
        """An integer epoch time field's value in microseconds."""
        return value * (1 if self.time_unit == "timestamp" else MICROS[self.time_unit])

    def watermark(self, max_event_us: int | None) -> int | None:
        """The watermark for the largest event time seen (None before any record)."""
        return None if max_event_us is None else max_event_us - self.lateness_us

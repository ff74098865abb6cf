"""When a time range of final windows is complete: the rule behind the time-partitioned finals.

Pure: no Spark, DuckDB or Dagster imports; instants are epoch microseconds (UTC).

A time range ``[p_start, p_end)`` (a Dagster time partition) holds the windows whose
``window_start`` lies in it. It is **complete** when every window that can ever start in it
is final (``window_end <= watermark``), so its set of final windows never changes again:

* tumbling(size): the last window starting before ``p_end`` ends at
  ``ceil(p_end / size) * size`` (``p_end`` itself when the range is aligned to the size), so
  the range is complete when the watermark reaches that end;
* sliding(size, slide): the last window starting before ``p_end`` starts at
  ``floor((p_end - 1) / slide) * slide`` and ends ``size`` later: the range is complete when
  the watermark reaches ``p_end - slide + size`` (aligned), i.e. ``size - slide`` after the
  range's end;
* session windows have no such bound (a session starting in the range may grow for as long
  as records keep coming within the gap): they get no time-partitioned finals.

Because the watermark never decreases, a range that is complete stays complete; the txid
whose watermark first makes it complete is the one that reports it.
"""

from __future__ import annotations

from trident_assets.core.event_windows import EventWindow
from trident_assets.errors import ConfigError

__all__ = ["completion_time", "has_time_partitions", "newly_complete"]


def has_time_partitions(window: EventWindow) -> bool:
    """True for tumbling and sliding windows (sessions have no completion bound)."""
    return window.kind in ("tumbling", "sliding")


def completion_time(window: EventWindow, p_end_us: int) -> int:
    """The watermark at which every window starting before ``p_end_us`` is final.

    Raises:
        ConfigError: a session window (no bound exists).
    """
    if not has_time_partitions(window):
        msg = "session windows have no completion time: a session may grow without bound"
        raise ConfigError(msg)
    last_start = ((p_end_us - 1) // window.slide_us) * window.slide_us
    return last_start + window.size_us


def newly_complete(
    window: EventWindow,
    ranges: list[tuple[int, int]],
    watermark_before_us: int | None,
    watermark_us: int | None,
) -> list[tuple[int, int]]:
    """The ``(p_start, p_end)`` of ``ranges`` complete at ``watermark_us`` but not before.

    ``watermark_before_us`` is the watermark of the previous committed txid (None: none).
    """
    if watermark_us is None:
        return []
    done = []
    for start, end in ranges:
        at = completion_time(window, end)
        if at <= watermark_us and (watermark_before_us is None or at > watermark_before_us):
            done.append((start, end))
    return done

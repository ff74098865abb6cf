"""A plain-Python model of event-time windows: the reference the Spark job and the store follow.

The rules are :mod:`trident_assets.core.event_windows`'s (window assignment, emission, late
records); the tests compare the engine's finals, open windows and dead letters with
:func:`reference_windows` over the same records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trident_assets.core.event_windows import EventWindow

__all__ = ["ReferenceResult", "is_final", "reference_windows", "sessionize", "window_starts"]


def window_starts(t: int, size: int, slide: int) -> list[int]:
    """The starts of the tumbling/sliding windows ``[start, start + size)`` holding ``t``."""
    last = (t // slide) * slide
    first = ((t - size) // slide + 1) * slide
    return list(range(first, last + 1, slide))


def is_final(window_end: int, watermark: int | None) -> bool:
    """The emission rule: a window is final once the watermark reaches its end."""
    return watermark is not None and window_end <= watermark


def sessionize(sessions: list[tuple[int, int, Any]], combine: Any) -> list[tuple[int, int, Any]]:
    """Merge overlapping ``(start, end, value)`` sessions of one key (``combine`` values)."""
    out: list[tuple[int, int, Any]] = []
    for start, end, value in sorted(sessions, key=lambda s: s[0]):
        if out and start < out[-1][1]:
            s0, e0, v0 = out[-1]
            out[-1] = (s0, max(e0, end), combine(v0, value))
        else:
            out.append((start, end, value))
    return out


@dataclass
class ReferenceResult:
    """What :func:`reference_windows` computes."""

    finals: list[tuple[Any, int, int, Any, int]]
    """``(key, start, end, value, final_txid)``, sorted."""
    open: list[tuple[Any, int, int, Any]]
    """``(key, start, end, value)`` of the windows still open, sorted."""
    late: list[tuple[int, Any, int]]
    """``(txid, key, t)`` of the late records."""
    watermarks: list[int | None]
    """The watermark after each txid."""


def reference_windows(
    window: EventWindow,
    batches: list[list[tuple[Any, int, Any]]],
    init: Any = lambda v: 1,
    combine: Any = lambda a, b: a + b,
) -> ReferenceResult:
    """A plain-Python model of a windowed aggregation over txids ``1..len(batches)``.

    Each batch is a list of ``(key, t_us, value)`` records; ``init(value)`` is a record's
    partial, ``combine`` merges two.
    """
    open_: dict[tuple[Any, int, int], Any] = {}
    finals: list[tuple[Any, int, int, Any, int]] = []
    late: list[tuple[int, Any, int]] = []
    marks: list[int | None] = []
    max_t: int | None = None
    for txid, batch in enumerate(batches, start=1):
        wm = window.watermark(max_t)
        for key, t, value in batch:
            max_t = t if max_t is None else max(max_t, t)
            part = init(value)
            if window.kind == "session":
                if wm is not None and t < wm:
                    late.append((txid, key, t))
                    continue
                mine = [(s, e, v) for (k, s, e), v in open_.items() if k == key]
                for s, e, _ in mine:
                    del open_[(key, s, e)]
                for s, e, v in sessionize([*mine, (t, t + window.gap_us, part)], combine):
                    open_[(key, s, e)] = v
                continue
            starts = window_starts(t, window.size_us, window.slide_us)
            live = [s for s in starts if not is_final(s + window.size_us, wm)]
            if not live:
                late.append((txid, key, t))
            for s in live:
                k = (key, s, s + window.size_us)
                open_[k] = part if k not in open_ else combine(open_[k], part)
        after = window.watermark(max_t)
        marks.append(after)
        for k in sorted(k for k in open_ if is_final(k[2], after)):
            finals.append((k[0], k[1], k[2], open_.pop(k), txid))
    return ReferenceResult(
        sorted(finals),
        sorted((k[0], k[1], k[2], v) for k, v in open_.items()),
        late,
        marks,
    )

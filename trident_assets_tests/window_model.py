"""The Trident window rules over batches in memory: the reference the store follows.

:mod:`trident_assets.backends.window_tuples` applies the same rules with set-based SQL; the
tests check one against the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trident_assets.core.trident_windows import (
    TridentWindow,
    count_keep_from,
    count_windows_fired,
    duration_candidates,
    duration_keep_after,
    fold_window,
)
from trident_assets.errors import StaleTxidError

__all__ = ["FiredWindow", "WindowModel"]


@dataclass(frozen=True)
class FiredWindow:
    """One fired window: its number (count: ``k``; duration: its end), tuples and aggregate."""

    key: int
    start: int
    end: int
    tuples: tuple[tuple[Any, ...], ...]
    value: Any


@dataclass
class WindowModel:
    """The window rules over batches in memory: the reference the store implementation follows.

    Holds only the tuples a window still to fire needs (the bounded store).
    """

    window: TridentWindow
    seen: int = 0
    prev_time: int | None = None
    last_txid: int = 0
    held: list[tuple[int, int, tuple[Any, ...]]] = field(default_factory=list)
    """``(number, time, values)`` of each kept tuple."""

    def add_batch(
        self, txid: int, tuples: Sequence[tuple[Any, ...]], time: int = 0
    ) -> list[FiredWindow]:
        """Apply txid ``txid``'s tuples (already in order), stamped ``time``; return what fires.

        Raises:
            StaleTxidError: ``txid`` is not after the last applied one.
        """
        if txid <= self.last_txid:
            msg = f"txid {txid} is not after the last applied txid {self.last_txid}"
            raise StaleTxidError(msg)
        cfg, agg = self.window.config, self.window.aggregator
        self.last_txid = txid
        if cfg.by_count:
            before = self.seen
            self.held += [(before + i + 1, time, t) for i, t in enumerate(tuples)]
            self.seen += len(tuples)
            fired = [
                FiredWindow(k, lo, hi, rows, fold_window(agg, rows))
                for k, lo, hi in count_windows_fired(cfg.size, cfg.slide, before, self.seen)
                for rows in [tuple(v for n, _, v in self.held if lo <= n <= hi)]
            ]
            keep = count_keep_from(cfg.size, cfg.slide, self.seen)
            self.held = [h for h in self.held if h[0] >= keep]
            return fired
        time = time if self.prev_time is None else max(time, self.prev_time)
        fired = []
        for start, end in duration_candidates(cfg.size, cfg.slide, self.prev_time, time):
            rows = tuple(v for _, ts, v in self.held if start <= ts < end)
            if rows:
                fired.append(FiredWindow(end, start, end, rows, fold_window(agg, rows)))
        self.held += [(0, time, t) for t in tuples]
        self.prev_time = time
        cutoff = duration_keep_after(cfg.size, time)
        self.held = [h for h in self.held if h[1] > cutoff]
        return fired

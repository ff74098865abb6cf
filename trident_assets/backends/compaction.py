"""When to compact a map's append-only log (see :meth:`StateStore.compact`).

Every batch appends one version per key it writes, so a map's log holds its live keys plus
superseded versions. Compaction rewrites the log to the live keys; it costs one pass over
the table, so it runs between batches, and only when the superseded rows have grown to a
fraction of the live keys. With ``ratio=1.0`` the log stays under twice the state, and the
cost amortises to about one extra write per key written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trident_assets.backends.map_layout import log_table
from trident_assets.errors import ConfigError

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore

__all__ = ["CompactionPolicy", "maybe_compact"]


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """Compact a map when ``superseded >= ratio * live`` and the log has ``min_rows`` rows."""

    ratio: float = 1.0
    min_rows: int = 100_000

    def __post_init__(self) -> None:
        """Validate the thresholds (types first: a string is named, not compared)."""
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, int | float):
            msg = f"CompactionPolicy ratio must be a number > 0, got {self.ratio!r}"
            raise ConfigError(msg)
        if isinstance(self.min_rows, bool) or not isinstance(self.min_rows, int):
            msg = f"CompactionPolicy min_rows must be an int >= 0, got {self.min_rows!r}"
            raise ConfigError(msg)
        if self.ratio <= 0 or self.min_rows < 0:
            msg = f"CompactionPolicy needs ratio > 0 and min_rows >= 0, got {self}"
            raise ConfigError(msg)

    def due(self, log_rows: int, live_keys: int) -> bool:
        """True when a log of ``log_rows`` rows holding ``live_keys`` keys should be compacted."""
        return log_rows >= self.min_rows and log_rows - live_keys >= self.ratio * live_keys


def maybe_compact(
    store: StateStore, live_keys: dict[str, int], policy: CompactionPolicy
) -> dict[str, int]:
    """Compact each map of ``live_keys`` (table -> live key count) that ``policy`` finds due.

    Call between batches (no transaction open). Returns the rows dropped per compacted map.
    """
    dropped: dict[str, int] = {}
    for table, live in live_keys.items():
        if store.layout(table) is None:
            continue
        rows = int(store.fetch_rows(f"SELECT count(*) FROM {log_table(table)}")[0][0])
        if policy.due(rows, live):
            dropped |= store.compact(table)
    return dropped

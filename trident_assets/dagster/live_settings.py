"""How a live run polls the log, when it evaluates its checks and when it ends."""

from __future__ import annotations

from dataclasses import dataclass

from trident_assets.errors import ConfigError

__all__ = ["LIVE_TAG", "LiveSettings"]

LIVE_TAG = "trident/live"
"""Run tag of a live run (``true``)."""


@dataclass(frozen=True, slots=True)
class LiveSettings:
    """How a live run polls, when it evaluates the checks and when it ends."""

    poll_interval_s: float = 0.1
    """Seconds between two looks at the log while no records wait."""
    idle_s: float = 60.0
    """The run ends after this long without a record to commit."""
    max_duration_s: float = 900.0
    """The run ends (after the txid in hand) once it has run this long."""
    max_txids: int = 0
    """The run ends once it committed this many txids (0: no limit)."""
    check_every_s: float = 30.0
    """Evaluate the asset checks at most this often while the run lasts (the log idle)."""
    max_catch_up: int = 10
    """The most waiting batches one call of the runner takes (they share Spark jobs)."""

    def __post_init__(self) -> None:
        """Validate the settings.

        Raises:
            ConfigError: a setting is out of range.
        """
        for name in ("poll_interval_s", "idle_s", "max_duration_s", "check_every_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                msg = f"LiveSettings.{name} must be a number of seconds > 0, got {value!r}"
                raise ConfigError(msg)
        for name, low in (("max_txids", 0), ("max_catch_up", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                msg = f"LiveSettings.{name} must be an integer >= {low}, got {value!r}"
                raise ConfigError(msg)

"""Exponential retry backoff with Storm's KafkaSpout formula.

``KafkaSpoutRetryExponentialBackoff`` (``KC/spout/KafkaSpoutRetryExponentialBackoff.java``)
computes, for the ``n``-th failure of a message (``n`` counts 1, 2, 3, ...)::

    delay(1) = initial_delay
    delay(n) = delay_period * 2**(n-1)          for n >= 2
    delay(n) = min(delay(n), max_delay)

and gives up (``schedule`` returns false) once ``n > max_retries``. The javadoc's
``delayPeriod^(failCount-1)`` is wrong; the code and its test use ``delayPeriod * 2^(n-1)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trident_assets.errors import ConfigError

__all__ = ["ExponentialBackoff"]


def _check_seconds(name: str, value: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        msg = f"{name} must be a finite number of seconds >= 0, got {value!r}"
        raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    """When to retry a failed message, and when to give up.

    The defaults are Storm's ``KafkaSpoutConfig.DEFAULT_RETRY_SERVICE``: no initial delay,
    a 2 ms period, unlimited retries, at most 10 s between attempts.

    Example:
        >>> b = ExponentialBackoff(0.0, 4.0, None, 1000.0)
        >>> [b.delay(n) for n in (1, 2, 3, 4)]
        [0.0, 8.0, 16.0, 32.0]

    Attributes:
        initial_delay_s: The delay after the first failure.
        delay_period_s: The base of the exponential delay from the second failure on.
        max_retries: How many failures may still be retried; None means unlimited.
        max_delay_s: The cap on every delay.
    """

    initial_delay_s: float = 0.0
    delay_period_s: float = 0.002
    max_retries: int | None = None
    max_delay_s: float = 10.0

    def __post_init__(self) -> None:
        """Validate the settings.

        Raises:
            ConfigError: a delay is negative, infinite or not a number, or ``max_retries`` is
                not None or an integer >= 0.
        """
        _check_seconds("initial_delay_s", self.initial_delay_s)
        _check_seconds("delay_period_s", self.delay_period_s)
        _check_seconds("max_delay_s", self.max_delay_s)
        retries = self.max_retries
        if retries is not None and (
            isinstance(retries, bool) or not isinstance(retries, int) or retries < 0
        ):
            msg = f"max_retries must be None (unlimited) or an integer >= 0, got {retries!r}"
            raise ConfigError(msg)

    @staticmethod
    def _check_failure(num_fails: int) -> None:
        if isinstance(num_fails, bool) or not isinstance(num_fails, int) or num_fails < 1:
            msg = f"num_fails counts failures from 1, got {num_fails!r}"
            raise ConfigError(msg)

    def delay(self, num_fails: int) -> float:
        """Return the delay in seconds before retrying after failure number ``num_fails``.

        ``initial_delay_s`` for the first failure, ``delay_period_s * 2**(num_fails-1)`` after,
        never more than ``max_delay_s``. The result does not depend on ``max_retries``.

        Raises:
            ConfigError: ``num_fails`` is not an integer >= 1.
        """
        self._check_failure(num_fails)
        if num_fails == 1:
            raw = self.initial_delay_s
        else:
            try:
                raw = math.ldexp(float(self.delay_period_s), num_fails - 1)
            except OverflowError:
                raw = math.inf
        return float(min(raw, self.max_delay_s))

    def should_retry(self, num_fails: int) -> bool:
        """Return whether failure number ``num_fails`` may be retried (False once > max_retries).

        Raises:
            ConfigError: ``num_fails`` is not an integer >= 1.
        """
        self._check_failure(num_fails)
        return self.max_retries is None or num_fails <= self.max_retries

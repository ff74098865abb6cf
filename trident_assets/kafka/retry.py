"""Retrying failed batches with Storm's exponential backoff.

Storm's ``KafkaSpoutRetryExponentialBackoff(initialDelay, delayPeriod, maxRetries, maxDelay)``
is :class:`~trident_assets.core.retry.ExponentialBackoff`. A :class:`KafkaSpout` carries one
(``retry=``); :func:`backoff_for` picks it for the Dagster coordinator sensor
(``coordinator_sensor(topology, backoff=backoff_for(topology))``), and
:func:`run_with_retries` applies it to replays of a batch outside Dagster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from trident_assets.core.retry import ExponentialBackoff
from trident_assets.errors import ConfigError, OutOfOrderCommitError

__all__ = ["backoff_for", "run_with_retries"]

T = TypeVar("T")

NOT_RETRIED: tuple[type[BaseException], ...] = (ConfigError, OutOfOrderCommitError)
"""Failures a replay cannot fix: bad configuration, a batch run out of order."""


def backoff_for(topology: Any) -> ExponentialBackoff | None:
    """The retry policy of the topology's spouts: the first spout's that declares ``retry``.

    Returns None when no spout declares one (the caller's default applies).
    """
    for node in topology.spouts.values():
        retry = getattr(node.args["spout"], "retry", None)
        if isinstance(retry, ExponentialBackoff):
            return retry
    return None


def run_with_retries(
    run: Callable[[int], T],
    txid: int,
    backoff: ExponentialBackoff,
    *,
    sleep: Callable[[float], None] = time.sleep,
    on_failure: Callable[[int, BaseException, float], None] | None = None,
) -> T:
    """Run batch ``txid`` (e.g. ``runner.run_batch``), replaying it after failures.

    Failure ``n`` (1, 2, ...) waits ``backoff.delay(n)`` before replay ``n``; once
    ``backoff.should_retry(n)`` is False the last error is raised. :data:`NOT_RETRIED`
    errors are raised at once.

    Args:
        run: runs one attempt of a batch.
        txid: the batch.
        backoff: Storm's (initial delay, delay period, max retries, max delay).
        sleep: waits the given seconds (injectable for tests).
        on_failure: called with ``(n, error, delay)`` before each wait.
    """
    failures = 0
    while True:
        try:
            return run(txid)
        except NOT_RETRIED:
            raise
        except Exception as exc:
            failures += 1
            if not backoff.should_retry(failures):
                raise
            delay = backoff.delay(failures)
            if on_failure is not None:
                on_failure(failures, exc, delay)
            sleep(delay)

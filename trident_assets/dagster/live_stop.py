"""A clean stop of live mode: the live runs end after the txid in hand, none starts meanwhile.

``trident ui --live`` stopped by Ctrl-C (or SIGTERM) writes the stop file
``<DAGSTER_HOME>/trident-live-stop`` (:func:`request_stop`) before it stops ``dagster dev``:

* a live run sees it within one poll of its log, lets its committer finish the txids in hand
  (each commits, or was not begun: a txid begun and not committed is replayed by the next live
  run), logs their events and ends as a success ("stopped: trident ui is stopping");
* the coordinator sensor launches no live run while it exists (:func:`stop_reason`);
* ``trident ui`` waits until no live run is in flight (:func:`wait_live_runs_ended`), then
  stops ``dagster dev``, and removes the file (:func:`clear_stop`; also when it starts).

This module imports Dagster only inside :func:`wait_live_runs_ended` (``trident ui`` imports
it before ``dagster dev`` starts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["STOP_FILE", "clear_stop", "request_stop", "stop_reason", "wait_live_runs_ended"]

STOP_FILE = "trident-live-stop"
"""The stop file's name in the Dagster instance's directory (``DAGSTER_HOME``)."""


def request_stop(dagster_home: Path, why: str) -> None:
    """Ask the live runs over ``dagster_home`` to end after their txids in hand (see module)."""
    (Path(dagster_home) / STOP_FILE).write_text(why + "\n", encoding="utf-8")


def clear_stop(dagster_home: Path) -> None:
    """Remove the stop file of ``dagster_home`` (live runs start and run again)."""
    (Path(dagster_home) / STOP_FILE).unlink(missing_ok=True)


def stop_reason(dagster_home: str | Path) -> str | None:
    """Why live runs over ``dagster_home`` are to stop (the stop file's text), or None."""
    try:
        return (Path(dagster_home) / STOP_FILE).read_text(encoding="utf-8").strip() or "stop"
    except OSError:
        return None


def wait_live_runs_ended(
    dagster_home: Path, timeout_s: float, give_up: Callable[[], bool] = lambda: False
) -> list[str]:
    """Wait until no live run of the instance at ``dagster_home`` is in flight.

    Returns the ids of the live runs still in flight after ``timeout_s`` or once ``give_up``
    says so (empty: all ended). A queued live run does not count: its op would end at once.
    """
    import dagster as dg

    from trident_assets.dagster.in_flight import IN_FLIGHT
    from trident_assets.dagster.live_settings import LIVE_TAG

    started = [s for s in IN_FLIGHT if s is not dg.DagsterRunStatus.QUEUED]
    deadline = time.monotonic() + timeout_s
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        while True:
            runs = instance.get_runs(
                filters=dg.RunsFilter(tags={LIVE_TAG: "true"}, statuses=started)
            )
            if not runs or time.monotonic() >= deadline or give_up():
                return [run.run_id for run in runs]
            time.sleep(0.2)

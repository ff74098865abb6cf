"""``dagster dev`` as a child of ``trident ui``: its log without idle ticks, its group stopped."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO

__all__ = ["STRAGGLER_SIGNAL_S", "IdleTickFilter", "copy_filtered", "stop_process_group"]

STRAGGLER_SIGNAL_S = 2.0
"""After a stopped group's leader exited: seconds between repeats of the stop signal."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SENSOR_LINE = re.compile(r" - dagster\.daemon\.SensorDaemon - [A-Z]+ - (.*)$")
_IDLE = re.compile(r"Checking for new runs for sensor: |No run requests returned for ")
_SKIPPED = re.compile(r"Sensor (\S+) skipped: (.*)")
_LAUNCHED = re.compile(r"(?:Launching run|Completed launch of run \S+) for (\S+)$")
_ASSET_LINE = re.compile(r" - dagster\.daemon\.AssetDaemon - (?:DEBUG|INFO) - (.*)$")
_ASSET_IDLE = re.compile(
    r"Checking \d+ assets/checks and |Prefetching asset records |Done prefetching asset "
    r"records|Adding \d+ asset evaluations? |(?:Tick produced|Submitting) 0 runs |Finished "
    r"auto-materialization tick"
)


class IdleTickFilter:
    """Which lines of ``dagster dev``'s log to show: daemon ticks that request nothing are not.

    Dropped: the sensor daemon's "Checking for new runs for sensor: ..." (logged every tick)
    and "No run requests returned for ..."; a "Sensor S skipped: REASON" line is shown once,
    and again only when S's reason changes or after S launched a run. The asset daemon's
    routine lines of each automation tick (about every 15 s: "Checking N assets/checks ...",
    prefetching, "Adding N asset evaluations ...", "Finished auto-materialization tick ...")
    and its "Tick produced 0 runs ..." and "Submitting 0 runs ..." are dropped; a tick that
    requests runs shows "Tick produced N runs ..." and "Submitting N runs ...". Every other
    line is kept (runs launched, dynamic partitions added, warnings, errors, the webserver's
    lines).
    """

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def keep(self, line: str) -> bool:
        """True if ``line`` (one line of the log, ANSI colours allowed) is to be shown."""
        plain = _ANSI.sub("", line).rstrip("\r\n")
        asset = _ASSET_LINE.search(plain)
        if asset is not None:
            return _ASSET_IDLE.match(asset.group(1)) is None
        found = _SENSOR_LINE.search(plain)
        if found is None:
            return True
        message = found.group(1)
        if _IDLE.match(message):
            return False
        skipped = _SKIPPED.match(message)
        if skipped is not None:
            sensor, reason = skipped.groups()
            if self._reasons.get(sensor) == reason:
                return False
            self._reasons[sensor] = reason
            return True
        launched = _LAUNCHED.search(message)
        if launched is not None:
            self._reasons.pop(launched.group(1), None)
        return True


def copy_filtered(source: IO[bytes], keep: Callable[[str], bool]) -> None:
    """Copy ``source``'s lines that ``keep`` accepts to this process's stdout, until EOF."""
    shown = True
    for raw in iter(source.readline, b""):
        line = raw.decode("utf-8", "replace")
        if not shown or not keep(line):
            continue
        try:
            sys.stdout.write(line)
            sys.stdout.flush()
        except (OSError, ValueError):  # stdout closed: keep draining so dagster never blocks
            shown = False
    source.close()


def stop_process_group(
    proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 60.0
) -> None:
    """Stop ``proc`` (leader of its own process group) and wait until nothing of the group runs.

    ``sig`` goes to the group unless the leader has exited already; whatever still runs after
    ``timeout_s`` gets SIGKILL. ``dagster dev`` exits before its webserver, daemon and code
    servers have: they are in its group. Once the leader has exited, ``sig`` goes to the group
    again every :data:`STRAGGLER_SIGNAL_S`: a process started after the first signal (``dagster
    dev`` may restart a code server while it shuts down) never got it, and would otherwise run
    until its own heartbeat times out.
    """
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    deadline = time.monotonic() + timeout_s
    resignal = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            now = time.monotonic()
            if resignal is None:
                resignal = now + STRAGGLER_SIGNAL_S
            elif now >= resignal:
                resignal = now + STRAGGLER_SIGNAL_S
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(30)

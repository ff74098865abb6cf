"""``dagster dev`` as a child of ``trident ui``: its log without idle ticks."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import IO

__all__ = ["IdleTickFilter", "copy_filtered"]

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

"""A driver crash at one of the runner's fault points, for the tests that replay after one."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Crash", "crash_at"]


class Crash(RuntimeError):
    """The driver died at a fault point (raised in place of a SIGKILL)."""


def crash_at(point: str) -> Callable[[str], None]:
    """A runner ``fault`` that raises :class:`Crash` at ``point`` (``after_state_write``, ...)."""

    def fault(where: str) -> None:
        if where == point:
            raise Crash(where)

    return fault

"""A context manager that closes its object on exit (stores, backing maps, Kafka clients)."""

from __future__ import annotations

import abc
from typing import Self

__all__ = ["ClosesOnExit"]


class ClosesOnExit(abc.ABC):
    """``with obj:`` returns ``obj`` and calls :meth:`close` on exit, even after an error."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what the object holds (idempotent)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

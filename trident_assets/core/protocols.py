"""The state protocols: what Trident calls State, MapState, Snapshottable and IBackingMap.

Keys are tuples of group values. A value updater is any callable ``stored_or_None -> new``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = [
    "BackingMap",
    "Key",
    "MapState",
    "ReadOnlyMapState",
    "Snapshottable",
    "State",
    "ValueUpdater",
]

T = TypeVar("T")
"""The type of value a state holds."""

Key = tuple[Any, ...]
"""A state key: the values of the group fields, in order."""

ValueUpdater = Callable[[Any], Any]
"""Maps the stored value (``None`` if absent) to the new value."""


@runtime_checkable
class State(Protocol):
    """A state taking part in the commit phase of batch ``txid`` (None for ad-hoc batches)."""

    def begin_commit(self, txid: int | None) -> None:
        """Start applying batch ``txid``."""

    def commit(self, txid: int | None) -> None:
        """Finish applying batch ``txid``."""


@runtime_checkable
class BackingMap(Protocol[T]):
    """Plain bulk storage: knows nothing about txids. One call handles every key of a batch."""

    def multi_get(self, keys: Sequence[Key]) -> list[T | None]:
        """Return the stored value of each key (``None`` where absent), in key order."""

    def multi_put(self, keys: Sequence[Key], values: Sequence[T]) -> None:
        """Store ``values[i]`` under ``keys[i]``."""


@runtime_checkable
class ReadOnlyMapState(State, Protocol[T]):
    """A keyed state that can be read in bulk."""

    def multi_get(self, keys: Sequence[Key]) -> list[T | None]:
        """Return the current value of each key (``None`` where absent)."""


@runtime_checkable
class MapState(ReadOnlyMapState[T], Protocol[T]):
    """A keyed state updated in bulk, once per batch."""

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[ValueUpdater]) -> list[T | None]:
        """Apply ``updaters[i]`` to the value of ``keys[i]``; return the new values in key order."""

    def multi_put(self, keys: Sequence[Key], values: Sequence[T | None]) -> None:
        """Set each key's value."""


@runtime_checkable
class Snapshottable(State, Protocol[T]):
    """A single global value (ungrouped ``persistent_aggregate``)."""

    def get(self) -> T | None:
        """Return the current value."""

    def update(self, updater: ValueUpdater) -> T | None:
        """Apply ``updater`` to the value and return the new value."""

    def set(self, value: T | None) -> None:
        """Replace the value."""

"""Query functions for ``state_query``: one bulk lookup per batch, one result per input tuple."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from trident_assets.core.protocols import ReadOnlyMapState

__all__ = ["MapGet", "QueryFunction", "SnapshotGet"]


class QueryFunction(ABC):
    """Reads a state for a whole batch at once (Trident's ``QueryFunction.batchRetrieve``).

    ``batch_retrieve`` is called ONCE per batch with every input tuple and must return one
    result per input, in order; the result is appended as the output field.
    """

    @abstractmethod
    def batch_retrieve(
        self, state: ReadOnlyMapState[Any], args: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        """Return one result per tuple of ``args``."""


class MapGet(QueryFunction):
    """Looks each tuple's fields up as a key of a map state (the value, or None if absent).

    Against a DuckDB state this runs as ONE SQL join per batch, without Python per key.
    """

    def batch_retrieve(
        self, state: ReadOnlyMapState[Any], args: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        """``state.multi_get(args)``."""
        return state.multi_get([tuple(a) for a in args])


class SnapshotGet(QueryFunction):
    """Returns the global value of an ungrouped state for every tuple."""

    def batch_retrieve(
        self, state: ReadOnlyMapState[Any], args: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        """The global value, repeated."""
        from trident_assets.core.caching import GLOBAL_KEY

        value = state.multi_get([GLOBAL_KEY])[0]
        return [value] * len(args)

"""Query functions for ``state_query``: one bulk lookup per batch, one result per input tuple."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from trident_assets.core.protocols import ReadOnlyMapState
from trident_assets.errors import ConfigError
from trident_assets.stream.fields import Fields, as_fields

__all__ = ["MapGet", "QueryFunction", "SnapshotGet", "TupleCollectionGet"]


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


class TupleCollectionGet(QueryFunction):
    """Emits every (key..., value) tuple of a state for each input tuple (all-tuples query).

    ``stream.state_query(state, [], TupleCollectionGet(), ["word", "count"])`` appends the
    state's key fields and value field (renamed to the given output fields, in that order):
    one output tuple per (input tuple, state tuple) pair, so an input tuple meets every
    tuple of the state and a state without tuples drops every input tuple. A global
    (ungrouped) state has one tuple, its value. The state is read as committed before the
    batch, with ONE SQL statement per batch; the cross product runs in Spark. Typical use:
    after ``global_()`` or ``broadcast()`` on a stream of one trigger tuple per batch.

    It reads map states (``persistent_aggregate``) and static states; a ``partition_persist``
    or single-join state has no (key, value) tuples.
    """

    def batch_retrieve(
        self, state: ReadOnlyMapState[Any], args: Sequence[tuple[Any, ...]]
    ) -> list[Any]:
        """Not used: the executor reads every tuple with one statement.

        Raises:
            ConfigError: always (TupleCollectionGet emits several tuples per input).
        """
        msg = "TupleCollectionGet emits several tuples per input; only state_query runs it"
        raise ConfigError(msg)

    @staticmethod
    def output_fields(state: Any, outputs: Fields) -> tuple[str, ...]:
        """Validate ``outputs`` against ``state``'s key fields + value field (declaration).

        Raises:
            ConfigError: the state has no (key, value) tuples, or ``outputs`` does not name
                one field per key field plus one for the value.
        """
        outs = as_fields(outputs, "state_query outputs")
        value = getattr(state, "value_field", None)
        if value is None:
            msg = (
                f"TupleCollectionGet reads (key..., value) tuples; state {state.spec.name!r} "
                "is not a map state (persistent_aggregate or static state)"
            )
            raise ConfigError(msg)
        expected = (*state.group, value)
        if len(outs) != len(expected):
            msg = (
                f"TupleCollectionGet over state {state.spec.name!r} emits {len(expected)} fields "
                f"(its keys and value {list(expected)}), got {len(outs)} output fields {list(outs)}"
            )
            raise ConfigError(msg)
        return outs

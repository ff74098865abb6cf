"""Aggregators and the value updaters that apply them to a state.

* ``CombinerAggregator``: ``init(tuple)`` per tuple, ``combine(a, b)`` associative, ``zero()``
  for an empty batch. Partials can be combined before the shuffle; a combiner whose
  ``sql_combine`` is set is applied to DuckDB state by one SQL statement per batch.
* ``ReducerAggregator``: ``init()`` then ``reduce(acc, tuple)`` over the tuples of a group.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, TypeAlias, TypeVar

from trident_assets.core.protocols import Key, MapState
from trident_assets.errors import ConfigError

__all__ = [
    "Aggregator",
    "CombinerAggregator",
    "CombinerValueUpdater",
    "Count",
    "DistinctCount",
    "Max",
    "Min",
    "ReducerAggregator",
    "ReducerValueUpdater",
    "Sum",
    "apply_combiner",
    "apply_reducer",
    "check_aggregator",
    "is_sql_combiner",
]

T = TypeVar("T")
"""The aggregated value type."""

SqlCombine = Literal["sum", "min", "max"]


class CombinerAggregator(ABC, Generic[T]):
    """An associative aggregation: partials may be combined in any grouping and order."""

    sql_combine: ClassVar[SqlCombine | None] = None
    """How SQL combines two partials (``sum``/``min``/``max``), or None for Python only."""
    output_type: ClassVar[str | None] = None
    """The SQL type of a partial (e.g. ``"bigint"``); Python-only combiners must set it."""

    @abstractmethod
    def init(self, values: tuple[Any, ...]) -> T:
        """Return the partial for one input tuple (the values of the input fields)."""

    @abstractmethod
    def combine(self, a: T, b: T) -> T:
        """Combine two partials."""

    @abstractmethod
    def zero(self) -> T:
        """Return the aggregate of an empty batch."""


class ReducerAggregator(ABC, Generic[T]):
    """A sequential aggregation over a group's tuples; it is not split before the shuffle."""

    @abstractmethod
    def init(self) -> T:
        """Return the starting accumulator for a key with no stored value."""

    @abstractmethod
    def reduce(self, acc: T, values: tuple[Any, ...]) -> T:
        """Fold one input tuple into the accumulator."""


Aggregator: TypeAlias = CombinerAggregator[Any] | ReducerAggregator[Any]
"""A combiner or a reducer (what ``aggregate`` and ``partition_aggregate`` take)."""


class Count(CombinerAggregator[int]):
    """Counts tuples, as Trident's Count: a tuple whose input value is null counts too."""

    sql_combine = "sum"
    output_type = "bigint"

    def init(self, values: tuple[Any, ...]) -> int:
        """One per tuple."""
        return 1

    def combine(self, a: int, b: int) -> int:
        """Add counts."""
        return a + b

    def zero(self) -> int:
        """Zero tuples."""
        return 0


class Sum(CombinerAggregator[Any]):
    """Sums the first input field (ints stay ints; floats and Decimals promote as in Python).

    Null values are skipped, whatever else the batch holds: ``{5, null}`` sums to 5. As a
    state (``persistent_aggregate``), the batch outcome counts them
    (``StateOutcome.null_values_skipped``) and a key whose values in a batch are all null is
    not updated, as if absent from the batch; a global state treats a batch of only nulls
    as an empty batch (``zero()``). In Python, ``init`` of a null is ``0``.
    """

    sql_combine = "sum"

    def init(self, values: tuple[Any, ...]) -> Any:
        """The tuple's value, or ``0`` for a null value (skipped)."""
        return 0 if values[0] is None else values[0]

    def combine(self, a: Any, b: Any) -> Any:
        """Add partial sums."""
        return a + b

    def zero(self) -> Any:
        """An empty sum."""
        return 0


class _Extreme(CombinerAggregator[Any]):
    def init(self, values: tuple[Any, ...]) -> Any:
        return values[0]

    def zero(self) -> Any:
        return None

    def _pick(self, a: Any, b: Any, pick_a: bool) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return a if pick_a else b


class Min(_Extreme):
    """The smallest value of the first input field; ties keep the later one.

    Null values are skipped and counted exactly as :class:`Sum`'s.
    """

    sql_combine = "min"

    def combine(self, a: Any, b: Any) -> Any:
        """The smaller partial."""
        return self._pick(a, b, a is not None and b is not None and a < b)


class Max(_Extreme):
    """The largest value of the first input field; ties keep the later one.

    Null values are skipped and counted exactly as :class:`Sum`'s.
    """

    sql_combine = "max"

    def combine(self, a: Any, b: Any) -> Any:
        """The larger partial."""
        return self._pick(a, b, a is not None and b is not None and a > b)


class DistinctCount:
    """The number of distinct values of one input field per key, each counted once.

    For ``persistent_aggregate`` only: the state keeps the values it has seen per key (with
    the txid that first saw each), so a value seen again, in a later batch or a replayed
    txid, is not counted again. Null values are not counted.
    """

    output_type: ClassVar[str] = "bigint"
    """The SQL type of the count."""

    def __repr__(self) -> str:
        return "DistinctCount()"


def is_sql_combiner(agg: Any) -> bool:
    """True for the built-ins whose partials Spark computes and DuckDB merges in SQL."""
    return isinstance(agg, Count | Sum | Min | Max)


def check_aggregator(agg: Any, inputs: Sequence[str], operation: str) -> None:
    """Declaration check: a combiner (of one input field) or a reducer, typed unless built in.

    Raises:
        ConfigError: naming ``operation`` and what is wrong: another kind of aggregator, a
            combiner over several fields, or a Python aggregator without ``output_type``.
    """
    if not isinstance(agg, CombinerAggregator | ReducerAggregator):
        msg = f"{operation} needs a CombinerAggregator or ReducerAggregator, got {agg!r}"
        raise ConfigError(msg)
    if isinstance(agg, CombinerAggregator) and len(inputs) != 1:
        msg = f"{operation}: combiner aggregators take a single input field, got {list(inputs)}"
        raise ConfigError(msg)
    if not is_sql_combiner(agg) and not getattr(agg, "output_type", None):
        msg = (
            f"{operation}: {type(agg).__name__} is a Python aggregator: set its class attribute "
            "output_type to the SQL type of its result (e.g. output_type = 'bigint')"
        )
        raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class CombinerValueUpdater(Generic[T]):
    """Combine a batch partial into the stored value: ``arg`` if absent, else ``combine``."""

    agg: CombinerAggregator[T]
    arg: T

    def __call__(self, stored: T | None) -> T:
        """Return the new stored value."""
        return self.arg if stored is None else self.agg.combine(stored, self.arg)


@dataclass(frozen=True, slots=True)
class ReducerValueUpdater(Generic[T]):
    """Reduce a group's tuples onto the stored value (``init()`` if absent)."""

    agg: ReducerAggregator[T]
    tuples: Sequence[tuple[Any, ...]]

    def __call__(self, stored: T | None) -> T:
        """Return the new stored value."""
        acc = self.agg.init() if stored is None else stored
        for values in self.tuples:
            acc = self.agg.reduce(acc, values)
        return acc


def apply_combiner(
    state: MapState[T], agg: CombinerAggregator[T], keys: Sequence[Key], partials: Sequence[T]
) -> list[T | None]:
    """Apply one batch of per-key partials with ONE ``multi_update``; return the new values.

    Mirrors ``MapCombinerAggStateUpdater``: the caller passes one partial per key, already
    combined within the batch.
    """
    return state.multi_update(keys, [CombinerValueUpdater(agg, p) for p in partials])


def apply_reducer(
    state: MapState[T],
    agg: ReducerAggregator[T],
    keys: Sequence[Key],
    tuples: Sequence[tuple[Any, ...]],
) -> tuple[list[Key], list[T | None]]:
    """Group ``tuples`` by ``keys[i]`` and reduce each group with ONE ``multi_update``.

    Returns the unique keys (first-seen order) and their new values (``MapReducerAggStateUpdater``).
    """
    groups: dict[Key, list[tuple[Any, ...]]] = {}
    for key, values in zip(keys, tuples, strict=True):
        groups.setdefault(key, []).append(values)
    unique = list(groups)
    new = state.multi_update(unique, [ReducerValueUpdater(agg, groups[k]) for k in unique])
    return unique, new

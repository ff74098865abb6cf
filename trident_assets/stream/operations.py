"""Functions, filters and query functions that streams apply, with their Spark implementations.

Built-ins run as Spark column expressions. User Python runs as vectorised pandas UDFs
(Arrow batches), never as a loop on the driver. Spark is imported only when a batch runs.

This module holds the functions of ``each`` (:class:`Function`: fields appended to the
tuple) and the filters; the map and flat-map functions are in
:mod:`trident_assets.stream.map_functions` and the typing of Python functions' outputs in
:mod:`trident_assets.stream.typed_outputs` (their classes are re-exported here).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from trident_assets.core.user_code import call
from trident_assets.errors import ConfigError
from trident_assets.stream.map_functions import (
    FlatMapFunction,
    MapFunction,
    PandasFlatMap,
    PandasMap,
    PyFlatMap,
    PyMap,
    SqlFlatMap,
    SqlMap,
)
from trident_assets.stream.typed_outputs import (
    arrow_schema,
    call_rows,
    check_typed,
    output_ddl,
    typed_outputs,
)

__all__ = [
    "Filter",
    "FilterNull",
    "FlatMapFunction",
    "Function",
    "MapFunction",
    "PandasFlatMap",
    "PandasMap",
    "PyFilter",
    "PyFlatMap",
    "PyFunction",
    "PyMap",
    "Split",
    "SqlFlatMap",
    "SqlMap",
]


def _one(fields: Sequence[str], what: str, op: str) -> str:
    if len(fields) != 1:
        msg = f"{op} takes exactly one {what} field, got {list(fields)}"
        raise ConfigError(msg)
    return fields[0]


class Function(ABC):
    """A Trident function: appends output fields to each input tuple.

    It may emit zero (the tuple is dropped), one or several outputs per input.
    """

    def validate(self, inputs: Sequence[str], outputs: Sequence[str]) -> None:  # noqa: B027
        """Check the field counts at declaration; raise ConfigError if they do not fit."""

    @abstractmethod
    def apply(
        self, df: Any, inputs: Sequence[str], outputs: Sequence[str], step: str = "each"
    ) -> Any:
        """Return ``df`` with the output columns appended (a Spark DataFrame).

        ``step`` names the operation in errors raised by user code.
        """


class Split(Function):
    """Splits a string field on a separator, one output per non-empty piece (Storm's Split)."""

    def __init__(self, sep: str = " ") -> None:
        """Split on the literal ``sep`` (default a single space)."""
        if not sep:
            msg = "Split needs a non-empty separator"
            raise ConfigError(msg)
        self.sep = sep

    def validate(self, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        """One input, one output."""
        _one(inputs, "input", "Split")
        _one(outputs, "output", "Split")

    def apply(
        self, df: Any, inputs: Sequence[str], outputs: Sequence[str], step: str = "each"
    ) -> Any:
        """Explode the split pieces into the output column, dropping empty ones."""
        from pyspark.sql import functions as F

        out = outputs[0]
        pieces = F.explode(F.split(F.col(inputs[0]), re.escape(self.sep)))
        return df.withColumn(out, pieces).where(F.col(out) != F.lit(""))


class PyFunction(Function):
    """A user function ``fn(*input_values) -> iterable of output tuples`` (Trident's Function).

    Runs per tuple in ``mapInArrow`` on Spark's Python workers: each output tuple is appended
    to a copy of the input tuple; none drops it. An exception, or an output of the wrong
    width, fails the batch with a :class:`~trident_assets.errors.UserCodeError` naming the
    operation, ``fn`` and the input tuple.

    Args:
        fn: called once per input tuple; returns the tuples to append (possibly none).
        output_types: the Spark SQL type of each output field, e.g. ``{"len": "bigint"}``.
    """

    def __init__(
        self, fn: Callable[..., Iterable[Sequence[Any]]], output_types: Mapping[str, str]
    ) -> None:
        """Wrap ``fn``; ``output_types`` maps output field -> Spark type.

        Raises:
            ConfigError: ``output_types`` is not a mapping of field names to Spark types.
        """
        self.fn = fn
        self.output_types = typed_outputs("PyFunction", output_types)

    def validate(self, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        """The output fields must be exactly those typed in ``output_types``."""
        check_typed("PyFunction", self.output_types, inputs, outputs)

    def apply(
        self, df: Any, inputs: Sequence[str], outputs: Sequence[str], step: str = "each"
    ) -> Any:
        """The input tuples, each repeated once per output tuple, with the outputs appended."""
        import pyarrow as pa
        from pyspark.sql.types import StructType

        types = [self.output_types[o] for o in outputs]
        added = cast("StructType", StructType.fromDDL(output_ddl(outputs, types)))
        result_type = StructType([*df.schema.fields, *added.fields])
        schema = arrow_schema(result_type)
        added_fields = list(arrow_schema(added))
        positions = [df.columns.index(c) for c in inputs]
        fn, label = self.fn, f"{step} [PyFunction]"

        def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
            for batch in batches:
                args = list(zip(*(batch.column(i).to_pylist() for i in positions), strict=True))
                added_arrays, rows = call_rows(label, fn, args, True, added_fields, types)
                kept = batch.take(pa.array(rows, pa.int64()))
                yield pa.RecordBatch.from_arrays([*kept.columns, *added_arrays], schema=schema)

        return df.mapInArrow(run, result_type)


class Filter(ABC):  # noqa: B024 (either method may be overridden)
    """A Trident filter: keeps the tuples for which the condition holds.

    Built-ins give a Spark boolean Column (:meth:`condition`); Python filters override
    :meth:`apply`.
    """

    def condition(self, inputs: Sequence[str]) -> Any:
        """Return a Spark boolean Column over the input fields."""
        msg = f"{type(self).__name__} must implement condition(inputs) or apply(df, inputs)"
        raise ConfigError(msg)

    def apply(self, df: Any, inputs: Sequence[str], step: str = "filter") -> Any:
        """``df`` without the tuples for which the filter does not hold."""
        return df.where(self.condition(inputs))


class FilterNull(Filter):
    """Keeps tuples whose input fields are all non-null."""

    def condition(self, inputs: Sequence[str]) -> Any:
        """All inputs are not null."""
        from pyspark.sql import functions as F

        cond = F.lit(True)
        for name in inputs:
            cond = cond & F.col(name).isNotNull()
        return cond


class PyFilter(Filter):
    """A user predicate ``fn(*input_values) -> bool`` (Trident's ``BaseFilter.isKeep``).

    Runs per tuple in ``mapInArrow`` on Spark's Python workers; an exception fails the
    batch with a :class:`~trident_assets.errors.UserCodeError` naming ``fn`` and the tuple.
    """

    def __init__(self, fn: Callable[..., bool]) -> None:
        """Wrap ``fn``."""
        self.fn = fn

    def apply(self, df: Any, inputs: Sequence[str], step: str = "filter") -> Any:
        """Keep the rows of each Arrow batch whose inputs ``fn`` accepts."""
        import pyarrow as pa

        positions = [df.columns.index(c) for c in inputs]
        fn, label = self.fn, f"{step} [PyFilter]"

        def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
            for batch in batches:
                args = zip(*(batch.column(i).to_pylist() for i in positions), strict=True)
                keep = [bool(call(label, fn, values)) for values in args]
                yield batch.filter(pa.array(keep, pa.bool_()))

        return df.mapInArrow(run, df.schema)

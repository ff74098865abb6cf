"""Functions, filters and query functions that streams apply, with their Spark implementations.

Built-ins run as Spark column expressions. User Python runs as vectorised pandas UDFs
(Arrow batches), never as a loop on the driver. Spark is imported only when a batch runs.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from trident_assets.core.user_code import call, call_many, failure, short_repr
from trident_assets.errors import ConfigError
from trident_assets.names import validate_identifier
from trident_assets.stream.fields import as_fields
from trident_assets.stream.sql_types import check_spark_type

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
        self.output_types = _typed_outputs("PyFunction", output_types)

    def validate(self, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        """The output fields must be exactly those typed in ``output_types``."""
        if list(outputs) != list(self.output_types):
            msg = (
                f"PyFunction outputs {list(outputs)} must match the keys of output_types "
                f"{list(self.output_types)}"
            )
            raise ConfigError(msg)

    def apply(
        self, df: Any, inputs: Sequence[str], outputs: Sequence[str], step: str = "each"
    ) -> Any:
        """The input tuples, each repeated once per output tuple, with the outputs appended."""
        import pyarrow as pa
        from pyspark.sql.types import StructType

        types = [self.output_types[o] for o in outputs]
        added = StructType.fromDDL(_ddl(outputs, types))
        result_type = StructType([*df.schema.fields, *added.fields])
        schema = _arrow_schema(result_type)
        added_fields = list(_arrow_schema(added))
        positions = [df.columns.index(c) for c in inputs]
        fn, width, label = self.fn, len(outputs), f"{step} [PyFunction]"

        def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
            for batch in batches:
                args = zip(*(batch.column(i).to_pylist() for i in positions), strict=True)
                rows: list[int] = []
                origins: list[tuple[Any, ...]] = []
                out: list[tuple[Any, ...]] = []
                for index, values in enumerate(args):
                    for result in call_many(label, fn, values):
                        out.append(_as_values(result, width, label, fn, values))
                        rows.append(index)
                        origins.append(values)
                kept = batch.take(pa.array(rows, pa.int64()))
                columns = [list(c) for c in zip(*out, strict=True)] if out else [[]] * width
                added_arrays = _output_arrays(columns, added_fields, types, label, fn, origins)
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


# -- map and flat_map: one tuple in, fresh tuples out (Trident's MapFunction / FlatMapFunction) --

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _sql_fields(expression: str, what: str) -> tuple[str, ...]:
    """The ``{field}`` references of a SQL expression, validated as identifiers."""
    if not isinstance(expression, str) or not expression.strip():
        msg = f"{what} needs a non-empty SQL expression, got {expression!r}"
        raise ConfigError(msg)
    names = tuple(dict.fromkeys(_PLACEHOLDER.findall(expression)))
    for name in names:
        validate_identifier(name, f"field (in {what} expression {expression!r})")
    return names


def _sql_text(expression: str) -> str:
    """``expression`` with each ``{field}`` replaced by the quoted column name."""
    return _PLACEHOLDER.sub(lambda m: f"`{m.group(1)}`", expression)


class _FreshFunction(ABC):
    """Shared contract of map and flat-map functions: they replace the whole tuple.

    The function sees every field of the stream and emits tuples of ``outputs`` only (the
    stream's fields unless others are declared), as Trident's ``map``/``flatMap``.
    """

    def referenced_fields(self) -> tuple[str, ...]:
        """Fields the function names explicitly (checked against the stream at declaration)."""
        return ()

    def default_outputs(self, fields: Sequence[str]) -> tuple[str, ...]:
        """The output fields when none are declared: the stream's (Trident keeps them)."""
        return tuple(fields)

    def validate(self, fields: Sequence[str], outputs: Sequence[str]) -> None:  # noqa: B027
        """Check the outputs fit the function; raise ConfigError if not."""

    @abstractmethod
    def apply(self, df: Any, outputs: Sequence[str], step: str = "map") -> Any:
        """Return a DataFrame of exactly the ``outputs`` columns (a Spark DataFrame).

        ``step`` names the operation in errors raised by user code.
        """


class MapFunction(_FreshFunction):
    """One tuple in, exactly one tuple out (Trident's ``MapFunction``)."""


class FlatMapFunction(_FreshFunction):
    """One tuple in, zero or more tuples out (Trident's ``FlatMapFunction``)."""


class SqlMap(MapFunction):
    """A map as Spark SQL column expressions, one per output field, in order.

    Fields are referenced as ``{name}`` (validated at declaration), e.g.
    ``SqlMap("lower({word})", "length({word})")`` with outputs ``["word", "n"]``.
    """

    def __init__(self, *expressions: str) -> None:
        """One SQL expression per output field."""
        if not expressions:
            msg = "SqlMap needs at least one expression"
            raise ConfigError(msg)
        self.expressions = expressions
        self._fields = tuple(
            dict.fromkeys(f for e in expressions for f in _sql_fields(e, "SqlMap"))
        )

    def referenced_fields(self) -> tuple[str, ...]:
        """The ``{field}`` references."""
        return self._fields

    def validate(self, fields: Sequence[str], outputs: Sequence[str]) -> None:
        """One expression per output field."""
        if len(outputs) != len(self.expressions):
            msg = (
                f"SqlMap has {len(self.expressions)} expressions for {len(outputs)} output "
                f"fields {list(outputs)}; give one expression per output field"
            )
            raise ConfigError(msg)

    def apply(self, df: Any, outputs: Sequence[str], step: str = "map") -> Any:
        """``select(expr AS output, ...)``."""
        from pyspark.sql import functions as F

        return df.select(
            *[F.expr(_sql_text(e)).alias(o) for e, o in zip(self.expressions, outputs, strict=True)]
        )


class SqlFlatMap(FlatMapFunction):
    """A flat map as a Spark SQL expression returning an array, exploded to one tuple each.

    With one output field the array's elements are the values; with several, the elements
    must be structs whose fields map to the outputs by position. A null or empty array emits
    nothing (the tuple is dropped). E.g. ``SqlFlatMap("split({sentence}, ' ')")``.
    """

    def __init__(self, expression: str) -> None:
        """The array-valued SQL expression."""
        self._fields = _sql_fields(expression, "SqlFlatMap")
        self.expression = expression

    def referenced_fields(self) -> tuple[str, ...]:
        """The ``{field}`` references."""
        return self._fields

    def apply(self, df: Any, outputs: Sequence[str], step: str = "flat_map") -> Any:
        """``explode`` (one output) or ``inline`` (struct elements) of the array."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, StructType

        array = F.expr(_sql_text(self.expression))
        kind = df.select(array.alias("a")).schema["a"].dataType
        if not isinstance(kind, ArrayType):
            msg = f"SqlFlatMap expression {self.expression!r} must return an array, not {kind}"
            raise ConfigError(msg)
        element = kind.elementType
        if isinstance(element, StructType):
            if len(element.fields) != len(outputs):
                msg = (
                    f"SqlFlatMap elements have {len(element.fields)} fields for outputs "
                    f"{list(outputs)}"
                )
                raise ConfigError(msg)
            return df.select(F.inline(array)).toDF(*outputs)
        if len(outputs) != 1:
            msg = f"SqlFlatMap of non-struct elements emits one field, not {list(outputs)}"
            raise ConfigError(msg)
        return df.select(F.explode(array).alias(outputs[0]))


def _typed_outputs(name: str, output_types: object) -> dict[str, str]:
    """``output_types`` as a dict, its names and Spark types checked.

    Raises:
        ConfigError: not a mapping, a bad field name, or a type not in ``SPARK_TYPES``.
    """
    if not isinstance(output_types, Mapping):
        msg = (
            f"{name} output_types must map each output field to its Spark type, e.g. "
            f"{{'len': 'bigint'}}, got {output_types!r}"
        )
        raise ConfigError(msg)
    as_fields(tuple(output_types), f"{name} output_types")
    for field, declared in output_types.items():
        check_spark_type(declared, f"{name} output {field!r}")
    return dict(output_types)


def _ddl(names: Sequence[str], types: Sequence[str]) -> str:
    return ", ".join(f"`{n}` {t}" for n, t in zip(names, types, strict=True))


def _output_types(declared: Mapping[str, str] | None, df: Any, outputs: Sequence[str]) -> list[str]:
    """Declared Spark types of ``outputs``, else the input field types by position."""
    if declared is not None:
        return [declared[o] for o in outputs]
    return [f.dataType.simpleString() for f in df.schema.fields]


def _check_typed(
    name: str, declared: Mapping[str, str] | None, fields: Sequence[str], outputs: Sequence[str]
) -> None:
    if declared is not None:
        if list(declared) != list(outputs):
            msg = (
                f"{name} outputs {list(outputs)} must match the keys of output_types "
                f"{list(declared)}"
            )
            raise ConfigError(msg)
        return
    if len(outputs) != len(fields):
        msg = (
            f"{name} without output_types keeps the input field types by position: it needs "
            f"{len(fields)} outputs (the stream has {list(fields)}), got {list(outputs)}; "
            "declare output_types for other outputs"
        )
        raise ConfigError(msg)


def _arrow_schema(spark_type: Any) -> Any:
    """The Arrow schema of a Spark struct or DDL (computed on the driver, shipped to workers)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    struct = StructType.fromDDL(spark_type) if isinstance(spark_type, str) else spark_type
    return to_arrow_schema(struct, timezone="UTC")


def _as_values(
    result: Any, width: int, step: str, fn: Any, values: tuple[Any, ...]
) -> tuple[Any, ...]:
    """One output tuple of ``width`` values (a bare value when ``width`` is 1)."""
    out = tuple(result) if isinstance(result, tuple | list) else (result,)
    if len(out) != width:
        why = f"expected {width} output values, got {len(out)}: {out!r}"
        raise failure(step, fn, "input tuple", values, why)
    return out


def _output_arrays(
    columns: Sequence[list[Any]],
    fields: Sequence[Any],
    types: Sequence[str],
    step: str,
    fn: Any,
    origins: Sequence[tuple[Any, ...]],
) -> list[Any]:
    """``columns[j]`` as an Arrow array of ``fields[j]`` (declared Spark type ``types[j]``).

    Raises:
        UserCodeError: a value does not convert to its field's type (e.g. a dict or a str
            for a ``bigint``); the message names the field, the value and the input tuple
            ``origins[i]`` it was returned for.
    """
    import pyarrow as pa

    arrays = []
    for column, field, declared in zip(columns, fields, types, strict=True):
        try:
            arrays.append(pa.array(column, type=field.type))
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            i = _first_misfit(column, field.type)
            why = (
                f"returned {short_repr(column[i])} (a {type(column[i]).__name__}) for output field "
                f"{field.name!r}, declared {declared}; return values of that type"
            )
            raise failure(step, fn, "input tuple", origins[i], why) from exc
    return arrays


def _first_misfit(column: Sequence[Any], kind: Any) -> int:
    """The index of the first value of ``column`` that Arrow cannot convert to ``kind``."""
    import pyarrow as pa

    for i, value in enumerate(column):
        try:
            pa.array([value], type=kind)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return i
    return 0


class _PythonFunction(_FreshFunction):
    """A user Python function whose outputs are typed by ``output_types`` or the inputs."""

    def __init__(
        self, fn: Callable[..., Any], output_types: Mapping[str, str] | None = None
    ) -> None:
        """Wrap ``fn``; ``output_types`` maps each output field to its Spark SQL type.

        Raises:
            ConfigError: ``output_types`` is not a mapping of field names to Spark types.
        """
        self.fn = fn
        self.output_types = (
            None if output_types is None else _typed_outputs(type(self).__name__, output_types)
        )

    def default_outputs(self, fields: Sequence[str]) -> tuple[str, ...]:
        """The keys of ``output_types`` if given, else the stream's fields."""
        return tuple(fields) if self.output_types is None else tuple(self.output_types)

    def validate(self, fields: Sequence[str], outputs: Sequence[str]) -> None:
        """The outputs are typed by ``output_types`` or by the input fields' types."""
        _check_typed(type(self).__name__, self.output_types, fields, outputs)


class _RowFunction(_PythonFunction):
    """A Python function per tuple, run inside ``mapInArrow`` on the executors."""

    flat = False

    def apply(self, df: Any, outputs: Sequence[str], step: str = "map") -> Any:
        """Run ``fn`` over each Arrow record batch of each Spark partition."""
        import pyarrow as pa

        types = _output_types(self.output_types, df, outputs)
        ddl = _ddl(outputs, types)
        schema = _arrow_schema(ddl)
        fn, flat, width = self.fn, self.flat, len(outputs)
        label = f"{step} [{type(self).__name__}]"

        def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
            for batch in batches:
                rows = list(zip(*(c.to_pylist() for c in batch.columns), strict=True))
                if flat:
                    pairs = [
                        (_as_values(r, width, label, fn, row), row)
                        for row in rows
                        for r in call_many(label, fn, row)
                    ]
                    out = [values for values, _ in pairs]
                    origins = [row for _, row in pairs]
                else:
                    out = [_as_values(call(label, fn, row), width, label, fn, row) for row in rows]
                    origins = rows
                columns = [list(c) for c in zip(*out, strict=True)] if out else [[]] * width
                yield pa.RecordBatch.from_arrays(
                    _output_arrays(columns, list(schema), types, label, fn, origins),
                    schema=schema,
                )

        return df.mapInArrow(run, ddl)


class PyMap(_RowFunction, MapFunction):
    """A Python ``fn(*values) -> values`` per tuple, run in ``mapInArrow`` on the executors.

    ``fn`` gets every field of the tuple and returns a tuple of the output values (or one
    value when there is one output). Without ``output_types`` the outputs keep the input
    types by position.
    """


class PyFlatMap(_RowFunction, FlatMapFunction):
    """A Python ``fn(*values) -> iterable of value tuples`` per tuple, run in ``mapInArrow``.

    Each yielded tuple becomes one output tuple; yielding nothing drops the input tuple.
    """

    flat = True


class _PandasFunction(_PythonFunction):
    """A vectorised pandas function over chunks of a partition, run in ``mapInPandas``."""

    same_rows = True

    def apply(self, df: Any, outputs: Sequence[str], step: str = "map") -> Any:
        """``mapInPandas`` of ``fn``; the row count is checked for a map."""
        import pandas as pd

        ddl = _ddl(outputs, _output_types(self.output_types, df, outputs))
        fn, same, cols = self.fn, self.same_rows, list(outputs)
        label = f"{step} [{type(self).__name__}]"

        def run(chunks: Iterable[pd.DataFrame]) -> Iterable[pd.DataFrame]:
            for chunk in chunks:
                out = call(label, fn, (chunk,))
                first = chunk.head(1).to_dict("records")
                where = "chunk starting with tuple"
                if not isinstance(out, pd.DataFrame):
                    why = f"expected a pandas DataFrame, got {type(out).__name__}"
                    raise failure(label, fn, where, first, why)
                missing = [c for c in cols if c not in out.columns]
                if missing:
                    why = f"expected output columns {cols}, got {list(out)} (missing {missing})"
                    raise failure(label, fn, where, first, why)
                if same and len(out) != len(chunk):
                    why = f"a map is one to one: expected {len(chunk)} rows, got {len(out)}"
                    raise failure(label, fn, where, first, why)
                yield out[cols]

        return df.mapInPandas(run, ddl)


class PandasMap(_PandasFunction, MapFunction):
    """A vectorised ``fn(pandas.DataFrame) -> pandas.DataFrame`` run in ``mapInPandas``.

    ``fn`` gets chunks of a partition with every field as a column and returns the output
    columns (by name) for the same rows, in order. Without ``output_types`` the outputs keep
    the input types by position.
    """


class PandasFlatMap(_PandasFunction, FlatMapFunction):
    """A vectorised ``fn(pandas.DataFrame) -> pandas.DataFrame`` of any number of rows."""

    same_rows = False

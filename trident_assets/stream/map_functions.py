"""Map and flat-map functions: one tuple in, fresh tuples out (Trident's ``map``/``flatMap``).

The function sees every field of the stream and emits tuples of its output fields only.
:class:`SqlMap` and :class:`SqlFlatMap` run as Spark column expressions; :class:`PyMap` and
:class:`PyFlatMap` run a Python function per tuple in ``mapInArrow``, :class:`PandasMap` and
:class:`PandasFlatMap` a vectorised pandas function in ``mapInPandas``, on the executors.
Spark is imported only when a batch runs.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from trident_assets.core.user_code import call, failure
from trident_assets.errors import ConfigError
from trident_assets.names import validate_identifier
from trident_assets.stream.typed_outputs import (
    arrow_schema,
    call_rows,
    check_typed,
    output_ddl,
    output_types_of,
    typed_outputs,
)

__all__ = [
    "FlatMapFunction",
    "MapFunction",
    "PandasFlatMap",
    "PandasMap",
    "PyFlatMap",
    "PyMap",
    "SqlFlatMap",
    "SqlMap",
]

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

    _fields: tuple[str, ...] = ()

    def referenced_fields(self) -> tuple[str, ...]:
        """Fields the function names explicitly (checked against the stream at declaration)."""
        return self._fields

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
            None if output_types is None else typed_outputs(type(self).__name__, output_types)
        )

    def default_outputs(self, fields: Sequence[str]) -> tuple[str, ...]:
        """The keys of ``output_types`` if given, else the stream's fields."""
        return tuple(fields) if self.output_types is None else tuple(self.output_types)

    def validate(self, fields: Sequence[str], outputs: Sequence[str]) -> None:
        """The outputs are typed by ``output_types`` or by the input fields' types."""
        check_typed(type(self).__name__, self.output_types, fields, outputs)


class _RowFunction(_PythonFunction):
    """A Python function per tuple, run inside ``mapInArrow`` on the executors."""

    flat = False

    def apply(self, df: Any, outputs: Sequence[str], step: str = "map") -> Any:
        """Run ``fn`` over each Arrow record batch of each Spark partition."""
        import pyarrow as pa

        types = output_types_of(self.output_types, df, outputs)
        ddl = output_ddl(outputs, types)
        schema = arrow_schema(ddl)
        fn, flat, label = self.fn, self.flat, f"{step} [{type(self).__name__}]"

        def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
            for batch in batches:
                rows = list(zip(*(c.to_pylist() for c in batch.columns), strict=True))
                arrays, _ = call_rows(label, fn, rows, flat, list(schema), types)
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)

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

        ddl = output_ddl(outputs, output_types_of(self.output_types, df, outputs))
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

"""Functions, filters and query functions that streams apply, with their Spark implementations.

Built-ins run as Spark column expressions. User Python runs as vectorised pandas UDFs
(Arrow batches), never as a loop on the driver. Spark is imported only when a batch runs.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from trident_assets.errors import ConfigError

__all__ = [
    "Filter",
    "FilterNull",
    "Function",
    "PyFilter",
    "PyFunction",
    "Split",
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
    def apply(self, df: Any, inputs: Sequence[str], outputs: Sequence[str]) -> Any:
        """Return ``df`` with the output columns appended (a Spark DataFrame)."""


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

    def apply(self, df: Any, inputs: Sequence[str], outputs: Sequence[str]) -> Any:
        """Explode the split pieces into the output column, dropping empty ones."""
        from pyspark.sql import functions as F

        out = outputs[0]
        pieces = F.explode(F.split(F.col(inputs[0]), re.escape(self.sep)))
        return df.withColumn(out, pieces).where(F.col(out) != F.lit(""))


class PyFunction(Function):
    """A user function ``fn(*input_values) -> iterable of output tuples``, run as a pandas UDF.

    Args:
        fn: called once per input tuple; returns the tuples to append (possibly none).
        output_types: the Spark SQL type of each output field, e.g. ``{"len": "bigint"}``.
    """

    def __init__(
        self, fn: Callable[..., Iterable[Sequence[Any]]], output_types: Mapping[str, str]
    ) -> None:
        """Wrap ``fn``; ``output_types`` maps output field -> Spark type."""
        self.fn = fn
        self.output_types = dict(output_types)

    def validate(self, inputs: Sequence[str], outputs: Sequence[str]) -> None:
        """The output fields must be exactly those typed in ``output_types``."""
        if list(outputs) != list(self.output_types):
            msg = (
                f"PyFunction outputs {list(outputs)} must match the keys of output_types "
                f"{list(self.output_types)}"
            )
            raise ConfigError(msg)

    def apply(self, df: Any, inputs: Sequence[str], outputs: Sequence[str]) -> Any:
        """Explode the UDF's list of output structs into the output columns."""
        import pandas as pd
        from pyspark.sql import functions as F
        from pyspark.sql.functions import pandas_udf

        ddl = ", ".join(f"{name}: {typ}" for name, typ in self.output_types.items())
        fn = self.fn

        @pandas_udf(f"array<struct<{ddl}>>")  # type: ignore[call-overload]
        def _udf(*cols: pd.Series) -> pd.Series:
            return pd.Series([[tuple(out) for out in fn(*row)] for row in zip(*cols, strict=True)])

        tmp = "__trident_out"
        exploded = df.withColumn(tmp, F.explode(_udf(*[F.col(c) for c in inputs])))
        return exploded.select(
            *[F.col(c) for c in df.columns], *[F.col(f"{tmp}.{o}").alias(o) for o in outputs]
        )


class Filter(ABC):
    """A Trident filter: keeps the tuples for which the condition holds."""

    @abstractmethod
    def condition(self, inputs: Sequence[str]) -> Any:
        """Return a Spark boolean Column over the input fields."""


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
    """A user predicate ``fn(*input_values) -> bool``, run as a pandas UDF."""

    def __init__(self, fn: Callable[..., bool]) -> None:
        """Wrap ``fn``."""
        self.fn = fn

    def condition(self, inputs: Sequence[str]) -> Any:
        """The UDF's result."""
        import pandas as pd
        from pyspark.sql import functions as F
        from pyspark.sql.functions import pandas_udf

        fn = self.fn

        @pandas_udf("boolean")  # type: ignore[call-overload]
        def _udf(*cols: pd.Series) -> pd.Series:
            return pd.Series([bool(fn(*row)) for row in zip(*cols, strict=True)])

        return _udf(*[F.col(c) for c in inputs])

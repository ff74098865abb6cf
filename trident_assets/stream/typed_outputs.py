"""Typed outputs of user Python functions: declared Spark types, and their Arrow values.

A Python function's output fields are typed by its ``output_types`` (field name to Spark SQL
type) or, without them, by the input fields' types by position. These helpers check the
declaration, spell it as DDL and an Arrow schema, and turn the values the function returned
into Arrow arrays, naming the input tuple of a value that does not fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from trident_assets.core.user_code import call, call_many, failure, short_repr
from trident_assets.errors import ConfigError
from trident_assets.stream.fields import as_fields
from trident_assets.stream.sql_types import check_spark_type

__all__ = [
    "arrow_schema",
    "as_values",
    "call_rows",
    "check_typed",
    "output_arrays",
    "output_ddl",
    "output_types_of",
    "typed_outputs",
]


def typed_outputs(name: str, output_types: object) -> dict[str, str]:
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


def output_ddl(names: Sequence[str], types: Sequence[str]) -> str:
    r"""The DDL of fields ``names`` of Spark types ``types`` (``\`a\` bigint, ...``)."""
    return ", ".join(f"`{n}` {t}" for n, t in zip(names, types, strict=True))


def output_types_of(
    declared: Mapping[str, str] | None, df: Any, outputs: Sequence[str]
) -> list[str]:
    """Declared Spark types of ``outputs``, else the input field types by position."""
    if declared is not None:
        return [declared[o] for o in outputs]
    return [f.dataType.simpleString() for f in df.schema.fields]


def check_typed(
    name: str, declared: Mapping[str, str] | None, fields: Sequence[str], outputs: Sequence[str]
) -> None:
    """Check ``outputs`` against ``declared`` output types, or the input ``fields`` without them.

    Raises:
        ConfigError: the outputs differ from the declared ones, or (undeclared) their number
            differs from the input fields'.
    """
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


def arrow_schema(spark_type: Any) -> Any:
    """The Arrow schema of a Spark struct or DDL (computed on the driver, shipped to workers)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    struct = StructType.fromDDL(spark_type) if isinstance(spark_type, str) else spark_type
    return to_arrow_schema(cast("StructType", struct), timezone="UTC")


def as_values(
    result: Any, width: int, step: str, fn: Any, values: tuple[Any, ...]
) -> tuple[Any, ...]:
    """One output tuple of ``width`` values (a bare value when ``width`` is 1)."""
    out = tuple(result) if isinstance(result, tuple | list) else (result,)
    if len(out) != width:
        why = f"expected {width} output values, got {len(out)}: {out!r}"
        raise failure(step, fn, "input tuple", values, why)
    return out


def call_rows(
    step: str,
    fn: Any,
    rows: Sequence[tuple[Any, ...]],
    flat: bool,
    fields: Sequence[Any],
    types: Sequence[str],
) -> tuple[list[Any], list[int]]:
    """``fn`` over ``rows``: its :func:`output_arrays` and each output tuple's row index.

    ``flat``: ``fn`` returns an iterable of output tuples (else one output tuple).
    """
    out: list[tuple[Any, ...]] = []
    index: list[int] = []
    for i, row in enumerate(rows):
        for result in call_many(step, fn, row) if flat else (call(step, fn, row),):
            out.append(as_values(result, len(fields), step, fn, row))
            index.append(i)
    columns = [list(c) for c in zip(*out, strict=True)] if out else [[]] * len(fields)
    return output_arrays(columns, fields, types, step, fn, [rows[i] for i in index]), index


def output_arrays(
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

"""The checks a batch of partials passes before it is merged into a map table.

Names, key and value column types (Arrow to SQL), nulls, the combine, the txid, and the
stored table's layout against the batch's: each raises before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa

from trident_assets.backends.map_layout import MapLayout, kind_for_state_type
from trident_assets.backends.sql_store import StateStore
from trident_assets.core.values import StateType
from trident_assets.errors import AggregationError, ConfigError, StateLayoutError
from trident_assets.names import validate_identifier

__all__ = [
    "COMBINES",
    "Combine",
    "arrow_to_sql_type",
    "check_batch",
    "check_schema",
    "check_txid",
    "refuse_null_keys",
    "refuse_null_sum",
    "resolve_layout",
    "value_fits",
    "value_sql_type",
]

Combine = Literal["sum", "min", "max"]
"""How two partials combine in SQL."""

COMBINES: tuple[Combine, ...] = ("sum", "min", "max")
"""Every :data:`Combine`."""


_STRING_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)


def arrow_to_sql_type(arrow_type: pa.DataType, *, for_key: bool) -> str | None:
    """Return the column type that stores ``arrow_type``, or None if it has none.

    Integers -> BIGINT, floats -> DOUBLE, strings -> VARCHAR, booleans -> BOOLEAN, decimals
    -> DECIMAL(38, scale) (values only), binary -> BLOB (keys only).
    """
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_boolean(arrow_type):
        return "BOOLEAN"
    if pa.types.is_integer(arrow_type):
        return "BIGINT"
    if pa.types.is_floating(arrow_type):
        return "DOUBLE"
    if any(is_string(arrow_type) for is_string in _STRING_TYPES):
        return "VARCHAR"
    if for_key and (pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)):
        return "BLOB"
    if not for_key and pa.types.is_decimal(arrow_type):
        return f"DECIMAL(38,{arrow_type.scale})"
    return None


def value_fits(batch_type: str, stored_type: str) -> bool:
    """True when a value column of ``stored_type`` can take values of ``batch_type``.

    The same type, or integers into a DOUBLE or DECIMAL column.
    """
    if batch_type == stored_type:
        return True
    if batch_type == "BIGINT":
        return stored_type == "DOUBLE" or stored_type.startswith("DECIMAL")
    return False


def check_txid(txid: int | None, state_type: StateType) -> None:
    """Refuse (ConfigError) a ``state_type`` not a StateType, a ``txid`` not None or int64 >= 0."""
    if not isinstance(state_type, StateType):
        msg = f"state_type must be a StateType, got {state_type!r}"
        raise ConfigError(msg)
    if txid is None:
        return
    if isinstance(txid, bool) or not isinstance(txid, int) or not 0 <= txid < 2**63:
        msg = f"txid must be a non-negative 64-bit integer or None, got {txid!r}"
        raise ConfigError(msg)


def check_batch(
    table: str, batch: pa.Table, key_columns: Sequence[str], value_column: str
) -> tuple[list[str], list[str]]:
    """Validate names and nulls; return the key columns and their SQL types."""
    if not isinstance(batch, pa.Table):
        msg = f"apply to {table!r}: batch must be a pyarrow.Table, got {type(batch).__name__}"
        raise ConfigError(msg)
    keys, key_types = check_schema(table, batch.schema, key_columns, value_column)
    for col in keys:
        refuse_null_keys(table, col, batch.column(col).null_count)
    return keys, key_types


def check_schema(
    table: str, schema: pa.Schema, key_columns: Sequence[str], value_column: str
) -> tuple[list[str], list[str]]:
    """Validate a batch's names and key types; return the key columns and their SQL types.

    Raises:
        ConfigError: a name is invalid or missing from ``schema``.
        StateLayoutError: a key column's type cannot be a key.
    """
    keys = [validate_identifier(c, "key column") for c in key_columns]
    if not keys:
        msg = f"apply to {table!r}: key_columns must name at least one column"
        raise ConfigError(msg)
    validate_identifier(value_column, "value column")
    if value_column in keys:
        msg = f"apply to {table!r}: value column {value_column!r} is also a key column"
        raise ConfigError(msg)
    missing = [c for c in (*keys, value_column) if c not in schema.names]
    if missing:
        msg = f"apply to {table!r}: batch has no column(s) {missing}; it has {schema.names}"
        raise ConfigError(msg)
    key_types: list[str] = []
    for col in keys:
        sql_type = arrow_to_sql_type(schema.field(col).type, for_key=True)
        if sql_type is None:
            msg = (
                f"apply to {table!r}: key column {col!r} has Arrow type "
                f"{schema.field(col).type}, which cannot be a key (use integers, floats, "
                "strings, booleans or binary)"
            )
            raise StateLayoutError(msg)
        key_types.append(sql_type)
    return keys, key_types


def refuse_null_keys(table: str, column: str, nulls: int) -> None:
    """Raise StateLayoutError when key ``column`` of a batch holds ``nulls`` > 0 nulls."""
    if nulls:
        msg = (
            f"apply to {table!r}: key column {column!r} has {nulls} null value(s); key "
            "columns cannot be NULL (filter or fill them before applying the batch)"
        )
        raise StateLayoutError(msg)


def refuse_null_sum(table: str, value_column: str, nulls: int) -> None:
    """Raise AggregationError when a Sum batch's ``value_column`` holds ``nulls`` > 0 nulls."""
    if nulls:
        msg = (
            f"apply to {table!r}: Sum got a null value in {value_column!r}; filter nulls first "
            "(e.g. stream.filter(FilterNull()))"
        )
        raise AggregationError(msg)


def value_sql_type(table: str, schema: pa.Schema, value_column: str, combine: Combine) -> str:
    """The SQL type of a batch's value column, checked against ``combine``.

    Raises:
        ConfigError: ``combine`` is unknown, or is ``sum`` over a non-numeric column.
        StateLayoutError: no value column can hold the column's Arrow type.
    """
    if combine not in COMBINES:
        msg = f"combine must be one of {', '.join(COMBINES)}, got {combine!r}"
        raise ConfigError(msg)
    value_type = arrow_to_sql_type(schema.field(value_column).type, for_key=False)
    if value_type is None:
        msg = (
            f"apply to {table!r}: value column {value_column!r} has Arrow type "
            f"{schema.field(value_column).type}, which no value column can hold"
        )
        raise StateLayoutError(msg)
    if combine == "sum" and value_type not in ("BIGINT", "DOUBLE") and "DECIMAL" not in value_type:
        msg = f"combine='sum' needs a numeric value column; {value_column!r} is {value_type}"
        raise ConfigError(msg)
    return value_type


def resolve_layout(
    store: StateStore,
    table: str,
    keys: list[str],
    key_types: list[str],
    value_type: str,
    state_type: StateType,
) -> tuple[MapLayout | None, MapLayout]:
    """Return (stored layout or None, the layout this batch wants)."""
    wanted = MapLayout(
        table, kind_for_state_type(state_type), tuple(keys), tuple(key_types), value_type
    )
    stored = store.layout(table)
    if stored is None:
        return None, wanted
    problems: list[str] = []
    if stored.kind != wanted.kind:
        problems.append(f"it holds {stored.kind} values, the batch is {wanted.kind}")
    if stored.key_columns != wanted.key_columns:
        problems.append(f"its key columns are {list(stored.key_columns)}, the batch's {keys}")
    elif stored.key_types != wanted.key_types:
        problems.append(f"its key types are {list(stored.key_types)}, the batch's {key_types}")
    if not value_fits(value_type, stored.value_type):
        problems.append(f"its values are {stored.value_type}, the batch's {value_type}")
    if problems:
        msg = f"cannot apply batch to map table {table!r}: " + "; ".join(problems)
        raise StateLayoutError(msg)
    return stored, wanted

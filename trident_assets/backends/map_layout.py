"""The versioned map layout shared by every SQL state store: names, types, value encoding.

A map table is an append-only log ``_trident_log_<map>`` (the key columns, then
``_trident_seq, txid, curr, prev``) numbered by the sequence ``_trident_seq_<map>``, with a
view named like the map showing each key's latest version; the catalog ``_trident_maps``
describes it (see :mod:`trident_assets.backends.duckdb_store`). Column types are spelled in
DuckDB's vocabulary here (``BIGINT``, ``DOUBLE``, ``VARCHAR``, ``BOOLEAN``, ``BLOB``,
``DECIMAL(38,s)``, ``JSON``); :mod:`trident_assets.backends.sql_dialect` maps them to each
database's column types. Nothing here talks to a database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

import pyarrow as pa

from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError
from trident_assets.names import (
    MAP_LOG_PREFIX,
    MAP_SEQ_PREFIX,
    RESERVED_COLUMNS,
    RESERVED_PREFIX,
    validate_identifier,
)

__all__ = [
    "VALUE_COLUMNS",
    "MapKind",
    "MapLayout",
    "check_scope",
    "decimal_scale",
    "decode_value",
    "default_key_columns",
    "encode_value",
    "infer_scalar_type",
    "kind_for_state_type",
    "log_table",
    "normalize_key_type",
    "normalize_kind",
    "normalize_value_type",
    "quote_ident",
    "seq_name",
    "sql_to_arrow",
    "validate_table_name",
]

MapKind = Literal["opaque", "transactional", "plain"]
"""How a map table's rows read back: OpaqueValue, TransactionalValue or the plain value."""


VALUE_COLUMNS = RESERVED_COLUMNS
"""The value columns of every map table, after the key columns."""
_KINDS: tuple[MapKind, ...] = ("opaque", "transactional", "plain")
_KEY_TYPES = ("BIGINT", "VARCHAR", "DOUBLE", "BOOLEAN", "BLOB", "JSON")
_SCALAR_VALUE_TYPES = ("BIGINT", "DOUBLE", "VARCHAR", "BOOLEAN", "JSON")
_DECIMAL_RE = re.compile(r"^DECIMAL\(\s*38\s*,\s*(\d{1,2})\s*\)$")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def log_table(table: str) -> str:
    """Return the quoted name of the append-only log table behind map view ``table``."""
    return f'"{MAP_LOG_PREFIX}{validate_identifier(table, "table")}"'


def seq_name(table: str) -> str:
    """Return the quoted name of the sequence numbering the writes to map ``table``."""
    return f'"{MAP_SEQ_PREFIX}{validate_identifier(table, "table")}"'


def quote_ident(name: str, what: str = "identifier") -> str:
    """Validate ``name`` and return it double-quoted for SQL.

    Raises:
        ConfigError: ``name`` is not a valid identifier.
    """
    return f'"{validate_identifier(name, what)}"'


def kind_for_state_type(state_type: StateType) -> MapKind:
    """Return the map-table kind that stores values of ``state_type``."""
    if state_type is StateType.OPAQUE:
        return "opaque"
    if state_type is StateType.TRANSACTIONAL:
        return "transactional"
    return "plain"


def normalize_kind(kind: MapKind | StateType | str | None) -> MapKind | None:
    """Return the map kind for a kind name or StateType (None stays None).

    Raises:
        ConfigError: an unknown kind.
    """
    if kind is None:
        return None
    if isinstance(kind, StateType):
        return kind_for_state_type(kind)
    if kind in _KINDS:
        return kind  # type: ignore[return-value]
    msg = f"invalid map kind {kind!r}: use one of {', '.join(_KINDS)} or a StateType"
    raise ConfigError(msg)


def normalize_value_type(value_type: str) -> str:
    """Return the canonical spelling of a value column type.

    Raises:
        ConfigError: the type is not BIGINT, DOUBLE, VARCHAR, BOOLEAN, DECIMAL(38,s) or JSON.
    """
    if isinstance(value_type, str):
        upper = value_type.strip().upper()
        if upper in _SCALAR_VALUE_TYPES:
            return upper
        match = _DECIMAL_RE.match(upper)
        if match and int(match.group(1)) <= 38:
            return f"DECIMAL(38,{int(match.group(1))})"
    msg = (
        f"invalid value_type {value_type!r}: use BIGINT, DOUBLE, VARCHAR, BOOLEAN, "
        "DECIMAL(38,s) with 0 <= s <= 38, or JSON"
    )
    raise ConfigError(msg)


def normalize_key_type(key_type: str) -> str:
    """Return the canonical spelling of a key column type.

    Raises:
        ConfigError: the type is not BIGINT, VARCHAR, DOUBLE, BOOLEAN, BLOB or JSON.
    """
    if isinstance(key_type, str) and key_type.strip().upper() in _KEY_TYPES:
        return key_type.strip().upper()
    msg = f"invalid key type {key_type!r}: use one of {', '.join(_KEY_TYPES)}"
    raise ConfigError(msg)


def decimal_scale(value_type: str) -> int | None:
    """Return the scale of a ``DECIMAL(38,s)`` type, None for any other type."""
    match = _DECIMAL_RE.match(value_type)
    return int(match.group(1)) if match else None


def sql_to_arrow(sql_type: str) -> pa.DataType:
    """Return the Arrow type that carries values of a key or value column type."""
    scale = decimal_scale(sql_type)
    if scale is not None:
        return pa.decimal128(38, scale)
    return {
        "BIGINT": pa.int64(),
        "DOUBLE": pa.float64(),
        "VARCHAR": pa.string(),
        "BOOLEAN": pa.bool_(),
        "BLOB": pa.binary(),
        "JSON": pa.string(),
    }[sql_type]


def dump_json(value: Any) -> str:
    """Return the canonical JSON text of ``value`` (sorted keys, no NaN)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


@dataclass(frozen=True, slots=True)
class MapLayout:
    """The layout of one map table, as recorded in the catalog."""

    table: str
    kind: MapKind
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]
    value_type: str

    def __post_init__(self) -> None:
        """Validate names and types.

        Raises:
            ConfigError: a name or type is invalid, or key columns collide.
        """
        validate_table_name(self.table)
        normalize_kind(self.kind)
        if not self.key_columns:
            msg = f"map {self.table!r} needs at least one key column"
            raise ConfigError(msg)
        if len(self.key_columns) != len(self.key_types):
            msg = (
                f"map {self.table!r}: {len(self.key_columns)} key columns "
                f"{list(self.key_columns)} but {len(self.key_types)} key types "
                f"{list(self.key_types)}"
            )
            raise ConfigError(msg)
        seen: set[str] = set()
        for col in self.key_columns:
            validate_identifier(col, "key column")
            low = col.lower()
            if low in VALUE_COLUMNS or low.startswith(RESERVED_PREFIX) or low in seen:
                msg = (
                    f"map {self.table!r}: key column {col!r} is a duplicate or reserved "
                    f"(txid, curr, prev and names starting with {RESERVED_PREFIX!r} are taken)"
                )
                raise ConfigError(msg)
            seen.add(low)
        for key_type in self.key_types:
            normalize_key_type(key_type)
        normalize_value_type(self.value_type)

    @property
    def arity(self) -> int:
        """The number of key columns."""
        return len(self.key_columns)

    def describe(self) -> str:
        """Return a one-line description for error messages."""
        keys = ", ".join(f"{c} {t}" for c, t in zip(self.key_columns, self.key_types, strict=True))
        return f"{self.kind} map ({keys}) -> {self.value_type}"


def validate_table_name(table: str) -> str:
    """Return ``table`` if it is a valid map table name (not reserved).

    Raises:
        ConfigError: invalid or reserved (starts with ``_trident``).
    """
    validate_identifier(table, "table")
    if table.lower().startswith(RESERVED_PREFIX):
        msg = (
            f"table name {table!r} is reserved: names starting with {RESERVED_PREFIX!r} "
            "are internal"
        )
        raise ConfigError(msg)
    return table


def default_key_columns(arity: int) -> tuple[str, ...]:
    """Return ``("k0", ..., "k{arity-1}")``."""
    return tuple(f"k{i}" for i in range(arity))


def infer_scalar_type(values: Sequence[Any], *, for_key: bool) -> str:
    """Return the column type inferred from the first non-None of ``values``."""
    first = next((v for v in values if v is not None), None)
    if isinstance(first, bool):
        return "BOOLEAN"
    if isinstance(first, int):
        return "BIGINT"
    if isinstance(first, float):
        return "DOUBLE"
    if isinstance(first, str):
        return "VARCHAR"
    if for_key and isinstance(first, bytes | bytearray | memoryview):
        return "BLOB"
    if not for_key and isinstance(first, Decimal) and first.is_finite():
        scales = [
            -v.as_tuple().exponent  # type: ignore[operator]
            for v in values
            if isinstance(v, Decimal) and v.is_finite()
        ]
        return f"DECIMAL(38,{min(38, max(0, *scales))})"
    return "JSON"


def encode_value(value: Any, sql_type: str) -> tuple[bool, Any]:
    """Return (ok, encoded) for storing ``value`` (not None) in a column of ``sql_type``."""
    if sql_type == "BIGINT":
        ok = isinstance(value, int) and not isinstance(value, bool)
        return (ok and _INT64_MIN <= value <= _INT64_MAX), value
    if sql_type == "DOUBLE":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False, None
        try:
            return True, float(value)
        except OverflowError:
            return False, None
    if sql_type == "VARCHAR":
        return isinstance(value, str), value
    if sql_type == "BOOLEAN":
        return isinstance(value, bool), value
    if sql_type == "BLOB":
        ok = isinstance(value, bytes | bytearray | memoryview)
        return ok, bytes(value) if ok else None
    if sql_type == "JSON":
        try:
            return True, dump_json(value)
        except (TypeError, ValueError):
            return False, None
    scale = decimal_scale(sql_type)
    if scale is None or isinstance(value, bool) or not isinstance(value, int | Decimal):
        return False, None
    try:
        dec = Decimal(value)
        quantized = dec.quantize(Decimal(1).scaleb(-scale))
    except InvalidOperation:
        return False, None
    ok = quantized == dec and len(quantized.as_tuple().digits) <= 38
    return ok, quantized


def decode_value(value: Any, sql_type: str) -> Any:
    """Return the Python value of a stored column value (JSON text is parsed)."""
    if value is None or sql_type != "JSON":
        return value
    return json.loads(value)


def check_scope(scope: object) -> None:
    """Raise ConfigError unless ``scope`` (a commit scope) is a non-empty string."""
    if not isinstance(scope, str) or not scope:
        msg = f"commit scope must be a non-empty string, got {scope!r}"
        raise ConfigError(msg)

"""Spark SQL type strings users declare (JsonScheme fields, Python functions' output types).

Checked at declaration without Spark: a small parser of the type grammar below, so an unknown
type (``integr``) or text that is not a type (``"int) ; DROP TABLE x; --"``) is refused when
declared instead of failing a batch, and nothing but a type reaches a DDL string.
"""

from __future__ import annotations

import re

from trident_assets.errors import ConfigError
from trident_assets.names import IDENTIFIER_RE

__all__ = ["SPARK_TYPES", "check_spark_type"]

INTEGER_TYPES = frozenset(
    ("tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long")
)
"""Integer type names (and their Spark aliases)."""
NUMBER_TYPES = frozenset(("float", "real", "double"))
"""Floating-point type names."""

_SCALAR_TYPES = frozenset(
    (
        *INTEGER_TYPES,
        *NUMBER_TYPES,
        "string",
        "boolean",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "timestamp_ltz",
    )
)
SPARK_TYPES = (
    "string, boolean, tinyint, smallint, int, bigint, float, double, decimal(p,s), date, "
    "timestamp, timestamp_ntz, binary, array<T>, map<K,V>, struct<name:T,...>"
)
"""The Spark SQL types a field may declare (case-insensitive)."""
_TYPE_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:])")


def _parse_type(tokens: list[str], i: int) -> int:
    """Parse one type from ``tokens[i]``; return the index after it (ValueError if none)."""
    word = tokens[i].lower() if i < len(tokens) else ""
    if word in _SCALAR_TYPES:
        return i + 1
    if word in ("decimal", "dec", "numeric"):
        i += 1
        if i < len(tokens) and tokens[i] == "(":
            digits = []
            i += 1
            while i < len(tokens) and tokens[i].isdigit():
                digits.append(int(tokens[i]))
                i += 1
                if i < len(tokens) and tokens[i] == ",":
                    i += 1
            if i >= len(tokens) or tokens[i] != ")" or not 1 <= len(digits) <= 2:
                raise ValueError
            precision, scale = digits[0], digits[1] if len(digits) == 2 else 0
            if not (1 <= precision <= 38 and scale <= precision):
                raise ValueError
            i += 1
        return i
    if word in ("array", "map", "struct") and i + 1 < len(tokens) and tokens[i + 1] == "<":
        i += 2
        if word == "array":
            i = _parse_type(tokens, i)
        elif word == "map":
            i = _parse_type(tokens, i)
            if i >= len(tokens) or tokens[i] != ",":
                raise ValueError
            i = _parse_type(tokens, i + 1)
        else:
            while True:
                if i >= len(tokens) or not IDENTIFIER_RE.fullmatch(tokens[i]):
                    raise ValueError
                i += 1
                if i < len(tokens) and tokens[i] == ":":
                    i += 1
                i = _parse_type(tokens, i)
                if i < len(tokens) and tokens[i] == ",":
                    i += 1
                    continue
                break
        if i >= len(tokens) or tokens[i] != ">":
            raise ValueError
        return i + 1
    raise ValueError


def check_spark_type(declared: object, what: str) -> str:
    """Return ``declared`` if it is one of :data:`SPARK_TYPES`.

    Raises:
        ConfigError: naming ``what`` (e.g. ``JsonScheme field 'age'``), the declared type
            and the allowed types.
    """
    ok = isinstance(declared, str)
    if isinstance(declared, str):
        tokens, pos = [], 0
        while ok and pos < len(declared.rstrip()):
            match = _TYPE_TOKEN.match(declared, pos)
            ok = match is not None
            if match is not None:
                tokens.append(match.group(1))
                pos = match.end()
        try:
            ok = ok and _parse_type(tokens, 0) == len(tokens)
        except ValueError:
            ok = False
    if not ok:
        msg = f"{what} has unknown type {declared!r}; use one of {SPARK_TYPES}"
        raise ConfigError(msg)
    return declared  # type: ignore[return-value]

"""Field-list validation done when a topology is declared, not when it runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

from trident_assets.errors import ConfigError, FieldNotFoundError
from trident_assets.names import RESERVED_PREFIX, validate_identifier

__all__ = ["Fields", "as_fields", "check_distinct", "require_fields"]

Fields: TypeAlias = str | Sequence[str]
"""A field name or a list of field names (:func:`as_fields` normalises it)."""


def as_fields(fields: Fields, what: str = "field list") -> tuple[str, ...]:
    """Normalise ``"a"`` or ``["a", "b"]`` to a tuple and validate each name.

    Raises:
        ConfigError: ``fields`` is neither a name nor a list of names, a name is not a str
            (the message gives its position, counting from 1), not a valid identifier, or
            starts with ``_trident`` or ``__trident`` (any case: internal columns).
    """
    if isinstance(fields, str):
        names: tuple[object, ...] = (fields,)
    elif isinstance(fields, Iterable) and not isinstance(fields, bytes | bytearray):
        names = tuple(fields)
    else:
        msg = f"{what} must be a field name or a list of field names, got {fields!r}"
        raise ConfigError(msg)
    for i, name in enumerate(names, start=1):
        if not isinstance(name, str):
            msg = (
                f"{what}: field {i} of {len(names)} is {name!r} ({type(name).__name__}), not a "
                "name; field names are strings of 1-63 letters, digits or underscores"
            )
            raise ConfigError(msg)
        validate_identifier(name, f"field (in {what})")
        if name.lower().startswith((RESERVED_PREFIX, f"_{RESERVED_PREFIX}")):
            msg = (
                f"invalid field (in {what}) name {name!r}: names starting with "
                f"{RESERVED_PREFIX!r} or '_{RESERVED_PREFIX}' are trident's internal columns; "
                "choose another name"
            )
            raise ConfigError(msg)
    return names  # type: ignore[return-value]


def require_fields(wanted: Sequence[str], existing: Sequence[str], operation: str) -> None:
    """Check every field in ``wanted`` exists (Trident's projection validation).

    Raises:
        FieldNotFoundError: naming the missing field and the fields that exist.
    """
    for name in wanted:
        if name not in existing:
            msg = (
                f"{operation}: trying to select non-existent field {name!r} from stream "
                f"containing fields {list(existing)}"
            )
            raise FieldNotFoundError(msg)


def check_distinct(new: Sequence[str], existing: Sequence[str], operation: str) -> None:
    """Check appended fields neither repeat nor collide with existing ones.

    Raises:
        ConfigError: a field would appear twice.
    """
    seen = set(existing)
    for name in new:
        if name in seen:
            msg = (
                f"{operation}: output field {name!r} already exists in {list(existing)} "
                "(or is repeated); choose a new name"
            )
            raise ConfigError(msg)
        seen.add(name)

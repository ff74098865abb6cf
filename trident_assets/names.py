"""Identifier validation shared by every layer: table, state, spout, topology and field names."""

from __future__ import annotations

import re

from trident_assets.errors import ConfigError

__all__ = ["IDENTIFIER_RE", "validate_identifier"]

IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
"""Names safe as SQL identifiers, asset key parts and file names."""


def validate_identifier(name: object, what: str) -> str:
    """Return ``name`` if it is a safe identifier (1-63 letters, digits, underscores).

    Raises:
        ConfigError: naming what the name was for and the rule it breaks.
    """
    if not isinstance(name, str) or not IDENTIFIER_RE.fullmatch(name):
        msg = (
            f"invalid {what} name {name!r}: use 1-63 letters, digits or underscores, "
            "starting with a letter or underscore (e.g. 'word_count')"
        )
        raise ConfigError(msg)
    return name

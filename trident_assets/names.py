"""Identifier validation shared by every layer: table, state, spout, topology and field names."""

from __future__ import annotations

import re
from collections.abc import Sequence

from trident_assets.errors import ConfigError

__all__ = [
    "IDENTIFIER_RE",
    "MAP_LOG_PREFIX",
    "MAP_SEQ_PREFIX",
    "MAX_IDENTIFIER_LENGTH",
    "RESERVED_COLUMNS",
    "RESERVED_PREFIX",
    "check_state_columns",
    "validate_identifier",
]

IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
"""Names safe as SQL identifiers, asset key parts and file names."""

MAX_IDENTIFIER_LENGTH = 63
"""The longest identifier (PostgreSQL's limit, in bytes; names are ASCII)."""

RESERVED_COLUMNS = ("txid", "curr", "prev")
"""Columns every state table has besides its keys (compared case-insensitively)."""

RESERVED_PREFIX = "_trident"
"""Prefix of the store's internal tables and columns (compared case-insensitively)."""

MAP_LOG_PREFIX = "_trident_log_"
"""Prefix of the append-only log table behind a map table."""

MAP_SEQ_PREFIX = "_trident_seq_"
"""Prefix of the sequence numbering a map table's writes."""


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


def check_state_columns(
    state: str, role: str, names: Sequence[str], *, extra: tuple[str, ...] = ()
) -> None:
    """Refuse a field that would land in a state table under a reserved column name.

    ``txid``, ``curr``, ``prev`` (and ``extra``) and names starting with ``_trident`` are the
    store's own columns of a state table, its new-values and partials tables.

    Raises:
        ConfigError: naming the state, the role of the field (e.g. ``key field``) and the rule.
    """
    taken = (*RESERVED_COLUMNS, *extra)
    for name in names:
        low = name.lower()
        if low in taken or low.startswith(RESERVED_PREFIX):
            msg = (
                f"state {state!r}: {role} {name!r} is reserved for the store's own columns "
                f"({', '.join(taken)} and names starting with {RESERVED_PREFIX!r}); "
                "give the field another name where it is made (its scheme or function)"
            )
            raise ConfigError(msg)

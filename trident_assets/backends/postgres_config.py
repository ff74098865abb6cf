"""Choosing the state store from configuration: a PostgreSQL DSN, or the DuckDB file."""

from __future__ import annotations

import re
from pathlib import Path

from trident_assets.errors import ConfigError

__all__ = ["is_postgres_dsn", "state_location"]

_DSN_RE = re.compile(r"^postgres(ql)?://", re.IGNORECASE)


def is_postgres_dsn(location: object) -> bool:
    """True if ``location`` is a ``postgresql://`` (or ``postgres://``) URI."""
    return isinstance(location, str) and bool(_DSN_RE.match(location.strip()))


def state_location(state_dsn: str | None, database: Path) -> str:
    """The store to open: ``state_dsn`` if set (it must be a PostgreSQL URI), else ``database``.

    Raises:
        ConfigError: ``state_dsn`` is set but is not a ``postgresql://`` URI (checked before
            anything is opened or written).
    """
    if state_dsn is None or not state_dsn.strip():
        return str(database)
    if not is_postgres_dsn(state_dsn):
        msg = (
            f"state_dsn {state_dsn!r} is not a PostgreSQL URI: use "
            "postgresql://user[:password]@host:port/database, or leave state_dsn unset to keep "
            "the state in the DuckDB file (state_database)"
        )
        raise ConfigError(msg)
    return state_dsn.strip()

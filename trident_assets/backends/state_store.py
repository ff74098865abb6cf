"""The state store: :class:`StateStore`, the class every store shares, and its opener.

Two implementations, sharing their statements (:mod:`~trident_assets.backends.sql_store`):
:class:`~trident_assets.backends.duckdb_store.DuckDBStore` (an embedded file, the default)
and :class:`~trident_assets.backends.postgres_store.PostgresStore` (a server database).
"""

from __future__ import annotations

from pathlib import Path

from trident_assets.backends.postgres_config import is_postgres_dsn
from trident_assets.backends.sql_store import StateStore
from trident_assets.errors import ConfigError

__all__ = ["StateStore", "open_state_store"]


def open_state_store(
    location: str | Path, *, read_only: bool = False, memory_limit: str | None = None
) -> StateStore:
    """Open the state store at ``location``: a ``postgresql://`` DSN or a DuckDB file path.

    ``memory_limit``: DuckDB's ``memory_limit`` for a DuckDB store (e.g. ``"1GB"``; DuckDB
    spills what exceeds it to ``<file>.tmp``); None: DuckDB's default (80% of RAM).

    Raises:
        ConfigError: a DSN that does not connect (nothing is written), a bad path, or a
            ``memory_limit`` DuckDB refuses or given with a DSN.
    """
    if is_postgres_dsn(location):
        from trident_assets.backends.postgres_store import PostgresStore

        if memory_limit is not None:
            msg = (
                f"memory_limit={memory_limit!r} is a DuckDB setting; a PostgreSQL state store's "
                "memory is its server's (work_mem, shared_buffers): leave it unset"
            )
            raise ConfigError(msg)
        return PostgresStore(str(location), read_only=read_only)
    from trident_assets.backends.duckdb_store import DuckDBStore

    config = None if memory_limit is None else {"memory_limit": memory_limit}
    return DuckDBStore(location, read_only=read_only, config=config)

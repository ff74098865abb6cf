"""The state-store interface: what the runner, the IO manager, the CLI and the join need.

Two implementations, sharing their statements (:mod:`~trident_assets.backends.sql_store`):
:class:`~trident_assets.backends.duckdb_store.DuckDBStore` (an embedded file, the default)
and :class:`~trident_assets.backends.postgres_store.PostgresStore` (a server database).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from trident_assets.backends.map_layout import MapKind, MapLayout
from trident_assets.backends.postgres_config import is_postgres_dsn
from trident_assets.backends.sql_dialect import Dialect
from trident_assets.core.commit import StoreTransaction
from trident_assets.core.protocols import BackingMap
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError

__all__ = ["StateStore", "open_state_store"]


@runtime_checkable
class StateStore(Protocol):
    """A transactional store of versioned map tables, commit markers and side tables.

    Contract: every write made inside :meth:`transaction` commits or rolls back with the
    commit marker written there (``mark_committed``); readers outside a transaction see the
    last committed state only; a store object holds one connection and is not thread-safe.
    """

    dialect: Dialect
    path: str
    """Where the store lives, for messages (a file, or a DSN without its password)."""

    def transaction(self) -> AbstractContextManager[StoreTransaction]:
        """Open a transaction (re-entrant); committed on normal exit, rolled back on error."""

    def last_committed(self, scope: str) -> int | None:
        """The last txid committed to ``scope`` (None: none yet)."""

    def scopes(self) -> dict[str, int]:
        """Every scope and its last committed txid."""

    def layout(self, table: str) -> MapLayout | None:
        """The catalog layout of map ``table`` (None: no such map yet)."""

    def ensure_map(self, layout: MapLayout) -> MapLayout:
        """Create map ``layout.table`` if missing; return the stored layout."""

    def tables(self) -> list[str]:
        """The map tables, sorted."""

    def size(self, table: str) -> int:
        """The number of keys in map ``table``."""

    def scan(
        self,
        table: str,
        value_name: str = "value",
        *,
        as_of: int | None = None,
        key: Sequence[Any] | None = None,
    ) -> pa.Table:
        """Every key of ``table`` and its value (as of txid ``as_of``), ordered by key."""

    def latest_sql(
        self, layout: MapLayout, keys_from: str, keys_in: Sequence[str] | None = None
    ) -> str:
        """A query for the current rows of the keys held by relation ``keys_from``."""

    def compact(self, table: str | None = None) -> dict[str, int]:
        """Drop superseded versions; rows dropped per map."""

    def oldest_readable_txid(self, table: str) -> int | None:
        """The oldest txid ``scan`` can read ``table`` as of (None: all)."""

    def map(
        self,
        table: str,
        *,
        key_columns: Sequence[str] | None = None,
        key_types: Sequence[str] | None = None,
        value_type: str | None = None,
        kind: MapKind | StateType | None = None,
    ) -> BackingMap[Any]:
        """A backing map over ``table`` sharing the store's connection and transaction."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement (``?`` parameters); the rows it changed."""

    def fetch_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one query (``?`` parameters); its rows."""

    def fetch_arrow(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """Run one query (``?`` parameters); its result as Arrow."""

    def staged(self, table: pa.Table) -> AbstractContextManager[str]:
        """``table`` as a relation named for the ``with`` block (bulk, no per-row Python)."""

    def has_table(self, name: str) -> bool:
        """True if table or view ``name`` exists."""

    def close(self) -> None:
        """Close the connection (idempotent); an open transaction rolls back."""


def open_state_store(
    location: str | Path, *, read_only: bool = False, memory_limit: str | None = None
) -> Any:
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

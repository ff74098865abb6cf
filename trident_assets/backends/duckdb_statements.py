"""The statement primitives of a DuckDB store: run, fetch, and register relations as views.

:class:`DuckDBStatements` runs statements with ``?`` parameters on the store's connection and
fetches their rows (as tuples, an Arrow table or a stream of Arrow batches), and registers an
Arrow table, Parquet files or a query as a view for a ``with`` block. It is a base of
:class:`~trident_assets.backends.duckdb_store.DuckDBStore`, which provides the connection.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import duckdb
import pyarrow as pa

__all__ = ["DuckDBStatements"]


class DuckDBStatements:
    """The primitives :class:`~trident_assets.backends.sql_store.StateStore` builds on.

    The store provides ``conn`` (its open connection), ``_conn`` (None once closed) and
    ``_stale_views`` (views to unregister once an aborted transaction has rolled back).
    """

    conn: duckdb.DuckDBPyConnection
    _conn: duckdb.DuckDBPyConnection | None
    _stale_views: list[str]

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement with ``?`` parameters; return the rows it changed (-1: unknown)."""
        result = self.conn.execute(sql, list(params) if params else None)
        if result.description and result.description[0][0] == "Count":
            rows = result.fetchall()
            return int(rows[0][0]) if rows else 0
        return -1

    def fetch_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one query with ``?`` parameters; return its rows."""
        return self.conn.execute(sql, list(params) if params else None).fetchall()

    def fetch_arrow(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """Run one query with ``?`` parameters; return its result as an Arrow table."""
        return self.conn.sql(sql, params=list(params) if params else None).to_arrow_table()

    def fetch_reader(self, sql: str, params: Sequence[Any] = ()) -> pa.RecordBatchReader:
        """Run one query with ``?`` parameters; stream its result in batches of 100,000 rows.

        Read it to the end before the connection runs its next statement.
        """
        relation = self.conn.sql(sql, params=list(params) if params else None)
        return relation.to_arrow_reader(100_000)

    def staged(self, table: pa.Table, *, analyze: bool = True) -> AbstractContextManager[str]:
        """Register ``table`` on the connection for the ``with`` block (see :meth:`registered`).

        ``analyze`` is for PostgreSQL; DuckDB reads the Arrow table as it is.
        """
        return self.registered(table)

    def has_table(self, name: str) -> bool:
        """True if a table or view named ``name`` exists in the database's main schema."""
        rows = self.conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ? "
            "AND table_schema = 'main' AND table_catalog = current_database()",
            [name],
        ).fetchall()
        return bool(rows[0][0])

    def registered(self, table: pa.Table) -> AbstractContextManager[str]:
        """Register an Arrow table on the connection under a fresh name; unregister on exit."""
        return self._registered("arrow", table)

    def staged_files(self, files: Sequence[str]) -> AbstractContextManager[str]:
        """A view over the rows of Parquet ``files`` for the ``with`` block.

        Its queries stream the files from disk: the rows are never loaded into Python.
        """
        return self._registered("files", self.conn.read_parquet(list(files)))

    def staged_query(self, sql: str) -> AbstractContextManager[str]:
        """A view of query ``sql`` (no parameters) for the ``with`` block."""
        return self._registered("query", self.conn.sql(sql))

    @contextmanager
    def _registered(self, kind: str, relation: Any) -> Iterator[str]:
        name = f"_trident_{kind}_{uuid.uuid4().hex}"
        self.conn.register(name, relation)
        try:
            yield name
        finally:
            if self._conn is not None:
                try:
                    self._conn.unregister(name)
                except duckdb.Error:
                    self._stale_views.append(name)  # the transaction is aborted: after ROLLBACK

"""DuckDB state store: map tables with txid columns, commit markers, one transaction per batch.

Layout of one database file:

* ``_trident_commits(scope PK, txid, committed_at)``: the last committed txid per scope.
* ``_trident_maps(table_name PK, kind, key_columns, key_types, value_type)``: the catalog of
  map tables (``key_columns`` and ``key_types`` are JSON lists).
* ``_trident_compactions(table_name PK, oldest_txid, compacted_at)``: per map, the oldest txid
  an as-of read can still reconstruct after :meth:`DuckDBStore.compact` dropped versions
  (created by the first compaction that drops rows).
* per map, an append-only log table ``_trident_log_<map>``: the key columns, then
  ``_trident_seq BIGINT, txid BIGINT, curr <V>, prev <V>``; every write appends one row per
  key written, numbered by the sequence ``_trident_seq_<map>`` (one number per statement).
  A view named like the map shows the latest version of each key (the key columns, ``txid``,
  ``curr``, ``prev``); :meth:`DuckDBStore.latest_sql` gives the latest rows of a set of keys
  without reading the whole view. Appending (instead of updating rows in place) keeps a
  batch's cost, and the checkpoint after it, proportional to the batch rather than to the
  table; superseded versions are dropped by :meth:`DuckDBStore.compact`, to be run between
  batches. ``kind`` says how a row reads back:

  - ``opaque``: ``OpaqueValue(txid, curr, prev)``;
  - ``transactional``: ``TransactionalValue(txid, curr)``, ``prev`` is NULL;
  - ``plain``: ``curr``; ``txid`` and ``prev`` are NULL.

As-of reads (:meth:`DuckDBStore.scan` with ``as_of=N``) use the log: per key, the newest row
whose ``txid`` is at most N is the value the key had once txid N committed (batches commit in
txid order, one transaction each, so a key's versions are in txid order). Compaction keeps only
the newest row per key, so it records the oldest txid still exact: the largest txid among the
rows it kept for keys that lost older versions. Plain maps store no txid: no as-of reads.

``<V>`` is a SQL scalar type (``BIGINT``, ``DOUBLE``, ``VARCHAR``, ``BOOLEAN``,
``DECIMAL(38,s)``) or ``JSON``: a VARCHAR column holding the JSON text of any JSON-able value.

Every bulk call is one set-based statement: keys and values travel as an Arrow table registered
on the connection, never as a per-key loop. SQL values are always bound parameters; identifiers
are validated by :data:`~trident_assets.names.IDENTIFIER_RE` and double-quoted.

A store holds one connection and is not thread-safe: use one store per thread (or process).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, ClassVar

import duckdb
import pyarrow as pa

from trident_assets.backends.backing_map import SqlBackingMap
from trident_assets.backends.duckdb_open import (
    connect_file,
    corrupt_state_error,
    is_corrupt_state,
)
from trident_assets.backends.map_layout import MapKind
from trident_assets.backends.marker_file import (
    CommitMarkerFile,
    lost_commits,
    lost_commits_error,
)
from trident_assets.backends.sql_catalog import SqlTransaction
from trident_assets.backends.sql_dialect import DUCKDB, Dialect
from trident_assets.backends.sql_store import StateStore
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError, StateLayoutError, TridentError
from trident_assets.names import CATALOG_TABLE, COMMITS_TABLE

__all__ = ["DuckDBBackingMap", "DuckDBStore", "DuckDBTransaction"]

log = logging.getLogger(__name__)


class DuckDBTransaction(SqlTransaction):
    """One open transaction of a :class:`DuckDBStore` (the core's ``StoreTransaction``)."""

    store: DuckDBStore

    def __init__(self, store: DuckDBStore) -> None:
        super().__init__(store)
        self.marked: dict[str, int] = {}
        """The scopes this transaction moved and their txids (for the commit marker file)."""

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        """The connection; every statement on it runs inside this transaction."""
        return self.store.conn

    def mark_committed(self, scope: str, txid: int) -> None:
        """Record ``txid`` as committed to ``scope`` (in the database, then the marker file).

        The commit marker file is written once the transaction has committed.
        """
        super().mark_committed(scope, txid)
        self.marked[scope] = txid


class DuckDBStore(StateStore):
    """A DuckDB database file holding map tables and commit markers (the core's ``CommitStore``).

    Opening waits for another process's lock on the file (retrying with backoff) for up to
    ``lock_timeout_s`` seconds. Use as a context manager or call :meth:`close`.

    Example:
        >>> with DuckDBStore(":memory:") as store:
        ...     counts = store.map("counts")
        ...     counts.multi_put([("a",)], [1])
        ...     counts.multi_get([("a",), ("b",)])
        [1, None]
    """

    dialect: ClassVar[Dialect] = DUCKDB
    transaction_type = DuckDBTransaction
    conversion_errors: ClassVar[tuple[type[BaseException], ...]] = (duckdb.ConversionException,)
    value_errors: ClassVar[tuple[type[BaseException], ...]] = (
        duckdb.OutOfRangeException,
        duckdb.ConversionException,
    )
    catalog_errors: ClassVar[tuple[type[BaseException], ...]] = (duckdb.CatalogException,)

    def __init__(
        self,
        database: str | Path,
        *,
        lock_timeout_s: float = 30.0,
        config: dict[str, Any] | None = None,
        read_only: bool = False,
        verify_commits: bool = True,
    ) -> None:
        """Open (creating if needed) the database file.

        Args:
            database: the DuckDB file (``":memory:"`` for a private in-memory database).
                Missing parent directories are created.
            lock_timeout_s: how long to wait while another process holds the file's lock.
            config: extra DuckDB settings passed to ``duckdb.connect`` (for example
                ``{"checkpoint_threshold": "1GB"}``).
            read_only: open an existing store for reading only: nothing is created, and
                several read-only processes may hold the file at once (not while a writer
                holds it: DuckDB's lock is per process).
            verify_commits: refuse a file behind its commit marker file
                (:mod:`~trident_assets.backends.marker_file`). False opens it anyway, leaving
                the marker file alone (to report or accept the loss).

        Raises:
            StoreLockedError: the file stayed locked by another process for ``lock_timeout_s``.
            StateLayoutError: the file is not a DuckDB database, or (``read_only``) not a
                trident state store.
            CorruptStateError: the file is a damaged DuckDB database (e.g. truncated); it is
                left unchanged.
            LostCommitsError: the file lost transactions it had committed (its write-ahead
                log was torn or deleted): it is behind its commit marker file. Nothing was
                written.
            ConfigError: ``lock_timeout_s`` is negative, or (``read_only``) the file does not
                exist.
        """
        if lock_timeout_s < 0:
            msg = f"lock_timeout_s must be >= 0 seconds, got {lock_timeout_s!r}"
            raise ConfigError(msg)
        self.path = str(database)
        self.read_only = read_only
        if read_only and not Path(self.path).is_file():
            msg = f"no state store at {self.path}"
            raise ConfigError(msg)
        if self.path != ":memory:" and not read_only:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        super().__init__()
        new = not Path(self.path).exists()
        self._conn: duckdb.DuckDBPyConnection | None = connect_file(
            self.path, lock_timeout_s, dict(config or {}), read_only
        )
        self._tx: DuckDBTransaction | None = None
        self._stale_views: list[str] = []
        self.marker_file: CommitMarkerFile | None = None
        """The commit marker file (None: in memory, or not verified)."""
        if verify_commits and self.path and not self.path.startswith(":memory:"):
            self.marker_file = CommitMarkerFile(self.path)
            try:
                self._verify_commits(new)
            except BaseException:
                self.close()
                raise
        if read_only:
            if not self.has_table(CATALOG_TABLE) or not self.has_table(COMMITS_TABLE):
                self.close()
                msg = f"{self.path} is a DuckDB database but not a trident state store"
                raise StateLayoutError(msg)
            return
        with self.transaction():
            self.create_base_tables()

    def _verify_commits(self, new: bool) -> None:
        """Refuse a database behind its marker file; otherwise bring the file up to date.

        Runs before anything is written. A new database file (it did not exist) makes a
        leftover marker file stale (its database was deleted): it is removed.
        """
        assert self.marker_file is not None
        if new:
            if self.marker_file.discard():
                log.warning(
                    "state file %s is new: removed the commit marker file %s of the database "
                    "that was deleted",
                    self.path,
                    self.marker_file.path,
                )
            return
        database = self.scopes() if self.has_table(COMMITS_TABLE) else {}
        marker = self.marker_file.read()
        lost = lost_commits(database, marker)
        if lost:
            raise lost_commits_error(self.path, str(self.marker_file.path), lost)
        if not self.read_only and database and marker != database:
            self._record_commits(database)  # missing, or behind (a crash before its write)

    def _record_commits(self, marked: dict[str, int]) -> None:
        """Write the just-committed txids to the marker file (a failure is only logged).

        The transaction has committed: a marker file left behind is accepted on the next
        open, so failing to write it must not report the commit as failed.
        """
        assert self.marker_file is not None
        try:
            self.marker_file.record(marked)
        except OSError as exc:
            log.warning(
                "commit marker file %s was not updated after a commit (%s); the commit "
                "stands, and the file catches up with the next one",
                self.marker_file.path,
                exc,
            )

    # -- connection lifecycle -------------------------------------------------------------

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        """The store's connection.

        Raises:
            TridentError: the store is closed.
        """
        if self._conn is None:
            msg = f"DuckDB state store {self.path!r} is closed"
            raise TridentError(msg)
        return self._conn

    @property
    def in_transaction(self) -> bool:
        """True while a :meth:`transaction` block is open."""
        return self._tx is not None

    def close(self) -> None:
        """Close the connection (idempotent). An open transaction is rolled back."""
        if self._conn is not None:
            if self._tx is not None:
                self._rollback()
            self._conn.close()
            self._conn = None

    # -- primitives: statements with ``?`` parameters, relations registered as views ----------

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

    # -- transactions and commit markers ---------------------------------------------------

    def _committed(self, tx: SqlTransaction) -> None:
        if isinstance(tx, DuckDBTransaction) and tx.marked and self.marker_file is not None:
            self._record_commits(tx.marked)

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, duckdb.IOException) and is_corrupt_state(exc):
            raise corrupt_state_error(self.path, exc) from exc

    def _rollback(self) -> None:
        self._tx = None
        self.forget_layouts()
        with contextlib.suppress(duckdb.TransactionException):  # DuckDB already ended it
            self.conn.execute("ROLLBACK")
        while self._stale_views:
            self.conn.unregister(self._stale_views.pop())

    def checkpoint(self) -> None:
        """Run a DuckDB CHECKPOINT (write the WAL into the database file).

        Raises:
            TridentError: a transaction is open (checkpoint between batches).
        """
        if self._tx is not None:
            msg = "checkpoint() inside an open transaction: call it between batches"
            raise TridentError(msg)
        self.conn.execute("CHECKPOINT")


class DuckDBBackingMap(SqlBackingMap):
    """A :class:`~trident_assets.backends.backing_map.SqlBackingMap` on a DuckDB store or file.

    Built on a :class:`DuckDBStore` it shares the store's connection, so its writes join the
    store's open transaction; built on a path it opens (and :meth:`close` closes) its own store.
    """

    def __init__(
        self,
        database: str | Path | DuckDBStore,
        table: str,
        *,
        key_columns: Sequence[str] | None = None,
        key_types: Sequence[str] | None = None,
        value_type: str | None = None,
        kind: MapKind | StateType | None = None,
    ) -> None:
        owns = not isinstance(database, DuckDBStore)
        store = DuckDBStore(database) if owns else database
        try:
            super().__init__(
                store,
                table,
                key_columns=key_columns,
                key_types=key_types,
                value_type=value_type,
                kind=kind,
            )
        except BaseException:
            if owns:
                store.close()
            raise
        self._owns_store = owns

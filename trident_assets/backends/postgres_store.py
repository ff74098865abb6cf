"""PostgreSQL state store: the DuckDB store's layout and semantics on a server database.

Every shared statement is :class:`~trident_assets.backends.sql_store.StateStore`'s;
:mod:`~trident_assets.backends.sql_dialect` spells the differences (an index on each log's
``(keys, _trident_seq)`` makes a batch's lookups follow the batch).

One ADBC connection (``adbc-driver-postgresql``) carries everything, so a batch's state
writes, its commit marker and its spout metadata commit in one transaction: Arrow tables go
in by bulk ingest (``COPY``) into a temporary table and come out with ``fetch_arrow_table``;
no per-row Python. SQL values are bound parameters; identifiers are validated names.

Writers: the first time a transaction reads a scope's commit marker (``commit_batch``), the
store takes a session advisory lock on that scope; a second store writing the same scope
(another process running the same topology) is refused with
:class:`~trident_assets.errors.StoreLockedError` until the first closes. Readers never lock
(MVCC): they see the last committed batch while the next one commits.

Threads: the connection is one libpq session, which must never carry two statements at once.
A re-entrant lock serializes every use of it, and an open transaction holds that lock until it
ends, so the thread that plans the next chunk of txids (creating its spill tables) waits for
the commit in flight instead of joining its transaction or interleaving with a ``COPY``.
"""

from __future__ import annotations

import contextlib
import re
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends.map_layout import check_scope
from trident_assets.backends.postgres_config import is_postgres_dsn
from trident_assets.backends.sql_catalog import SqlTransaction
from trident_assets.backends.sql_dialect import PG_ERROR_FUNCTION, POSTGRES, Dialect
from trident_assets.backends.sql_store import StateStore
from trident_assets.errors import ConfigError, StateLayoutError, StoreLockedError, TridentError
from trident_assets.names import CATALOG_TABLE, COMMITS_TABLE, validate_identifier

__all__ = ["PostgresStore", "PostgresTransaction", "redact_dsn"]

SESSION_SETTINGS = {"work_mem": "64MB", "jit": "off", "TimeZone": "UTC"}
"""Set on every store connection. ``work_mem``: a batch's grouping and joins stay in memory
(the default 4MB spills). ``jit=off``: a batch's statement is costed high enough to
JIT-compile, which took about 300 ms per merge (more than the merge's own work at 100k keys).
``TimeZone=UTC``: the store keeps instants as naive UTC ``TIMESTAMP``; a time-zone-aware value
(Spark's timestamps arrive with a zone) is stored as its UTC time, whatever the server's or the
client's (``PGTZ``) default zone."""
_DML_RE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
_INIT_LOCK = 7_291_604_115
"""The advisory lock serializing the creation of the base tables by concurrent stores."""


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password replaced by ``***`` (for messages and metadata)."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _adbc() -> Any:
    try:
        import adbc_driver_manager
        import adbc_driver_postgresql.dbapi as pgdbapi
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        msg = "PostgreSQL state needs adbc-driver-postgresql: pip install adbc-driver-postgresql"
        raise ConfigError(msg) from exc
    return pgdbapi, adbc_driver_manager


_pgdbapi, _adbc_errors = _adbc()


class PostgresTransaction(SqlTransaction):
    """One open transaction of a :class:`PostgresStore`."""

    store: PostgresStore

    def __init__(self, store: PostgresStore) -> None:
        super().__init__(store)
        self.thread = threading.get_ident()
        """The thread whose transaction this is."""

    def last_committed(self, scope: str) -> int | None:
        """Return ``scope``'s last committed txid, first claiming the scope for this writer.

        Raises:
            StoreLockedError: another store (process) is writing ``scope``.
        """
        self.store.claim_scope(scope)
        return self.store.last_committed(scope)


class PostgresStore(StateStore):
    """Map tables and commit markers in a PostgreSQL database (the core's ``CommitStore``).

    Example:
        >>> with PostgresStore("postgresql://user@127.0.0.1:5432/db") as store:  # doctest: +SKIP
        ...     store.map("counts").multi_put([("a",)], [1])
    """

    dialect: ClassVar[Dialect] = POSTGRES
    transaction_type = PostgresTransaction
    conversion_errors: ClassVar[tuple[type[BaseException], ...]] = (_adbc_errors.DataError,)
    value_errors: ClassVar[tuple[type[BaseException], ...]] = (_adbc_errors.DataError,)
    catalog_errors: ClassVar[tuple[type[BaseException], ...]] = (_adbc_errors.ProgrammingError,)

    def __init__(self, dsn: str, *, read_only: bool = False) -> None:
        """Connect to ``dsn`` and create the store's tables if missing.

        Args:
            dsn: a ``postgresql://user[:password]@host:port/database`` URI.
            read_only: only read: nothing is created, every transaction is read-only.

        Raises:
            ConfigError: ``dsn`` is not a PostgreSQL URI, or the server cannot be reached
                or refuses the login (nothing was written).
            StateLayoutError: ``read_only`` and the database holds no trident state store.
        """
        super().__init__()
        if not is_postgres_dsn(dsn):
            msg = (
                f"state DSN {dsn!r} is not a PostgreSQL URI: use "
                "postgresql://user[:password]@host:port/database"
            )
            raise ConfigError(msg)
        self.dsn = dsn.strip()
        self.path = redact_dsn(self.dsn)
        self.read_only = read_only
        try:
            self._conn: Any = _pgdbapi.connect(self.dsn, autocommit=True)
        except _adbc_errors.Error as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            msg = (
                f"cannot connect to the PostgreSQL state store {self.path}: {detail}. Check the "
                "DSN (host, port, user, database) and that the server is running; nothing was "
                "written"
            )
            raise ConfigError(msg) from None
        self._cur: Any = self._conn.cursor()
        self._tx: PostgresTransaction | None = None
        self._lock = threading.RLock()
        """Held by each statement, and by an open transaction until it ends."""
        self._claimed: set[str] = set()
        for name, value in SESSION_SETTINGS.items():
            self.execute("SELECT set_config(?, ?, false)", [name, value])
        if read_only:
            self.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            if not self.has_table(CATALOG_TABLE) or not self.has_table(COMMITS_TABLE):
                self.close()
                msg = f"{self.path} is a PostgreSQL database but holds no trident state store"
                raise StateLayoutError(msg)
            return
        with self.transaction():
            self.execute("SELECT pg_advisory_xact_lock(?)", [_INIT_LOCK])
            self.create_base_tables()
            found = self.fetch_rows(
                "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE p.proname = ? AND n.nspname = current_schema()",
                [PG_ERROR_FUNCTION],
            )
            if not found[0][0]:
                self.execute(
                    f"CREATE FUNCTION {PG_ERROR_FUNCTION}(msg text) RETURNS text "
                    "LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION '%', msg; END $f$"
                )

    # -- connection lifecycle ----------------------------------------------------------------

    @property
    def in_transaction(self) -> bool:
        """True while the calling thread has a :meth:`transaction` block open."""
        return self._tx is not None and self._tx.thread == threading.get_ident()

    def close(self) -> None:
        """Close the connection (idempotent); an open transaction is rolled back."""
        with self._lock:
            if self._conn is None:
                return
            if self._tx is not None:
                self._rollback()
            with contextlib.suppress(_adbc_errors.Error):
                if self._claimed:  # release now: the server ends a closed session asynchronously
                    self._cur.execute("SELECT pg_advisory_unlock_all()")
                self._cur.close()
            self._conn.close()
            self._conn = None

    def _cursor(self) -> Any:
        if self._conn is None:
            msg = f"PostgreSQL state store {self.path} is closed"
            raise TridentError(msg)
        return self._cur

    # -- primitives ----------------------------------------------------------------------------

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement with ``?`` parameters; return the rows it changed (-1: unknown).

        The driver's ``execute`` reports no row count for a parameterized statement; a DML
        statement with parameters runs through ``executemany`` with its one parameter set
        (the driver's update path, which does; counting through ``WITH ... RETURNING 1``
        cost about 15% of a 100k-row merge).
        """
        with self._lock:
            cur = self._cursor()
            query = self.dialect.placeholders(sql)
            if params and _DML_RE.match(sql) and " RETURNING " not in sql.upper():
                cur.executemany(query, [list(params)])
            else:
                cur.execute(query, parameters=list(params) if params else None)
            return int(cur.rowcount)

    def fetch_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one query with ``?`` parameters; return its rows (NUMERIC as Decimal)."""
        table = self.fetch_arrow(sql, params)
        return list(zip(*(c.to_pylist() for c in table.columns), strict=True))

    def fetch_arrow(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """Run one query with ``?`` parameters; return it as Arrow (NUMERIC as decimal128)."""
        with self._lock:
            cur = self._cursor()
            query = self.dialect.placeholders(sql)
            cur.execute(query, parameters=list(params) if params else None)
            return _numeric_to_decimal(cur.fetch_arrow_table())

    @contextmanager
    def staged(self, table: pa.Table, *, analyze: bool = True) -> Iterator[str]:
        """Bulk-load ``table`` into a temporary table for the ``with`` block; drop it on exit.

        ``analyze``: ``ANALYZE`` it, so the planner knows its size and keys (about 30 ms for
        100k rows; the merge of a batch of distinct keys has one plan and skips it).
        """
        with self._lock:
            cur = self._cursor()
            name = f"_trident_stage_{uuid.uuid4().hex}"
            cur.adbc_ingest(name, _ingestable(table), mode="create", temporary=True)
            if analyze:
                cur.execute(f'ANALYZE "{name}"')
            with self._dropped("TABLE", name):
                yield name

    def create_unlogged(self, name: str, schema: pa.Schema) -> None:
        """Create empty unlogged table ``name`` with the columns of Arrow ``schema``.

        Typed as a ``COPY`` of that schema creates them, so writers in other sessions can
        append Arrow batches of the schema to it (committed apart from any transaction).
        """
        with self._lock:
            self._cursor().adbc_ingest(name, _ingestable(schema.empty_table()), mode="create")
            self.execute(f'ALTER TABLE "{validate_identifier(name, "table")}" SET UNLOGGED')

    @contextmanager
    def staged_query(self, sql: str) -> Iterator[str]:
        """A temporary view of query ``sql`` (no parameters) for the ``with`` block."""
        name = f"_trident_view_{uuid.uuid4().hex}"
        with self._lock:
            self._cursor().execute(f'CREATE TEMP VIEW "{name}" AS {sql}')
            with self._dropped("VIEW", name):
                yield name

    @contextmanager
    def _dropped(self, kind: str, name: str) -> Iterator[None]:
        """Drop temporary ``kind`` (TABLE, VIEW) ``name`` when the block exits."""
        try:
            yield
        finally:
            with self._lock:
                if self._conn is not None:
                    with contextlib.suppress(_adbc_errors.Error):  # an aborted tx drops it
                        self._cur.execute(f'DROP {kind} IF EXISTS "{name}"')

    def has_table(self, name: str) -> bool:
        """True if a table or view ``name`` exists in the current schema."""
        rows = self.fetch_rows(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema = current_schema() AND table_name = ?",
            [name],
        )
        return bool(rows[0][0])

    # -- transactions ----------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[PostgresTransaction]:
        """:meth:`~.sql_catalog.SqlCatalogStore.transaction`, holding the session's lock.

        One thread at a time: another thread's statements wait until the transaction ends.
        """
        with self._lock, super().transaction() as tx:
            yield tx

    def _rollback(self) -> None:
        self._tx = None
        self.forget_layouts()
        with contextlib.suppress(_adbc_errors.Error):
            self._cur.execute("ROLLBACK")

    def claim_scope(self, scope: str) -> None:
        """Become the only writer of ``scope`` until this store closes (a session lock).

        Raises:
            StoreLockedError: another store (session) already writes ``scope``.
        """
        check_scope(scope)
        if scope in self._claimed:
            return
        rows = self.fetch_rows("SELECT pg_try_advisory_lock(hashtextextended(?, 0))", [scope])
        if not rows[0][0]:
            msg = (
                f"topology {scope!r} is being written by another process through {self.path} "
                "(it holds the scope's writer lock); stop that run, or wait for it to finish, "
                "before committing batches of the same topology"
            )
            raise StoreLockedError(msg)
        self._claimed.add(scope)


def _ingestable(table: pa.Table) -> pa.Table:
    """``table`` with dictionary and view columns decoded (what COPY ingest accepts)."""
    fields = []
    changed = False
    for field in table.schema:
        t = field.type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if pa.types.is_string_view(t) or pa.types.is_large_string(t):
            t = pa.string()
        changed = changed or t != field.type
        fields.append(pa.field(field.name, t))
    return table.cast(pa.schema(fields)) if changed else table


def _numeric_to_decimal(table: pa.Table) -> pa.Table:
    """Turn the driver's opaque NUMERIC text columns into ``decimal128(38, scale)``."""
    for i, field in enumerate(table.schema):
        if not isinstance(field.type, pa.BaseExtensionType):
            continue
        text = table.column(i).cast(field.type.storage_type)
        pos = pc.find_substring(text, ".")
        digits = pc.subtract(pc.subtract(pc.utf8_length(text), pos), 1)
        best = pc.max(pc.if_else(pc.greater_equal(pos, 0), digits, 0)).as_py()
        scale = int(best or 0)
        decimals = pc.cast(text, pa.decimal128(38, scale))
        table = table.set_column(i, pa.field(field.name, decimals.type), decimals)
    return table

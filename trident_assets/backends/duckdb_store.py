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
are validated by :data:`IDENTIFIER_RE` and double-quoted.

A store holds one connection and is not thread-safe: use one store per thread (or process).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import duckdb
import pyarrow as pa

from trident_assets.core.protocols import Key
from trident_assets.core.values import OpaqueValue, StateType, TransactionalValue
from trident_assets.errors import (
    ConfigError,
    CorruptStateError,
    HistoryUnavailableError,
    StateLayoutError,
    StoreLockedError,
    TridentError,
)
from trident_assets.names import IDENTIFIER_RE, validate_identifier

__all__ = [
    "CATALOG_TABLE",
    "COMMITS_TABLE",
    "COMPACTIONS_TABLE",
    "IDENTIFIER_RE",
    "DuckDBBackingMap",
    "DuckDBStore",
    "DuckDBTransaction",
    "MapKind",
    "MapLayout",
    "kind_for_state_type",
    "quote_ident",
    "validate_identifier",
]

MapKind = Literal["opaque", "transactional", "plain"]
"""How a map table's rows read back: OpaqueValue, TransactionalValue or the plain value."""


COMMITS_TABLE = "_trident_commits"
"""The table of commit markers (last committed txid per scope)."""

CATALOG_TABLE = "_trident_maps"
"""The catalog describing every map table."""

COMPACTIONS_TABLE = "_trident_compactions"
"""Per map, the oldest txid an as-of read can still reconstruct after compaction."""

_RESERVED_PREFIX = "_trident"
_VALUE_COLUMNS = ("txid", "curr", "prev")
_KINDS: tuple[MapKind, ...] = ("opaque", "transactional", "plain")
_KEY_TYPES = ("BIGINT", "VARCHAR", "DOUBLE", "BOOLEAN", "BLOB", "JSON")
_SCALAR_VALUE_TYPES = ("BIGINT", "DOUBLE", "VARCHAR", "BOOLEAN", "JSON")
_DECIMAL_RE = re.compile(r"^DECIMAL\(\s*38\s*,\s*(\d{1,2})\s*\)$")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_LOCK_MARKER = "Could not set lock"
_NOT_A_DATABASE_MARKER = "not a valid DuckDB database"
_ORD = "_trident_ord"

RESTORE_HINT = "Restore the last backup with `trident state restore BACKUP` (README, Guarantees)"
"""The recovery path every corrupt-state message ends with."""


def corrupt_state_error(path: str, exc: BaseException) -> CorruptStateError:
    """Return the error for a DuckDB I/O failure on state file ``path`` (not a lock conflict).

    DuckDB opens a truncated file without complaint and fails when a query reaches a missing
    block (``IO Error: Could not read enough bytes``); this names the file and the way back.
    """
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    msg = (
        f"state file {path} is corrupt or unreadable ({detail}); it was left unchanged. "
        f"{RESTORE_HINT}"
    )
    return CorruptStateError(msg)


def is_corrupt_state(exc: BaseException) -> bool:
    """True for a DuckDB I/O error that is neither another process's lock nor a full disk."""
    text = str(exc)
    return (
        isinstance(exc, duckdb.IOException)
        and _LOCK_MARKER not in text
        and "No space left" not in text
    )


SEQ_COLUMN = "_trident_seq"
"""The log-table column ordering the versions of a key (higher = newer)."""


def log_table(table: str) -> str:
    """Return the quoted name of the append-only log table behind map view ``table``."""
    return f'"_trident_log_{validate_identifier(table, "table")}"'


def seq_name(table: str) -> str:
    """Return the quoted name of the sequence numbering the writes to map ``table``."""
    return f'"_trident_seq_{validate_identifier(table, "table")}"'


def quote_ident(name: str, what: str = "identifier") -> str:
    """Validate ``name`` and return it double-quoted for SQL.

    Raises:
        ConfigError: ``name`` is not a valid identifier.
    """
    return f'"{validate_identifier(name, what)}"'


def kind_for_state_type(state_type: StateType) -> MapKind:
    """Return the map-table kind that stores values of ``state_type``."""
    if state_type is StateType.OPAQUE:
        return "opaque"
    if state_type is StateType.TRANSACTIONAL:
        return "transactional"
    return "plain"


def _normalize_kind(kind: MapKind | StateType | str | None) -> MapKind | None:
    if kind is None:
        return None
    if isinstance(kind, StateType):
        return kind_for_state_type(kind)
    if kind in _KINDS:
        return kind  # type: ignore[return-value]
    msg = f"invalid map kind {kind!r}: use one of {', '.join(_KINDS)} or a StateType"
    raise ConfigError(msg)


def normalize_value_type(value_type: str) -> str:
    """Return the canonical spelling of a value column type.

    Raises:
        ConfigError: the type is not BIGINT, DOUBLE, VARCHAR, BOOLEAN, DECIMAL(38,s) or JSON.
    """
    if isinstance(value_type, str):
        upper = value_type.strip().upper()
        if upper in _SCALAR_VALUE_TYPES:
            return upper
        match = _DECIMAL_RE.match(upper)
        if match and int(match.group(1)) <= 38:
            return f"DECIMAL(38,{int(match.group(1))})"
    msg = (
        f"invalid value_type {value_type!r}: use BIGINT, DOUBLE, VARCHAR, BOOLEAN, "
        "DECIMAL(38,s) with 0 <= s <= 38, or JSON"
    )
    raise ConfigError(msg)


def normalize_key_type(key_type: str) -> str:
    """Return the canonical spelling of a key column type.

    Raises:
        ConfigError: the type is not BIGINT, VARCHAR, DOUBLE, BOOLEAN, BLOB or JSON.
    """
    if isinstance(key_type, str) and key_type.strip().upper() in _KEY_TYPES:
        return key_type.strip().upper()
    msg = f"invalid key type {key_type!r}: use one of {', '.join(_KEY_TYPES)}"
    raise ConfigError(msg)


def _decimal_scale(value_type: str) -> int | None:
    match = _DECIMAL_RE.match(value_type)
    return int(match.group(1)) if match else None


def sql_to_arrow(sql_type: str) -> pa.DataType:
    """Return the Arrow type that carries values of a key or value column type."""
    scale = _decimal_scale(sql_type)
    if scale is not None:
        return pa.decimal128(38, scale)
    return {
        "BIGINT": pa.int64(),
        "DOUBLE": pa.float64(),
        "VARCHAR": pa.string(),
        "BOOLEAN": pa.bool_(),
        "BLOB": pa.binary(),
        "JSON": pa.string(),
    }[sql_type]


def _column_sql_type(sql_type: str) -> str:
    return "VARCHAR" if sql_type == "JSON" else sql_type


def _dump_json(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


@dataclass(frozen=True, slots=True)
class MapLayout:
    """The layout of one map table, as recorded in the catalog."""

    table: str
    kind: MapKind
    key_columns: tuple[str, ...]
    key_types: tuple[str, ...]
    value_type: str

    def __post_init__(self) -> None:
        """Validate names and types.

        Raises:
            ConfigError: a name or type is invalid, or key columns collide.
        """
        _validate_table_name(self.table)
        _normalize_kind(self.kind)
        if not self.key_columns:
            msg = f"map {self.table!r} needs at least one key column"
            raise ConfigError(msg)
        if len(self.key_columns) != len(self.key_types):
            msg = (
                f"map {self.table!r}: {len(self.key_columns)} key columns "
                f"{list(self.key_columns)} but {len(self.key_types)} key types "
                f"{list(self.key_types)}"
            )
            raise ConfigError(msg)
        seen: set[str] = set()
        for col in self.key_columns:
            validate_identifier(col, "key column")
            low = col.lower()
            if low in _VALUE_COLUMNS or low.startswith(_RESERVED_PREFIX) or low in seen:
                msg = (
                    f"map {self.table!r}: key column {col!r} is a duplicate or reserved "
                    f"(txid, curr, prev and names starting with {_RESERVED_PREFIX!r} are taken)"
                )
                raise ConfigError(msg)
            seen.add(low)
        for key_type in self.key_types:
            normalize_key_type(key_type)
        normalize_value_type(self.value_type)

    @property
    def arity(self) -> int:
        """The number of key columns."""
        return len(self.key_columns)

    def describe(self) -> str:
        """Return a one-line description for error messages."""
        keys = ", ".join(f"{c} {t}" for c, t in zip(self.key_columns, self.key_types, strict=True))
        return f"{self.kind} map ({keys}) -> {self.value_type}"


def _validate_table_name(table: str) -> str:
    validate_identifier(table, "table")
    if table.lower().startswith(_RESERVED_PREFIX):
        msg = (
            f"table name {table!r} is reserved: names starting with {_RESERVED_PREFIX!r} "
            "are internal"
        )
        raise ConfigError(msg)
    return table


def default_key_columns(arity: int) -> tuple[str, ...]:
    """Return ``("k0", ..., "k{arity-1}")``."""
    return tuple(f"k{i}" for i in range(arity))


class DuckDBTransaction:
    """One open transaction of a :class:`DuckDBStore` (the core's ``StoreTransaction``)."""

    def __init__(self, store: DuckDBStore) -> None:
        self.store = store
        self.rollback_only = False
        """Set when a joined inner block failed: the outermost block must roll back."""

    @property
    def conn(self) -> duckdb.DuckDBPyConnection:
        """The connection; every statement on it runs inside this transaction."""
        return self.store.conn

    def last_committed(self, scope: str) -> int | None:
        """Return the last txid committed to ``scope``, or None."""
        return self.store.last_committed(scope)

    def mark_committed(self, scope: str, txid: int) -> None:
        """Record ``txid`` as committed to ``scope``; effective when the transaction commits.

        Raises:
            ConfigError: ``scope`` is empty or ``txid`` is not an integer.
        """
        _check_scope(scope)
        if isinstance(txid, bool) or not isinstance(txid, int):
            msg = f"mark_committed({scope!r}, {txid!r}): txid must be an integer"
            raise ConfigError(msg)
        now = datetime.now(UTC).replace(tzinfo=None)
        self.conn.execute(
            f'INSERT INTO "{COMMITS_TABLE}" (scope, txid, committed_at) VALUES (?, ?, ?) '
            "ON CONFLICT (scope) DO UPDATE SET txid = excluded.txid, "
            "committed_at = excluded.committed_at",
            [scope, txid, now],
        )


def _check_scope(scope: object) -> None:
    if not isinstance(scope, str) or not scope:
        msg = f"commit scope must be a non-empty string, got {scope!r}"
        raise ConfigError(msg)


def _connect(
    path: str, timeout_s: float, config: dict[str, Any], read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        try:
            return duckdb.connect(path, read_only=read_only, config=config)
        except duckdb.IOException as exc:
            if _NOT_A_DATABASE_MARKER in str(exc):
                msg = f"{path} is not a DuckDB database file (it was left unchanged)"
                raise StateLayoutError(msg) from exc
            if is_corrupt_state(exc):
                raise corrupt_state_error(path, exc) from exc
            if _LOCK_MARKER not in str(exc):
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                msg = (
                    f"DuckDB state store {path!r} is locked by another process and stayed locked "
                    f"for {timeout_s:g}s ({exc}). Stop the other process that holds the file "
                    "(a running job, `dagster dev`, a notebook), or raise lock_timeout_s."
                )
                raise StoreLockedError(msg) from exc
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 1.0)


class DuckDBStore:
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

    def __init__(
        self,
        database: str | Path,
        *,
        lock_timeout_s: float = 30.0,
        config: dict[str, Any] | None = None,
        read_only: bool = False,
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

        Raises:
            StoreLockedError: the file stayed locked by another process for ``lock_timeout_s``.
            StateLayoutError: the file is not a DuckDB database, or (``read_only``) not a
                trident state store.
            CorruptStateError: the file is a damaged DuckDB database (e.g. truncated); it is
                left unchanged.
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
        self._conn: duckdb.DuckDBPyConnection | None = _connect(
            self.path, lock_timeout_s, dict(config or {}), read_only
        )
        self._tx: DuckDBTransaction | None = None
        self._layouts: dict[str, MapLayout] = {}
        self._stale_views: list[str] = []
        if read_only:
            if not self._has_table(CATALOG_TABLE) or not self._has_table(COMMITS_TABLE):
                self.close()
                msg = f"{self.path} is a DuckDB database but not a trident state store"
                raise StateLayoutError(msg)
            return
        with self.transaction() as tx:
            tx.conn.execute(
                f'CREATE TABLE IF NOT EXISTS "{COMMITS_TABLE}" (scope VARCHAR PRIMARY KEY, '
                "txid BIGINT NOT NULL, committed_at TIMESTAMP)"
            )
            tx.conn.execute(
                f'CREATE TABLE IF NOT EXISTS "{CATALOG_TABLE}" (table_name VARCHAR PRIMARY KEY, '
                "kind VARCHAR NOT NULL, key_columns VARCHAR NOT NULL, key_types VARCHAR NOT NULL, "
                "value_type VARCHAR NOT NULL)"
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

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- transactions and commit markers ---------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[DuckDBTransaction]:
        """Open a transaction: BEGIN, then COMMIT on normal exit or ROLLBACK on an exception.

        Re-entrant: inside an open transaction, a nested ``transaction()`` joins it (no nested
        BEGIN) and only the outermost block commits. If a nested block exits with an exception
        that the caller then swallows, the outermost block still rolls back and raises.

        Raises:
            TridentError: the store is closed, or a nested block failed and the transaction
                was rolled back.
        """
        conn = self.conn
        if self._tx is not None:
            outer = self._tx
            try:
                yield outer
            except BaseException:
                outer.rollback_only = True
                raise
            return
        conn.execute("BEGIN TRANSACTION")
        tx = DuckDBTransaction(self)
        self._tx = tx
        try:
            yield tx
        except duckdb.IOException as exc:
            self._rollback()
            if is_corrupt_state(exc):
                raise corrupt_state_error(self.path, exc) from exc
            raise
        except BaseException:
            self._rollback()
            raise
        if tx.rollback_only:
            self._rollback()
            msg = (
                f"transaction on {self.path!r} rolled back: a nested transaction block failed "
                "and its error was caught; nothing was committed"
            )
            raise TridentError(msg)
        try:
            conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        self._tx = None

    def _rollback(self) -> None:
        self._tx = None
        self._layouts.clear()
        with contextlib.suppress(duckdb.TransactionException):  # DuckDB already ended it
            self.conn.execute("ROLLBACK")
        while self._stale_views:
            self.conn.unregister(self._stale_views.pop())

    def last_committed(self, scope: str) -> int | None:
        """Return the last txid committed to ``scope`` (None if nothing was committed)."""
        _check_scope(scope)
        rows = self.conn.execute(
            f'SELECT txid FROM "{COMMITS_TABLE}" WHERE scope = ?', [scope]
        ).fetchall()
        return int(rows[0][0]) if rows else None

    def scopes(self) -> dict[str, int]:
        """Return every commit scope (topology) and its last committed txid."""
        rows = self.conn.execute(
            f'SELECT scope, txid FROM "{COMMITS_TABLE}" ORDER BY scope'
        ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    # -- the catalog --------------------------------------------------------------------------

    def _has_table(self, name: str) -> bool:
        rows = self.conn.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND schema_name = 'main' "
            "AND database_name = current_database()",
            [name],
        ).fetchall()
        return bool(rows[0][0])

    def layout(self, table: str) -> MapLayout | None:
        """Return the catalog layout of map ``table``, or None if it does not exist yet.

        Raises:
            ConfigError: ``table`` is not a valid map table name.
        """
        _validate_table_name(table)
        cached = self._layouts.get(table)
        if cached is not None:
            return cached
        rows = self.conn.execute(
            f'SELECT kind, key_columns, key_types, value_type FROM "{CATALOG_TABLE}" '
            "WHERE table_name = ?",
            [table],
        ).fetchall()
        if not rows:
            return None
        row = rows[0]
        layout = MapLayout(
            table, row[0], tuple(json.loads(row[1])), tuple(json.loads(row[2])), row[3]
        )
        self._layouts[table] = layout
        return layout

    def ensure_map(self, layout: MapLayout) -> MapLayout:
        """Create map table ``layout.table`` if it does not exist; return its stored layout.

        The table and its catalog row are created in one transaction (joining an open one).

        Raises:
            StateLayoutError: the table exists with a different layout, or a non-map table of
                that name exists.
        """
        with self.transaction() as tx:
            existing = self.layout(layout.table)
            if existing is not None:
                if existing != layout:
                    msg = (
                        f"map table {layout.table!r} is a {existing.describe()}, not a "
                        f"{layout.describe()}; use another table name or the stored layout"
                    )
                    raise StateLayoutError(msg)
                return existing
            keys = ", ".join(
                f"{quote_ident(c)} {_column_sql_type(t)} NOT NULL"
                for c, t in zip(layout.key_columns, layout.key_types, strict=True)
            )
            vtype = _column_sql_type(layout.value_type)
            pk = ", ".join(quote_ident(c) for c in layout.key_columns)
            try:
                tx.conn.execute(
                    f"CREATE TABLE {log_table(layout.table)} ({keys}, "
                    f"{SEQ_COLUMN} BIGINT NOT NULL, txid BIGINT, curr {vtype}, prev {vtype})"
                )
                tx.conn.execute(f"CREATE SEQUENCE {seq_name(layout.table)} START 1")
                tx.conn.execute(
                    f"CREATE VIEW {quote_ident(layout.table)} AS SELECT {pk}, txid, curr, prev "
                    f"FROM {log_table(layout.table)} QUALIFY row_number() OVER "
                    f"(PARTITION BY {pk} ORDER BY {SEQ_COLUMN} DESC) = 1"
                )
            except duckdb.CatalogException as exc:
                msg = (
                    f"table {layout.table!r} already exists in {self.path!r} but is not a "
                    f"trident map table (it has no catalog entry): {exc}"
                )
                raise StateLayoutError(msg) from exc
            tx.conn.execute(
                f'INSERT INTO "{CATALOG_TABLE}" VALUES (?, ?, ?, ?, ?)',
                [
                    layout.table,
                    layout.kind,
                    json.dumps(list(layout.key_columns)),
                    json.dumps(list(layout.key_types)),
                    layout.value_type,
                ],
            )
            self._layouts[layout.table] = layout
            return layout

    def tables(self) -> list[str]:
        """Return the names of the map tables in this store, sorted."""
        rows = self.conn.execute(
            f'SELECT table_name FROM "{CATALOG_TABLE}" ORDER BY table_name'
        ).fetchall()
        return [r[0] for r in rows]

    def size(self, table: str) -> int:
        """Return the number of keys in map ``table`` (0 if it does not exist yet)."""
        layout = self.layout(table)
        if layout is None:
            return 0
        keys = ", ".join(quote_ident(c) for c in layout.key_columns)
        rows = self.conn.execute(
            f"SELECT count(*) FROM (SELECT DISTINCT {keys} FROM {log_table(table)})"
        ).fetchall()
        return int(rows[0][0])

    def latest_sql(
        self, layout: MapLayout, keys_from: str, keys_in: Sequence[str] | None = None
    ) -> str:
        """Return a query for the current row of every stored key that appears in ``keys_from``.

        ``keys_from`` is a relation name (a registered Arrow table, a temp table, a view) whose
        columns ``keys_in`` (default: the map's key column names) hold keys. The query yields
        the map's key columns, ``txid``, ``curr`` and ``prev``: a semi join of the log table
        against ``keys_from``, then the latest version per key, so its cost follows the number
        of keys asked for (plus one scan of the log's key columns).
        """
        key_q = [quote_ident(c) for c in layout.key_columns]
        cols_in = ['"' + c.replace('"', '""') + '"' for c in (keys_in or layout.key_columns)]
        on = " AND ".join(f"q.{i} = s.{k}" for i, k in zip(cols_in, key_q, strict=True))
        keys = ", ".join(f"s.{k}" for k in key_q)
        return (
            f"SELECT {keys}, s.txid, s.curr, s.prev FROM {log_table(layout.table)} s "
            f"WHERE EXISTS (SELECT 1 FROM {keys_from} q WHERE {on}) QUALIFY row_number() OVER "
            f"(PARTITION BY {keys} ORDER BY s.{SEQ_COLUMN} DESC) = 1"
        )

    def compact(self, table: str | None = None) -> dict[str, int]:
        """Drop superseded versions from map tables' logs (all maps if ``table`` is None).

        Each map is rewritten to hold only its current row per key, in one transaction
        (joining an open one). This is the periodic maintenance of the append-only layout:
        run it between batches (e.g. from the runner, every few batches); it costs one pass
        over the table, so it must not be on the per-batch path. Returns rows dropped per map.
        """
        names = [table] if table is not None else self.tables()
        dropped: dict[str, int] = {}
        with self.transaction() as tx:
            for name in names:
                layout = self.layout(name)
                if layout is None:
                    continue
                log = log_table(name)
                pk = ", ".join(quote_ident(c) for c in layout.key_columns)
                before = int(tx.conn.execute(f"SELECT count(*) FROM {log}").fetchall()[0][0])
                if before == self.size(name):
                    dropped[name] = 0
                    continue
                self._record_oldest_readable(name, pk)
                tx.conn.execute(
                    f"CREATE OR REPLACE TABLE {log} AS SELECT * FROM {log} QUALIFY row_number() "
                    f"OVER (PARTITION BY {pk} ORDER BY {SEQ_COLUMN} DESC) = 1"
                )
                after = int(tx.conn.execute(f"SELECT count(*) FROM {log}").fetchall()[0][0])
                dropped[name] = before - after
        return dropped

    def _record_oldest_readable(self, table: str, pk: str) -> None:
        """Record the oldest txid still exact once ``table``'s superseded rows are dropped.

        A key with versions at txids ``t1 < ... < tm`` loses ``t1..t(m-1)``: an as-of read at
        N in ``[t1, tm)`` would need them. So every N at or after the largest ``tm`` of such a
        key stays exact; reads before it are refused. Kept with the larger earlier bound.
        """
        rows = self.conn.execute(
            f"SELECT max(newest) FROM (SELECT max(txid) AS newest FROM {log_table(table)} "
            f"GROUP BY {pk} HAVING count(*) > 1)"
        ).fetchall()
        newest = rows[0][0]
        if newest is None:  # a plain map (no txids): nothing to record
            return
        self.conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{COMPACTIONS_TABLE}" (table_name VARCHAR PRIMARY KEY, '
            "oldest_txid BIGINT NOT NULL, compacted_at TIMESTAMP)"
        )
        self.conn.execute(
            f'INSERT INTO "{COMPACTIONS_TABLE}" VALUES (?, ?, ?) ON CONFLICT (table_name) DO '
            "UPDATE SET oldest_txid = greatest(oldest_txid, excluded.oldest_txid), "
            "compacted_at = excluded.compacted_at",
            [table, int(newest), datetime.now(UTC).replace(tzinfo=None)],
        )

    def oldest_readable_txid(self, table: str) -> int | None:
        """Return the oldest txid :meth:`scan` can read ``table`` as of.

        None if compaction never dropped a version of the map: every committed txid can be read.
        """
        _validate_table_name(table)
        if not self._has_table(COMPACTIONS_TABLE):
            return None
        rows = self.conn.execute(
            f'SELECT oldest_txid FROM "{COMPACTIONS_TABLE}" WHERE table_name = ?', [table]
        ).fetchall()
        return int(rows[0][0]) if rows else None

    def checkpoint(self) -> None:
        """Run a DuckDB CHECKPOINT (write the WAL into the database file).

        Raises:
            TridentError: a transaction is open (checkpoint between batches).
        """
        if self._tx is not None:
            msg = "checkpoint() inside an open transaction: call it between batches"
            raise TridentError(msg)
        self.conn.execute("CHECKPOINT")

    def scan(
        self,
        table: str,
        value_name: str = "value",
        *,
        as_of: int | None = None,
        key: Sequence[Any] | None = None,
    ) -> pa.Table:
        """Return every key of map ``table`` and its value, ordered by key.

        The columns are the key columns and ``value_name``: ``curr`` for opaque maps, the
        value for transactional and plain maps. JSON values come back as their JSON text.

        Args:
            table: the map table.
            value_name: the name of the value column.
            as_of: read the map as it was once txid ``as_of`` committed (None: now); keys
                first written later are absent.
            key: only this key (one value per key column; cast to the column types).

        Raises:
            StateLayoutError: the table does not exist, or ``as_of`` is given for a plain
                map (it stores no txids).
            HistoryUnavailableError: compaction removed versions ``as_of`` needs; the message
                names the oldest txid that can still be read.
            ConfigError: ``value_name`` is invalid or clashes with a key column, ``as_of`` is
                negative, or ``key`` has the wrong arity or a value of the wrong type.
        """
        layout = self.layout(table)
        if layout is None:
            msg = f"no map table {table!r} in {self.path!r}; it has {self.tables()}"
            raise StateLayoutError(msg)
        validate_identifier(value_name, "value column")
        if value_name.lower() in {c.lower() for c in layout.key_columns}:
            msg = f"value column name {value_name!r} clashes with a key column of {table!r}"
            raise ConfigError(msg)
        keys = ", ".join(quote_ident(c) for c in layout.key_columns)
        where, params = self._key_filter(layout, key)
        if as_of is None:
            source = quote_ident(table)
            latest = ""
        else:
            self._check_as_of(layout, as_of)
            source = log_table(table)
            where.append("txid <= ?")
            params.append(as_of)
            latest = (
                f" QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {SEQ_COLUMN} DESC) = 1"
            )
        condition = f" WHERE {' AND '.join(where)}" if where else ""
        try:
            return self.conn.sql(
                f"SELECT {keys}, curr AS {quote_ident(value_name)} FROM {source}{condition}"
                f"{latest} ORDER BY {keys}",
                params=params or None,
            ).to_arrow_table()
        except duckdb.ConversionException as exc:
            reason = str(exc).splitlines()[0]
            msg = f"key {list(key or [])} does not match {layout.describe()}: {reason}"
            raise ConfigError(msg) from exc

    @staticmethod
    def _key_filter(layout: MapLayout, key: Sequence[Any] | None) -> tuple[list[str], list[Any]]:
        if key is None:
            return [], []
        if len(key) != layout.arity:
            msg = (
                f"a key of {layout.table!r} has {layout.arity} value(s) "
                f"({', '.join(layout.key_columns)}), got {len(key)}: {list(key)}"
            )
            raise ConfigError(msg)
        where = [
            f"{quote_ident(c)} = CAST(? AS {_column_sql_type(t)})"
            for c, t in zip(layout.key_columns, layout.key_types, strict=True)
        ]
        return where, list(key)

    def _check_as_of(self, layout: MapLayout, as_of: int) -> None:
        if isinstance(as_of, bool) or not isinstance(as_of, int) or as_of < 0:
            msg = f"as_of must be a txid >= 0, got {as_of!r}"
            raise ConfigError(msg)
        if layout.kind == "plain":
            msg = (
                f"map {layout.table!r} is non-transactional (plain): it stores no txids, "
                "so it cannot be read as of a txid"
            )
            raise StateLayoutError(msg)
        oldest = self.oldest_readable_txid(layout.table)
        if oldest is not None and as_of < oldest:
            msg = (
                f"map {layout.table!r} cannot be read as of txid {as_of}: compaction removed "
                f"the versions it needs; the oldest txid that can still be read is {oldest}"
            )
            raise HistoryUnavailableError(msg)

    def map(
        self,
        table: str,
        *,
        key_columns: Sequence[str] | None = None,
        key_types: Sequence[str] | None = None,
        value_type: str | None = None,
        kind: MapKind | StateType | None = None,
    ) -> DuckDBBackingMap:
        """Return a backing map over ``table`` that shares this store's connection."""
        return DuckDBBackingMap(
            self,
            table,
            key_columns=key_columns,
            key_types=key_types,
            value_type=value_type,
            kind=kind,
        )

    @contextmanager
    def registered(self, table: pa.Table) -> Iterator[str]:
        """Register an Arrow table on the connection under a fresh name; unregister on exit."""
        name = f"_trident_arrow_{uuid.uuid4().hex}"
        self.conn.register(name, table)
        try:
            yield name
        finally:
            if self._conn is not None:
                try:
                    self._conn.unregister(name)
                except duckdb.Error:
                    self._stale_views.append(name)  # the transaction is aborted: after ROLLBACK


# -- value encoding --------------------------------------------------------------------------


def _infer_scalar_type(values: Sequence[Any], *, for_key: bool) -> str:
    first = next((v for v in values if v is not None), None)
    if isinstance(first, bool):
        return "BOOLEAN"
    if isinstance(first, int):
        return "BIGINT"
    if isinstance(first, float):
        return "DOUBLE"
    if isinstance(first, str):
        return "VARCHAR"
    if for_key and isinstance(first, bytes | bytearray | memoryview):
        return "BLOB"
    if not for_key and isinstance(first, Decimal) and first.is_finite():
        scales = [
            -v.as_tuple().exponent  # type: ignore[operator]
            for v in values
            if isinstance(v, Decimal) and v.is_finite()
        ]
        return f"DECIMAL(38,{min(38, max(0, *scales))})"
    return "JSON"


def _encode(value: Any, sql_type: str) -> tuple[bool, Any]:
    """Return (ok, encoded) for storing ``value`` (not None) in a column of ``sql_type``."""
    if sql_type == "BIGINT":
        ok = isinstance(value, int) and not isinstance(value, bool)
        return (ok and _INT64_MIN <= value <= _INT64_MAX), value
    if sql_type == "DOUBLE":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False, None
        try:
            return True, float(value)
        except OverflowError:
            return False, None
    if sql_type == "VARCHAR":
        return isinstance(value, str), value
    if sql_type == "BOOLEAN":
        return isinstance(value, bool), value
    if sql_type == "BLOB":
        ok = isinstance(value, bytes | bytearray | memoryview)
        return ok, bytes(value) if ok else None
    if sql_type == "JSON":
        try:
            return True, _dump_json(value)
        except (TypeError, ValueError):
            return False, None
    scale = _decimal_scale(sql_type)
    if scale is None or isinstance(value, bool) or not isinstance(value, int | Decimal):
        return False, None
    try:
        dec = Decimal(value)
        quantized = dec.quantize(Decimal(1).scaleb(-scale))
    except InvalidOperation:
        return False, None
    ok = quantized == dec and len(quantized.as_tuple().digits) <= 38
    return ok, quantized


def _decode(value: Any, sql_type: str) -> Any:
    if value is None or sql_type != "JSON":
        return value
    return json.loads(value)


class DuckDBBackingMap:
    """A backing map (``multi_get`` / ``multi_put``) over one map table of a DuckDB store.

    Keys are tuples; each part goes in one key column. Values are ``OpaqueValue``,
    ``TransactionalValue`` or plain values, per the table's kind. A layout not declared is
    inferred from the first write: key types from the first keys (int->BIGINT, str->VARCHAR,
    float->DOUBLE, bool->BOOLEAN, bytes->BLOB, anything else->JSON text), the kind and value
    type from the first values (int->BIGINT, float->DOUBLE, str->VARCHAR, bool->BOOLEAN,
    Decimal->DECIMAL(38,s), anything else->JSON text).

    When built on a :class:`DuckDBStore` it shares the store's connection, so its writes join
    the store's open transaction; when built on a path it opens (and :meth:`close` closes) its
    own store.
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
        """Attach to map ``table`` (created on the first write if it does not exist).

        Raises:
            ConfigError: a name or declared type is invalid.
            StateLayoutError: the table exists with a layout that contradicts the declaration.
        """
        _validate_table_name(table)
        self.table = table
        self._key_columns = (
            None
            if key_columns is None
            else tuple(validate_identifier(c, "key column") for c in key_columns)
        )
        self._key_types = (
            None if key_types is None else tuple(normalize_key_type(t) for t in key_types)
        )
        if self._key_columns and self._key_types and len(self._key_columns) != len(self._key_types):
            msg = (
                f"map {table!r}: {len(self._key_columns)} key columns but "
                f"{len(self._key_types)} key types declared"
            )
            raise ConfigError(msg)
        self._value_type = None if value_type is None else normalize_value_type(value_type)
        self._kind = _normalize_kind(kind)
        if isinstance(database, DuckDBStore):
            self.store = database
            self._owns_store = False
        else:
            self.store = DuckDBStore(database)
            self._owns_store = True
        existing = self.store.layout(table)
        if existing is not None:
            self._check_declared(existing)

    def close(self) -> None:
        """Close the store if this map opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def layout(self) -> MapLayout | None:
        """The table's stored layout, or None before the first write."""
        return self.store.layout(self.table)

    def _check_declared(self, layout: MapLayout) -> None:
        declared = {
            "key_columns": self._key_columns,
            "key_types": self._key_types,
            "value_type": self._value_type,
            "kind": self._kind,
        }
        for field, want in declared.items():
            if want is not None and getattr(layout, field) != want:
                msg = (
                    f"map table {self.table!r} is a {layout.describe()}; declared {field}="
                    f"{want!r} does not match the stored {getattr(layout, field)!r}"
                )
                raise StateLayoutError(msg)

    # -- encoding -----------------------------------------------------------------------------

    def _encode_keys(self, layout: MapLayout, keys: Sequence[Key]) -> list[list[Any]]:
        columns: list[list[Any]] = [[] for _ in layout.key_columns]
        for key in keys:
            parts = tuple(key)
            if len(parts) != layout.arity:
                msg = (
                    f"map {self.table!r}: key {parts!r} has {len(parts)} part(s) but the table's "
                    f"key is ({', '.join(layout.key_columns)}), {layout.arity} part(s)"
                )
                raise StateLayoutError(msg)
            for i, (part, key_type) in enumerate(zip(parts, layout.key_types, strict=True)):
                if part is None and key_type != "JSON":
                    msg = (
                        f"map {self.table!r}: key {parts!r} has None in key column "
                        f"{layout.key_columns[i]!r} ({key_type}); key columns cannot be NULL "
                        "(declare that key type as JSON to store None)"
                    )
                    raise StateLayoutError(msg)
                ok, encoded = _encode(part, key_type)
                if not ok:
                    msg = (
                        f"map {self.table!r}: key part {part!r} of {parts!r} cannot be stored in "
                        f"key column {layout.key_columns[i]!r} ({key_type})"
                    )
                    raise StateLayoutError(msg)
                columns[i].append(encoded)
        return columns

    def _key_table(self, layout: MapLayout, columns: list[list[Any]]) -> dict[str, pa.Array]:
        return {
            c: pa.array(col, type=sql_to_arrow(t))
            for c, t, col in zip(layout.key_columns, layout.key_types, columns, strict=True)
        }

    def _encode_value(self, layout: MapLayout, value: Any) -> Any:
        if value is None:
            return None
        ok, encoded = _encode(value, layout.value_type)
        if not ok:
            msg = (
                f"map {self.table!r}: value {value!r} ({type(value).__name__}) cannot be stored "
                f"in its {layout.value_type} value column; convert it, or use a new table "
                "declared with value_type='JSON'"
            )
            raise StateLayoutError(msg)
        return encoded

    def _check_txid(self, txid: Any, value: Any) -> int | None:
        if txid is None:
            return None
        if (
            isinstance(txid, bool)
            or not isinstance(txid, int)
            or not (_INT64_MIN <= txid <= _INT64_MAX)
        ):
            msg = f"map {self.table!r}: value {value!r} has txid {txid!r}, not a BIGINT"
            raise StateLayoutError(msg)
        return txid

    def _split_values(
        self, layout: MapLayout, values: Sequence[Any]
    ) -> tuple[list[int | None], list[Any], list[Any]]:
        wanted: type | None = {"opaque": OpaqueValue, "transactional": TransactionalValue}.get(
            layout.kind
        )
        txids: list[int | None] = []
        currs: list[Any] = []
        prevs: list[Any] = []
        for value in values:
            is_wrapped = isinstance(value, OpaqueValue | TransactionalValue)
            if (wanted is None and is_wrapped) or (
                wanted is not None and type(value) is not wanted
            ):
                want = "plain values" if wanted is None else f"{wanted.__name__}s"
                msg = (
                    f"map {self.table!r} holds {layout.kind} values and stores {want}; got "
                    f"{type(value).__name__} {value!r}. Use one state type per table."
                )
                raise StateLayoutError(msg)
            if isinstance(value, OpaqueValue):
                txids.append(self._check_txid(value.curr_txid, value))
                currs.append(self._encode_value(layout, value.curr))
                prevs.append(self._encode_value(layout, value.prev))
            elif isinstance(value, TransactionalValue):
                txids.append(self._check_txid(value.txid, value))
                currs.append(self._encode_value(layout, value.val))
                prevs.append(None)
            else:
                txids.append(None)
                currs.append(self._encode_value(layout, value))
                prevs.append(None)
        return txids, currs, prevs

    def _infer_layout(self, keys: Sequence[Key], values: Sequence[Any]) -> MapLayout:
        arity = len(self._key_columns) if self._key_columns else len(tuple(keys[0]))
        if self._key_types is not None:
            arity = len(self._key_types)
        key_columns = self._key_columns or default_key_columns(arity)
        tuples = [tuple(k) for k in keys]
        if any(len(t) != arity for t in tuples):
            bad = next(t for t in tuples if len(t) != arity)
            msg = (
                f"map {self.table!r}: key {bad!r} has {len(bad)} part(s) but the table's key "
                f"is ({', '.join(key_columns)}), {arity} part(s)"
            )
            raise StateLayoutError(msg)
        key_types = self._key_types or tuple(
            _infer_scalar_type([t[i] for t in tuples], for_key=True) for i in range(arity)
        )
        first = next((v for v in values if v is not None), None)
        kind = self._kind or (
            "opaque"
            if isinstance(first, OpaqueValue)
            else "transactional"
            if isinstance(first, TransactionalValue)
            else "plain"
        )
        inner: list[Any] = []
        for v in values:
            if isinstance(v, OpaqueValue):
                inner += [v.curr, v.prev]
            elif isinstance(v, TransactionalValue):
                inner.append(v.val)
            else:
                inner.append(v)
        value_type = self._value_type or _infer_scalar_type(inner, for_key=False)
        return MapLayout(self.table, kind, tuple(key_columns), tuple(key_types), value_type)

    # -- the BackingMap protocol ----------------------------------------------------------------

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Return each key's stored value in key order (None where absent), in ONE query.

        Values come back as ``OpaqueValue`` / ``TransactionalValue`` / plain values per the
        table's kind. A table that does not exist yet reads as all None.

        Raises:
            StateLayoutError: a key does not fit the table's key columns.
        """
        if not keys:
            return []
        layout = self.store.layout(self.table)
        if layout is None:
            return [None] * len(keys)
        self._check_declared(layout)
        columns = self._encode_keys(layout, keys)
        arrays = {_ORD: pa.array(range(len(keys)), type=pa.int64())}
        arrays.update(self._key_table(layout, columns))
        on = " AND ".join(f"q.{quote_ident(c)} = s.{quote_ident(c)}" for c in layout.key_columns)
        found = f"s.{quote_ident(layout.key_columns[0])} IS NOT NULL"
        with self.store.registered(pa.table(arrays)) as view:
            latest = self.store.latest_sql(layout, quote_ident(view))
            result = self.store.conn.sql(
                f"SELECT {found} AS found, s.txid, s.curr, s.prev FROM {quote_ident(view)} q "
                f"LEFT JOIN ({latest}) s ON {on} ORDER BY q.{_ORD}"
            ).to_arrow_table()
        vt = layout.value_type
        out: list[Any] = []
        rows = zip(
            result.column("found").to_pylist(),
            result.column("txid").to_pylist(),
            result.column("curr").to_pylist(),
            result.column("prev").to_pylist(),
            strict=True,
        )
        for hit, txid, curr, prev in rows:
            if not hit:
                out.append(None)
            elif layout.kind == "opaque":
                out.append(OpaqueValue(txid, _decode(curr, vt), _decode(prev, vt)))
            elif layout.kind == "transactional":
                out.append(TransactionalValue(txid, _decode(curr, vt)))
            else:
                out.append(_decode(curr, vt))
        return out

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Store ``values[i]`` under ``keys[i]`` with ONE ``INSERT`` (a new version per key).

        If a key appears more than once, the last value wins. The first write to a table
        that does not exist creates it (in the same transaction as the write).

        Raises:
            ConfigError: ``keys`` and ``values`` differ in length.
            StateLayoutError: a key or value does not fit the table (kind, arity, type).
        """
        if len(keys) != len(values):
            msg = f"map {self.table!r}: multi_put got {len(keys)} keys but {len(values)} values"
            raise ConfigError(msg)
        if not keys:
            return
        layout = self.store.layout(self.table)
        if layout is None:
            with self.store.transaction():
                layout = self.store.ensure_map(self._infer_layout(keys, values))
                self._put(layout, keys, values)
        else:
            self._check_declared(layout)
            self._put(layout, keys, values)

    def _put(self, layout: MapLayout, keys: Sequence[Key], values: Sequence[Any]) -> None:
        columns = self._encode_keys(layout, keys)
        txids, currs, prevs = self._split_values(layout, values)
        last: dict[tuple[Any, ...], int] = {}
        for i, encoded in enumerate(zip(*columns, strict=True)):
            last[encoded] = i
        if len(last) < len(keys):
            keep = sorted(last.values())
            columns = [[col[i] for i in keep] for col in columns]
            txids = [txids[i] for i in keep]
            currs = [currs[i] for i in keep]
            prevs = [prevs[i] for i in keep]
        vtype = sql_to_arrow(layout.value_type)
        arrays = self._key_table(layout, columns)
        arrays["txid"] = pa.array(txids, type=pa.int64())
        arrays["curr"] = pa.array(currs, type=vtype)
        arrays["prev"] = pa.array(prevs, type=vtype)
        names = ", ".join(quote_ident(c) for c in (*layout.key_columns, *_VALUE_COLUMNS))
        with self.store.registered(pa.table(arrays)) as view:
            self.store.conn.execute(
                f"INSERT INTO {log_table(self.table)} ({names}, {SEQ_COLUMN}) SELECT {names}, "
                f"(SELECT nextval('{seq_name(self.table)[1:-1]}')) FROM {quote_ident(view)}"
            )

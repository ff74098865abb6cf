"""The half of a SQL state store below its reads: primitives, commit markers, the map catalog.

:class:`SqlCatalogStore` declares the primitives a concrete store provides and holds what
DuckDB and PostgreSQL do the same way on top of them; its subclass
:class:`~trident_assets.backends.sql_store.StateStore` adds reads and compaction.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, ClassVar

import pyarrow as pa

from trident_assets.backends.map_layout import (
    MapLayout,
    check_scope,
    log_table,
    quote_ident,
    seq_name,
    validate_table_name,
)
from trident_assets.backends.sql_dialect import Dialect
from trident_assets.core.closing import ClosesOnExit
from trident_assets.errors import ConfigError, StateLayoutError, TridentError
from trident_assets.names import CATALOG_TABLE, COMMITS_TABLE, SEQ_COLUMN

__all__ = ["SqlCatalogStore", "SqlTransaction"]


class SqlTransaction:
    """One open transaction of a store (the core's ``StoreTransaction``)."""

    def __init__(self, store: SqlCatalogStore) -> None:
        self.store = store
        self.rollback_only = False
        """Set when a joined inner block failed: the outermost block must roll back."""

    def last_committed(self, scope: str) -> int | None:
        """Return the last txid committed to ``scope``, or None."""
        return self.store.last_committed(scope)

    def mark_committed(self, scope: str, txid: int) -> None:
        """Record ``txid`` as committed to ``scope``; effective when the transaction commits.

        Raises:
            ConfigError: ``scope`` is empty or ``txid`` is not an integer.
        """
        check_scope(scope)
        if isinstance(txid, bool) or not isinstance(txid, int):
            msg = f"mark_committed({scope!r}, {txid!r}): txid must be an integer"
            raise ConfigError(msg)
        now = datetime.now(UTC).replace(tzinfo=None)
        self.store.execute(
            f'INSERT INTO "{COMMITS_TABLE}" (scope, txid, committed_at) VALUES (?, ?, ?) '
            "ON CONFLICT (scope) DO UPDATE SET txid = excluded.txid, "
            "committed_at = excluded.committed_at",
            [scope, txid, now],
        )


class SqlCatalogStore(ClosesOnExit):
    """The primitives, commit markers and catalog of a SQL state store (see the module).

    A store holds one connection and is not thread-safe: use one store per thread or process.
    """

    dialect: ClassVar[Dialect]
    conversion_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    """Driver errors raised when a bound value does not convert to a column's type."""
    value_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    """Driver errors raised when a computed value overflows or does not convert."""
    catalog_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    """Driver errors raised when a table of the same name already exists."""

    path: str
    """Where the store lives, for messages (a file path, or a DSN without its password)."""

    def __init__(self) -> None:
        self._layouts: dict[str, MapLayout] = {}

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection (idempotent); an open transaction is rolled back."""

    # -- primitives ------------------------------------------------------------------------

    @abc.abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement with ``?`` parameters; return the rows it changed (-1: unknown)."""

    @abc.abstractmethod
    def fetch_rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one query with ``?`` parameters; return its rows."""

    @abc.abstractmethod
    def fetch_arrow(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """Run one query with ``?`` parameters; return its result as an Arrow table."""

    @abc.abstractmethod
    def staged(self, table: pa.Table, *, analyze: bool = True) -> AbstractContextManager[str]:
        """Make ``table`` a relation for the ``with`` block; yield its quoted-ready name.

        ``analyze``: gather the planner's statistics on it (PostgreSQL; a statement whose plan
        does not depend on them skips that cost).
        """

    transaction_type: ClassVar[type[SqlTransaction]] = SqlTransaction
    _tx: SqlTransaction | None = None

    @abc.abstractmethod
    def _rollback(self) -> None:
        """ROLLBACK the open transaction (if the database has not ended it already)."""

    def _failed(self, exc: BaseException) -> None:
        """Raise the store's own error for ``exc``, which rolled the transaction back."""

    def _committed(self, tx: SqlTransaction) -> None:
        """What the store does once ``tx`` has committed."""

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """Open a transaction: BEGIN, then COMMIT on normal exit or ROLLBACK on an exception.

        Re-entrant: inside an open transaction, a nested ``transaction()`` joins it (no nested
        BEGIN) and only the outermost block commits. If a nested block exits with an exception
        that the caller then swallows, the outermost block still rolls back and raises.

        Raises:
            TridentError: the store is closed, or a nested block failed and the transaction
                was rolled back.
        """
        if self._tx is not None:
            outer = self._tx
            try:
                yield outer
            except BaseException:
                outer.rollback_only = True
                raise
            return
        self.execute("BEGIN")
        tx = self._tx = self.transaction_type(self)
        try:
            yield tx
        except BaseException as exc:
            self._rollback()
            self._failed(exc)
            raise
        if tx.rollback_only:
            self._rollback()
            msg = (
                f"transaction on {self.path!r} rolled back: a nested transaction block failed "
                "and its error was caught; nothing was committed"
            )
            raise TridentError(msg)
        try:
            self.execute("COMMIT")
            self._tx = None
        except BaseException:
            self._rollback()
            raise
        self._committed(tx)

    @abc.abstractmethod
    def has_table(self, name: str) -> bool:
        """True if a table or view ``name`` exists in the store's schema."""

    def forget_layouts(self) -> None:
        """Drop cached catalog rows (after a rollback: a created map may be gone)."""
        self._layouts.clear()

    # -- commit markers ----------------------------------------------------------------------

    def create_base_tables(self) -> None:
        """Create the commit-marker and catalog tables if missing (inside a transaction)."""
        self.execute(
            f'CREATE TABLE IF NOT EXISTS "{COMMITS_TABLE}" (scope VARCHAR PRIMARY KEY, '
            "txid BIGINT NOT NULL, committed_at TIMESTAMP)"
        )
        self.execute(
            f'CREATE TABLE IF NOT EXISTS "{CATALOG_TABLE}" (table_name VARCHAR PRIMARY KEY, '
            "kind VARCHAR NOT NULL, key_columns VARCHAR NOT NULL, key_types VARCHAR NOT NULL, "
            "value_type VARCHAR NOT NULL)"
        )

    def last_committed(self, scope: str) -> int | None:
        """Return the last txid committed to ``scope`` (None if nothing was committed)."""
        check_scope(scope)
        rows = self.fetch_rows(f'SELECT txid FROM "{COMMITS_TABLE}" WHERE scope = ?', [scope])
        return int(rows[0][0]) if rows else None

    def scopes(self) -> dict[str, int]:
        """Return every commit scope (topology) and its last committed txid."""
        rows = self.fetch_rows(f'SELECT scope, txid FROM "{COMMITS_TABLE}" ORDER BY scope')
        return {str(r[0]): int(r[1]) for r in rows}

    # -- the catalog -------------------------------------------------------------------------

    def layout(self, table: str) -> MapLayout | None:
        """Return the catalog layout of map ``table``, or None if it does not exist yet.

        Raises:
            ConfigError: ``table`` is not a valid map table name.
        """
        validate_table_name(table)
        cached = self._layouts.get(table)
        if cached is not None:
            return cached
        rows = self.fetch_rows(
            f'SELECT kind, key_columns, key_types, value_type FROM "{CATALOG_TABLE}" '
            "WHERE table_name = ?",
            [table],
        )
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

        The log table, its sequence, the latest-version view and the catalog row are created
        in one transaction (joining an open one).

        Raises:
            StateLayoutError: the table exists with a different layout, or a non-map table of
                that name exists.
        """
        d = self.dialect
        with self.transaction():
            existing = self.layout(layout.table)
            if existing is not None:
                if existing != layout:
                    msg = (
                        f"map table {layout.table!r} is a {existing.describe()}, not a "
                        f"{layout.describe()}; use another table name or the stored layout"
                    )
                    raise StateLayoutError(msg)
                return existing
            if self.has_table(layout.table):
                msg = (
                    f"table {layout.table!r} already exists in {self.path!r} but is not a "
                    "trident map table (it has no catalog entry)"
                )
                raise StateLayoutError(msg)
            keys = ", ".join(
                f"{quote_ident(c)} {d.column_type(t)} NOT NULL"
                for c, t in zip(layout.key_columns, layout.key_types, strict=True)
            )
            vtype = d.column_type(layout.value_type)
            pk = ", ".join(quote_ident(c) for c in layout.key_columns)
            log = log_table(layout.table)
            try:
                self.execute(
                    f"CREATE TABLE {log} ({keys}, "
                    f"{SEQ_COLUMN} BIGINT NOT NULL, txid BIGINT, curr {vtype}, prev {vtype})"
                )
                for index in d.log_indexes(log, pk, SEQ_COLUMN):
                    self.execute(index)
                self.execute(f"CREATE SEQUENCE {seq_name(layout.table)} START 1")
                latest = d.latest(f"{pk}, txid, curr, prev", log, pk, SEQ_COLUMN)
                self.execute(f"CREATE VIEW {quote_ident(layout.table)} AS {latest}")
            except self.catalog_errors as exc:
                msg = (
                    f"table {layout.table!r} already exists in {self.path!r} but is not a "
                    f"trident map table (it has no catalog entry): {exc}"
                )
                raise StateLayoutError(msg) from exc
            self.execute(
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
        rows = self.fetch_rows(f'SELECT table_name FROM "{CATALOG_TABLE}" ORDER BY table_name')
        return [r[0] for r in rows]

    def size(self, table: str) -> int:
        """Return the number of keys in map ``table`` (0 if it does not exist yet)."""
        layout = self.layout(table)
        if layout is None:
            return 0
        keys = ", ".join(quote_ident(c) for c in layout.key_columns)
        rows = self.fetch_rows(
            f"SELECT count(*) FROM (SELECT DISTINCT {keys} FROM {log_table(table)}) AS d"
        )
        return int(rows[0][0])

    def latest_sql(
        self, layout: MapLayout, keys_from: str, keys_in: Sequence[str] | None = None
    ) -> str:
        """Return a query for the current row of every stored key that appears in ``keys_from``.

        ``keys_from`` is a relation name (a staged Arrow table, a temp table, a view) whose
        columns ``keys_in`` (default: the map's key column names) hold keys. The query yields
        the map's key columns, ``txid``, ``curr`` and ``prev``. DuckDB: a semi join of the log
        table against ``keys_from``, then the latest version per key; PostgreSQL: one index
        probe of the log per distinct key asked for (so the cost follows the batch, not the
        state).
        """
        key_q = [quote_ident(c) for c in layout.key_columns]
        cols_in = ['"' + c.replace('"', '""') + '"' for c in (keys_in or layout.key_columns)]
        if self.dialect.is_postgres:
            return self.dialect.latest_by_index(
                log_table(layout.table), key_q, cols_in, keys_from, SEQ_COLUMN
            )
        on = " AND ".join(f"q.{i} = s.{k}" for i, k in zip(cols_in, key_q, strict=True))
        keys = ", ".join(f"s.{k}" for k in key_q)
        source = (
            f"{log_table(layout.table)} s WHERE EXISTS (SELECT 1 FROM {keys_from} q WHERE {on})"
        )
        return self.dialect.latest(
            f"{keys}, s.txid, s.curr, s.prev", source, keys, f"s.{SEQ_COLUMN}"
        )

"""The state store's interface and what every SQL store reads the same way; compaction.

:class:`StateStore` adds reads (map tables now or as of a txid) and compaction to
:class:`~trident_assets.backends.sql_catalog.SqlCatalogStore` (the primitives, commit markers
and catalog); its subclasses are :class:`~trident_assets.backends.duckdb_store.DuckDBStore`
and :class:`~trident_assets.backends.postgres_store.PostgresStore`. The txid rules live
elsewhere (the core's map wrappers and commit protocol, and the merge statement): a store only
stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from trident_assets.backends.backing_map import SqlBackingMap
from trident_assets.backends.map_layout import (
    MapKind,
    MapLayout,
    log_table,
    quote_ident,
    validate_table_name,
)
from trident_assets.backends.sql_catalog import SqlCatalogStore
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError, HistoryUnavailableError, StateLayoutError
from trident_assets.names import COMPACTIONS_TABLE, SEQ_COLUMN, validate_identifier

__all__ = ["StateStore"]


class StateStore(SqlCatalogStore):
    """A transactional store of versioned map tables, commit markers and side tables.

    Contract: every write made inside :meth:`transaction` commits or rolls back with the
    commit marker written there (``mark_committed``); readers outside a transaction see the
    last committed state only; a store object holds one connection and is not thread-safe
    (use one store per thread or process). Subclasses provide the connection primitives.
    """

    # -- compaction ----------------------------------------------------------------------------

    def compact(self, table: str | None = None) -> dict[str, int]:
        """Drop superseded versions from map tables' logs (all maps if ``table`` is None).

        Each map keeps only its current row per key, in one transaction (joining an open one).
        Run it between batches: it costs one pass over the table. Returns rows dropped per map.
        """
        names = [table] if table is not None else self.tables()
        dropped: dict[str, int] = {}
        with self.transaction():
            for name in names:
                layout = self.layout(name)
                if layout is None:
                    continue
                log = log_table(name)
                pk = ", ".join(quote_ident(c) for c in layout.key_columns)
                before = int(self.fetch_rows(f"SELECT count(*) FROM {log}")[0][0])
                if before == self.size(name):
                    dropped[name] = 0
                    continue
                self._record_oldest_readable(name, pk)
                self.execute(self.dialect.compact(log, pk, SEQ_COLUMN))
                after = int(self.fetch_rows(f"SELECT count(*) FROM {log}")[0][0])
                dropped[name] = before - after
        return dropped

    def _record_oldest_readable(self, table: str, pk: str) -> None:
        """Record the oldest txid still exact once ``table``'s superseded rows are dropped.

        A key with versions at txids ``t1 < ... < tm`` loses ``t1..t(m-1)``: an as-of read at
        N in ``[t1, tm)`` would need them. So every N at or after the largest ``tm`` of such a
        key stays exact; reads before it are refused. Kept with the larger earlier bound.
        """
        rows = self.fetch_rows(
            f"SELECT max(newest) FROM (SELECT max(txid) AS newest FROM {log_table(table)} "
            f"GROUP BY {pk} HAVING count(*) > 1) AS n"
        )
        newest = rows[0][0]
        if newest is None:  # a plain map (no txids): nothing to record
            return
        self.execute(
            f'CREATE TABLE IF NOT EXISTS "{COMPACTIONS_TABLE}" (table_name VARCHAR PRIMARY KEY, '
            "oldest_txid BIGINT NOT NULL, compacted_at TIMESTAMP)"
        )
        self.execute(
            f'INSERT INTO "{COMPACTIONS_TABLE}" VALUES (?, ?, ?) ON CONFLICT (table_name) DO '
            f'UPDATE SET oldest_txid = greatest("{COMPACTIONS_TABLE}".oldest_txid, '
            "excluded.oldest_txid), "
            "compacted_at = excluded.compacted_at",
            [table, int(newest), datetime.now(UTC).replace(tzinfo=None)],
        )

    def oldest_readable_txid(self, table: str) -> int | None:
        """Return the oldest txid :meth:`scan` can read ``table`` as of.

        None if compaction never dropped a version of the map: every committed txid can be read.
        """
        validate_table_name(table)
        if not self.has_table(COMPACTIONS_TABLE):
            return None
        rows = self.fetch_rows(
            f'SELECT oldest_txid FROM "{COMPACTIONS_TABLE}" WHERE table_name = ?', [table]
        )
        return int(rows[0][0]) if rows else None

    # -- reads -----------------------------------------------------------------------------------

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
            condition = f" WHERE {' AND '.join(where)}" if where else ""
            source = f"{quote_ident(table)}{condition}"
        else:
            self._check_as_of(layout, as_of)
            where.append("txid <= ?")
            params.append(as_of)
            latest = self.dialect.latest(
                f"{keys}, curr",
                f"{log_table(table)} WHERE {' AND '.join(where)}",
                keys,
                SEQ_COLUMN,
            )
            source = f"({latest}) AS l"
        try:
            return self.fetch_arrow(
                f"SELECT {keys}, curr AS {quote_ident(value_name)} FROM {source} ORDER BY {keys}",
                params,
            )
        except self.conversion_errors as exc:
            reason = str(exc).splitlines()[0]
            msg = f"key {list(key or [])} does not match {layout.describe()}: {reason}"
            raise ConfigError(msg) from exc

    def _key_filter(
        self, layout: MapLayout, key: Sequence[Any] | None
    ) -> tuple[list[str], list[Any]]:
        if key is None:
            return [], []
        if len(key) != layout.arity:
            msg = (
                f"a key of {layout.table!r} has {layout.arity} value(s) "
                f"({', '.join(layout.key_columns)}), got {len(key)}: {list(key)}"
            )
            raise ConfigError(msg)
        where = [
            f"{quote_ident(c)} = CAST(? AS {self.dialect.column_type(t)})"
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
    ) -> SqlBackingMap:
        """Return a backing map over ``table`` that shares this store's connection."""
        return SqlBackingMap(
            self,
            table,
            key_columns=key_columns,
            key_types=key_types,
            value_type=value_type,
            kind=kind,
        )

"""Apache Iceberg tables (``pyiceberg``, a SQL catalog): one catalog commit per txid.

The catalog is a ``pyiceberg`` :class:`~pyiceberg.catalog.sql.SqlCatalog` named ``trident``:
by default a SQLite file ``iceberg_catalog.db`` beside a DuckDB state file (its tables' files
under ``iceberg/`` there), or the store's own database for a PostgreSQL store. Each txid is
one transaction on the table, whose snapshots carry ``trident.txid`` and ``trident.app`` in
their summaries (a merge by keys is an overwrite-by-filter: a delete and an append snapshot in
that one commit). The table as of txid N: the newest snapshot whose summary says N.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import (
    AlwaysFalse,
    BooleanExpression,
    EqualTo,
    In,
    IsNull,
    Or,
)

from trident_assets.errors import ConfigError, PublishError
from trident_assets.lakehouse.writer import TableWriter

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from trident_assets.stream.lakehouse_specs import Publication

__all__ = ["CATALOG_NAME", "IcebergWriter", "catalog_for", "match_filter"]

CATALOG_NAME = "trident"
"""The name of the SQL catalog tables are registered in (readers open it by this name)."""
REWRITE_SHARE = 0.25
"""A merge changing at least this share of the table's rows rewrites the whole table."""
TXID_KEY = "trident.txid"
APP_KEY = "trident.app"


def catalog_for(store: Any, uri: str | None, warehouse: str | None) -> SqlCatalog:
    """The SQL catalog for ``store``: ``uri``/``warehouse`` if given, else beside the store.

    Raises:
        ConfigError: a PostgreSQL store and no ``warehouse`` (where to put the files).
    """
    dsn = getattr(store, "dsn", None)
    if uri is None and dsn is not None:
        rest = dsn.partition("://")[2]
        uri = f"postgresql+psycopg2://{rest}"
    if warehouse is None and dsn is not None:
        msg = (
            "an IcebergTable published from a PostgreSQL store needs warehouse= (a folder or "
            "URL for the table's files), e.g. IcebergTable('lake.counts', warehouse='/lake')"
        )
        raise ConfigError(msg)
    home = Path(store.path).resolve().parent
    uri = uri or f"sqlite:///{home / 'iceberg_catalog.db'}"
    where = warehouse or str(home / "iceberg")
    if "://" not in where:
        Path(where).mkdir(parents=True, exist_ok=True)
        where = Path(where).as_uri()
    return SqlCatalog(CATALOG_NAME, uri=uri, warehouse=where)


class IcebergWriter(TableWriter):
    """The Iceberg table of one publication."""

    def __init__(self, publication: Publication, store: Any) -> None:
        """Bind ``publication`` (an :class:`~trident_assets.IcebergTable`) to its catalog."""
        self.publication = publication
        spec = publication.table
        self.identifier: str = spec.identifier  # type: ignore[attr-defined]
        self.catalog = catalog_for(store, spec.catalog_uri, spec.warehouse)  # type: ignore[attr-defined]

    def _table(self) -> Table | None:
        try:
            return self.catalog.load_table(self.identifier)
        except NoSuchTableError:
            return None

    def _create(self, rows: pa.Table) -> Table:
        namespace = self.identifier.rsplit(".", 1)[0]
        self.catalog.create_namespace_if_not_exists(namespace)
        return self.catalog.create_table_if_not_exists(self.identifier, schema=rows.schema)

    def _props(self, txid: int) -> dict[str, str]:
        return {TXID_KEY: str(txid), APP_KEY: self.publication.app_id}

    def last_txid(self) -> int | None:
        """The txid in the summary of the newest snapshot of this publication."""
        table = self._table()
        if table is None:
            return None
        ours = _ours(table, self.publication.app_id)
        if ours:
            return max(ours)
        if table.current_snapshot() is not None and table.scan().count() > 0:
            msg = (
                f"{self.publication.describe()}: the table holds data this publication did "
                f"not write (no snapshot of application {self.publication.app_id!r}); nothing "
                "was written to it. Publish to a new table, or drop this one"
            )
            raise PublishError(msg)
        return None

    def _typed(self, table: Table, rows: pa.Table) -> pa.Table:
        schema = table.schema().as_arrow()
        if schema.names != rows.schema.names:
            return rows
        return rows.cast(schema)

    def append(self, txid: int, rows: pa.Table) -> None:
        """Append ``rows`` (possibly none) as one snapshot stamped ``txid``."""
        table = self._table() or self._create(rows)
        table.append(self._typed(table, rows), snapshot_properties=self._props(txid))

    def merge(
        self,
        txid: int,
        rows: pa.Table,
        keys: tuple[str, ...],
        whole: Callable[[], pa.Table | None] | None = None,
    ) -> None:
        """Overwrite the rows of ``rows``'s keys by ``rows``: one transaction stamped ``txid``.

        An overwrite-by-filter evaluates the keys' filter against every data file and
        rewrites them; when ``rows`` changes at least :data:`REWRITE_SHARE` of the table's
        rows and ``whole`` gives the table after ``txid``, that content replaces the table
        instead (one overwrite, the same rows, far cheaper for many keys).
        """
        table = self._table()
        if table is None or rows.num_rows == 0:
            self.append(txid, rows)
            return
        if whole is not None and rows.num_rows >= REWRITE_SHARE * _total_rows(table):
            content = whole()
            if content is not None:
                table.overwrite(self._typed(table, content), snapshot_properties=self._props(txid))
                return
        table.overwrite(
            self._typed(table, rows),
            overwrite_filter=match_filter(rows, keys),
            snapshot_properties=self._props(txid),
        )

    def replace(self, txid: int, rows: pa.Table) -> None:
        """Overwrite the whole table by ``rows`` in one transaction stamped ``txid``."""
        table = self._table() or self._create(rows)
        table.overwrite(self._typed(table, rows), snapshot_properties=self._props(txid))

    def versions(self) -> dict[int, Any]:
        """Per txid published: the snapshot id holding the table as of it."""
        table = self._table()
        return {} if table is None else _ours(table, self.publication.app_id)

    def empty(self) -> pa.Table | None:
        """No rows, typed like the table."""
        table = self._table()
        return None if table is None else table.schema().as_arrow().empty_table()


def _total_rows(table: Table) -> int:
    """The rows of the table's current snapshot (its summary's ``total-records``)."""
    snapshot = table.current_snapshot()
    total = snapshot.summary.get("total-records") if snapshot and snapshot.summary else None
    return int(total) if total is not None else table.scan().count()


def _ours(table: Table, app: str) -> dict[int, int]:
    """Per txid of application ``app``: the id of its newest snapshot."""
    found: dict[int, tuple[int, int]] = {}
    for snap in table.snapshots():
        props = snap.summary.additional_properties if snap.summary else {}
        if props.get(APP_KEY) == app and TXID_KEY in props:
            txid = int(props[TXID_KEY])
            if txid not in found or snap.sequence_number > found[txid][0]:
                found[txid] = (snap.sequence_number, snap.snapshot_id)
    return {txid: sid for txid, (_, sid) in found.items()}


def match_filter(rows: pa.Table, keys: tuple[str, ...]) -> BooleanExpression:
    """The rows of the table whose ``keys`` equal a row of ``rows`` (a null equals a null)."""
    unique = rows.select(list(keys)).group_by(list(keys)).aggregate([])
    if len(keys) == 1:
        column = unique.column(0)
        values = pc.drop_null(column).to_pylist()
        found: BooleanExpression = In(keys[0], values) if values else AlwaysFalse()
        return Or(found, IsNull(keys[0])) if column.null_count else found
    filters = [
        functools.reduce(
            operator.and_, [IsNull(k) if row[k] is None else EqualTo(k, row[k]) for k in keys]
        )
        for row in unique.to_pylist()
    ]
    if not filters:
        return AlwaysFalse()
    return filters[0] if len(filters) == 1 else Or(*filters)

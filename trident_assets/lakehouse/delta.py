"""Delta Lake tables (``deltalake``, no JVM): one commit per txid, an application transaction.

Every commit carries the Delta ``txn`` action ``(app id, version = txid)`` of its publication
(:attr:`~trident_assets.stream.lakehouse_specs.Publication.app_id`) and the commit info
``trident.txid``; :meth:`DeltaWriter.last_txid` reads the txn back
(``DeltaTable.transaction_version``), which is what Spark Structured Streaming's idempotent
writes read too. A table version for txid N: the commit whose ``trident.txid`` is N
(``DeltaTable.history()``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from trident_assets.errors import PublishError
from trident_assets.lakehouse.writer import TableWriter

if TYPE_CHECKING:
    from trident_assets.stream.lakehouse_specs import Publication

__all__ = ["DeltaWriter"]

TXID_KEY = "trident.txid"
"""The commit-info key holding a commit's txid."""


class DeltaWriter(TableWriter):
    """The Delta table of one publication."""

    def __init__(self, publication: Publication) -> None:
        self.publication = publication
        self.path: str = publication.table.path  # type: ignore[attr-defined]

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.path)
        except TableNotFoundError:
            return None

    def last_txid(self) -> int | None:
        """The version of the publication's application transaction in the table's log."""
        table = self._table()
        if table is None:
            return None
        version = table.transaction_version(self.publication.app_id)
        # a table created empty by hand has no file
        if version is None and table.version() >= 0 and table.file_uris():
            msg = (
                f"{self.publication.describe()}: the table holds data this publication did "
                f"not write (no transaction of application {self.publication.app_id!r}); "
                "nothing was written to it. Publish to a new path, or delete the table"
            )
            raise PublishError(msg)
        return None if version is None else int(version)

    def _props(self, txid: int) -> CommitProperties:
        app = self.publication.app_id
        return CommitProperties(
            app_transactions=[Transaction(app, txid)],
            custom_metadata={TXID_KEY: str(txid), "trident.app": app},
        )

    def _typed(self, rows: pa.Table) -> pa.Table:
        empty = self.empty()
        if empty is None or empty.schema.names != rows.schema.names:
            return rows
        return rows.cast(empty.schema)

    def append(self, txid: int, rows: pa.Table) -> None:
        """Append ``rows`` (possibly none) as one commit carrying ``txid``."""
        write_deltalake(
            self.path, self._typed(rows), mode="append", commit_properties=self._props(txid)
        )

    def merge(
        self,
        txid: int,
        rows: pa.Table,
        keys: tuple[str, ...],
        whole: Callable[[], pa.Table | None] | None = None,
    ) -> None:
        """One MERGE by ``keys`` (null-safe); an empty batch commits the txid alone.

        ``whole`` is not used: Delta's MERGE rewrites only the files holding changed keys.
        """
        table = self._table()
        if table is None or rows.num_rows == 0:
            self.append(txid, rows)
            return
        predicate = " AND ".join(f't."{k}" IS NOT DISTINCT FROM s."{k}"' for k in keys)
        (
            table.merge(
                self._typed(rows),
                predicate=predicate,
                source_alias="s",
                target_alias="t",
                commit_properties=self._props(txid),
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    def replace(self, txid: int, rows: pa.Table) -> None:
        """Overwrite the table with ``rows`` in one commit carrying ``txid``."""
        write_deltalake(
            self.path,
            self._typed(rows),
            mode="overwrite",
            commit_properties=self._props(txid),
        )

    def versions(self) -> dict[int, Any]:
        """Per txid published: its table version."""
        table = self._table()
        if table is None:
            return {}
        return {
            int(h[TXID_KEY]): int(h["version"])
            for h in table.history()
            if h.get("trident.app") == self.publication.app_id and TXID_KEY in h
        }

    def empty(self) -> pa.Table | None:
        """No rows, typed like the table."""
        table = self._table()
        if table is None:
            return None
        return pa.schema(table.schema()).empty_table()

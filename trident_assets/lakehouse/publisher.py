"""One publication's table brought up to the store's commit marker, one table commit per txid.

:class:`TablePublisher` holds the rules every format shares; a :class:`TableWriter` (Delta,
Iceberg) makes the commits. For a topology whose marker is at ``M`` and a table whose last
published txid (read from the table itself) is ``T``:

* ``T == M``: nothing to do (a txid is never written twice, even after a crash between the
  table commit and anything after it);
* ``T > M``: the table is ahead of the store (an older store restored): refused with
  :class:`~trident_assets.errors.PublishError` naming both txids, before any write;
* ``T < M``: txids ``T+1 .. M`` are published in order, each as one commit, from the rows the
  store keeps of recent txids (its last ``kept``); a txid it no longer keeps is refused,
  naming the way out (delete the table: it is published anew);
* no table yet (or one emptied by hand): a state published as a table gets its current values
  in one commit stamped ``M``; a changelog gets every txid from 1 if the store still keeps
  them all, else it starts at ``M`` with an empty commit (it holds the txids after ``M``).

A state published as a table takes each txid's new values (its changed keys, their values
after the txid) merged in by key; a changelog or an output appends the txid's rows. Every row
carries ``txid`` (for a table: the txid that last changed the key).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.errors import PublishError
from trident_assets.names import validate_identifier

if TYPE_CHECKING:
    from trident_assets.lakehouse.writer import TableWriter
    from trident_assets.stream.lakehouse_specs import Publication

__all__ = ["FAULT_POINT", "TXID", "TablePublisher", "open_publisher"]

TXID = "txid"
"""The column of every published row holding its txid."""
FAULT_POINT = "after_table_commit"
"""The fault point after each table commit (crash tests)."""


class TablePublisher:
    """Publishes one :class:`Publication` of a topology from ``store`` with ``writer``."""

    def __init__(self, publication: Publication, writer: TableWriter, kept: int) -> None:
        """``kept``: how many recent txids the store keeps of the publication's rows."""
        self.publication = publication
        self.writer = writer
        self.kept = kept

    def catch_up(self, store: Any, fault: Callable[[str], None] = lambda _p: None) -> list[int]:
        """Publish every txid the store committed and the table lacks; return them.

        Raises:
            PublishError: the table is ahead of the store, or lacks txids the store no
                longer keeps; nothing was written to it.
        """
        pub = self.publication
        marker = store.last_committed(pub.topology) or 0
        last = self.writer.last_txid()
        if last is not None and last > marker:
            msg = (
                f"{pub.describe()}: the table has txid {last} but the store "
                f"{store.path} has committed only up to txid {marker} (an older store "
                "restored?); nothing was written to it. Restore the store that matches the "
                f"table, or delete the table to publish it anew from txid {marker}"
            )
            raise PublishError(msg)
        if last == marker or marker == 0:
            return []
        if last is None:
            return self._start(store, marker, fault)
        oldest = marker - self.kept + 1
        if last + 1 < oldest:
            msg = (
                f"{pub.describe()}: the table has txid {last} but the store {store.path} is at "
                f"txid {marker} and keeps the rows of txids {max(1, oldest)}..{marker} only, so "
                f"txids {last + 1}..{oldest - 1} cannot be published; nothing was written to "
                "it. Delete the table: it is published anew at the next commit"
                + (" from the state's current values" if pub.mode == "table" else "")
            )
            raise PublishError(msg)
        return self._publish(store, range(last + 1, marker + 1), fault, marker)

    def _start(self, store: Any, marker: int, fault: Callable[[str], None]) -> list[int]:
        """A table without txids of ours: the state's values, or the changelog's start."""
        pub = self.publication
        if pub.mode == "table":
            rows = _whole_state(store, pub)
            if rows is None:
                return []  # the state is not in the store yet: nothing to publish
            self.writer.replace(marker, rows)
            fault(FAULT_POINT)
            return [marker]
        if marker - self.kept + 1 <= 1:
            return self._publish(store, range(1, marker + 1), fault)
        rows = _txid_rows(store, pub, marker)
        if rows is None:
            return []
        self.writer.append(marker, rows.slice(0, 0))
        fault(FAULT_POINT)
        return [marker]

    def _publish(
        self,
        store: Any,
        txids: Collection[int],
        fault: Callable[[str], None],
        marker: int | None = None,
    ) -> list[int]:
        """Publish ``txids`` in order, one table commit each.

        At ``marker`` (the store's last txid) a merge is offered the state's current values.
        """
        pub = self.publication
        done = []
        for txid in txids:
            rows = _txid_rows(store, pub, txid)
            if rows is None:
                rows = self.writer.empty()
                if rows is None:
                    continue  # neither the store nor the table has rows of it yet
            if pub.mode != "table":
                self.writer.append(txid, rows)
            elif pub.keys:
                current = None if txid != marker else lambda: _whole_state(store, pub)
                self.writer.merge(txid, rows, pub.keys, current)
            elif rows.num_rows:
                self.writer.replace(txid, rows)
            else:
                self.writer.append(txid, rows)  # a global state unchanged: the txid alone
            fault(FAULT_POINT)
            done.append(txid)
        return done


def open_publisher(publication: Publication, store: Any, kept: int) -> TablePublisher:
    """The publisher of ``publication`` for ``store`` (its table opened lazily).

    Raises:
        ConfigError: an Iceberg table with a PostgreSQL store and no ``warehouse``.
    """
    writer: TableWriter
    if publication.table.format == "delta":
        from trident_assets.lakehouse.delta import DeltaWriter

        writer = DeltaWriter(publication)
    else:
        from trident_assets.lakehouse.iceberg import IcebergWriter

        writer = IcebergWriter(publication, store)
    return TablePublisher(publication, writer, kept)


def _txid_rows(store: Any, pub: Publication, txid: int) -> pa.Table | None:
    """The rows ``txid`` wrote to the publication's rows table (None: no such table yet)."""
    table = validate_identifier(pub.rows_table, "table")
    if not store.has_table(table):
        return None
    rows = store.fetch_arrow(f'SELECT * FROM "{table}" WHERE txid = ?', [txid])
    index = rows.schema.get_field_index(TXID)  # moved to the end
    return rows.remove_column(index).append_column(rows.schema.field(index), rows.column(index))


def _whole_state(store: Any, pub: Publication) -> pa.Table | None:
    """A map state's current values (keys, value, the txid that last changed each key)."""
    state = f"{pub.topology}__{pub.name}"
    layout = store.layout(state)
    if layout is None:
        return None
    value = validate_identifier(pub.value or "value", "value column")
    pairs = list(zip(layout.key_columns, pub.keys, strict=False))
    cols = [
        f'"{validate_identifier(c, "key")}" AS "{validate_identifier(k, "key")}"' for c, k in pairs
    ]
    cols += [f'curr AS "{value}"', f"CAST(txid AS BIGINT) AS {TXID}"]
    view = validate_identifier(state, "state")
    return store.fetch_arrow(f'SELECT {", ".join(cols)} FROM "{view}"')

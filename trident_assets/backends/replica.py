"""A read replica of the state store: Parquet files that readers open without any lock.

DuckDB lets one process write a database file, and a reader in another process would have to
take the file's lock, stalling the writer. So after each txid commits, the writer *publishes*
what that txid wrote, and readers (the IO manager, the CLI) read the replica:

* ``<root>/<table>/<txid:010d>.parquet``: the rows txid N appended to ``table`` (for a map,
  its log rows: key columns, ``_trident_seq``, ``txid``, ``curr``, ``prev``; for an output or
  new-values table, the txid's rows). Cost: the batch's rows, never the whole state.
* ``<root>/<table>/base-<txid:010d>.parquet``: a map's newest row per key as of that txid,
  written by :meth:`Replica.compact`, which folds deltas older than the last ``keep_txids``.
* an *append* table (an event-window state's finals: rows are only ever added, each stamped
  with the txid that added it): ``<root>/<table>/<txid:010d>.parquet`` holds the rows txid N
  added (written only when it added some), ``base-<txid:010d>.parquet`` every row added up to
  that txid, and ``_append.json`` marks the table as published whole: its first publish
  writes the base of everything the store held before (a home older than the table's
  publishing), so readers never see part of it. Nothing of it is ever dropped; compaction
  concatenates old deltas into the base.
* ``<root>/_scopes/<scope>.json``: ``{"txid": N}``, written last, atomically (temp + rename):
  readers see txid N only once every table of N is published, so they never see a half of
  a batch. A delta of a txid beyond the marker (a publish cut short) is ignored.

Reading map ``table`` as of txid N is the newest row per key over the base and the deltas up
to N: exact for every N from the base's txid on; older reads raise
:class:`~trident_assets.errors.HistoryUnavailableError` naming the oldest readable txid.
Publishing happens after the store's commit, so a crash between the two leaves the replica
behind; :meth:`Replica.publish_missing` catches it up from the store before the next batch.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trident_assets.backends.duckdb_open import quiet_connect
from trident_assets.backends.replica_reader import APPEND_MARK, ReplicaReader, quote_column
from trident_assets.errors import ConfigError
from trident_assets.names import DEAD_LETTERS_TABLE, SEQ_COLUMN, validate_identifier

__all__ = ["DEFAULT_KEEP_TXIDS", "Replica"]

DEFAULT_KEEP_TXIDS = 100
"""How many recent txids stay readable as-of after a replica compaction."""
NEW_VALUES_KEPT = 50
"""How many recent txids of new values and outputs each table of the store keeps."""
PARTIALS_KEPT = 2
"""Txids of partials the store keeps: enough to publish a txid a crash left unpublished
(the read replica keeps ``keep_txids`` of them for readers)."""


def _rows(store: Any, sql: str, params: Sequence[Any]) -> pa.Table | pa.RecordBatchReader:
    """The rows of one query, streamed in batches where the store can (DuckDB).

    A txid's rows are then written out without all of them in memory at once; other stores
    give one Arrow table.
    """
    if hasattr(store, "fetch_reader"):
        return store.fetch_reader(sql, params)
    return store.fetch_arrow(sql, params)


def _write_atomically(path: Path, write: Any) -> None:
    """Write ``path`` through a temporary sibling and a rename (readers see all or nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


class Replica(ReplicaReader):
    """The published, lock-free copy of a state store's tables under ``root``.

    Reading it is :class:`~trident_assets.backends.replica_reader.ReplicaReader`'s; this class
    adds publishing and compaction, done by the process that owns the store.
    """

    # -- writing (the process that owns the store) -------------------------------------------

    def publish(
        self,
        store: Any,
        scope: str,
        txid: int,
        maps: Sequence[str],
        row_tables: Sequence[str],
        described: Mapping[str, Mapping[str, Any]] | None = None,
        appends: Mapping[str, str] | None = None,
    ) -> None:
        """Publish what ``txid`` wrote to ``maps``, ``row_tables`` and ``appends``, then mark it.

        Call after ``txid`` committed in ``store`` (DuckDB or PostgreSQL), before compaction.
        ``described``: per map table, what readers name its parts (``value_field``: the
        state's value field; ``global``: a global state, keyed by one internal key), kept in
        its ``_layout.json``. ``appends``: append tables and the column holding the txid
        that added a row. The txid's dead letters of ``scope`` are published too.
        """
        for table in maps:
            layout = store.layout(table)
            if layout is None:
                continue
            more = {"key_types": list(layout.key_types), "value_type": layout.value_type}
            more |= dict((described or {}).get(table, {}))
            self._write_layout(table, list(layout.key_columns), layout.kind, more)
            self._write_delta(table, txid, self._map_rows(store, table, layout.kind, txid))
        if store.has_table(DEAD_LETTERS_TABLE):
            dead = store.fetch_arrow(
                f"SELECT * FROM {DEAD_LETTERS_TABLE} WHERE topology = ? AND txid = ?",
                [scope, txid],
            )
            if dead.num_rows:
                path = self.dead_letters_dir(scope) / f"{txid:010d}.parquet"
                _write_atomically(path, lambda p: pq.write_table(dead, p))
        for table in row_tables:
            if not store.has_table(table):
                continue
            rows = _rows(
                store,
                f'SELECT * FROM "{validate_identifier(table, "table")}" WHERE txid = ?',
                [txid],
            )
            self._write_delta(table, txid, rows)
        for table, column in (appends or {}).items():
            self._publish_appended(store, table, column, txid)
        marker = self.root / "_scopes" / f"{validate_identifier(scope, 'scope')}.json"
        _write_atomically(marker, lambda p: p.write_text(json.dumps({"txid": txid})))

    def publish_missing(
        self,
        store: Any,
        scope: str,
        maps: Sequence[str],
        row_tables: Sequence[str],
        described: Mapping[str, Mapping[str, Any]] | None = None,
        appends: Mapping[str, str] | None = None,
    ) -> list[int]:
        """Publish the txids ``store`` committed after the replica's marker; return them.

        An append table not published yet is published whole up to the marker first.
        """
        last = store.last_committed(scope)
        if last is None:
            return []
        done = self.latest(scope) or 0
        for table, column in (appends or {}).items():
            if done and store.has_table(table):
                self._publish_appended(store, table, column, done, whole=True)
        missing = list(range(done + 1, last + 1))
        for txid in missing:
            self.publish(store, scope, txid, maps, row_tables, described, appends)
        return missing

    def _publish_appended(
        self, store: Any, table: str, column: str, txid: int, *, whole: bool = False
    ) -> None:
        """Publish the rows ``txid`` added to append ``table`` (with ``whole``: up to it).

        The table's first publish writes a base of every row added before ``txid`` first.
        """
        if not store.has_table(table):
            return
        name = f'"{validate_identifier(table, "table")}"'
        col = quote_column(column)
        mark = self.root / table / APPEND_MARK
        if not mark.exists():
            first = txid if whole else txid - 1
            rows = store.fetch_arrow(f"SELECT * FROM {name} WHERE {col} <= ?", [first])
            base = self.root / table / f"base-{first:010d}.parquet"
            _write_atomically(base, lambda p: pq.write_table(rows, p))
            body = json.dumps({"txid_column": column})
            _write_atomically(mark, lambda p: p.write_text(body))
            if whole:
                return
        rows = store.fetch_arrow(f"SELECT * FROM {name} WHERE {col} = ?", [txid])
        if rows.num_rows:
            self._write_delta(table, txid, rows)

    def replace_map(
        self, store: Any, table: str, up_to: int, described: Mapping[str, Any] | None = None
    ) -> None:
        """Republish map ``table`` whole from ``store``: one delta per txid up to ``up_to``.

        For a map whose history the store rewrote (a state built or rebuilt from the log).
        The new files are written aside, then the table's folder is swapped by two renames:
        a reader sees the old files or the new ones, never a mix (between the renames it
        finds no published map and raises, naming it).
        """
        layout = store.layout(table)
        if layout is None:
            return
        folder = self.root / validate_identifier(table, "table")
        fresh = self.root / f".{table}.rebuilt"
        stale = self.root / f".{table}.replaced"
        for leftover in (fresh, stale):
            if leftover.exists():
                shutil.rmtree(leftover)
        fresh.mkdir(parents=True)
        log = f'"_trident_log_{table}"'
        if layout.kind == "plain":  # no txids: every row as of ``up_to``
            rows = store.fetch_arrow(f"SELECT * FROM {log}")
            pq.write_table(rows, fresh / f"{up_to:010d}.parquet")
            top = pc.max(rows.column(SEQ_COLUMN)).as_py() if rows.num_rows else 0
            (fresh / "_published_seq.json").write_text(json.dumps({"seq": int(top)}))
        else:
            rows = store.fetch_arrow(f"SELECT * FROM {log} WHERE txid <= ?", [up_to])
            for txid in sorted(set(rows.column("txid").to_pylist())):
                part = rows.filter(pc.equal(rows.column("txid"), txid))
                pq.write_table(part, fresh / f"{int(txid):010d}.parquet")
        more = {"key_types": list(layout.key_types), "value_type": layout.value_type}
        body = {"key_columns": list(layout.key_columns), "kind": layout.kind}
        (fresh / "_layout.json").write_text(json.dumps(body | more | dict(described or {})))
        if folder.exists():
            os.replace(folder, stale)
        os.replace(fresh, folder)
        if stale.exists():
            shutil.rmtree(stale)

    def _map_rows(
        self, store: Any, table: str, kind: str, txid: int
    ) -> pa.Table | pa.RecordBatchReader:
        """The log rows ``txid`` wrote.

        Found by their ``txid``; plain maps store none, so theirs are the rows appended
        since the last publish.
        """
        log = f'"_trident_log_{validate_identifier(table, "table")}"'
        if kind != "plain":
            return _rows(store, f"SELECT * FROM {log} WHERE txid = ?", [txid])
        mark = self.root / table / "_published_seq.json"
        after = int(json.loads(mark.read_text())["seq"]) if mark.exists() else 0
        rows = store.fetch_arrow(f"SELECT * FROM {log} WHERE {SEQ_COLUMN} > ?", [after])
        if rows.num_rows:
            top = int(pc.max(rows.column(SEQ_COLUMN)).as_py())
            _write_atomically(mark, lambda p: p.write_text(json.dumps({"seq": top})))
        return rows

    def _write_delta(self, table: str, txid: int, rows: pa.Table | pa.RecordBatchReader) -> None:
        path = self.root / table / f"{txid:010d}.parquet"

        def write(target: Path) -> None:
            if isinstance(rows, pa.Table):
                pq.write_table(rows, target)
                return
            with pq.ParquetWriter(target, rows.schema) as writer:
                for batch in rows:
                    writer.write_batch(batch)

        _write_atomically(path, write)

    def _write_layout(
        self, table: str, keys: list[str], kind: str, more: Mapping[str, Any] | None = None
    ) -> None:
        path = self.root / table / "_layout.json"
        layout = {"key_columns": keys, "kind": kind, **(more or {})}
        if not path.exists() or json.loads(path.read_text()) != layout:
            body = json.dumps(layout)
            _write_atomically(path, lambda p: p.write_text(body))

    def compact(
        self, table: str, keep_txids: int = DEFAULT_KEEP_TXIDS, min_fold: int = 1
    ) -> int | None:
        """Fold map ``table``'s deltas older than the last ``keep_txids`` into its base.

        Returns the new base's txid (the oldest txid still readable), or None when there was
        nothing to fold. Readers of a txid at or after it are unaffected. For an output or
        new-values table the older deltas are deleted. ``min_fold``: fold only once at least
        that many deltas are due (a fold rewrites the base: batching folds amortises it).
        """
        if keep_txids < 1:
            msg = f"keep_txids must be >= 1, got {keep_txids}"
            raise ConfigError(msg)
        deltas = self._deltas(table)
        if not deltas:
            return None
        cut = max(deltas) - keep_txids + 1
        old = sorted(t for t in deltas if t < cut)
        if not old or len(old) < min_fold:
            return None
        base_txid = old[-1]
        files = [*self._base_files(table), *(deltas[t] for t in old)]
        if (self.root / table / APPEND_MARK).exists():  # an append table: concatenate
            rows = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")
        elif not (self.root / table / "_layout.json").exists():  # per-txid rows: drop the old
            for t in old:
                deltas[t].unlink()
            return base_txid + 1
        else:
            keys = ", ".join(quote_column(k) for k in self._layout(table)["key_columns"])
            with quiet_connect() as conn:
                rows = conn.sql(
                    f"SELECT * FROM read_parquet(?, union_by_name = true) QUALIFY row_number() "
                    f"OVER (PARTITION BY {keys} ORDER BY {SEQ_COLUMN} DESC) = 1",
                    params=[[str(f) for f in files]],
                ).to_arrow_table()
        base = self.root / table / f"base-{base_txid:010d}.parquet"
        _write_atomically(base, lambda p: pq.write_table(rows, p))
        for f in files:
            if f != base:
                f.unlink()
        return base_txid

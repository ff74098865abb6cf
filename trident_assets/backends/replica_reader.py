"""Reading a state store's read replica: any process, no lock (see :mod:`.replica`).

:class:`~.replica.Replica` adds publishing and compaction, done by the process that owns the
store.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trident_assets.backends.duckdb_open import quiet_connect
from trident_assets.errors import HistoryUnavailableError, StateLayoutError
from trident_assets.names import SEQ_COLUMN, validate_identifier

__all__ = ["APPEND_MARK", "ReplicaReader", "quote_column"]

_DELTA = re.compile(r"^(\d{10})\.parquet$")
_BASE = re.compile(r"^base-(\d{10})\.parquet$")
APPEND_MARK = "_append.json"
"""The file that marks a table of the replica as an append table, published whole."""


def quote_column(name: str) -> str:
    """``name`` validated and double-quoted, for the replica's DuckDB queries."""
    return '"' + validate_identifier(name, "column") + '"'


class ReplicaReader:
    """What is published under ``root``, read without any lock."""

    def __init__(self, root: str | Path) -> None:
        """Use ``root`` (created by the first publish)."""
        self.root = Path(root)

    def dead_letters_dir(self, scope: str) -> Path:
        """Where ``scope``'s dead letters are published: one Parquet file per txid with any."""
        return self.root / "_dead_letters" / validate_identifier(scope, "scope")

    def scopes(self) -> dict[str, int]:
        """Every published scope (topology) and its last published txid."""
        folder = self.root / "_scopes"
        if not folder.is_dir():
            return {}
        return {
            f.stem: int(json.loads(f.read_text())["txid"])
            for f in sorted(folder.glob("*.json"))
            if not f.name.startswith(".")
        }

    def layout(self, table: str) -> dict[str, Any] | None:
        """Map ``table``'s published layout (key columns, kind, ...), or None: not a map."""
        path = self.root / validate_identifier(table, "table") / "_layout.json"
        if not path.exists():
            return None
        layout: dict[str, Any] = json.loads(path.read_text())
        return layout

    def tables(self) -> list[str]:
        """The published tables (maps and per-txid row tables), by name."""
        if not self.root.is_dir():
            return []
        return sorted(
            d.name for d in self.root.iterdir() if d.is_dir() and not d.name.startswith(("_", "."))
        )

    def row_files(self, table: str, up_to: int) -> dict[int, Path]:
        """The per-txid files of row ``table`` up to txid ``up_to`` (the published ones)."""
        return {t: f for t, f in sorted(self._deltas(table).items()) if t <= up_to}

    def latest(self, scope: str) -> int | None:
        """The last txid of ``scope`` whose tables are all published, or None."""
        marker = self.root / "_scopes" / f"{validate_identifier(scope, 'scope')}.json"
        if not marker.exists():
            return None
        return int(json.loads(marker.read_text())["txid"])

    def oldest_readable(self, table: str) -> int:
        """The oldest txid map ``table`` can be read as of (1 until a compaction)."""
        bases = [int(m.group(1)) for f in self._files(table) if (m := _BASE.match(f.name))]
        return max(bases, default=1)

    def read_map(
        self, table: str, *, scope: str, as_of: int | None = None, value_name: str = "value"
    ) -> pa.Table:
        """Map ``table`` as committed after txid ``as_of`` (default: the latest published).

        Columns: the key columns, then ``value_name`` (a value's ``curr``). Empty if the map
        had no key by then.

        Raises:
            HistoryUnavailableError: ``as_of`` is older than the oldest readable txid, or not
                committed (published) yet.
            StateLayoutError: nothing of ``table`` was ever published.
        """
        latest = self.latest(scope)
        target = latest if as_of is None else as_of
        layout = self._layout(table)
        keys = [quote_column(k) for k in layout["key_columns"]]
        if target is None:
            return self._empty(table, keys, value_name)
        if latest is None or target > latest:
            msg = (
                f"{table}: txid {target} is not committed yet (the last committed txid of "
                f"{scope!r} is {latest})"
            )
            raise HistoryUnavailableError(msg)
        oldest = self.oldest_readable(table)
        if target < oldest:
            msg = (
                f"{table}: txid {target} can no longer be read; compaction kept txids "
                f"{oldest} to {latest} (raise keep_txids to keep more history)"
            )
            raise HistoryUnavailableError(msg)
        files = self._files_up_to(table, target)
        if not files:
            return self._empty(table, keys, value_name)
        key_list = ", ".join(keys)
        with quiet_connect() as conn:
            return conn.sql(
                f"SELECT {key_list}, curr AS {quote_column(value_name)} FROM read_parquet(?, "
                f"union_by_name = true) QUALIFY row_number() OVER (PARTITION BY {key_list} "
                f"ORDER BY {SEQ_COLUMN} DESC) = 1 ORDER BY {key_list}",
                params=[[str(f) for f in files]],
            ).to_arrow_table()

    def read_rows(self, table: str, txid: int) -> pa.Table | None:
        """The rows ``txid`` wrote to output / new-values ``table`` (without ``txid``).

        None when nothing of that txid is published (never, or pruned by :meth:`compact`).
        """
        path = self.root / table / f"{txid:010d}.parquet"
        if not path.exists():
            return None
        rows = pq.read_table(path)
        return rows.drop_columns(["txid"]) if "txid" in rows.column_names else rows

    def appended_files(self, table: str, scope: str) -> list[Path]:
        """The files of append ``table`` holding every row ``scope``'s published txids added.

        Raises:
            StateLayoutError: the table is not published (no batch has committed it since
                the replica carried it).
        """
        if not (self.root / validate_identifier(table, "table") / APPEND_MARK).exists():
            msg = (
                f"{table} is not published in the read replica {self.root} yet: it appears "
                "with the next committed batch of its topology"
            )
            raise StateLayoutError(msg)
        return self._files_up_to(table, self.latest(scope) or 0)

    def _layout(self, table: str) -> dict[str, Any]:
        layout = self.layout(table)
        if layout is None:
            msg = f"no published map {table!r} under {self.root} (no batch has committed it)"
            raise StateLayoutError(msg)
        return layout

    def _empty(self, table: str, keys: list[str], value_name: str) -> pa.Table:
        names = [k.strip('"') for k in keys]
        return pa.table({n: pa.array([], pa.null()) for n in [*names, value_name]})

    def _files(self, table: str) -> list[Path]:
        folder = self.root / validate_identifier(table, "table")
        return sorted(folder.iterdir()) if folder.is_dir() else []

    def _deltas(self, table: str) -> dict[int, Path]:
        return {int(m.group(1)): f for f in self._files(table) if (m := _DELTA.match(f.name))}

    def _base_files(self, table: str) -> list[Path]:
        return [f for f in self._files(table) if _BASE.match(f.name)]

    def _files_up_to(self, table: str, txid: int) -> list[Path]:
        """The base files, then the deltas up to ``txid`` in txid order."""
        deltas = self._deltas(table)
        return [*self._base_files(table), *(deltas[t] for t in sorted(deltas) if t <= txid)]

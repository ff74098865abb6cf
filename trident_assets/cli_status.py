"""``trident status``: per topology, last committed txid, lag, quarantine and last failure.

Reads the state file read-only and the embedded log's offset files; lag of partitions that
are not in the embedded log (Kafka topics) is shown as unknown (it needs the broker: the
``lag`` metadata of each txid and the ``lag_below_threshold`` check have it).

A state file that lost committed txids (behind its commit marker file: a torn write-ahead
log) is still shown: its topologies' ``last_error`` names the lost txids and the way out, and
the command exits with code 1 after the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from trident_assets.cli_common import (
    DEFAULT_HOME,
    DatabaseOption,
    Format,
    FormatOption,
    HomeOption,
    WaitOption,
    cli_errors,
    emit,
    open_state,
)
from trident_assets.errors import LostCommitsError
from trident_assets.names import SPOUT_RANGES_TABLE
from trident_assets.spouts.ranges import partition_sort_key

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore

__all__ = ["status"]

COLUMNS = ["topology", "last_txid", "lag", "lag_by_partition", "quarantined", "last_error"]
RANGES = SPOUT_RANGES_TABLE
"""The spout ranges table (:mod:`trident_assets.backends.duckdb_spout_meta`)."""


def _positions(store: StateStore) -> dict[str, dict[str, int]]:
    """Per topology, per partition: the next offset after its last committed batch."""
    if not store.has_table(RANGES):
        return {}
    rows = store.fetch_rows(
        store.dialect.latest(
            "topology, partition, next_offset",
            f"{RANGES} WHERE committed",
            "topology, spout, partition",
            "txid",
        )
    )
    positions: dict[str, dict[str, int]] = {}
    for topology, partition, next_offset in rows:
        positions.setdefault(topology, {})[partition] = int(next_offset)
    return positions


def _lag(home: Path, positions: dict[str, int]) -> dict[str, int | None]:
    """Records waiting per partition (None where the partition is not in the embedded log).

    A file spout's partition counts its files waiting (a :class:`FilesWaiting`: shown with
    their bytes and location).
    """
    from trident_assets.log.store import PartitionedLog

    log = PartitionedLog(home / "log") if (home / "log").is_dir() else None
    topics = set(log.topics()) if log is not None else set()
    lag: dict[str, int | None] = {}
    for topic in sorted({p.rpartition("@")[0] for p in positions}):
        waiting = None if log is None else _files_waiting(log.root, f"{topic}@0", positions)
        if waiting is not None:  # a file spout's: files and bytes
            lag[f"{topic}@0"] = waiting
            continue
        if log is None or topic not in topics:
            lag |= {p: None for p in positions if p.rpartition("@")[0] == topic}
            continue
        for n in range(log.partitions(topic)):  # partitions never read yet count too
            start = positions.get(f"{topic}@{n}", log.earliest_offset(topic, n))
            lag[f"{topic}@{n}"] = max(0, log.latest_offset(topic, n) - start)
    return dict(sorted(lag.items(), key=lambda kv: partition_sort_key(kv[0])))


def _files_waiting(root: Path, partition: str, positions: dict[str, int]) -> FilesWaiting | None:
    """The files and bytes a file spout's partition has waiting (None: not a file spout's)."""
    from trident_assets.spouts.file_catalog import index_backlog

    found = index_backlog(root, partition, positions.get(partition, 0))
    return None if found is None else FilesWaiting(*found)


class FilesWaiting(int):
    """A file spout's lag: the files waiting (the int), with their bytes and location."""

    def __new__(cls, files: int, size: int, url: str) -> FilesWaiting:
        """``files`` waiting, ``size`` bytes in all, under ``url``."""
        made = super().__new__(cls, files)
        made.size = size
        made.url = url
        return made

    size: int
    url: str

    def __str__(self) -> str:
        return f"{int(self)} files/{self.size} bytes ({self.url})"


def _error(home: Path, topology: str, last: int | None) -> str | None:
    from trident_assets.status import last_failure

    failure = last_failure(home, topology)
    if failure is None:
        return None
    moved = last is not None and last >= int(failure["txid"])
    state = f"since passed: txid {last} committed" if moved else "not committed yet"
    return f"txid {failure['txid']} at {failure['at']} ({state}): {failure['error']}"


def status_rows(home: Path, store: StateStore) -> list[dict[str, Any]]:
    """One row per topology of the store (see :data:`COLUMNS`)."""
    from trident_assets.backends.quarantine import entries

    positions = _positions(store)
    held: dict[str, int] = {}
    for entry in entries(store, pending_only=True):
        held[entry.topology] = held.get(entry.topology, 0) + entry.records
    rows = []
    for topology, last in sorted(store.scopes().items()):
        lag = _lag(home, positions.get(topology, {}))
        known = [n for n in lag.values() if n is not None]
        rows.append(
            {
                "topology": topology,
                "last_txid": last,
                "lag": sum(known) if len(known) == len(lag) and lag else None,
                "lag_by_partition": ", ".join(
                    f"{p}={'?' if n is None else str(n)}" for p, n in lag.items()
                ),
                "quarantined": held.get(topology, 0),
                "last_error": _error(home, topology, last),
            }
        )
    return rows


def _lost_rows(home: Path, lost: LostCommitsError, wait: float) -> list[dict[str, Any]]:
    """The rows of a state file that lost committed txids; ``last_error`` says which."""
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.backends.marker_file import lost_txids

    with DuckDBStore(
        lost.state, read_only=True, lock_timeout_s=wait, verify_commits=False
    ) as store:
        rows = {row["topology"]: row for row in status_rows(home, store)}
    for topology, (db, txid) in lost.lost.items():
        row = rows.setdefault(
            topology,
            {"topology": topology, "last_txid": None, "lag": None, "lag_by_partition": ""}
            | {"quarantined": 0, "last_error": None},
        )
        row["last_error"] = (
            f"LOST committed {lost_txids((db, txid))}: the state file is behind its commit "
            f"marker file {lost.marker} (a torn or deleted write-ahead log); restore a backup "
            "(`trident state restore BACKUP --force`) or accept the loss "
            "(`trident state accept-lost-commits`)"
        )
    return [rows[t] for t in sorted(rows)]


def status(
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    fmt: FormatOption = Format.table,
    wait: WaitOption = 0.0,
) -> None:
    """Per topology: last committed txid, records waiting (lag), quarantine, last failure."""
    lost: LostCommitsError | None = None
    with cli_errors():
        try:
            with open_state(home, database, wait) as store:
                rows = status_rows(home, store)
        except LostCommitsError as exc:
            lost = exc
            rows = _lost_rows(home, exc, wait)
    emit(rows, COLUMNS, fmt, title=None if rows else "no topology has committed yet")
    if lost is not None:
        typer.echo(f"error: {lost}", err=True)
        raise typer.Exit(code=1)

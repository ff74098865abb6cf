"""A topology's status: what ``trident status`` prints and the UI's overview shows.

:func:`status_rows`: per topology, the last committed txid, the records (or a file spout's
files) waiting per partition, the records held in quarantine and the last failure. A failed
batch run writes ``<home>/status/<topology>.json`` (the txid, the error, when, the run:
:func:`record_failure`); the file stays until a later failure replaces it, so the status
can say whether the topology has moved past it (its last committed txid is at least the
failed one).
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trident_assets.names import SPOUT_RANGES_TABLE, validate_identifier
from trident_assets.spouts.ranges import partition_sort_key

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore

__all__ = ["FilesWaiting", "last_failure", "record_failure", "status_rows"]


def _path(home: str | Path, topology: str) -> Path:
    return Path(home) / "status" / f"{validate_identifier(topology, 'topology')}.json"


def record_failure(home: str | Path, topology: str, txid: int, error: str, run: str) -> None:
    """Record that ``txid`` of ``topology`` failed with ``error`` in ``run`` (atomically)."""
    path = _path(home, topology)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "txid": txid,
        "error": error,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "run": run,
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".status-")
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)
    os.replace(tmp, path)


def last_failure(home: str | Path, topology: str) -> dict[str, Any] | None:
    """The last recorded failure of ``topology`` (None: none, or the file is unreadable)."""
    try:
        return json.loads(_path(home, topology).read_text())
    except (OSError, ValueError):
        return None


def _positions(store: StateStore) -> dict[str, dict[str, int]]:
    """Per topology, per partition: the next offset after its last committed batch."""
    if not store.has_table(SPOUT_RANGES_TABLE):
        return {}
    rows = store.fetch_rows(
        store.dialect.latest(
            "topology, partition, next_offset",
            f"{SPOUT_RANGES_TABLE} WHERE committed",
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

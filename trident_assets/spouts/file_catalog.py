"""The file index of a file spout: every stable file of a location, numbered once, for good.

A file's number (its offset in the spout's one partition) is given the first time a listing
finds it stable, in the order (modification time, name) among the files found by that
listing, after every file numbered before. Numbers never change and a path is numbered
once, so a file that appears late with an older modification time is still taken exactly
once (after the files numbered before it). Each number keeps the file's size,
modification time and content fingerprint as first seen: a batch's files are verified
against them before every read.

The index is a SQLite file (``<log root>/_file_spouts/<key>.sqlite``, WAL mode): several
processes may list and number at once (one writer at a time). It has an ID, the offsets'
incarnation: an index deleted and rebuilt gets another, so recorded batches are never
read against other numbers.

Listing cost: one ``os.scandir`` walk per refresh, a stat and a fingerprint only for names
not numbered yet, and the rows other processes numbered since this one last looked. It does
not grow with the number of batches taken.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trident_assets.spouts.file_listing import FileEntry, Location, fingerprint

__all__ = ["CATALOG_DIR", "FileCatalog", "Refresh", "catalog_key", "index_backlog"]

CATALOG_DIR = "_file_spouts"
"""The folder of the log root holding the file indexes."""


def catalog_key(url: str, stable_after: float) -> str:
    """The index key of a location and quiet period (16 hex digits)."""
    return hashlib.sha256(f"{url}\0{float(stable_after)!r}".encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Refresh:
    """What one refresh did (for tests and benchmarks: its cost, counted)."""

    listed: int
    """Files the listing found (matching, not temp names)."""
    statted: int
    """Files stat-ed: those not numbered yet."""
    loaded: int
    """Index rows read (numbered by another process since this one last looked)."""
    numbered: int
    """Files numbered by this refresh."""
    unstable: int
    """Files skipped as modified within the quiet period."""


class FileCatalog:
    """The numbered files of one location (see the module docstring).

    Args:
        root: the folder holding the index files.
        location: the files' folder or glob.
        stable_after: seconds since its last modification before a file is numbered.
        clock: the time (seconds since the epoch) the quiet period is measured against.
    """

    def __init__(
        self,
        root: Path,
        location: Location,
        stable_after: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Open (or create) the index of ``location``."""
        self.location = location
        self.stable_after = float(stable_after)
        self.clock = clock
        self.key = catalog_key(location.url, stable_after)
        root.mkdir(parents=True, exist_ok=True)
        self.path = root / f"{self.key}.sqlite"
        self._db = sqlite3.connect(
            self.path, timeout=60.0, isolation_level=None, check_same_thread=False
        )
        self._lock = threading.RLock()  # the runner plans and reads on several threads
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        with self._write():
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS files (seq INTEGER PRIMARY KEY, "
                "path TEXT NOT NULL UNIQUE, size INTEGER NOT NULL, "
                "mtime_ns INTEGER NOT NULL, fingerprint TEXT NOT NULL)"
            )
            described = json.dumps({"url": location.url, "stable_after": self.stable_after})
            self._db.execute(
                "INSERT OR IGNORE INTO meta VALUES ('id', ?), ('location', ?)",
                [uuid.uuid4().hex, described],
            )
        self.id: str = self._db.execute("SELECT value FROM meta WHERE key = 'id'").fetchone()[0]
        self._known: set[str] = set()
        self._end = 0
        self.last_refresh: Refresh | None = None

    def close(self) -> None:
        """Close the index file."""
        self._db.close()

    def _write(self) -> _Transaction:
        return _Transaction(self._db)

    def _catch_up(self) -> int:
        """Read the rows numbered since this instance last looked; return how many."""
        rows = self._db.execute(
            "SELECT seq, path FROM files WHERE seq >= ? ORDER BY seq", [self._end]
        ).fetchall()
        for seq, path in rows:
            self._known.add(path)
            self._end = seq + 1
        return len(rows)

    @property
    def end(self) -> int:
        """The number the next file gets (files numbered so far), as of the last refresh."""
        return self._end

    def refresh(self) -> int:
        """List the location, number its new stable files; return :attr:`end`.

        New: a path never numbered. Stable: not modified in the last ``stable_after``
        seconds. Several new files are numbered by (modification time, path).
        """
        with self._lock:
            loaded = self._catch_up()
            listed = 0
            fresh: list[FileEntry] = []
            unstable = 0
            statted = 0
            now_ns = int(self.clock() * 1e9)
            quiet_ns = int(self.stable_after * 1e9)
            for relative, handle in self.location.names():
                listed += 1
                if relative in self._known:
                    continue
                statted += 1
                found = self.location.stat(relative, handle)
                if found is None:
                    continue
                size, mtime_ns = found
                if now_ns - mtime_ns < quiet_ns:
                    unstable += 1
                    continue
                try:
                    head, tail = self.location.head_tail(relative, size)
                except FileNotFoundError:
                    continue
                fresh.append(FileEntry(relative, size, mtime_ns, fingerprint(size, head, tail)))
            numbered = 0
            if fresh:
                with self._write():
                    loaded += self._catch_up()  # another process may have numbered some
                    todo = sorted(
                        (e for e in fresh if e.path not in self._known),
                        key=lambda e: (e.mtime_ns, e.path),
                    )
                    self._db.executemany(
                        "INSERT INTO files (seq, path, size, mtime_ns, fingerprint) "
                        "VALUES (?, ?, ?, ?, ?)",
                        [
                            (self._end + i, e.path, e.size, e.mtime_ns, e.fingerprint)
                            for i, e in enumerate(todo)
                        ],
                    )
                numbered = len(todo)
                self._known.update(e.path for e in todo)
                self._end += numbered
            self.last_refresh = Refresh(listed, statted, loaded, numbered, unstable)
            return self._end

    def entries(self, first: int, nxt: int) -> list[FileEntry]:
        """The files numbered ``first .. nxt - 1``, in order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT path, size, mtime_ns, fingerprint FROM files WHERE seq >= ? AND seq < ? "
                "ORDER BY seq",
                [first, nxt],
            ).fetchall()
            return [FileEntry(*row) for row in rows]

    def bounded_end(self, start: int, end: int, max_bytes: int | None) -> int:
        """The end of a batch from ``start`` of at most ``end`` and ``max_bytes`` bytes.

        A batch holds at least one file, however large.
        """
        with self._lock:
            if max_bytes is None or end <= start + 1:
                return end
            sizes = self._db.execute(
                "SELECT size FROM files WHERE seq >= ? AND seq < ? ORDER BY seq", [start, end]
            ).fetchall()
            total = 0
            for i, (size,) in enumerate(sizes):
                total += size
                if total > max_bytes:
                    return start + max(1, i)
            return end

    @classmethod
    def open_index(cls, path: Path) -> FileCatalog:
        """The index at ``path`` (made by a spout), with the location it was made for."""
        db = sqlite3.connect(path, timeout=60.0)
        try:
            (raw,) = db.execute("SELECT value FROM meta WHERE key = 'location'").fetchone()
        finally:
            db.close()
        described = json.loads(raw)
        return cls(path.parent, Location(described["url"]), described["stable_after"])

    def unnumbered(self) -> tuple[int, int]:
        """``(files, bytes)`` the location holds, stable but not numbered yet (no writes)."""
        with self._lock:
            self._catch_up()
            now_ns = int(self.clock() * 1e9)
            files = size_sum = 0
            for relative, handle in self.location.names():
                if relative in self._known:
                    continue
                found = self.location.stat(relative, handle)
                if found is not None and now_ns - found[1] >= int(self.stable_after * 1e9):
                    files += 1
                    size_sum += found[0]
            return files, size_sum

    def backlog(self, position: int) -> tuple[int, int]:
        """``(files, bytes)`` numbered at or after ``position``."""
        with self._lock:
            files, size = self._db.execute(
                "SELECT count(*), coalesce(sum(size), 0) FROM files WHERE seq >= ?", [position]
            ).fetchone()
            return int(files), int(size)


def index_backlog(log_root: Path, partition: str, position: int) -> tuple[int, int, str] | None:
    """``(files, bytes, location URL)`` waiting for a file spout's ``partition``.

    ``partition`` is ``files-<key>@0`` and ``position`` the next file number after its last
    committed batch. Waiting: files numbered from ``position`` on, and stable files the
    location holds that are not numbered yet (counted without numbering them). None when
    ``partition`` is not a file spout's or its index is not under ``log_root``.
    """
    topic = partition.rpartition("@")[0]
    key = topic.removeprefix("files-")
    path = log_root / CATALOG_DIR / f"{key}.sqlite"
    if key == topic or not path.is_file():
        return None
    catalog = FileCatalog.open_index(path)
    try:
        files, size = catalog.backlog(position)
        new_files, new_size = catalog.unnumbered()
    finally:
        catalog.close()
    return files + new_files, size + new_size, catalog.location.url


class _Transaction:
    """``BEGIN IMMEDIATE`` .. ``COMMIT`` (``ROLLBACK`` on an error): one writer at a time."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_: object) -> None:
        self.db.execute("ROLLBACK" if kind is not None else "COMMIT")

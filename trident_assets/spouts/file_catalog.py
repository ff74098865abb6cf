"""The file index of a file spout: every stable file of a location, numbered once, for good.

A file's number (its offset in the spout's one partition) is given when a new batch first
takes it: the batch takes the next stable files not numbered yet, in the order
(modification time, name), after every file numbered before. Numbers never change and a
path is numbered once, so a file that appears late with an older modification time is
still taken exactly once (after the files numbered before it). Each number keeps the
file's size, modification time and content fingerprint as recorded then: a batch's files
are verified against them before every read. The offsets past the numbered files count the
stable files waiting (what a batch could take next, for lag and backlog).

The index is a SQLite file (``<log root>/_file_spouts/<key>.sqlite``, WAL mode): several
processes may list and number at once (one writer at a time). It has an ID, the offsets'
incarnation: an index deleted and rebuilt gets another, so recorded batches are never
read against other numbers.

Listing cost: one ``os.scandir`` walk per refresh, a stat only for names not numbered yet,
a fingerprint (the first and last 32 KiB) only for the files a batch takes, and the rows
other processes numbered since this one last looked. It does not grow with the number of
batches taken.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
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
    """Files numbered by the batch planned after this refresh."""
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
        self._pending: list[tuple[int, str, int]] = []
        """The stable files not numbered yet, as of the last refresh: (mtime_ns, path, size)."""
        self._stable: set[str] = set()
        """The paths of :attr:`_pending`."""
        self.last_refresh: Refresh | None = None

    def close(self) -> None:
        """Close the index file."""
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` .. ``COMMIT`` (``ROLLBACK`` on an error): one writer at a time."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

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
        """List the location; return :attr:`end` plus the stable files not numbered yet.

        New: a path never numbered (stat-ed, never read). Stable: not modified in the last
        ``stable_after`` seconds. The new stable files wait, in the order (modification
        time, path), for :meth:`bounded_end` to number them.
        """
        with self._lock:
            loaded = self._catch_up()
            listed = unstable = statted = 0
            fresh: list[tuple[int, str, int]] = []
            still: set[str] = set()
            now_ns = int(self.clock() * 1e9)
            quiet_ns = int(self.stable_after * 1e9)
            for relative, handle in self.location.names():
                listed += 1
                if relative in self._known:
                    continue
                if relative in self._stable:  # stable at the last listing: checked again
                    still.add(relative)  # when a batch takes it (:meth:`_number`)
                    continue
                statted += 1
                found = self.location.stat(relative, handle)
                if found is None:
                    continue
                if now_ns - found[1] < quiet_ns:
                    unstable += 1
                    continue
                fresh.append((found[1], relative, found[0]))
            if len(still) != len(self._pending):  # some are gone
                self._pending = [p for p in self._pending if p[1] in still]
                self._stable = {p[1] for p in self._pending}
            if fresh:
                fresh.sort()
                self._pending = list(heapq.merge(self._pending, fresh))
                self._stable.update(p[1] for p in fresh)
            self.last_refresh = Refresh(listed, statted, loaded, 0, unstable)
            return self._end + len(self._pending)

    def bounded_end(self, start: int, end: int, max_bytes: int | None) -> int:
        """The end of a new batch from ``start``: at most ``end`` and ``max_bytes`` bytes.

        Files past :attr:`end` are numbered here, from the waiting files of the last
        :meth:`refresh`, in order, as many as the batch takes (a file gone meanwhile is
        left out). A batch holds at least one file, however large.
        """
        with self._lock:
            if start > self._end:  # nothing numbered there: no batch can start past the files
                return start
            if end > self._end:
                (total,) = self._db.execute(
                    "SELECT coalesce(sum(size), 0) FROM files WHERE seq >= ?", [start]
                ).fetchone()
                if max_bytes is None or total <= max_bytes:
                    self._number(end - self._end, int(total), max_bytes, start == self._end)
            return self._bounded(start, end, max_bytes)

    def _bounded(self, start: int, end: int, max_bytes: int | None) -> int:
        """The byte-bounded end of ``[start, min(end, numbered))``."""
        total = 0
        rows = self._db.execute(
            "SELECT size FROM files WHERE seq >= ? AND seq < ? ORDER BY seq", [start, end]
        ).fetchall()
        for i, (size,) in enumerate(rows):
            total += size
            if max_bytes is not None and total > max_bytes:
                return start + max(1, i)
        return start + len(rows)

    def _number(self, wanted: int, total: int, max_bytes: int | None, empty: bool) -> None:
        """Number up to ``wanted`` waiting files that fit in ``max_bytes`` after ``total``."""
        picked: list[FileEntry] = []
        stale: set[str] = set()
        for mtime_ns, relative, size in self._pending:
            if len(picked) == wanted:
                break
            if relative in self._known:
                continue
            if max_bytes is not None and total + size > max_bytes and (picked or not empty):
                break
            now = self.location.current(relative)
            if now != (size, mtime_ns):  # changed since listed: taken once stable again
                stale.add(relative)
                continue
            try:
                head, tail = self.location.head_tail(relative, size)
            except FileNotFoundError:
                continue
            picked.append(FileEntry(relative, size, mtime_ns, fingerprint(size, head, tail)))
            total += size
        if not picked:
            self._forget(stale)
            return
        with self._write():
            self._catch_up()  # another process may have numbered some
            todo = [e for e in picked if e.path not in self._known]
            self._db.executemany(
                "INSERT INTO files (seq, path, size, mtime_ns, fingerprint) VALUES (?, ?, ?, ?, ?)",
                [
                    (self._end + i, e.path, e.size, e.mtime_ns, e.fingerprint)
                    for i, e in enumerate(todo)
                ],
            )
        self._known.update(e.path for e in todo)
        self._end += len(todo)
        self._forget(stale | {e.path for e in picked})
        if self.last_refresh is not None:
            self.last_refresh = replace(self.last_refresh, numbered=len(todo))

    def _forget(self, paths: set[str]) -> None:
        """Drop ``paths`` from the waiting files (numbered, or to be stat-ed again)."""
        if paths:
            self._pending = [p for p in self._pending if p[1] not in paths]
            self._stable -= paths

    def entries(self, first: int, nxt: int) -> list[FileEntry]:
        """The files numbered ``first .. nxt - 1``, in order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT path, size, mtime_ns, fingerprint FROM files WHERE seq >= ? AND seq < ? "
                "ORDER BY seq",
                [first, nxt],
            ).fetchall()
            return [FileEntry(*row) for row in rows]

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
            self.refresh()
            return len(self._pending), sum(size for _, _, size in self._pending)

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

"""The commit marker file: a DuckDB state file's committed txids, kept outside the database.

DuckDB keeps a transaction in its write-ahead log (``<state>.wal``) until a checkpoint writes
it into the database file. If the log is torn or lost (a crash of the disk, or the state file
copied without its ``.wal``), the database reopens at an older txid without a word, and the
txids it had reported committed would run again. So after each commit transaction that moved
a topology's marker, the store writes the topology's txid to ``<state>.commits`` (JSON
``{"scopes": {"topology": txid}}``; temp file, fsync, rename, fsync of the directory), and
every open compares: a database *behind* the file lost committed transactions and is refused
(:class:`~trident_assets.errors.LostCommitsError`).

The file is written after the database commit returns, so it is never ahead of a healthy
database: a crash between the two leaves it behind, which is accepted (and caught up when
the store is next opened for writing), as is a missing file (a state file from before the
marker file existed: it is created).

PostgreSQL state stores have no such file: their write-ahead log is the server's, flushed
to disk before COMMIT returns (``synchronous_commit``), and never travels apart from the
database.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Mapping
from pathlib import Path

from trident_assets.errors import LostCommitsError
from trident_assets.log.files import fsync_path

__all__ = [
    "CommitMarkerFile",
    "lost_commits",
    "lost_commits_error",
    "lost_txids",
]

MARKER_SUFFIX = ".commits"
"""The marker file's name is the state file's plus this (beside DuckDB's ``.wal``)."""

log = logging.getLogger(__name__)


def lost_commits(
    database: Mapping[str, int], marker: Mapping[str, int] | None
) -> dict[str, tuple[int | None, int]]:
    """Per scope whose database txid is behind the marker file's: ``(database, marker)``.

    ``database`` None means the scope is absent from the database (it lost every txid).
    """
    if not marker:
        return {}
    return {
        scope: (database.get(scope), txid)
        for scope, txid in sorted(marker.items())
        if database.get(scope, 0) < txid
    }


def lost_txids(lost: tuple[int | None, int]) -> str:
    """``txid N`` or ``txids N..M``: the txids lost by a scope at ``(database, marker)``."""
    first, last = (lost[0] or 0) + 1, lost[1]
    return f"txid {first}" if first == last else f"txids {first}..{last}"


def lost_commits_error(
    state: str, marker: str, lost: Mapping[str, tuple[int | None, int]]
) -> LostCommitsError:
    """The refusal of state file ``state``, behind marker file ``marker`` by ``lost``."""
    behind = "; ".join(
        f"topology {scope!r} is at "
        f"{'no txid' if db is None else f'txid {db}'} in the database but committed txid "
        f"{txid} ({lost_txids((db, txid))} lost)"
        for scope, (db, txid) in lost.items()
    )
    msg = (
        f"state file {state} lost transactions it had committed: {behind}, as recorded in its "
        f"commit marker file {marker}. Its write-ahead log ({state}.wal) was torn or deleted "
        "(a crash of the disk, or a copy of the state file without its .wal). Nothing was run "
        "or written. Restore the last backup with `trident state restore BACKUP --force`, or "
        "accept the loss with `trident state accept-lost-commits` (the lost txids then run "
        "again)"
    )
    return LostCommitsError(msg, state, marker, dict(lost))


class CommitMarkerFile:
    """The marker file of state file ``state`` (``<state>.commits``)."""

    def __init__(self, state: str | Path) -> None:
        state = Path(state)
        self.path = state.with_name(state.name + MARKER_SUFFIX)
        """The marker file, named as the state file is (relative or absolute)."""
        self._abs = self.path.absolute()

    def read(self) -> dict[str, int] | None:
        """The committed txid per scope; None if the file is missing or unreadable.

        An unreadable file (damaged by hand: it is only ever replaced whole) is logged and
        treated as missing: it is rewritten from the database.
        """
        try:
            text = self._abs.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("commit marker file %s cannot be read (%s); ignored", self.path, exc)
            return None
        try:
            scopes = json.loads(text)["scopes"]
            return {str(s): int(t) for s, t in scopes.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("commit marker file %s is not valid (%s); ignored", self.path, exc)
            return None

    def write(self, scopes: Mapping[str, int]) -> None:
        """Replace the file with ``scopes``, durably (temp file, fsync, rename, fsync dir)."""
        directory = self._abs.parent
        tmp = directory / f".{self._abs.name}.tmp-{uuid.uuid4().hex}"
        data = json.dumps({"scopes": dict(sorted(scopes.items()))}).encode()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self._abs)
        finally:
            if tmp.exists():
                tmp.unlink()
        fsync_path(directory, directory=True)

    def record(self, committed: Mapping[str, int]) -> None:
        """Raise the file's txids to ``committed`` (just committed); never lowers one.

        Another store of this process on the same file may have recorded later txids: the
        file's values are kept where they are larger.
        """
        scopes = self.read() or {}
        for scope, txid in committed.items():
            scopes[scope] = max(txid, scopes.get(scope, txid))
        self.write(scopes)

    def discard(self) -> bool:
        """Remove the file (its database was deleted); True if there was one."""
        try:
            self._abs.unlink()
        except FileNotFoundError:
            return False
        return True

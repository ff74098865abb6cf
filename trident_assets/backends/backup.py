"""Backups of a DuckDB state file, taken while batches run, and restoring one.

**Backup** (:func:`backup_state`): open the state file for writing, which takes DuckDB's
file lock (a running batch holds it for its commit; the backup waits up to
``lock_timeout_s``, as a second batch would), ``CHECKPOINT`` so the file holds every
committed transaction and the write-ahead log is empty, copy the file to a temporary
sibling of ``dest``, fsync, rename. While the copy runs the lock is held, so no batch can
change the file mid-copy: the backup is exactly the state after one committed txid per
topology. Batches that want the file meanwhile wait (their ``lock_timeout_s``) and then
continue. The copy is opened read-only and its commit markers are read back before the
backup is reported done.

Why not ``EXPORT DATABASE``: it writes tables and views out as Parquet plus DDL, so a
restore re-imports every row (slower than a file copy for the whole state), and the
per-map sequences that number versions (``_trident_seq_<map>``) must come back at their
current values for a restored store to keep appending in order; a byte copy of a
checkpointed file keeps all of that exactly.

**Restore** (:func:`restore_state`): the backup is checked (a trident state store), copied
next to the state file and renamed over it. An existing state file is refused unless
``force``; with ``force`` it (and its write-ahead log, which must never be replayed against
another file) is moved aside as ``<name>.before-restore-<stamp>``, never deleted; its commit
marker file (:mod:`~trident_assets.backends.marker_file`) goes with it (as
``<name>.before-restore-<stamp>.commits``), and the restored file gets one holding the backup's
txids, so the restored state (behind the old file) is not taken for a torn one. The read
replica, if given, is moved aside the same way and rebuilt from the restored state
(:func:`rebuild_replica`): every table the replica carries of each topology (and of each
state written through the IO manager) as of its committed txid, and the scope markers.

**Accepting lost commits** (:func:`accept_lost_commits`): the other way out for a state file
behind its commit marker file (a torn or deleted write-ahead log) when no backup will do: the
marker file is rewritten with the database's txids, and the lost txids run again.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.map_layout import log_table
from trident_assets.backends.marker_file import CommitMarkerFile, lost_commits
from trident_assets.backends.replica import NEW_VALUES_KEPT, PARTIALS_KEPT, Replica
from trident_assets.backends.sql_dialect import DUCKDB
from trident_assets.backends.state_drop import DERIVED_SUFFIXES, table_owner
from trident_assets.backends.window_store import stored_windows
from trident_assets.errors import ConfigError, StateLayoutError
from trident_assets.log.files import fsync_path
from trident_assets.names import DEAD_LETTERS_TABLE, SEQ_COLUMN, validate_identifier

__all__ = ["BackupInfo", "accept_lost_commits", "backup_state", "rebuild_replica", "restore_state"]

_log = logging.getLogger(__name__)

_OUTPUT_INFIX = "__out_"


@dataclass(frozen=True, slots=True)
class BackupInfo:
    """What a backup or restore copied.

    Attributes:
        path: The file written (the backup, or the restored state file).
        size: Its size in bytes.
        seconds: Wall time of the copy, lock wait excluded.
        scopes: Every topology and its last committed txid in the copy.
        moved_aside: Files or directories moved aside by a forced restore.
    """

    path: Path
    size: int
    seconds: float
    scopes: dict[str, int]
    moved_aside: tuple[Path, ...] = ()


def _copy_durably(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` through a temporary sibling, fsynced, renamed into place."""
    tmp = dest.with_name(f".{dest.name}.tmp-{uuid.uuid4().hex}")
    try:
        shutil.copyfile(src, tmp)
        fsync_path(tmp)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_path(dest.parent, directory=True)


def _read_scopes(path: Path, lock_timeout_s: float = 0.0) -> dict[str, int]:
    """The commit markers of a state file, opened read-only (refuses a non-trident file)."""
    with DuckDBStore(path, read_only=True, lock_timeout_s=lock_timeout_s) as copy:
        return copy.scopes()


def backup_state(
    state: str | Path, dest: str | Path, *, lock_timeout_s: float = 30.0
) -> BackupInfo:
    """Copy the state file ``state`` to ``dest``: a consistent copy, even while batches run.

    Args:
        state: The state file (it must exist).
        dest: The backup file to write; it must not exist (missing directories are created).
        lock_timeout_s: How long to wait while a batch holds the state file.

    Raises:
        ConfigError: ``state`` does not exist, ``dest`` exists, or its parent is a file.
        StoreLockedError: a batch held the file for longer than ``lock_timeout_s``.
        StateLayoutError: ``state`` is not a trident state store (or is damaged).
    """
    src, target = Path(state), Path(dest)
    if not src.is_file():
        msg = f"state file {src} does not exist; nothing to back up"
        raise ConfigError(msg)
    if target.exists():
        msg = f"backup {target} already exists; choose a new file name"
        raise ConfigError(msg)
    if target.parent.exists() and not target.parent.is_dir():
        msg = f"{target.parent} (the directory of backup {target}) is not a directory"
        raise ConfigError(msg)
    _read_scopes(src, lock_timeout_s)  # a trident store? (checked before anything is written)
    target.parent.mkdir(parents=True, exist_ok=True)
    with DuckDBStore(src, lock_timeout_s=lock_timeout_s) as store:
        store.checkpoint()
        started = time.perf_counter()
        _copy_durably(src, target)
        seconds = time.perf_counter() - started
    return BackupInfo(target, target.stat().st_size, seconds, _read_scopes(target))


def restore_state(
    backup: str | Path,
    state: str | Path,
    *,
    force: bool = False,
    replica: str | Path | None = None,
    lock_timeout_s: float = 30.0,
) -> BackupInfo:
    """Make the backup ``backup`` the state file ``state`` (and rebuild ``replica``).

    Args:
        backup: A file written by :func:`backup_state` (any trident state file).
        state: The state file to restore; refused if it exists unless ``force``.
        force: Replace an existing state file; it is moved aside, never deleted.
        replica: The read replica directory of this state (``<home>/replica``), rebuilt from
            the restored state; ``None`` leaves replicas alone.
        lock_timeout_s: How long to wait while another process holds ``state``.

    Raises:
        ConfigError: ``backup`` does not exist, or ``state`` exists and ``force`` is false.
        StateLayoutError: ``backup`` is not a trident state store.
        StoreLockedError: another process (a running batch) holds ``state``.
    """
    src, target = Path(backup), Path(state)
    if not src.is_file():
        msg = f"backup {src} does not exist"
        raise ConfigError(msg)
    scopes = _read_scopes(src)
    wal = target.with_name(target.name + ".wal")
    if (target.exists() or wal.exists()) and not force:
        msg = (
            f"state file {target} exists; restoring would replace it (pass --force to move it "
            f"aside as {target.name}.before-restore-<time> and restore)"
        )
        raise ConfigError(msg)
    target.parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    moved: list[Path] = []
    holder = _hold(target, lock_timeout_s)
    try:
        started = time.perf_counter()
        tmp = target.with_name(f".{target.name}.restore-{uuid.uuid4().hex}")
        shutil.copyfile(src, tmp)
        fsync_path(tmp)
        for old in (target, wal):
            if old.exists():
                aside = old.with_name(f"{old.name}.before-restore-{stamp}")
                os.replace(old, aside)
                moved.append(aside)
        marker = CommitMarkerFile(target)
        if marker.path.exists():  # it belongs to the file moved aside
            aside = CommitMarkerFile(target.with_name(f"{target.name}.before-restore-{stamp}"))
            os.replace(marker.path, aside.path)
            moved.append(aside.path)
        os.replace(tmp, target)
        marker.write(scopes)  # fsyncs the directory (the renames above included)
        seconds = time.perf_counter() - started
    finally:
        if holder is not None:
            holder.close()
    previous = None
    if replica is not None and Path(replica).exists():
        aside = Path(replica).with_name(f"{Path(replica).name}.before-restore-{stamp}")
        os.replace(replica, aside)
        moved.append(aside)
        previous = Replica(aside)
    if replica is not None:
        with DuckDBStore(target, read_only=True, lock_timeout_s=lock_timeout_s) as store:
            rebuild_replica(store, Replica(replica), previous)
    return BackupInfo(target, target.stat().st_size, seconds, scopes, tuple(moved))


def accept_lost_commits(
    state: str | Path, *, lock_timeout_s: float = 30.0
) -> dict[str, tuple[int | None, int]]:
    """Accept that state file ``state`` lost the txids its marker file records past it.

    Opens the file for writing (waiting up to ``lock_timeout_s`` for another process's lock)
    and rewrites the marker file with the database's txids, so the store opens again; the
    lost txids run again with the next batches. Returns what was lost, per topology
    ``(database txid or None, marker txid)``; ``{}``: nothing was lost, nothing changed.

    Raises:
        ConfigError: ``state`` does not exist.
        StoreLockedError: another process held the file for ``lock_timeout_s``.
    """
    if not Path(state).is_file():
        msg = f"state file {state} does not exist"
        raise ConfigError(msg)
    marker = CommitMarkerFile(state)
    with DuckDBStore(state, lock_timeout_s=lock_timeout_s, verify_commits=False) as store:
        database = store.scopes()
        lost = lost_commits(database, marker.read())
        if lost:
            marker.write(database)
            _log.info("state file %s: accepted the loss of committed txids %s", state, lost)
    return lost


def _hold(target: Path, lock_timeout_s: float) -> DuckDBStore | None:
    """Take the state file's lock (so no batch writes while it is replaced), if it opens."""
    if not target.exists():
        return None
    try:
        return DuckDBStore(
            target, read_only=True, lock_timeout_s=lock_timeout_s, verify_commits=False
        )
    except StateLayoutError:
        return None  # damaged or foreign: nothing can be writing through DuckDB


def _write_base(replica: Replica, table: str, txid: int, rows: pa.Table) -> None:
    base = replica.root / table / f"base-{txid:010d}.parquet"
    base.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, base)


def _owner(table: str, scopes: dict[str, int]) -> int | None:
    """The committed txid of the scope owning ``table`` (:func:`table_owner`), if any."""
    owned = table_owner(table, scopes)
    return None if owned is None else scopes.get(owned[0])


def _is_row_table(name: str) -> bool:
    """A per-txid row table: an output, a state's new values or partials."""
    if name.startswith("_trident"):
        return False
    return _OUTPUT_INFIX in name or name.endswith(tuple(f"__{s}" for s in DERIVED_SUFFIXES))


def rebuild_replica(store: DuckDBStore, replica: Replica, previous: Replica | None = None) -> None:
    """Write ``replica`` from ``store``: maps, row tables, window finals, dead letters, markers.

    Every txid the store can read a map as of stays readable as of that txid in the replica:
    a map's rows up to its oldest readable txid (the store's compaction point; 1 when the
    store never compacted it) form its base, each later txid's rows its own delta. A
    non-transactional map stores no txids: its base holds its newest rows at its topology's
    last committed txid. The per-txid row tables (outputs, a state's new values and
    partials) and the dead letters keep the txids the store kept; an event-window state's
    finals are published whole (one base, as a first publish writes it). What a
    ``previous`` replica recorded of a map (its value field, global or not) is kept. Markers
    are written last, so readers see the replica only once it is whole.
    """
    scopes = store.scopes()
    for table in store.tables():
        layout = store.layout(table)
        txid = _owner(table, scopes)
        if layout is None or txid is None:
            continue
        keys = ", ".join(f'"{validate_identifier(k, "column")}"' for k in layout.key_columns)
        more: dict[str, Any] = {"key_types": list(layout.key_types)}
        more["value_type"] = layout.value_type
        known = previous.layout(table) if previous is not None else None
        more |= {k: v for k, v in (known or {}).items() if k in ("value_field", "global")}
        replica._write_layout(table, list(layout.key_columns), layout.kind, more)
        newest = DUCKDB.latest("*", f"{log_table(table)} WHERE {{where}}", keys, SEQ_COLUMN)
        if layout.kind == "plain":
            rows = store.conn.sql(newest.format(where="true")).to_arrow_table()
            _write_base(replica, table, txid, rows)
            if rows.num_rows:
                top = int(pc.max(rows.column(SEQ_COLUMN)).as_py())
                (replica.root / table / "_published_seq.json").write_text(f'{{"seq": {top}}}')
            continue
        oldest = store.oldest_readable_txid(table)
        if oldest is not None and oldest > 1:
            base = store.conn.sql(
                newest.format(where="txid <= $oldest"), params={"oldest": oldest}
            ).to_arrow_table()
            _write_base(replica, table, oldest, base)
        later = store.conn.sql(
            f"SELECT * FROM {log_table(table)} WHERE txid > ? AND txid <= ? ORDER BY txid",
            params=[oldest or 0, txid],
        ).to_arrow_table()
        for t in sorted(set(later.column("txid").to_pylist())):
            replica._write_delta(table, int(t), later.filter(pc.equal(later.column("txid"), t)))
    found = store.conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
        "AND database_name = current_database()"
    ).fetchall()
    for (name,) in found:
        txid = _owner(name, scopes)
        if txid is None or not _is_row_table(name):
            continue
        table = validate_identifier(name, "table")
        rows = store.conn.sql(
            f'SELECT * FROM "{table}" WHERE txid <= ? ORDER BY txid', params=[txid]
        ).to_arrow_table()
        kept = PARTIALS_KEPT if name.endswith("__partials") else NEW_VALUES_KEPT
        # the store deletes a txid's rows only once it is ``kept`` txids old: a younger txid
        # without rows wrote none (an empty delta, as its publish wrote)
        for t in sorted(
            {*rows.column("txid").to_pylist(), *range(max(1, txid - kept + 1), txid + 1)}
        ):
            replica._write_delta(table, int(t), rows.filter(pc.equal(rows.column("txid"), t)))
    for window in stored_windows(store):
        txid = scopes.get(window.topology)
        if txid is not None and store.has_table(window.finals_table):
            replica._publish_appended(store, window.finals_table, "final_txid", txid, whole=True)
    if store.has_table(DEAD_LETTERS_TABLE):
        dead = store.conn.sql(
            f"SELECT * FROM {DEAD_LETTERS_TABLE} ORDER BY topology, txid"
        ).to_arrow_table()
        pairs = zip(
            dead.column("topology").to_pylist(), dead.column("txid").to_pylist(), strict=True
        )
        for scope, txid in sorted(set(pairs)):
            if scope not in scopes:
                continue
            mask = pc.and_(
                pc.equal(dead.column("topology"), scope), pc.equal(dead.column("txid"), txid)
            )
            path = replica.dead_letters_dir(scope) / f"{int(txid):010d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(dead.filter(mask), path)
    for scope, txid in scopes.items():
        marker = replica.root / "_scopes" / f"{validate_identifier(scope, 'scope')}.json"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f'{{"txid": {txid}}}')

"""The commit marker file: a DuckDB state file that lost committed txids is refused, not re-run.

DuckDB keeps a commit in its write-ahead log until a checkpoint; a torn or deleted ``.wal``
reopens the database at an older txid without complaint. The marker file ``<state>.commits``
(written after each commit) makes that loss an error naming both files, the txids and the way
out; a marker behind the database (a crash before its write) or missing is accepted.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from trident_assets.backends.backup import backup_state, restore_state
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.marker_file import CommitMarkerFile
from trident_assets.backends.state_batches import StateTarget
from trident_assets.core.aggregators import Max
from trident_assets.core.values import StateType
from trident_assets.errors import LostCommitsError
from trident_assets_tests.children import clean_env, run_trident
from trident_assets_tests.state_assets import commit_partials

REPO = Path(__file__).resolve().parents[1]
TRIDENT = Path(sys.executable).parent / "trident"
CRASHING_WRITER = """
import os, sys
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets_tests.test_commit_marker_file import _commit
db, checkpoint_after = sys.argv[1], int(sys.argv[2])
store = DuckDBStore(db)
for txid in (1, 2):
    _commit(store, "wc", txid)
    if txid == checkpoint_after:
        store.checkpoint()
os._exit(0)  # a crash: no checkpoint on close, the last commits live in the .wal only
"""


def _crash_after_two_commits(tmp_path: Path, db: Path, checkpoint_after: int) -> None:
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(CRASHING_WRITER))
    subprocess.run(
        [sys.executable, str(script), str(db), str(checkpoint_after)],
        env={**clean_env(tmp_path), "PYTHONPATH": str(REPO)},
        check=True,
        timeout=120,
    )
    assert Path(f"{db}.wal").stat().st_size > 0
    assert json.loads(Path(f"{db}.commits").read_text()) == {"scopes": {"wc": 2}}


def _commit(store: DuckDBStore, scope: str, txid: int) -> None:
    """Commit ``txid`` to ``scope``: key ``a`` of its map ``<scope>__counts`` holds ``txid``."""
    target = StateTarget(f"{scope}__counts", ("k0",), "value", StateType.OPAQUE, Max())
    commit_partials(store, scope, target, pa.table({"k0": ["a"], "value": [txid]}), txid)


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _lost_message(db: Path, scope_text: str) -> str:
    return (
        f"state file {db} lost transactions it had committed: {scope_text}, as recorded in its "
        f"commit marker file {db}.commits. Its write-ahead log ({db}.wal) was torn or deleted "
        "(a crash of the disk, or a copy of the state file without its .wal). Nothing was run "
        "or written. Restore the last backup with `trident state restore BACKUP --force`, or "
        "accept the loss with `trident state accept-lost-commits` (the lost txids then run "
        "again)"
    )


@pytest.mark.parametrize("torn", ["truncated", "deleted"])
def test_a_wal_torn_after_two_commits_is_refused(tmp_path: Path, torn: str) -> None:
    db = tmp_path / "state.duckdb"
    _crash_after_two_commits(tmp_path, db, checkpoint_after=1)
    wal = Path(f"{db}.wal")
    if torn == "truncated":
        os.truncate(wal, wal.stat().st_size // 2)  # DuckDB drops a torn tail silently
    else:
        wal.unlink()
    marker = Path(f"{db}.commits")
    before = _md5(marker)
    with pytest.raises(LostCommitsError) as caught:
        DuckDBStore(db)
    expected = _lost_message(
        db, "topology 'wc' is at txid 1 in the database but committed txid 2 (txid 2 lost)"
    )
    assert str(caught.value) == expected
    assert (caught.value.state, caught.value.marker, caught.value.lost) == (
        str(db),
        f"{db}.commits",
        {"wc": (1, 2)},
    )
    assert _md5(marker) == before  # nothing written: the marker, and the database's txids
    with pytest.raises(LostCommitsError), DuckDBStore(db, read_only=True):
        pass
    with DuckDBStore(db, read_only=True, verify_commits=False) as store:
        assert (store.scopes(), store.scan("wc__counts").to_pylist()) == (
            {"wc": 1},
            [{"k0": "a", "value": 1}],
        )


def test_a_wal_holding_every_commit_deleted_leaves_no_txid(tmp_path: Path) -> None:
    db = tmp_path / "state.duckdb"
    _crash_after_two_commits(tmp_path, db, checkpoint_after=0)  # never checkpointed
    Path(f"{db}.wal").unlink()
    with pytest.raises(LostCommitsError) as caught:
        DuckDBStore(db, read_only=True)
    assert str(caught.value) == _lost_message(
        db, "topology 'wc' is at no txid in the database but committed txid 2 (txids 1..2 lost)"
    )


def test_a_marker_behind_the_database_is_accepted_and_caught_up(tmp_path: Path) -> None:
    db = tmp_path / "state.duckdb"
    with DuckDBStore(db) as store:
        _commit(store, "wc", 1)
        _commit(store, "other", 1)
        _commit(store, "wc", 2)
    marker = CommitMarkerFile(db)
    assert marker.read() == {"other": 1, "wc": 2}
    marker.write({"wc": 1})  # as a crash between the database commit and the file's write
    with DuckDBStore(db, read_only=True) as store:  # a reader accepts it, writes nothing
        assert store.scopes() == {"other": 1, "wc": 2}
    assert marker.read() == {"wc": 1}
    with DuckDBStore(db) as store:
        assert marker.read() == {"other": 1, "wc": 2}  # caught up on open
        _commit(store, "wc", 3)
    assert marker.read() == {"other": 1, "wc": 3}


def test_a_missing_marker_is_accepted_and_created(tmp_path: Path) -> None:
    db = tmp_path / "state.duckdb"
    with DuckDBStore(db) as store:
        _commit(store, "wc", 1)
    marker = CommitMarkerFile(db)
    marker.path.unlink()  # a state file from before the marker file existed
    with DuckDBStore(db, read_only=True) as store:
        assert store.last_committed("wc") == 1
    assert not marker.path.exists()
    with DuckDBStore(db) as store:
        assert marker.read() == {"wc": 1}
        _commit(store, "wc", 2)
    assert marker.read() == {"wc": 2}


def test_a_new_database_drops_the_marker_of_a_deleted_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "state.duckdb"
    with DuckDBStore(db) as store:
        _commit(store, "wc", 1)
    db.unlink()  # the state deleted on purpose: a new one starts at txid 1
    with DuckDBStore(db) as store:
        assert not CommitMarkerFile(db).path.exists()
        _commit(store, "wc", 1)
    assert CommitMarkerFile(db).read() == {"wc": 1}
    assert (
        f"state file {db} is new: removed the commit marker file {db}.commits of the database "
        "that was deleted"
    ) in caplog.messages


def test_a_failed_marker_write_leaves_the_commit_standing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "state.duckdb"
    with DuckDBStore(db) as store:
        _commit(store, "wc", 1)

        def full(self: CommitMarkerFile, scopes: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(CommitMarkerFile, "write", full)
        _commit(store, "wc", 2)
        assert store.last_committed("wc") == 2
        monkeypatch.undo()
    assert (
        f"commit marker file {db}.commits was not updated after a commit ([Errno 28] No space "
        "left on device); the commit stands, and the file catches up with the next one"
    ) in caplog.messages
    assert CommitMarkerFile(db).read() == {"wc": 1}
    with DuckDBStore(db) as store:
        assert store.last_committed("wc") == 2
    assert CommitMarkerFile(db).read() == {"wc": 2}


def test_backup_refuses_a_torn_state_and_restore_keeps_the_marker_consistent(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state.duckdb"
    with DuckDBStore(db) as store:
        _commit(store, "wc", 1)
        _commit(store, "wc", 2)
    backup_state(db, tmp_path / "b.duckdb")
    assert not CommitMarkerFile(tmp_path / "b.duckdb").path.exists()
    with DuckDBStore(db) as store:
        _commit(store, "wc", 3)
    info = restore_state(tmp_path / "b.duckdb", db, force=True)
    aside = next(p for p in info.moved_aside if p.suffix != ".commits")
    assert CommitMarkerFile(db).read() == {"wc": 2}  # the backup's txids, not 3
    assert CommitMarkerFile(aside).read() == {"wc": 3}  # the file moved aside keeps its own
    assert sorted(p.name for p in info.moved_aside) == sorted([aside.name, f"{aside.name}.commits"])
    with DuckDBStore(db) as store:  # not taken for a torn file: txid 3 runs again
        assert store.last_committed("wc") == 2
        _commit(store, "wc", 3)
    with DuckDBStore(aside, read_only=True) as store:
        assert store.last_committed("wc") == 3
    # a torn state file: a backup of it is refused (restoring it would re-run silently)
    torn = tmp_path / "torn" / "state.duckdb"
    _crash_after_two_commits(tmp_path, torn, checkpoint_after=1)
    Path(f"{torn}.wal").unlink()
    with pytest.raises(LostCommitsError, match=r"topology 'wc' is at txid 1 in the database"):
        backup_state(torn, tmp_path / "torn-backup.duckdb")
    assert not (tmp_path / "torn-backup.duckdb").exists()
    # restoring over it is the way out
    restore_state(tmp_path / "b.duckdb", torn, force=True)
    with DuckDBStore(torn) as store:
        assert store.last_committed("wc") == 2


def _trident(tmp_path: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_trident(tmp_path, *args, "--home", str(home))


def test_status_shows_the_loss_and_accept_lost_commits_ends_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = home / "state.duckdb"
    _crash_after_two_commits(tmp_path, db, checkpoint_after=1)
    Path(f"{db}.wal").unlink()
    shutil.copyfile(f"{db}.commits", tmp_path / "marker")

    done = _trident(tmp_path, home, "status", "--format", "json")
    expected = _lost_message(
        db, "topology 'wc' is at txid 1 in the database but committed txid 2 (txid 2 lost)"
    )
    assert (done.returncode, done.stderr) == (1, f"error: {expected}\n")
    assert json.loads(done.stdout) == [
        {
            "topology": "wc",
            "last_txid": 1,
            "lag": None,
            "lag_by_partition": "",
            "quarantined": 0,
            "last_error": (
                f"LOST committed txid 2: the state file is behind its commit marker file "
                f"{db}.commits (a torn or deleted write-ahead log); restore a backup "
                "(`trident state restore BACKUP --force`) or accept the loss "
                "(`trident state accept-lost-commits`)"
            ),
        }
    ]
    assert Path(f"{db}.commits").read_bytes() == (tmp_path / "marker").read_bytes()

    done = _trident(tmp_path, home, "state", "accept-lost-commits")
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "wc: accepted the loss of txid 2; the state is at txid 1, txid 2 runs next\n",
        "",
    )
    done = _trident(tmp_path, home, "state", "accept-lost-commits")
    assert (done.returncode, done.stdout) == (
        0,
        f"state file {db} lost no committed txid; nothing changed\n",
    )
    done = _trident(tmp_path, home, "status", "--format", "csv")
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "topology,last_txid,lag,lag_by_partition,quarantined,last_error\nwc,1,,,0,\n",
        "",
    )
    with DuckDBStore(db) as store:  # the lost txid runs again
        _commit(store, "wc", 2)
        assert store.scan("wc__counts").to_pylist() == [{"k0": "a", "value": 2}]


def test_a_dagster_run_on_a_state_file_that_lost_a_txid_fails_naming_it(
    tmp_path: Path, spark: object
) -> None:
    import dagster as dg

    from trident_assets.dagster.factory import trident_definitions
    from trident_assets.dagster.resources import TridentResource
    from trident_assets.examples.word_count import SENTENCES, build_word_count
    from trident_assets.status import last_failure

    trident = TridentResource(home=str(tmp_path))
    log = trident.log()
    log.create_topic("sentences", 1)
    log.create_topic("word_queries", 1)
    producer = log.producer("sentences")
    for sentence in SENTENCES[:4]:
        producer.send(sentence.encode())
    producer.flush()
    topo = build_word_count(max_batch_size=2)
    job = trident_definitions([topo], trident).resolve_implicit_global_asset_job_def()
    db = tmp_path / "state.duckdb"
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("word_count_txids", ["0000000001", "0000000002"])
        assert job.execute_in_process(partition_key="0000000001", instance=instance).success
        shutil.copyfile(db, tmp_path / "at-1.duckdb")
        assert job.execute_in_process(partition_key="0000000002", instance=instance).success
        assert CommitMarkerFile(db).read() == {"word_count": 2}
        # the file as a disk crash would leave it: txid 2 was in the lost write-ahead log
        shutil.copyfile(tmp_path / "at-1.duckdb", db)
        before = _md5(db)
        result = job.execute_in_process(
            partition_key="0000000002", instance=instance, raise_on_error=False
        )
    expected = _lost_message(
        db,
        "topology 'word_count' is at txid 1 in the database but committed txid 2 (txid 2 lost)",
    )
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data
    assert failure.user_failure_data is not None
    assert failure.user_failure_data.description == expected
    assert last_failure(tmp_path, "word_count") is not None
    assert last_failure(tmp_path, "word_count")["error"] == f"LostCommitsError: {expected}"
    assert _md5(db) == before  # nothing ran or was written

"""Failure modes of exactly-once batches, with real processes, and the short chaos soak.

Every scenario ends by checking the state against counts computed directly from the log:
a refused, crashed or failed batch leaves the state, the commit marker and the spout ranges
as they were, and a later run counts every word exactly once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.errors import OutOfOrderCommitError, StoreLockedError
from trident_assets.examples.word_count import SENTENCES, build_word_count
from trident_assets.log.store import PartitionedLog
from trident_assets.names import DEAD_LETTERS_TABLE
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spouts.config import SpoutKind
from trident_assets.stream.topology import TridentTopology
from trident_assets_tests.faults import Crash, crash_at
from trident_assets_tests.soaks import REPO, run_soak, soak_env

MALFORMED = [b"\xff\xfe broken", b"truncated \xc3", b"\x80 lone continuation"]


# -- helpers --------------------------------------------------------------------------------------


def _log(root: Path) -> PartitionedLog:
    log = PartitionedLog(root / "log")
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    return log


def _send(log: PartitionedLog, values: Sequence[str | bytes]) -> None:
    producer = log.producer("sentences", partitioner="round_robin")
    for v in values:
        producer.send(v if isinstance(v, bytes) else v.encode())
    producer.flush()


def _truth(log: PartitionedLog) -> dict[str, int]:
    """Word counts of every valid UTF-8 record in the log (read directly, not through Spark)."""
    counts: Counter[str] = Counter()
    for p in range(log.partitions("sentences")):
        end = log.latest_offset("sentences", p)
        for value in log.read("sentences", p, 0, end - 1).column("value").to_pylist():
            with contextlib.suppress(UnicodeDecodeError):
                counts.update(w for w in value.decode().split(" ") if w)
    return dict(counts)


def _state(store: DuckDBStore, topo: TridentTopology) -> dict[str, int]:
    table = f"{topo.name}__word_counts"
    if store.layout(table) is None:
        return {}
    return {r["word"]: r["value"] for r in store.scan(table).to_pylist()}


def _snapshot(store: DuckDBStore, topo: TridentTopology) -> tuple[Any, ...]:
    """Everything a refused or failed batch must leave unchanged."""
    conn = store.conn
    return (
        _state(store, topo),
        store.last_committed(topo.name),
        conn.execute("SELECT * FROM _trident_spout_ranges ORDER BY ALL").fetchall(),
        conn.execute(f"SELECT * FROM {DEAD_LETTERS_TABLE} ORDER BY ALL").fetchall(),
    )


def _drain(runner: TopologyRunner) -> int:
    """Run txids until the backlog is empty; return the last committed txid."""
    while runner.backlog() > 0:
        last = runner.last_committed() or 0
        assert runner.run_batch(last + 1).applied
    return runner.last_committed() or 0


class _Child:
    """trident_assets_tests.chaos_child: one Spark session answering JSON commands."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.stderr = (root / "child.log").open("w")
        env = soak_env()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trident_assets_tests.chaos_child", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
        assert "ready" in self.reply()

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        msg = f"chaos child exited with {self.proc.wait()}"
        raise AssertionError(msg)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.stderr.close()


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Child]:
    """A second process with its own Spark session, for races and resource limits."""
    proc = _Child(tmp_path_factory.mktemp("chaos-child"))
    yield proc
    proc.close()


# -- two runs of one txid at once -----------------------------------------------------------------


@pytest.mark.parametrize("lock_timeout_s", [0.0, 120.0])
def test_same_txid_in_two_processes_at_once_counts_once(
    spark: Any, tmp_path: Path, child: _Child, lock_timeout_s: float
) -> None:
    log = _log(tmp_path)
    _send(log, SENTENCES * 3)
    topo = build_word_count("wc_race")
    db = tmp_path / "state.duckdb"
    go = tmp_path / "go"
    child.send(
        op="race", db=str(db), log=str(tmp_path / "log"), topology=topo.name, txid=1,
        go=str(go), lock_timeout_s=lock_timeout_s,
    )  # fmt: skip
    go.touch()
    try:
        store = DuckDBStore(db, lock_timeout_s=lock_timeout_s)
    except StoreLockedError as exc:
        here: dict[str, Any] = {"error": "StoreLockedError", "message": str(exc)}
    else:
        with store:
            here = {"applied": TopologyRunner(topo, spark, store, log).run_batch(1).applied}
    there = child.reply()
    there.pop("records", None)
    winners = [o for o in (here, there) if o == {"applied": True}]
    losers = [o for o in (here, there) if o != {"applied": True}]
    # exactly one run applied txid 1; the other was refused (file locked) or was a no-op
    assert len(winners) == 1, (here, there)
    [loser] = losers
    if "error" in loser:
        assert loser["error"] == "StoreLockedError"
        assert "is locked by another process" in loser["message"]
    else:
        assert loser["applied"] is False
    with DuckDBStore(db, lock_timeout_s=60) as store:
        assert store.last_committed(topo.name) == 1
        assert _state(store, topo) == _truth(log)
        assert TopologyRunner(topo, spark, store, log).run_batch(1).applied is False
        assert _state(store, topo) == _truth(log)


@pytest.mark.parametrize("committed_before", [0, 1])
def test_same_txid_in_two_threads_of_one_process_counts_once(
    spark: Any, tmp_path: Path, committed_before: int
) -> None:
    """Two stores on one file in one process share DuckDB's database: the loser conflicts."""
    log = _log(tmp_path)
    _send(log, SENTENCES * 2)
    topo = build_word_count("wc_threads", max_batch_size=4)
    db = tmp_path / "state.duckdb"
    stores = [DuckDBStore(db), DuckDBStore(db)]
    runners = [TopologyRunner(topo, spark, s, log) for s in stores]
    for txid in range(1, committed_before + 1):
        assert runners[0].run_batch(txid).applied
    txid = committed_before + 1
    results: list[Any] = [None, None]

    def run(i: int) -> None:
        try:
            results[i] = runners[i].run_batch(txid).applied
        except duckdb.Error as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # one applied; the other was refused by DuckDB (a write-write conflict on the new state
    # table or the commit marker, or a duplicate commit-marker key) and rolled back, or it
    # started after the commit (a no-op)
    assert results.count(True) == 1, results
    [loser] = [r for r in results if r is not True]
    if isinstance(loser, duckdb.Error):
        assert isinstance(loser, duckdb.TransactionException | duckdb.ConstraintException)
        assert "conflict" in str(loser).lower() or "Duplicate key" in str(loser)
    else:
        assert loser is False
    assert not stores[0].in_transaction
    assert not stores[1].in_transaction
    stores[1].close()
    store = stores[0]
    assert store.last_committed(topo.name) == txid
    assert _drain(runners[0]) == 3
    assert _state(store, topo) == _truth(log)
    store.close()


# -- txid N+2 while N+1 is pending ----------------------------------------------------------------


@pytest.mark.parametrize("kind", [SpoutKind.OPAQUE, SpoutKind.TRANSACTIONAL])
def test_txid_n_plus_2_while_n_plus_1_pending_is_refused(
    spark: Any, tmp_path: Path, kind: SpoutKind
) -> None:
    log = _log(tmp_path)
    _send(log, SENTENCES)
    topo = build_word_count(f"wc_pending_{kind.value}", kind=kind, max_batch_size=2)
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        assert runner.run_batch(1).applied
        # txid 2 emitted (a transactional spout records its ranges), then fails
        with pytest.raises(Crash):
            TopologyRunner(topo, spark, store, log, fault=crash_at("after_state_write")).run_batch(
                2
            )
        pending = _snapshot(store, topo)
        with pytest.raises(OutOfOrderCommitError, match="txid 2 must commit first") as info:
            runner.run_batch(3)
        assert "Nothing was changed" in str(info.value)
        assert _snapshot(store, topo) == pending
        assert pending[1] == 1
        assert _drain(runner) == 3
        assert _state(store, topo) == _truth(log)


# -- the DuckDB file locked by another process ----------------------------------------------------

HOLDER = """
    import sys, time
    from pathlib import Path
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.core.values import OpaqueValue
    store = DuckDBStore({db!r})
    with store.transaction():
        # a half-done batch in another process: garbage in the state, never committed
        values = [OpaqueValue(99, -5), OpaqueValue(99, 7)]
        store.map({table!r}).multi_put([("the",), ("zzz",)], values)
        Path({marker!r}).touch()
        time.sleep(600)
"""


def test_file_locked_by_another_process_fails_clearly_and_nothing_is_corrupted(
    spark: Any, tmp_path: Path
) -> None:
    log = _log(tmp_path)
    _send(log, SENTENCES)
    topo = build_word_count("wc_locked", max_batch_size=3)
    db = tmp_path / "state.duckdb"
    with DuckDBStore(db) as store:
        runner = TopologyRunner(topo, spark, store, log)
        assert runner.run_batch(1).applied
        before = _snapshot(store, topo)
    marker = tmp_path / "holding"
    script = tmp_path / "holder.py"
    table = f"{topo.name}__word_counts"
    script.write_text(textwrap.dedent(HOLDER.format(db=str(db), table=table, marker=str(marker))))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path)
    try:
        while not marker.exists():
            assert proc.poll() is None, f"holder exited with {proc.returncode}"
            time.sleep(0.02)
        with pytest.raises(StoreLockedError, match="is locked by another process") as info:
            DuckDBStore(db, lock_timeout_s=0.5)
        assert str(db) in str(info.value)
        assert "raise lock_timeout_s" in str(info.value)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with DuckDBStore(db, lock_timeout_s=10) as store:
        assert _snapshot(store, topo) == before  # the holder's uncommitted writes are gone
        runner = TopologyRunner(topo, spark, store, log)
        assert _drain(runner) == 2
        assert _state(store, topo) == _truth(log)


# -- malformed records ----------------------------------------------------------------------------


def test_malformed_records_all_in_dead_letters_exactly_once_across_a_replay(
    spark: Any, tmp_path: Path
) -> None:
    log = _log(tmp_path)
    mixed: list[str | bytes] = []
    for i, sentence in enumerate(SENTENCES * 2):
        mixed.append(sentence)
        if i % 3 == 0:
            mixed.append(MALFORMED[i % len(MALFORMED)])
    _send(log, mixed)
    topo = build_word_count("wc_dead", max_batch_size=5)
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        # the first attempt of txid 1 reads and decodes, then crashes before its commit
        with pytest.raises(Crash):
            TopologyRunner(topo, spark, store, log, fault=crash_at("before_commit")).run_batch(1)
        assert store.conn.execute(f"SELECT count(*) FROM {DEAD_LETTERS_TABLE}").fetchall() == [(0,)]
        runner = TopologyRunner(topo, spark, store, log)
        reported = 0
        txid = 0
        while runner.backlog() > 0:
            txid += 1
            outcome = runner.run_batch(txid)
            reported += outcome.dead_letters
        rows = store.conn.execute(
            f'SELECT topology, spout, partition, "offset", reason, value FROM {DEAD_LETTERS_TABLE} '
            'ORDER BY partition, "offset"'
        ).fetchall()
        expected = []
        for p in range(2):
            table = log.read("sentences", p, 0, log.latest_offset("sentences", p) - 1)
            for offset, value in zip(
                table.column("offset").to_pylist(), table.column("value").to_pylist(), strict=True
            ):
                if value in MALFORMED:
                    expected.append(
                        (topo.name, "sentences", p, offset, "value is not valid UTF-8", value)
                    )
        assert len(expected) == 4
        assert rows == expected
        assert reported == 4
        assert txid == 3  # 14 records, at most 5 per batch
        assert _state(store, topo) == _truth(log)


# -- a full disk ----------------------------------------------------------------------------------


def test_full_disk_fails_the_batch_and_leaves_the_state_as_before(
    spark: Any, tmp_path: Path, child: _Child
) -> None:
    log = _log(tmp_path)
    _send(log, SENTENCES)
    topo = build_word_count("wc_full", max_batch_size=3)
    db = tmp_path / "state.duckdb"
    with DuckDBStore(db) as store:
        assert TopologyRunner(topo, spark, store, log).run_batch(1).applied
        before = _snapshot(store, topo)
    # a small batch the driver reads and hands to Spark: that write fails first
    child.send(
        op="full_disk", db=str(db), log=str(tmp_path / "log"), topology=topo.name, txid=2,
        limit_bytes=1024,
    )  # fmt: skip
    failed = child.reply()
    assert failed == {"error": "OSError", "message": "[Errno 27] File too large"}, failed
    with DuckDBStore(db, lock_timeout_s=30) as store:
        assert _snapshot(store, topo) == before
    # Spark reads the segments itself (no inline batch): the commit's write fails
    child.send(
        op="full_disk", db=str(db), log=str(tmp_path / "log"), topology=topo.name, txid=2,
        limit_bytes=1024, inline_records=0,
    )  # fmt: skip
    failed = child.reply()
    # DuckDB's own error: the WAL write at commit failed (EFBIG), so the commit failed
    assert failed["error"] == "TransactionException", failed
    assert "Failed to commit" in failed["message"], failed
    assert "state.duckdb.wal" in failed["message"], failed
    assert "File too large" in failed["message"], failed
    with DuckDBStore(db, lock_timeout_s=30) as store:
        assert _snapshot(store, topo) == before
        runner = TopologyRunner(topo, spark, store, log)
        assert _drain(runner) == 2
        assert _state(store, topo) == _truth(log)


# -- the short chaos soak -------------------------------------------------------------------------


# The short soaks' producer: 10 sentences a second, flushed once a second (one segment per
# partition a second, not one per record or two), so a batch reads tens of segment files, not
# hundreds; the long soaks keep the command's defaults (30 a second, flushed every 50 ms).
CI_PRODUCER = ("--rate", "10", "--tick", "1.0")


# `make check` runs the short soak on DuckDB; on PostgreSQL (a server the soak starts, fsync
# on) it runs in `make soak`. `make check` SIGKILLs PostgreSQL-backed runners at the fault
# points in test_lakehouse_crash and test_event_windows.
@pytest.mark.timeout(1800)  # a loaded machine; nothing here asserts a duration
@pytest.mark.parametrize(
    ("batches", "kills", "store", "producer"),
    [
        pytest.param(3, 2, "duckdb", CI_PRODUCER, id="ci"),
        pytest.param(3, 2, "postgres", CI_PRODUCER, id="ci-postgres", marks=pytest.mark.slow),
        pytest.param(12, 5, "duckdb", (), id="long", marks=pytest.mark.slow),
        pytest.param(12, 5, "postgres", (), id="long-postgres", marks=pytest.mark.slow),
    ],
)
def test_short_chaos_soak_both_spout_kinds_exactly_once(
    tmp_path: Path, batches: int, kills: int, store: str, producer: tuple[str, ...]
) -> None:
    """The soak on DuckDB, and on PostgreSQL (a server the soak starts and stops)."""
    result = run_soak(
        tmp_path, "--batches", str(batches), "--kills", str(kills), "--kind", "both",
        "--seed", "11", "--store", store, *producer, env=soak_env(),
    )  # fmt: skip
    assert result["ok"] is True
    assert result["store"] == store
    assert result["kills"] == kills  # every planned SIGKILL happened, each one a new worker
    assert result["workers_started"] >= kills + 1
    assert sum(sum(f["kills"].values()) for f in result["figures"]) == kills
    assert result["problems"] == []
    for fig, cmp in zip(result["figures"], result["comparisons"], strict=True):
        assert fig["batches"] >= batches
        assert (cmp["lost"], cmp["double_counted"], cmp["keys_mismatched"]) == (0, 0, 0)
        assert cmp["keys_truth"] == cmp["keys_state"] > 0
        assert cmp["dead_letters"] == cmp["malformed_in_log"] == result["produced"]["bad"]
        assert cmp["ranges_ok"] is True
        assert cmp["replica_mismatched"] == 0, "the read replica equals the state"
        assert cmp["replica_txid"] == cmp["last_txid"]
    assert {f["topology"] for f in result["figures"]} == {"wc_opaque", "wc_transactional"}


@pytest.mark.timeout(1800)  # a loaded machine; nothing here asserts a duration
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_short_chaos_soak_publishing_a_lakehouse_table_exactly_once(
    tmp_path: Path, fmt: str
) -> None:
    """The soak with the counts published to a table: kills may land after the table commit
    and after the marker, and a new worker catches the table up before its first batch."""
    result = run_soak(
        tmp_path, "--batches", "4", "--kills", "4", "--kind", "opaque", "--seed", "5",
        "--publish", fmt, *CI_PRODUCER, env=soak_env(),
    )  # fmt: skip
    assert result["ok"] is True
    assert result["publish"] == fmt
    assert result["kills"] == 4
    assert result["problems"] == []
    (fig,), (cmp,) = result["figures"], result["comparisons"]
    assert fig["batches"] >= 4
    assert (cmp["lost"], cmp["double_counted"], cmp["keys_mismatched"]) == (0, 0, 0)
    assert cmp["keys_truth"] == cmp["keys_state"] > 0
    assert cmp["dead_letters"] == cmp["malformed_in_log"] == result["produced"]["bad"]
    assert (cmp["table_mismatched"], cmp["table_problem"]) == (0, "")

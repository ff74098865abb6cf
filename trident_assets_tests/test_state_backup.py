"""``trident state backup|restore`` (issue 17, item 2): consistent copies, exactly-once resume.

A backup taken while another process commits batches is the state after one whole txid; a
restored backup resumes exactly-once: the txids after it run again and the state equals the
counts computed from the log.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from trident_assets.backends.backup import backup_state, restore_state
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.cli import app
from trident_assets.errors import ConfigError, StateLayoutError
from trident_assets.examples.word_count import SENTENCES, build_word_count
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spouts.config import SpoutKind
from trident_assets_tests.children import clean_env, run_trident

TRIDENT = Path(sys.executable).parent / "trident"
REPO = Path(__file__).resolve().parents[1]
WRITER = """
import sys
from trident_assets.backends.duckdb_store import DuckDBStore
db, stop = sys.argv[1], sys.argv[2]
import os, time
txid, deadline = 0, time.monotonic() + 300  # commits until told to stop (the deadline: a guard)
while not os.path.exists(stop) and time.monotonic() < deadline:
    txid += 1
    with DuckDBStore(db, lock_timeout_s=30) as store:
        with store.transaction() as tx:
            store.map("w__counts").multi_put([(f"k{i}",) for i in range(50)], [txid] * 50)
            tx.mark_committed("w", txid)
    if txid == 1:
        print("committed 1", flush=True)
print(txid)
"""


def test_a_backup_taken_while_another_process_commits_is_one_whole_txid(tmp_path: Path) -> None:
    db, stop = tmp_path / "state.duckdb", tmp_path / "stop"
    with DuckDBStore(db) as store, store.transaction() as tx:
        tx.mark_committed("w", 0)
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(WRITER))
    writer = subprocess.Popen(
        [sys.executable, str(script), str(db), str(stop)],
        env={**clean_env(tmp_path), "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == "committed 1\n"
        infos = []
        for n in range(3):
            time.sleep(0.2)
            infos.append(backup_state(db, tmp_path / f"b{n}.duckdb", lock_timeout_s=30))
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0
    assert int(out) > infos[-1].scopes["w"] >= infos[0].scopes["w"] > 0
    for info in infos:
        with DuckDBStore(info.path, read_only=True) as copy:
            txid = copy.last_committed("w")
            assert txid == info.scopes["w"]
            values = {r["value"] for r in copy.scan("w__counts").to_pylist()}
            assert values == {txid}  # every key holds the value of the last committed txid
            assert copy.size("w__counts") == 50


def test_backup_and_restore_refusals(tmp_path: Path) -> None:
    db = tmp_path / "state.duckdb"
    with DuckDBStore(db) as store, store.transaction() as tx:
        tx.mark_committed("t", 1)
    with pytest.raises(ConfigError) as info:
        backup_state(tmp_path / "missing.duckdb", tmp_path / "b.duckdb")
    assert (
        str(info.value)
        == f"state file {tmp_path / 'missing.duckdb'} does not exist; nothing to back up"
    )
    backup_state(db, tmp_path / "b.duckdb")
    with pytest.raises(ConfigError) as info:
        backup_state(db, tmp_path / "b.duckdb")
    assert (
        str(info.value) == f"backup {tmp_path / 'b.duckdb'} already exists; choose a new file name"
    )
    with pytest.raises(ConfigError) as info:
        restore_state(tmp_path / "b.duckdb", db)
    assert str(info.value) == (
        f"state file {db} exists; restoring would replace it (pass --force to move it aside "
        "as state.duckdb.before-restore-<time> and restore)"
    )
    (tmp_path / "junk.duckdb").write_bytes(b"junk")
    with pytest.raises(StateLayoutError) as info:
        restore_state(tmp_path / "junk.duckdb", db, force=True)
    assert str(info.value) == (
        f"{tmp_path / 'junk.duckdb'} is not a DuckDB database file (it was left unchanged): "
        "4 bytes, fewer than the 12288 of a DuckDB file's headers"
    )
    assert (tmp_path / "junk.duckdb").read_bytes() == b"junk"


def _sentences(log: PartitionedLog, values: list[str]) -> None:
    producer = log.producer("sentences", partitioner="round_robin")
    for v in values:
        producer.send(v.encode())
    producer.flush()


def _truth(log: PartitionedLog) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for p in range(log.partitions("sentences")):
        end = log.latest_offset("sentences", p)
        for value in log.read("sentences", p, 0, end - 1).column("value").to_pylist():
            counts.update(w for w in value.decode().split(" ") if w)
    return dict(counts)


def _counts(store: DuckDBStore, name: str) -> dict[str, int]:
    return {r["word"]: r["value"] for r in store.scan(f"{name}__word_counts").to_pylist()}


@pytest.mark.parametrize("kind", [SpoutKind.TRANSACTIONAL, SpoutKind.OPAQUE])
def test_a_restored_backup_resumes_exactly_once(
    spark: Any, tmp_path: Path, kind: SpoutKind
) -> None:
    home = tmp_path / "home"
    log = PartitionedLog(home / "log")
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    _sentences(log, SENTENCES)
    topo = build_word_count("wc", max_batch_size=3, kind=kind)
    db = home / "state.duckdb"
    replica = Replica(home / "replica")

    def run(txids: range) -> None:
        with DuckDBStore(db) as store:
            runner = TopologyRunner(topo, spark, store, log)
            for txid in txids:
                assert runner.run_batch(txid).applied
                replica.publish(store, topo.name, txid, [f"{topo.name}__word_counts"], [])

    run(range(1, 4))
    table = f"{topo.name}__word_counts"
    with DuckDBStore(db, read_only=True) as store:
        at_three = _counts(store, topo.name)
        as_of = {t: store.scan(table, as_of=t).to_pylist() for t in (1, 2, 3)}
    done = run_trident(tmp_path, "state", "backup", str(tmp_path / "b.duckdb"), "--home", str(home))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"backed up {db} to {tmp_path / 'b.duckdb'}: ")
    assert done.stdout.endswith("; wc at txid 3\n")
    run(range(4, 7))
    _sentences(log, ["late words arrive", "after the backup"])

    done = run_trident(
        tmp_path, "state", "restore", str(tmp_path / "b.duckdb"), "--home", str(home)
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"error: state file {db} exists; restoring would replace it (pass --force to move it "
        "aside as state.duckdb.before-restore-<time> and restore)\n"
    )
    done = run_trident(
        tmp_path, "state", "restore", str(tmp_path / "b.duckdb"), "--force", "--home", str(home)
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"restored {tmp_path / 'b.duckdb'} to {db}: ")
    assert lines[0].endswith(" bytes; wc at txid 3")
    assert [line.split(".before-restore-")[0] for line in lines[1:4]] == [
        f"  moved aside: {db}",
        f"  moved aside: {db}",  # its commit marker file, <name>.before-restore-<time>.commits
        f"  moved aside: {home / 'replica'}",
    ]
    assert lines[2] == f"{lines[1]}.commits"
    assert lines[4] == f"  rebuilt the read replica {home / 'replica'}"
    assert replica.latest(topo.name) == 3
    assert replica.oldest_readable(table) == 1  # no compaction ran: every txid stays readable
    for t in (1, 2, 3):  # downstream as-of reads see what the restored file reads
        assert replica.read_map(table, scope=topo.name, as_of=t).to_pylist() == as_of[t]
    assert as_of[1] != as_of[3]  # history, not the latest state thrice
    got = replica.read_map(f"{topo.name}__word_counts", scope=topo.name, value_name="value")
    assert (
        dict(zip(got.column("word").to_pylist(), got.column("value").to_pylist(), strict=True))
        == at_three
    )

    with DuckDBStore(db) as store:
        assert store.last_committed(topo.name) == 3
        assert _counts(store, topo.name) == at_three
        runner = TopologyRunner(topo, spark, store, log)
        assert not runner.run_batch(3).applied  # committed in the backup: nothing changes
        txid = 3
        while runner.backlog() > 0:
            txid += 1
            assert runner.run_batch(txid).applied
            replica.publish(store, topo.name, txid, [f"{topo.name}__word_counts"], [])
        assert txid > 3  # the txids after the backup ran again
        assert _counts(store, topo.name) == _truth(log)
    got = replica.read_map(f"{topo.name}__word_counts", scope=topo.name, value_name="value")
    assert dict(
        zip(got.column("word").to_pylist(), got.column("value").to_pylist(), strict=True)
    ) == _truth(log)


def test_restore_replaces_a_truncated_state_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = home / "state.duckdb"
    with DuckDBStore(db) as store, store.transaction() as tx:
        store.map("t__counts").multi_put([("a",)], [1])
        tx.mark_committed("t", 1)
    runner = CliRunner()
    result = runner.invoke(
        app, ["state", "backup", str(tmp_path / "b.duckdb"), "--home", str(home)]
    )
    assert result.exit_code == 0, result.output
    with open(db, "r+b") as fh:
        fh.truncate(4096)
    result = runner.invoke(app, ["state", "list", "--home", str(home)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: state file {db} is corrupt or unreadable (")
    result = runner.invoke(
        app, ["state", "restore", str(tmp_path / "b.duckdb"), "--force", "--home", str(home)]
    )
    assert result.exit_code == 0, result.output
    asides = sorted(p.name.split("-restore-")[0] for p in home.iterdir() if "before" in p.name)
    assert asides == ["state.duckdb.before", "state.duckdb.before"]  # the file, its .commits
    with contextlib.closing(DuckDBStore(db, read_only=True)) as store:
        assert store.scan("t__counts").to_pylist() == [{"k0": "a", "value": 1}]


ORDERS = """
import trident_assets as ta

topo = ta.TridentTopology("orders")
scheme = ta.JsonScheme({"customer": "string", "amount": "bigint", "ts": "string"})
spout = ta.LogSpout("orders", scheme, ta.SpoutConfig(max_batch_size=2))
orders = topo.new_stream("orders", spout).group_by("customer")
per_customer = orders.persistent_aggregate(
    ta.StateSpec("per_customer"), "amount", ta.Sum(), "total"
)
per_minute = orders.window_aggregate(
    ta.EventWindow.tumbling("1 minute", time_field="ts"),
    ta.Sum(),
    "amount_sum",
    spec=ta.StateSpec("per_minute"),
    inputs="amount",
)
"""
"""A user's topology: a map state and an event-window state over one stream."""


def _orders_home(spark: Any, tmp_path: Path) -> Path:
    """Topology ``orders`` run for txids 1..3 (two records each) into a home with a replica."""
    import json

    home = tmp_path / "home"
    log = PartitionedLog(home / "log")
    log.create_topic("orders", 1)
    producer = log.producer("orders")
    records = [
        ("ann", 5, "00:00:10"), ("bob", 3, "00:00:20"),  # txid 1
        ("ann", 2, "00:00:50"), ("bob", 4, "00:01:10"),  # txid 2: [00:00, 00:01) is final
        ("ann", 1, "00:02:05"), ("bob", 6, "00:02:30"),  # txid 3: [00:01, 00:02) is final
    ]  # fmt: skip
    for customer, amount, ts in records:
        record = {"customer": customer, "amount": amount, "ts": f"2026-01-01 {ts}"}
        producer.send(json.dumps(record).encode())
    producer.flush()
    declared: dict[str, Any] = {}
    exec(ORDERS, declared)
    topo = declared["topo"]
    with DuckDBStore(home / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log, replica=Replica(home / "replica"))
        for txid in (1, 2, 3):
            assert runner.run_batch(txid).applied
    (tmp_path / "orders_module.py").write_text(ORDERS)
    return home


PER_MINUTE = [
    {"customer": "ann", "window_start": "2026-01-01 00:00:00", "window_end": "2026-01-01 00:01:00",
     "amount_sum": 7, "final": True, "final_txid": 2},
    {"customer": "ann", "window_start": "2026-01-01 00:02:00", "window_end": "2026-01-01 00:03:00",
     "amount_sum": 1, "final": False, "final_txid": None},
    {"customer": "bob", "window_start": "2026-01-01 00:00:00", "window_end": "2026-01-01 00:01:00",
     "amount_sum": 3, "final": True, "final_txid": 2},
    {"customer": "bob", "window_start": "2026-01-01 00:01:00", "window_end": "2026-01-01 00:02:00",
     "amount_sum": 4, "final": True, "final_txid": 3},
    {"customer": "bob", "window_start": "2026-01-01 00:02:00", "window_end": "2026-01-01 00:03:00",
     "amount_sum": 6, "final": False, "final_txid": None},
]  # fmt: skip
"""``trident state scan orders per_minute --format json`` of :func:`_orders_home`'s home."""


def test_a_restore_keeps_every_state_of_a_topology_with_a_window(
    spark: Any, tmp_path: Path
) -> None:
    """After backup and a forced restore, each state, its finals and new values read as before."""
    import json

    home = _orders_home(spark, tmp_path)
    env = clean_env(tmp_path, PYTHONPATH=str(tmp_path))
    where = ["--home", str(home), "--format", "json"]

    def scans() -> list[Any]:
        out = []
        for args in (
            ["state", "list", "--module", "orders_module"],
            ["state", "scan", "orders", "per_minute"],
            ["state", "scan", "orders", "per_minute", "--txid", "2"],
            ["state", "scan", "orders", "per_customer"],
            ["state", "scan", "orders", "per_customer", "--txid", "1"],
            ["state", "get", "orders", "per_minute", "bob"],
        ):
            done = run_trident(tmp_path, *args, *where, env=env)
            assert (done.returncode, done.stderr) == (0, ""), args
            out.append(json.loads(done.stdout))
        return out

    before = scans()
    assert before[1] == PER_MINUTE
    assert before[2] == [r for r in PER_MINUTE if r["final_txid"] == 2]
    assert before[3] == [{"customer": "bob", "total": 13}, {"customer": "ann", "total": 8}]
    assert before[4] == [{"customer": "ann", "total": 5}, {"customer": "bob", "total": 3}]
    assert [(r["state"], r["kind"], r["keys"], r["last_txid"]) for r in before[0]] == [
        ("per_customer", "opaque", 2, 3),
        ("per_minute", "event_window", 5, 3),
    ]
    replica = Replica(home / "replica")
    finals = "orders__per_minute__finals"
    published = {t: sorted(replica.row_files(t, 3)) for t in replica.tables() if t != finals}
    appended = pa.concat_tables(pq.read_table(f) for f in replica.appended_files(finals, "orders"))
    done = run_trident(tmp_path, "state", "backup", str(tmp_path / "b.duckdb"), *where[:2], env=env)
    assert done.returncode == 0, done.stderr
    done = run_trident(
        tmp_path, "state", "restore", str(tmp_path / "b.duckdb"), "--force", *where[:2], env=env
    )
    assert done.returncode == 0, done.stderr
    assert scans() == before
    assert {t: sorted(replica.row_files(t, 3)) for t in replica.tables() if t != finals} == {
        **published,
        "orders__per_customer__partials": [2, 3],  # the store keeps the last 2 txids' partials
    }
    assert published["orders__per_customer__partials"] == [1, 2, 3]
    assert published["orders__per_minute__new_values"] == [1, 2, 3]  # txid 1 made none final
    aside = Replica(next(home.glob("replica.before-restore-*")))
    for table, txids in published.items():
        for txid in txids[-2:] if table.endswith("__partials") else txids:
            rows = replica.read_rows(table, txid)
            assert rows is not None, (table, txid)
            assert rows == aside.read_rows(table, txid), (table, txid)
    again = pa.concat_tables(pq.read_table(f) for f in replica.appended_files(finals, "orders"))
    order = [("customer", "ascending"), ("window_start", "ascending")]
    assert again.sort_by(order).equals(appended.sort_by(order))

"""The state-store interface on both stores: commit protocol, atomicity, side tables, concurrency.

Each test taking ``open_store`` runs on DuckDB and on PostgreSQL (a real server started by the
session fixture). The PostgreSQL-only tests cover what a server store adds: DSN configuration,
readers on other connections while a batch commits, several topologies in one database, and
the refusal of a second writer of the same topology.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from trident_assets.backends.duckdb_merge import apply_partials
from trident_assets.backends.duckdb_spout_meta import DuckDBSpoutMetaStore
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.postgres_store import PostgresStore, redact_dsn
from trident_assets.backends.state_batches import (
    StateTarget,
    state_total,
)
from trident_assets.backends.state_store import StateStore, open_state_store
from trident_assets.backends.txid_rows import ensure_dead_letters_table, store_dead_letters
from trident_assets.core.aggregators import Count
from trident_assets.core.commit import commit_batch
from trident_assets.core.values import StateType
from trident_assets.errors import (
    ConfigError,
    HistoryUnavailableError,
    OutOfOrderCommitError,
    StoreLockedError,
)
from trident_assets.names import DEAD_LETTERS_TABLE
from trident_assets.spouts.ranges import PartitionRange
from trident_assets_tests.state_assets import commit_partials

OPAQUE = StateType.OPAQUE
TARGET = StateTarget("wc__counts", ("word",), "n", OPAQUE, Count())


def words(*pairs: tuple[str, int]) -> pa.Table:
    return pa.table(
        {"word": [w for w, _ in pairs], "n": pa.array([n for _, n in pairs], pa.int64())}
    )


def counts(store: Any, table: str = "wc__counts", **kw: Any) -> dict[str, int]:
    scanned = store.scan(table, **kw)
    return dict(zip(scanned.column(0).to_pylist(), scanned.column(1).to_pylist(), strict=True))


def test_both_stores_satisfy_the_interface(open_store: Any) -> None:
    store = open_store()
    assert isinstance(store, StateStore)
    expected = DuckDBStore if open_store.kind == "duckdb" else PostgresStore
    assert type(store) is expected, "open_state_store picks the store from the location"


def test_strict_order_committed_is_final_and_as_of_reads(open_store: Any) -> None:
    store = open_store()
    first = commit_partials(store, "wc", TARGET, words(("a", 1), ("b", 2), ("a", 1)), 1)
    assert first.applied
    with pytest.raises(OutOfOrderCommitError, match=r"refusing to commit txid 3 to 'wc'"):
        commit_partials(store, "wc", TARGET, words(("a", 100)), 3)
    assert commit_partials(store, "wc", TARGET, words(("a", 5), ("c", 1)), 2).applied
    replay = commit_partials(store, "wc", TARGET, words(("a", 1000)), 1)
    assert not replay.applied, "a committed txid is final"
    assert store.last_committed("wc") == 2
    assert counts(store) == {"a": 7, "b": 2, "c": 1}, "replayed txid 1 must not double-count"
    assert counts(store, as_of=1) == {"a": 2, "b": 2}
    assert state_total(store, "wc__counts") == 10.0
    assert store.compact() == {"wc__counts": 1}
    with pytest.raises(HistoryUnavailableError, match="oldest txid that can still be read is 2"):
        store.scan("wc__counts", as_of=1)
    assert counts(store, as_of=2) == {"a": 7, "b": 2, "c": 1}


def test_a_failed_batch_leaves_state_marker_and_metadata_unchanged(open_store: Any) -> None:
    store = open_store()
    meta = DuckDBSpoutMetaStore(store)
    commit_partials(store, "wc", TARGET, words(("a", 1)), 1)

    def apply(_tx: Any) -> None:
        apply_partials(
            store,
            "wc__counts",
            words(("a", 10), ("z", 1)),
            key_columns=["word"],
            value_column="n",
            combine="sum",
            state_type=OPAQUE,
            txid=2,
        )
        meta.record("wc", "s", 2, [PartitionRange("p0", 0, 10, "d1")], committed=True)
        msg = "crash after the state write"
        raise RuntimeError(msg)

    with pytest.raises(RuntimeError, match="crash after the state write"):
        commit_batch(store, "wc", 2, apply)
    assert store.last_committed("wc") == 1
    assert counts(store) == {"a": 1}, "the state write rolled back with the marker"
    assert meta.ranges("wc", "s", 2) is None, "the spout metadata rolled back with the marker"


def test_spout_metadata_commits_with_the_batch(open_store: Any) -> None:
    store = open_store()
    meta = DuckDBSpoutMetaStore(store)
    meta.record(
        "wc",
        "s",
        1,
        [PartitionRange("p0", 0, 5, "d"), PartitionRange("p1", 0, 3, "d")],
        committed=True,
    )
    meta.record("wc", "s", 2, [PartitionRange("p0", 5, 9, "d")], committed=False)
    assert meta.ranges("wc", "s", 1) == (
        [PartitionRange("p0", 0, 5, "d"), PartitionRange("p1", 0, 3, "d")],
        True,
    )
    assert meta.latest_before("wc", "s", 3, committed_only=True) == {
        "p0": PartitionRange("p0", 0, 5, "d"),
        "p1": PartitionRange("p1", 0, 3, "d"),
    }
    assert meta.latest_before("wc", "s", 3, committed_only=False)["p0"] == PartitionRange(
        "p0", 5, 9, "d"
    )
    assert meta.last_committed_txid("wc", "s") == 1
    meta.record("wc", "s", 2, [PartitionRange("p0", 5, 9, "d")], committed=True)
    assert meta.cleanup_before("wc", "s", 3) == 1, "txid 1's p0 is superseded by txid 2's"
    assert meta.ranges("wc", "s", 1) == ([PartitionRange("p1", 0, 3, "d")], True)


def test_dead_letters_are_replaced_per_txid(open_store: Any) -> None:
    store = open_store()
    ensure_dead_letters_table(store)
    bad = pa.table(
        {
            "topic": ["t", "t"],
            "partition": pa.array([0, 1], pa.int32()),
            "offset": pa.array([4, 9], pa.int64()),
            "reason": ["not JSON", "missing field 'id'"],
            "value": pa.array([b"\xff", b"{}"], pa.binary()),
        }
    )
    with store.transaction():
        assert store_dead_letters(store, "wc", 3, {"s": bad}) == 2
    with store.transaction():
        assert store_dead_letters(store, "wc", 3, {"s": bad.slice(1)}) == 1, "a replay rewrites"
    rows = store.fetch_rows(
        f'SELECT topology, spout, txid, topic, partition, "offset", reason, value '
        f"FROM {DEAD_LETTERS_TABLE} ORDER BY 6"
    )
    assert rows == [("wc", "s", 3, "t", 1, 9, "missing field 'id'", b"{}")]


# -- PostgreSQL: configuration and concurrency ---------------------------------------------------


def test_bad_dsn_fails_before_any_write(postgres_server: Any) -> None:
    with pytest.raises(ConfigError, match=r"state DSN 'mysql://x/y' is not a PostgreSQL URI"):
        PostgresStore("mysql://x/y")
    port = postgres_server.port
    unreachable = f"postgresql://nobody:secret@127.0.0.1:{port}/no_such_database"
    with pytest.raises(ConfigError) as caught:
        open_state_store(unreachable)
    text = str(caught.value)
    assert "cannot connect to the PostgreSQL state store" in text
    assert "no_such_database" in text
    assert "secret" not in text, "the password never reaches a message"
    assert redact_dsn(unreachable).startswith("postgresql://nobody:***@")


def test_readers_see_the_last_commit_while_a_batch_commits(pg_dsn: str) -> None:
    writer = PostgresStore(pg_dsn)
    reader = PostgresStore(pg_dsn, read_only=True)
    try:
        commit_partials(writer, "wc", TARGET, words(("a", 1)), 1)
        with writer.transaction():
            commit_partials(writer, "wc", TARGET, words(("a", 5), ("b", 1)), 2)
            assert counts(reader) == {"a": 1}, "an uncommitted batch is invisible"
            assert reader.last_committed("wc") == 1
            assert counts(writer) == {"a": 6, "b": 1}, "the writer sees its own batch"
        assert counts(reader) == {"a": 6, "b": 1}
        assert reader.last_committed("wc") == 2
        assert counts(reader, as_of=1) == {"a": 1}
    finally:
        reader.close()
        writer.close()


def test_a_second_thread_waits_for_the_open_transaction_instead_of_joining_it(
    pg_dsn: str,
) -> None:
    """The thread planning the next chunk (its spill tables) never uses the session mid-commit.

    Its table is created after the open transaction ends, so a rollback of that transaction
    does not take it along, and it never sees the transaction as its own.
    """
    import threading

    store = PostgresStore(pg_dsn)
    seen: dict[str, Any] = {}

    def plan_next_chunk() -> None:
        seen["in_transaction"] = store.in_transaction
        store.create_unlogged("spill_next", pa.schema([("word", pa.string())]))
        seen["created"] = True

    planner = threading.Thread(target=plan_next_chunk)

    def commit_that_crashes() -> None:
        with store.transaction():
            store.execute("CREATE TABLE in_the_commit (x INTEGER)")
            assert store.in_transaction
            planner.start()
            planner.join(timeout=2.0)
            assert planner.is_alive(), "the other thread waits while the transaction is open"
            raise RuntimeError("crash inside the commit")

    try:
        with pytest.raises(RuntimeError, match="crash inside the commit"):
            commit_that_crashes()
        planner.join()
        assert seen == {"in_transaction": False, "created": True}
        assert store.has_table("spill_next"), "created after the rollback, not inside it"
        assert not store.has_table("in_the_commit")
    finally:
        if planner.is_alive():
            planner.join()
        store.close()


def test_two_topologies_share_one_database(pg_dsn: str) -> None:
    one, two = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
    other = StateTarget("other__counts", ("word",), "n", OPAQUE, Count())
    try:
        commit_partials(one, "wc", TARGET, words(("a", 1)), 1)
        commit_partials(two, "other", other, words(("a", 7)), 1)
        commit_partials(one, "wc", TARGET, words(("a", 1)), 2)
        commit_partials(two, "other", other, words(("b", 1)), 2)
        assert one.scopes() == {"other": 2, "wc": 2}
        assert counts(two) == {"a": 2}
        assert counts(one, "other__counts") == {"a": 7, "b": 1}
    finally:
        one.close()
        two.close()


def test_a_second_writer_of_the_same_topology_is_refused(pg_dsn: str) -> None:
    first, second = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
    try:
        commit_partials(first, "wc", TARGET, words(("a", 1)), 1)
        with pytest.raises(StoreLockedError, match=r"topology 'wc' is being written by another"):
            commit_partials(second, "wc", TARGET, words(("a", 100)), 2)
        assert second.last_committed("wc") == 1
        assert counts(second) == {"a": 1}, "the refused writer changed nothing"
        first.close()
        assert commit_partials(second, "wc", TARGET, words(("a", 2)), 2).applied
        assert counts(second) == {"a": 3}
    finally:
        first.close()
        second.close()


def test_topology_resource_checks_the_state_dsn_before_any_write(tmp_path: Any) -> None:
    from trident_assets.dagster.resources import TridentResource

    bad = TridentResource(home=str(tmp_path / "h"), state_dsn="sqlite:///state.db")
    with pytest.raises(ConfigError, match=r"state_dsn 'sqlite:///state.db' is not a PostgreSQL"):
        bad.store().__enter__()
    down = TridentResource(home=str(tmp_path / "h"), state_dsn="postgresql://u@127.0.0.1:1/db")
    with pytest.raises(
        ConfigError,
        match=r"cannot connect to the PostgreSQL state store postgresql://u@127\.0\.0\.1:1/db: "
        r".*nothing was written",
    ):
        down.store().__enter__()
    assert not (tmp_path / "h").exists(), "nothing was written"


def test_the_cli_reads_postgres_state_as_a_child_process(
    spark: Any, tmp_path: Path, pg_dsn: str
) -> None:
    """A topology run on PostgreSQL state; the ``trident`` commands read it with
    ``--database <dsn>`` from a clean environment; file-only commands refuse the DSN."""
    import json
    import subprocess
    import sys

    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.spouts.config import SpoutKind
    from trident_assets_tests.test_executor import _word_count

    home = tmp_path / "home"
    log = PartitionedLog(home / "log")
    log.create_topic("sentences", 1)
    producer = log.producer("sentences")
    for value in (b"a b a", b"\xff\xfe", b"b c"):
        producer.send(value)
    producer.flush()
    topo, counts = _word_count("wc_pg", kind=SpoutKind.TRANSACTIONAL, max_batch_size=None)
    counts.new_values_stream().as_output("changes")
    with PostgresStore(pg_dsn) as store:
        assert TopologyRunner(topo, spark, store, log).run_batch(1).applied

    def trident(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "trident"), *args, "--database", pg_dsn],
            cwd=tmp_path,
            env={"HOME": str(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def rows(*args: str) -> list[dict[str, Any]]:
        done = trident(*args, "--format", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert rows("state", "list") == [
        {
            "topology": "wc_pg",
            "state": "counts",
            "kind": "opaque",
            "key_columns": "word",
            "value_type": "BIGINT",
            "keys": 3,
            "last_txid": 1,
            "orphaned": "unknown",  # no --module: the built-in location does not declare wc_pg
        }
    ]
    scanned = {r["word"]: r["value"] for r in rows("state", "scan", "wc_pg", "counts")}
    assert scanned == {"a": 2, "b": 2, "c": 1}
    changes = rows("outputs", "wc_pg", "changes")
    assert [(r["txid"], r["word"], r["count"]) for r in changes] == [
        (1, "a", 2), (1, "b", 2), (1, "c", 1),
    ]  # fmt: skip
    dead = rows("dead-letters", "wc_pg")
    assert [(r["txid"], r["offset"], r["reason"]) for r in dead] == [
        (1, 1, "value is not valid UTF-8")
    ]
    assert rows("quarantine", "list") == []
    status = rows("status", "--home", str(home))
    assert [(r["topology"], r["last_txid"], r["lag"]) for r in status] == [("wc_pg", 1, 0)]

    refused = trident("state", "backup", str(tmp_path / "copy.duckdb"))
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "error: this command works on a DuckDB state file; --database is a PostgreSQL DSN: "
        "back PostgreSQL state up with pg_dump and restore it with pg_restore"
    )


def test_per_txid_rows_keep_a_field_named_txid_and_type_a_null_column(open_store: Any) -> None:
    """``store_rows`` on both stores: a user field ``txid`` is kept as ``txid_1``; a column
    NULL in every row of the first batch takes the type of a later batch; old txids go."""
    from trident_assets.backends.txid_rows import store_rows

    store = open_store()
    first = pa.table({"word": ["a"], "txid": [7], "n": pa.array([None], pa.null())})
    with store.transaction():
        store_rows(store, "t__out_x", 1, first, keep=2)
    second = pa.table({"word": ["b"], "txid": [8], "n": pa.array([5], pa.int64())})
    with store.transaction():
        store_rows(store, "t__out_x", 2, second, keep=2)
    with store.transaction():
        store_rows(store, "t__out_x", 3, second.slice(0, 0), keep=2)
    got = store.fetch_arrow('SELECT * FROM "t__out_x" ORDER BY txid')
    assert got.column_names == ["txid", "word", "txid_1", "n"]
    assert got.schema.field("n").type == pa.int64()
    assert got.to_pylist() == [{"txid": 2, "word": "b", "txid_1": 8, "n": 5}]

"""DuckDBStore and DuckDBBackingMap: layout, durability, transactions, commit markers, crashes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from trident_assets.backends.duckdb_open import CREATION_GRACE_S, HEADER_BYTES
from trident_assets.backends.duckdb_store import DuckDBBackingMap, DuckDBStore
from trident_assets.backends.map_layout import MapLayout
from trident_assets.core.commit import commit_batch
from trident_assets.core.values import OpaqueValue, StateType, TransactionalValue
from trident_assets.errors import (
    ConfigError,
    OutOfOrderCommitError,
    StateLayoutError,
    StoreLockedError,
    TridentError,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state.duckdb"


@pytest.fixture
def store(db: Path) -> DuckDBStore:
    s = DuckDBStore(db)
    yield s
    s.close()


def raw(store: DuckDBStore, table: str) -> list[tuple]:
    return store.conn.execute(f'SELECT * FROM "{table}" ORDER BY ALL').fetchall()


# -- maps: round trips, durability, layout -------------------------------------------------------


def test_round_trip_each_kind_and_durable_on_reopen(db: Path) -> None:
    with DuckDBStore(db) as store:
        store.map("op").multi_put([("a",), ("b",)], [OpaqueValue(3, 10, 7), OpaqueValue(1, 5)])
        store.map("tr").multi_put([("a",)], [TransactionalValue(3, 10)])
        store.map("pl").multi_put([("a",), ("b",)], [10, None])
    with DuckDBStore(db) as store:
        assert store.map("op").multi_get([("b",), ("zz",), ("a",)]) == [
            OpaqueValue(1, 5, None),
            None,
            OpaqueValue(3, 10, 7),
        ]
        assert store.map("tr").multi_get([("a",), ("b",)]) == [TransactionalValue(3, 10), None]
        assert store.map("pl").multi_get([("a",), ("b",), ("c",)]) == [10, None, None]
        assert raw(store, "op") == [("a", 3, 10, 7), ("b", 1, 5, None)]
        assert raw(store, "tr") == [("a", 3, 10, None)]
        assert raw(store, "pl") == [("a", None, 10, None), ("b", None, None, None)]
        assert store.tables() == ["op", "pl", "tr"]
        assert [store.size(t) for t in ("op", "pl", "tr", "nope")] == [2, 2, 1, 0]


def test_map_opened_on_a_path_owns_its_store(db: Path) -> None:
    with DuckDBBackingMap(db, "counts") as m:
        m.multi_put([("x", 1)], [5])
    with DuckDBBackingMap(str(db), "counts") as m:
        assert m.multi_get([("x", 1)]) == [5]
        assert m.layout == MapLayout(
            "counts", "plain", ("k0", "k1"), ("VARCHAR", "BIGINT"), "BIGINT"
        )


def test_compound_and_typed_keys(store: DuckDBStore) -> None:
    m = store.map("c")
    keys = [("a", 1, 2.5, True, b"\x00\xff", (1, "x"))]
    m.multi_put(keys, [OpaqueValue(1, 4)])
    assert m.layout.key_types == ("VARCHAR", "BIGINT", "DOUBLE", "BOOLEAN", "BLOB", "JSON")
    assert m.multi_get([("a", 1, 2.5, True, b"\x00\xff", [1, "x"])]) == [OpaqueValue(1, 4)]
    assert m.multi_get([("a", 1, 2.5, False, b"\x00\xff", [1, "x"])]) == [None]
    assert store.scan("c").to_pylist() == [
        {"k0": "a", "k1": 1, "k2": 2.5, "k3": True, "k4": b"\x00\xff", "k5": '[1,"x"]', "value": 4}
    ]


def test_declared_layout_names_columns_and_types(store: DuckDBStore) -> None:
    m = store.map(
        "loc",
        key_columns=["user_id"],
        key_types=["BIGINT"],
        value_type="decimal(38, 2)",
        kind=StateType.TRANSACTIONAL,
    )
    m.multi_put([(7,)], [TransactionalValue(2, Decimal("1.5"))])
    assert m.multi_get([(7,)]) == [TransactionalValue(2, Decimal("1.50"))]
    assert store.layout("loc") == MapLayout(
        "loc", "transactional", ("user_id",), ("BIGINT",), "DECIMAL(38,2)"
    )
    table = store.scan("loc", value_name="location")
    assert table.column_names == ["user_id", "location"]
    assert table.to_pylist() == [{"user_id": 7, "location": Decimal("1.50")}]


def test_json_values_round_trip(store: DuckDBStore) -> None:
    m = store.map("j")
    m.multi_put([("a",), ("b",)], [{"n": [1, 2]}, "text"])
    assert store.layout("j").value_type == "JSON"
    assert m.multi_get([("a",), ("b",)]) == [{"n": [1, 2]}, "text"]
    assert store.scan("j").column("value").to_pylist() == ['{"n":[1,2]}', '"text"']


def test_duplicate_keys_in_one_put_last_wins(store: DuckDBStore) -> None:
    m = store.map("d")
    m.multi_put([("a",), ("b",), ("a",)], [1, 2, 3])
    assert m.multi_get([("a",), ("b",), ("a",)]) == [3, 2, 3]
    assert raw(store, "d") == [("a", None, 3, None), ("b", None, 2, None)]


def test_several_tables_in_one_file(db: Path) -> None:
    with DuckDBStore(db) as store:
        for i in range(3):
            store.map(f"t{i}").multi_put([(i,)], [i * 10])
    with DuckDBStore(db) as store:
        assert store.tables() == ["t0", "t1", "t2"]
        assert [store.map(f"t{i}").multi_get([(i,), (i + 1,)]) for i in range(3)] == [
            [0, None],
            [10, None],
            [20, None],
        ]


def test_missing_table_reads_as_none(store: DuckDBStore) -> None:
    assert store.map("never").multi_get([("a",), ("b",)]) == [None, None]
    assert store.map("never").multi_get([]) == []
    assert store.size("never") == 0
    assert store.tables() == []
    with pytest.raises(StateLayoutError, match="no map table 'never'"):
        store.scan("never")


def test_wrong_kind_is_refused(store: DuckDBStore) -> None:
    store.map("op").multi_put([("a",)], [OpaqueValue(1, 1)])
    with pytest.raises(
        StateLayoutError, match="holds opaque values and stores OpaqueValues; got int 5"
    ):
        store.map("op").multi_put([("a",)], [5])
    with pytest.raises(StateLayoutError, match="got TransactionalValue"):
        store.map("op").multi_put([("b",)], [TransactionalValue(1, 1)])
    store.map("pl").multi_put([("a",)], [1])
    with pytest.raises(StateLayoutError, match="stores plain values; got OpaqueValue"):
        store.map("pl").multi_put([("a",)], [OpaqueValue(1, 1)])
    assert raw(store, "op") == [("a", 1, 1, None)]


def test_wrong_key_arity_is_refused(store: DuckDBStore) -> None:
    m = store.map("a2")
    m.multi_put([("a", 1)], [1])
    with pytest.raises(
        StateLayoutError, match=r"key \('a',\) has 1 part\(s\) but the table's key is \(k0, k1\)"
    ):
        m.multi_put([("a",)], [1])
    with pytest.raises(StateLayoutError, match="has 3 part"):
        m.multi_get([("a", 1, 2)])
    with pytest.raises(StateLayoutError, match="has 1 part"):
        store.map("new").multi_put([("a", 1), ("b",)], [1, 2])
    assert store.tables() == ["a2"]


def test_values_the_column_cannot_hold_are_refused(store: DuckDBStore) -> None:
    m = store.map("ints")
    m.multi_put([("a",)], [1])
    for bad in ("x", 1.5, True, 2**63):
        with pytest.raises(StateLayoutError, match="cannot be stored in its BIGINT value column"):
            m.multi_put([("b",)], [bad])
    d = store.map("dec", value_type="DECIMAL(38,2)")
    with pytest.raises(StateLayoutError, match="DECIMAL"):
        d.multi_put([("a",)], [Decimal("1.234")])
    j = store.map("js", value_type="JSON")
    with pytest.raises(StateLayoutError, match="cannot be stored in its JSON value column"):
        j.multi_put([("a",)], [object()])
    assert raw(store, "ints") == [("a", None, 1, None)]


def test_keys_the_columns_cannot_hold_are_refused(store: DuckDBStore) -> None:
    m = store.map("k")
    m.multi_put([(1,)], [1])
    with pytest.raises(StateLayoutError, match="cannot be stored in key column 'k0' \\(BIGINT\\)"):
        m.multi_get([("a",)])
    with pytest.raises(StateLayoutError, match="has None in key column 'k0'"):
        m.multi_put([(None,)], [1])


def test_declared_layout_must_match_stored(db: Path) -> None:
    with DuckDBStore(db) as store:
        store.map("m").multi_put([("a",)], [1])
    with DuckDBStore(db) as store:
        with pytest.raises(
            StateLayoutError, match="declared kind='opaque' does not match the stored 'plain'"
        ):
            store.map("m", kind="opaque")
        with pytest.raises(StateLayoutError, match="declared value_type='DOUBLE'"):
            store.map("m", value_type="DOUBLE")
        with pytest.raises(StateLayoutError, match="declared key_columns=\\('word',\\)"):
            store.map("m", key_columns=["word"])


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"table": "bad name"}, "invalid table name 'bad name'"),
        ({"table": "x;drop"}, "invalid table name"),
        ({"table": "_trident_commits"}, "is reserved"),
        ({"table": "t", "key_columns": ['a"b']}, "invalid key column name"),
        ({"table": "t", "value_type": "TEXT"}, "invalid value_type 'TEXT'"),
        ({"table": "t", "key_types": ["INT"]}, "invalid key type 'INT'"),
        ({"table": "t", "kind": "weird"}, "invalid map kind 'weird'"),
    ],
)
def test_invalid_names_and_types(store: DuckDBStore, kwargs: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        store.map(**kwargs)


def test_reserved_key_column_is_refused(store: DuckDBStore) -> None:
    with pytest.raises(ConfigError, match="key column 'txid' is a duplicate or reserved"):
        store.map("t", key_columns=["txid"]).multi_put([(1,)], [1])


def test_foreign_table_of_same_name_is_refused(store: DuckDBStore) -> None:
    store.conn.execute("CREATE TABLE users (id INT)")
    with pytest.raises(StateLayoutError, match=r"already exists .* but is not a trident map table"):
        store.map("users").multi_put([(1,)], [1])
    assert store.tables() == []


def test_scan_returns_arrow_ordered_by_key(store: DuckDBStore) -> None:
    store.map("s").multi_put(
        [("b", 2), ("a", 9), ("a", 1)],
        [OpaqueValue(1, 20, 1), OpaqueValue(1, 90), OpaqueValue(1, 10)],
    )
    table = store.scan("s")
    assert isinstance(table, pa.Table)
    assert table.to_pydict() == {"k0": ["a", "a", "b"], "k1": [1, 9, 2], "value": [10, 90, 20]}


# -- transactions and commit markers ----------------------------------------------------------


def test_transaction_commits_and_rolls_back(store: DuckDBStore) -> None:
    m = store.map("t")
    with store.transaction():
        m.multi_put([("a",)], [1])

    def failing_batch() -> None:
        with store.transaction():
            m.multi_put([("a",)], [2])
            m.multi_put([("b",)], [3])
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing_batch()
    assert m.multi_get([("a",), ("b",)]) == [1, None]


def test_rolled_back_table_creation_is_forgotten(store: DuckDBStore) -> None:

    def failing_batch() -> None:
        with store.transaction():
            store.map("fresh").multi_put([("a",)], [1])
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing_batch()
    assert store.tables() == []
    assert store.layout("fresh") is None
    store.map("fresh").multi_put([("a",)], ["now a string"])
    assert store.layout("fresh").value_type == "VARCHAR"


def test_nested_transaction_joins_and_only_outermost_commits(db: Path) -> None:
    store = DuckDBStore(db)
    observer = DuckDBStore(db)  # a second connection to the same database
    m = store.map("n")
    m.multi_put([("a",)], [0])
    with store.transaction() as outer:
        with store.transaction() as inner:
            assert inner is outer
            m.multi_put([("a",)], [1])
        assert observer.map("n").multi_get([("a",)]) == [0]
        assert store.in_transaction
    assert not store.in_transaction
    assert observer.map("n").multi_get([("a",)]) == [1]
    observer.close()
    store.close()


def test_swallowed_inner_failure_rolls_back_outer(store: DuckDBStore) -> None:
    m = store.map("n")
    m.multi_put([("a",)], [0])

    def swallowing_batch() -> None:
        with store.transaction():
            m.multi_put([("a",)], [1])
            try:
                with store.transaction():
                    raise ValueError("inner")
            except ValueError:
                pass

    with pytest.raises(TridentError, match="a nested transaction block failed"):
        swallowing_batch()
    assert m.multi_get([("a",)]) == [0]


def test_commit_batch_in_order_and_already_committed(db: Path) -> None:
    with DuckDBStore(db) as store:
        m = store.map("wc")
        assert store.last_committed("topo") is None
        r1 = commit_batch(store, "topo", 1, lambda tx: m.multi_put([("a",)], [1]))
        assert (r1.applied, r1.previous, r1.txid) == (True, None, 1)
        r2 = commit_batch(store, "topo", 2, lambda tx: m.multi_put([("a",)], [2]))
        assert (r2.applied, r2.previous) == (True, 1)
        again = commit_batch(store, "topo", 1, lambda tx: m.multi_put([("a",)], [99]))
        assert (again.applied, again.previous) == (False, 2)  # already committed
        assert m.multi_get([("a",)]) == [2]
    with DuckDBStore(db) as store:
        assert store.last_committed("topo") == 2
        rows = store.conn.execute(
            "SELECT scope, txid, committed_at IS NOT NULL FROM _trident_commits"
        ).fetchall()
        assert rows == [("topo", 2, True)]


def test_commit_batch_out_of_order_changes_nothing(store: DuckDBStore) -> None:
    m = store.map("wc")
    commit_batch(store, "topo", 1, lambda tx: m.multi_put([("a",)], [1]))
    with pytest.raises(OutOfOrderCommitError, match="refusing to commit txid 3 to 'topo'"):
        commit_batch(store, "topo", 3, lambda tx: m.multi_put([("a",)], [3]))
    assert m.multi_get([("a",)]) == [1]
    assert store.last_committed("topo") == 1


def test_commit_batch_failure_rolls_back_values_and_marker(store: DuckDBStore) -> None:
    m = store.map("wc")
    commit_batch(store, "topo", 1, lambda tx: m.multi_put([("a",)], [1]))

    def apply(tx: object) -> None:
        m.multi_put([("a",), ("b",)], [2, 2])
        tx.mark_committed("other", 9)
        raise RuntimeError("apply failed")

    with pytest.raises(RuntimeError, match="apply failed"):
        commit_batch(store, "topo", 2, apply)
    assert m.multi_get([("a",), ("b",)]) == [1, None]
    assert store.last_committed("topo") == 1
    assert store.last_committed("other") is None


def test_transaction_object_exposes_connection(store: DuckDBStore) -> None:
    with store.transaction() as tx:
        assert tx.conn is store.conn
        tx.mark_committed("s", 4)
        assert tx.last_committed("s") == 4
    with pytest.raises(ConfigError, match="txid must be an integer"), store.transaction() as tx:
        tx.mark_committed("s", "5")
    with pytest.raises(ConfigError, match="non-empty string"):
        store.last_committed("")


def test_closed_store_refuses_work(db: Path) -> None:
    store = DuckDBStore(db)
    store.close()
    store.close()
    with pytest.raises(TridentError, match="is closed"):
        store.last_committed("x")


# -- locking and crashes ----------------------------------------------------------------------


def _child(code: str, tmp_path: Path) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"child exited early with {proc.returncode}"
        assert time.monotonic() < deadline, "child never reached the marker"
        time.sleep(0.02)


HOLDER = """
    import sys, time
    from pathlib import Path
    from trident_assets.backends.duckdb_store import DuckDBStore
    store = DuckDBStore({db!r})
    Path({marker!r}).touch()
    time.sleep({hold})
    store.close()
"""


def test_locked_file_raises_store_locked_error(db: Path, tmp_path: Path) -> None:
    marker = tmp_path / "held"
    proc = _child(HOLDER.format(db=str(db), marker=str(marker), hold=60), tmp_path)
    try:
        _wait_for(marker, proc)
        start = time.monotonic()
        with pytest.raises(StoreLockedError, match="is locked by another process") as info:
            DuckDBStore(db, lock_timeout_s=0.5)
        assert str(db) in str(info.value)
        assert "raise lock_timeout_s" in str(info.value)
        assert time.monotonic() - start >= 0.5
    finally:
        proc.kill()
        proc.wait()


def test_lock_wait_succeeds_when_other_process_releases(db: Path, tmp_path: Path) -> None:
    marker = tmp_path / "held"
    proc = _child(HOLDER.format(db=str(db), marker=str(marker), hold=1.0), tmp_path)
    try:
        _wait_for(marker, proc)
        with DuckDBStore(db, lock_timeout_s=30) as store:
            assert store.tables() == []
    finally:
        proc.wait()


def test_a_short_file_is_opened_once_its_creator_has_written_it(db: Path, tmp_path: Path) -> None:
    """Two processes opening one new state file at once: one may find the file the other
    has just made, empty, before its headers (DuckDB then refuses it as not a database).
    Seen in 4 of 60 pairs of fresh processes calling ``duckdb.connect`` at once."""
    db.touch()  # what the other process has made so far
    made = tmp_path / "made.duckdb"
    DuckDBStore(made).close()
    creator = threading.Timer(0.3, os.replace, (made, db))
    creator.start()
    try:
        with DuckDBStore(db, lock_timeout_s=0) as store:
            assert store.tables() == []
    finally:
        creator.join()


def test_a_file_completed_while_duckdb_read_it_is_opened_again(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The creator finishes between DuckDB reading the empty file and the store looking at
    its size: the file is whole by then, and is opened again rather than refused."""
    db.touch()
    made = tmp_path / "made.duckdb"
    DuckDBStore(made).close()
    real_connect = duckdb.connect
    attempts: list[int] = []

    def connect(*args: Any, **kwargs: Any) -> Any:
        attempts.append(db.stat().st_size)
        try:
            return real_connect(*args, **kwargs)
        finally:
            if len(attempts) == 1:
                os.replace(made, db)  # the creator's last write lands now

    monkeypatch.setattr(duckdb, "connect", connect)
    with DuckDBStore(db, lock_timeout_s=0) as store:
        assert store.tables() == []
    assert attempts[0] == 0
    assert attempts[1] >= HEADER_BYTES
    assert len(attempts) == 2


def test_a_stray_short_file_is_refused_after_the_grace_and_left_alone(db: Path) -> None:
    db.write_bytes(b"\0" * 100)
    start = time.monotonic()
    with pytest.raises(StateLayoutError) as info:
        DuckDBStore(db)
    assert time.monotonic() - start >= CREATION_GRACE_S
    assert str(info.value) == (
        f"{db} is not a DuckDB database file (it was left unchanged): 100 bytes, fewer than "
        f"the {HEADER_BYTES} of a DuckDB file's headers"
    )
    assert db.read_bytes() == b"\0" * 100


CRASHER = """
    import time
    from pathlib import Path
    from trident_assets.backends.duckdb_store import DuckDBStore, DuckDBTransaction
    from trident_assets.core.commit import commit_batch
    from trident_assets.core.values import OpaqueValue

    point = {point!r}
    marker = Path({marker!r})

    def stop_here():
        marker.touch()
        time.sleep(120)

    if point == "after_mark":
        original = DuckDBTransaction.mark_committed
        def mark_then_stop(self, scope, txid):
            original(self, scope, txid)
            stop_here()
        DuckDBTransaction.mark_committed = mark_then_stop

    store = DuckDBStore({db!r})
    m = store.map("wc")

    def apply(tx):
        m.multi_put([("a",), ("b",)], [OpaqueValue(2, 11, 1), OpaqueValue(2, 5)])
        if point == "after_values":
            stop_here()

    commit_batch(store, "topo", 2, apply)
    if point == "after_commit":
        stop_here()
"""


@pytest.mark.parametrize(
    ("point", "committed"),
    [("after_values", False), ("after_mark", False), ("after_commit", True)],
)
def test_sigkill_leaves_old_or_new_state(
    db: Path, tmp_path: Path, point: str, committed: bool
) -> None:
    with DuckDBStore(db) as store:
        commit_batch(
            store, "topo", 1, lambda tx: store.map("wc").multi_put([("a",)], [OpaqueValue(1, 1)])
        )
    marker = tmp_path / "reached"
    proc = _child(CRASHER.format(point=point, marker=str(marker), db=str(db)), tmp_path)
    try:
        _wait_for(marker, proc)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with DuckDBStore(db, lock_timeout_s=10) as store:
        values = store.map("wc").multi_get([("a",), ("b",)])
        if committed:
            assert values == [OpaqueValue(2, 11, 1), OpaqueValue(2, 5)]
            assert store.last_committed("topo") == 2
        else:
            assert values == [OpaqueValue(1, 1), None]
            assert store.last_committed("topo") == 1


def test_declaration_is_checked_when_another_writer_created_the_table(store: DuckDBStore) -> None:
    declared = store.map("late", kind="opaque")
    store.map("late").multi_put([("a",)], [TransactionalValue(1, 1)])
    with pytest.raises(StateLayoutError, match="declared kind='opaque' does not match"):
        declared.multi_get([("a",)])
    with pytest.raises(StateLayoutError, match="declared kind='opaque' does not match"):
        declared.multi_put([("a",)], [OpaqueValue(1, 1)])

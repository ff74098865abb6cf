"""``trident state drop`` and the ``orphaned`` column of ``trident state list``.

The home is :func:`~trident_assets_tests.test_cli.make_home`'s (``word_count`` committed txids
1..3 into the states ``word_counts`` and ``seen``; no Spark) with contracts, per-txid tables,
bookkeeping rows, spout ranges and a replica added. The built-in examples
(``trident_assets.examples.topologies``) declare ``word_count.word_counts`` but not ``seen``.
Commands run as child processes in a clean environment (``.venv/bin/trident``).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from trident_assets.backends.duckdb_spout_meta import DuckDBSpoutMetaStore
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.backends.state_contracts import (
    check_contracts,
    stored_contracts,
    write_contracts,
)
from trident_assets.backends.state_drop import drop_state, plan_drop
from trident_assets.core.contracts import StateContract
from trident_assets.errors import ConfigError, StateContractError
from trident_assets.names import JOIN_META_TABLE
from trident_assets.spouts.ranges import PartitionRange
from trident_assets_tests.children import clean_env, run_trident
from trident_assets_tests.conftest import OpenStore
from trident_assets_tests.test_cli import make_home


def _contract(state: str, **more: Any) -> StateContract:
    return StateContract(
        topology="word_count",
        state=state,
        table=f"word_count__{state}",
        state_type="opaque",
        key_fields=("word",),
        aggregator="trident_assets.core.aggregators.Count",
        spouts=("sentences",),
        **more,
    )


CONTRACTS = [_contract("seen"), _contract("word_counts")]
ALL_OBJECTS = [
    "_trident_commits",
    "_trident_compactions",
    "_trident_dead_letters",
    "_trident_log_word_count__seen",
    "_trident_log_word_count__word_counts",
    "_trident_maps",
    "_trident_seq_word_count__seen",
    "_trident_seq_word_count__word_counts",
    "_trident_spout_ranges",
    "_trident_state_contracts",
    "_trident_totals",
    "word_count__out_words",
    "word_count__seen",
    "word_count__seen__new_values",
    "word_count__seen__partials",
    "word_count__word_counts",
    "word_count__word_counts__new_values",
]
SEEN_OBJECTS = [
    "word_count__seen",
    "_trident_log_word_count__seen",
    "_trident_seq_word_count__seen",
    "word_count__seen__new_values",
    "word_count__seen__partials",
]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """make_home's home, plus what a real run leaves beside the states (and a replica)."""
    home = make_home(tmp_path)
    replica = Replica(home / "replica")
    with DuckDBStore(home / "state.duckdb") as store:
        write_contracts(store, CONTRACTS)
        for table in ("word_count__seen", "word_count__word_counts"):
            store.execute(f'CREATE TABLE "{table}__new_values" (txid BIGINT, word VARCHAR)')
            store.execute(f"INSERT INTO \"{table}__new_values\" VALUES (3, 'cow')")
        store.execute('CREATE TABLE "word_count__seen__partials" (txid BIGINT, word VARCHAR)')
        store.execute(
            'CREATE TABLE "_trident_totals" (table_name VARCHAR PRIMARY KEY, txid BIGINT, '
            "total DOUBLE)"
        )
        store.execute(
            "INSERT INTO _trident_totals VALUES ('word_count__seen', 3, 3), "
            "('word_count__word_counts', 3, 11)"
        )
        assert store.compact("word_count__seen") == {"word_count__seen": 2}
        store.execute(  # the map states' compaction bounds (word_counts stays readable)
            "CREATE TABLE _trident_compactions (table_name VARCHAR PRIMARY KEY, "
            "oldest_txid BIGINT NOT NULL, compacted_at TIMESTAMP)"
        )
        store.execute(
            "INSERT INTO _trident_compactions VALUES ('word_count__seen', 3, NULL), "
            "('word_count__word_counts', 1, NULL)"
        )
        meta = DuckDBSpoutMetaStore(store)
        meta.record("word_count", "sentences", 3, [PartitionRange("0", 4, 9, "d")], True)
        for txid in (1, 2, 3):
            replica.publish(
                store, "word_count", txid, ["word_count__seen", "word_count__word_counts"], []
            )
    return home


def _objects(store: DuckDBStore) -> list[str]:
    rows = store.fetch_rows(
        "SELECT table_name FROM duckdb_tables() UNION ALL SELECT view_name FROM duckdb_views() "
        "WHERE NOT internal UNION ALL SELECT sequence_name FROM duckdb_sequences() ORDER BY 1"
    )
    return [r[0] for r in rows]


def _snapshot(home: Path) -> dict[str, Any]:
    """Everything a drop of `seen` must leave as it was."""
    with DuckDBStore(home / "state.duckdb", read_only=True) as store:
        return {
            "commits": store.fetch_rows("SELECT scope, txid FROM _trident_commits"),
            "ranges": store.fetch_rows(
                "SELECT * EXCLUDE (topic_id) FROM _trident_spout_ranges ORDER BY ALL"
            ),
            "counts": store.scan("word_count__word_counts").to_pylist(),
            "counts_at_1": store.scan("word_count__word_counts", as_of=1).to_pylist(),
            "new_values": store.fetch_rows('SELECT * FROM "word_count__word_counts__new_values"'),
            "outputs": store.fetch_rows('SELECT * FROM "word_count__out_words" ORDER BY txid'),
            "dead": store.fetch_rows("SELECT count(*) FROM _trident_dead_letters"),
            "counts_rows": store.fetch_rows(
                "SELECT 'compaction', oldest_txid FROM _trident_compactions WHERE table_name = "
                "'word_count__word_counts' UNION ALL SELECT 'total', total FROM _trident_totals "
                "WHERE table_name = 'word_count__word_counts'"
            ),
        }


def trident(
    tmp_path: Path, *args: str, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    return run_trident(tmp_path, *args, env=clean_env(tmp_path, **env), stdin=stdin)


def test_drop_removes_the_state_and_nothing_else(home: Path, tmp_path: Path) -> None:
    with DuckDBStore(home / "state.duckdb", read_only=True) as store:
        assert _objects(store) == ALL_OBJECTS
    before = _snapshot(home)
    db, replica = home / "state.duckdb", home / "replica"
    assert sorted(p.name for p in replica.iterdir()) == [
        "_dead_letters",
        "_scopes",
        "word_count__seen",
        "word_count__word_counts",
    ]
    published = (
        Replica(replica)
        .read_map("word_count__word_counts", scope="word_count", as_of=2)
        .to_pylist()
    )

    done = trident(tmp_path, "state", "drop", "word_count", "seen", "--yes", "--home", str(home))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        f"dropped state seen of topology word_count from {db}",
        "  tables: word_count__seen, _trident_log_word_count__seen, "
        "_trident_seq_word_count__seen, word_count__seen__new_values, word_count__seen__partials",
        "  rows in: _trident_maps, _trident_compactions, _trident_totals, _trident_state_contracts",
        f"  replica: removed {replica / 'word_count__seen'}",
    ]
    with DuckDBStore(db, read_only=True) as store:
        assert _objects(store) == [o for o in ALL_OBJECTS if o not in SEEN_OBJECTS]
        assert store.tables() == ["word_count__word_counts"]
        assert stored_contracts(store) == [_contract("word_counts")]
        assert store.fetch_rows("SELECT table_name FROM _trident_compactions") == [
            ("word_count__word_counts",)
        ]
        assert store.fetch_rows("SELECT table_name FROM _trident_totals") == [
            ("word_count__word_counts",)
        ]
    assert _snapshot(home) == before
    assert sorted(p.name for p in replica.iterdir()) == [
        "_dead_letters",
        "_scopes",
        "word_count__word_counts",
    ]
    assert Replica(replica).latest("word_count") == 3
    assert (
        Replica(replica)
        .read_map("word_count__word_counts", scope="word_count", as_of=2)
        .to_pylist()
        == published
    )

    listed = trident(tmp_path, "state", "list", "--format", "csv", "--home", str(home))
    assert (listed.returncode, listed.stdout, listed.stderr) == (
        0,
        "topology,state,kind,key_columns,value_type,keys,last_txid,orphaned\n"
        "word_count,word_counts,opaque,word,BIGINT,3,3,no\n",
        "",
    )
    again = trident(tmp_path, "state", "drop", "word_count", "seen", "--yes", "--home", str(home))
    assert (again.returncode, again.stdout, again.stderr) == (
        1,
        "",
        "error: topology 'word_count' has no state 'seen'; its states: word_counts\n",
    )


def test_a_state_declared_again_after_a_drop_is_a_new_state(home: Path) -> None:
    with DuckDBStore(home / "state.duckdb") as store:
        drop_state(store, "word_count", "seen")
        with pytest.raises(
            StateContractError,
            match=r"^state 'seen' is new in topology 'word_count', which has committed txids "
            r"1\.\.3: ",
        ):
            check_contracts(store, "word_count", CONTRACTS, 3)


def test_confirmation_is_asked_and_no_answer_drops_nothing(home: Path, tmp_path: Path) -> None:
    db = home / "state.duckdb"
    prompt = (
        f"This drops state seen of topology word_count in {db}: tables word_count__seen, "
        "_trident_log_word_count__seen, _trident_seq_word_count__seen, "
        "word_count__seen__new_values, word_count__seen__partials; rows in _trident_maps, "
        "_trident_compactions, _trident_totals, _trident_state_contracts; replica copies: "
        f"{home / 'replica' / 'word_count__seen'}.\n"
        "Its values cannot be recovered (`trident state backup` keeps a copy).\n"
        "Drop it? [y/N]: "
    )
    refused = "error: not confirmed: nothing was dropped (pass --yes to drop without asking)\n"
    for answer in ("", "n\n"):
        done = trident(
            tmp_path, "state", "drop", "word_count", "seen", stdin=answer, TRIDENT_HOME=str(home)
        )
        assert (done.returncode, done.stdout, done.stderr) == (
            1,
            prompt + ("\n" if answer == "" else ""),
            refused,
        )
    with DuckDBStore(db, read_only=True) as store:
        assert _objects(store) == ALL_OBJECTS
        assert stored_contracts(store) == CONTRACTS
    done = trident(
        tmp_path, "state", "drop", "word_count", "seen", stdin="y\n", TRIDENT_HOME=str(home)
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith(prompt + f"dropped state seen of topology word_count from {db}\n")


def test_refusals_name_what_exists_and_change_nothing(home: Path, tmp_path: Path) -> None:
    (tmp_path / "no_topologies.py").write_text("topologies = []\n")
    cases = [
        (
            ["word_count", "word_counts"],
            "error: state 'word_counts' of topology 'word_count' is still declared in module "
            "trident_assets.examples.topologies: its next run would create it again, as a new "
            "state. Nothing was dropped. Remove the state from the topology's declaration first "
            "(or pass --module with the code location that no longer declares it)\n",
        ),
        (
            ["wordcount", "seen"],
            f"error: no topology 'wordcount' in state store {home / 'state.duckdb'}; "
            "topologies: word_count\n",
        ),
        (
            ["word_count", "sen"],
            "error: topology 'word_count' has no state 'sen'; its states: seen, word_counts\n",
        ),
        (
            ["word_count", "bad-name"],
            "error: invalid state name 'bad-name': use 1-63 letters, digits or underscores, "
            "starting with a letter or underscore (e.g. 'word_count')\n",
        ),
        (
            ["word_count", "seen", "--module", "no_such_module"],
            f"error: --module 'no_such_module': no such module importable from "
            f"{tmp_path.resolve()} (run trident in the directory that holds it, or install it)\n",
        ),
    ]
    for args, error in cases:
        done = trident(tmp_path, "state", "drop", *args, "--yes", "--home", str(home))
        assert (done.returncode, done.stdout, done.stderr) == (1, "", error), args
    missing = tmp_path / "nowhere"
    done = trident(tmp_path, "state", "drop", "word_count", "seen", "--yes", "--home", str(missing))
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"error: trident home {missing} does not exist; pass --home DIR or set TRIDENT_HOME "
        "(`make demo` fills the default home .trident)\n",
    )
    with DuckDBStore(home / "state.duckdb", read_only=True) as store:
        assert _objects(store) == ALL_OBJECTS
        assert stored_contracts(store) == CONTRACTS
    # a code location that no longer declares the state: the drop goes ahead
    done = trident(
        tmp_path,
        "state", "drop", "word_count", "word_counts", "--yes", "--module", "no_topologies",
        "--home", str(home),
        PYTHONPATH=str(tmp_path),
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    with DuckDBStore(home / "state.duckdb", read_only=True) as store:
        assert store.tables() == ["word_count__seen"]
        assert stored_contracts(store) == [_contract("seen")]


def test_state_list_marks_orphaned_states(home: Path, tmp_path: Path) -> None:
    (tmp_path / "no_topologies.py").write_text("topologies = []\n")
    header = "topology,state,kind,key_columns,value_type,keys,last_txid,orphaned\n"
    done = trident(tmp_path, "state", "list", "--format", "csv", "--home", str(home))
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        header + "word_count,seen,plain,word,BOOLEAN,3,3,yes\n"
        "word_count,word_counts,opaque,word,BIGINT,3,3,no\n",
        "orphaned (declared by no topology in module trident_assets.examples.topologies): "
        "word_count.seen. Remove one with `trident state drop TOPOLOGY STATE`, or pass "
        "--module with the module that declares it\n",
    )
    # a topology no longer declared at all: every state of it is orphaned
    done = trident(
        tmp_path, "state", "list", "--format", "json", "--home", str(home),
        TRIDENT_MODULE="no_topologies", PYTHONPATH=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0
    assert [(r["state"], r["orphaned"]) for r in json.loads(done.stdout)] == [
        ("seen", "yes"),
        ("word_counts", "yes"),
    ]
    assert done.stderr == (
        "orphaned (declared by no topology in module no_topologies): word_count.seen, "
        "word_count.word_counts. Remove one with `trident state drop TOPOLOGY STATE`, or pass "
        "--module with the module that declares it\n"
    )
    # several code locations: a state declared in any of them is not orphaned
    done = trident(
        tmp_path, "state", "list", "--format", "csv", "--home", str(home),
        "--module", "no_topologies", "--module", "trident_assets.definitions",
        PYTHONPATH=str(tmp_path),
    )  # fmt: skip
    assert (done.returncode, done.stdout.splitlines()[1:], done.stderr) == (
        0,
        [
            "word_count,seen,plain,word,BOOLEAN,3,3,yes",
            "word_count,word_counts,opaque,word,BIGINT,3,3,no",
        ],
        "orphaned (declared by no topology in modules no_topologies, trident_assets.definitions): "
        "word_count.seen. Remove one with `trident state drop TOPOLOGY STATE`, or pass "
        "--module with the module that declares it\n",
    )


def test_a_join_state_and_a_contract_only_state(home: Path, tmp_path: Path) -> None:
    """A single join's state (a pending table, not a map) and a contract left without tables."""
    db = home / "state.duckdb"
    with DuckDBStore(db) as store:
        store.execute(
            'CREATE TABLE "word_count__pairs" (key_word VARCHAR, arrived_txid BIGINT, '
            "arrived_ts DOUBLE)"
        )
        store.execute("INSERT INTO \"word_count__pairs\" VALUES ('the', 2, NULL)")
        store.execute(
            f"CREATE TABLE {JOIN_META_TABLE} (table_name VARCHAR PRIMARY KEY, last_txid BIGINT NOT "
            "NULL, watermark DOUBLE, pending BIGINT NOT NULL)"
        )
        store.execute(f"INSERT INTO {JOIN_META_TABLE} VALUES ('word_count__pairs', 3, NULL, 1)")
        write_contracts(store, [_contract("pairs"), _contract("gone")])
    done = trident(tmp_path, "state", "list", "--format", "csv", "--home", str(home))
    assert (done.returncode, done.stdout) == (
        0,
        "topology,state,kind,key_columns,value_type,keys,last_txid,orphaned\n"
        "word_count,gone,contract only,word,,,3,yes\n"
        "word_count,pairs,single_join,word,,1,3,yes\n"
        "word_count,seen,plain,word,BOOLEAN,3,3,yes\n"
        "word_count,word_counts,opaque,word,BIGINT,3,3,no\n",
    )
    with DuckDBStore(db) as store:
        plan = plan_drop(store, "word_count", "pairs")
        assert (plan.tables, plan.rows, plan.replica_dirs) == (
            ("word_count__pairs",),
            (JOIN_META_TABLE, "_trident_state_contracts"),
            (),
        )
        assert drop_state(store, "word_count", "pairs") == plan
        assert drop_state(store, "word_count", "gone").tables == ()
        assert not store.has_table("word_count__pairs")
        assert store.fetch_rows(f"SELECT count(*) FROM {JOIN_META_TABLE}") == [(0,)]
        assert stored_contracts(store) == CONTRACTS
        with pytest.raises(ConfigError) as refused:
            drop_state(store, "word_count", "pairs")
        assert str(refused.value) == (
            "topology 'word_count' has no state 'pairs'; its states: seen, word_counts"
        )


def _build(store: Any) -> None:
    """Two map states of ``wc`` committed at txids 1 and 2, with contracts and side rows."""
    from trident_assets.backends.map_layout import MapLayout
    from trident_assets.core.values import OpaqueValue

    for state in ("counts", "seen"):
        store.ensure_map(MapLayout(f"wc__{state}", "opaque", ("word",), ("VARCHAR",), "BIGINT"))
    for txid in (1, 2):
        with store.transaction() as tx:
            for state in ("counts", "seen"):
                store.map(f"wc__{state}").multi_put(
                    [("a",), ("b",)], [OpaqueValue(txid, txid * 10, None)] * 2
                )
            tx.mark_committed("wc", txid)
    with store.transaction():
        write_contracts(
            store, [replace(_contract(s), topology="wc", table=f"wc__{s}") for s in CONTRACT_STATES]
        )
        store.execute('CREATE TABLE "wc__seen__new_values" (txid BIGINT, word VARCHAR)')
        store.execute(
            'CREATE TABLE "_trident_totals" (table_name VARCHAR PRIMARY KEY, txid BIGINT, '
            "total DOUBLE PRECISION)"
        )
        store.execute(
            "INSERT INTO _trident_totals VALUES ('wc__seen', 2, 40), ('wc__counts', 2, 40)"
        )
    assert store.compact() == {"wc__counts": 2, "wc__seen": 2}


CONTRACT_STATES = ("counts", "seen")


def _sequences(store: Any) -> list[str]:
    sql = (
        "SELECT sequence_name FROM information_schema.sequences ORDER BY 1"
        if store.dialect.is_postgres
        else "SELECT sequence_name FROM duckdb_sequences() ORDER BY 1"
    )
    return [r[0] for r in store.fetch_rows(sql)]


SEEN = ["wc__seen", "_trident_log_wc__seen", "wc__seen__new_values"]


def _state_of(store: Any) -> dict[str, Any]:
    return {
        "maps": store.tables(),
        "tables": [t for t in SEEN if store.has_table(t)],
        "sequences": _sequences(store),
        "contracts": [c.state for c in stored_contracts(store)],
        "side_rows": store.fetch_rows(
            "SELECT table_name FROM _trident_compactions UNION ALL "
            "SELECT table_name FROM _trident_totals ORDER BY 1"
        ),
        "commits": store.scopes(),
        "counts": store.scan("wc__counts", as_of=2).to_pylist(),
    }


def test_drop_in_each_store_is_one_transaction(
    open_store: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    _build(store)
    before = _state_of(store)
    assert before["tables"] == SEEN
    assert before["sequences"] == ["_trident_seq_wc__counts", "_trident_seq_wc__seen"]
    assert before["contracts"] == ["counts", "seen"]
    assert before["side_rows"] == [("wc__counts",), ("wc__counts",), ("wc__seen",), ("wc__seen",)]

    # a failure at the last statement (the contract row) rolls every earlier drop back
    real = store.execute

    def failing(sql: str, params: Any = ()) -> int:
        if sql.startswith("DELETE FROM _trident_state_contracts"):
            raise RuntimeError("disk gone")
        return real(sql, params)

    monkeypatch.setattr(store, "execute", failing)
    with pytest.raises(RuntimeError, match=r"^disk gone$"):
        drop_state(store, "wc", "seen")
    monkeypatch.undo()
    store.forget_layouts()
    assert _state_of(store) == before

    store.close()  # the command takes the store's write lock (DuckDB)
    home = tmp_path / "home"
    database = str(open_store.location)  # type: ignore[attr-defined]
    (tmp_path / "no_topologies.py").write_text("topologies = []\n")  # imported from the cwd
    done = trident(
        tmp_path, "state", "drop", "wc", "seen", "--yes", "--database", database,
        "--home", str(home), "--module", "no_topologies",
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[1:] == [
        "  tables: wc__seen, _trident_log_wc__seen, _trident_seq_wc__seen, wc__seen__new_values",
        "  rows in: _trident_maps, _trident_compactions, _trident_totals, _trident_state_contracts",
    ]
    store = open_store()
    assert _state_of(store) == {
        **before,
        "maps": ["wc__counts"],
        "tables": [],
        "sequences": ["_trident_seq_wc__counts"],
        "contracts": ["counts"],
        "side_rows": [("wc__counts",), ("wc__counts",)],
    }

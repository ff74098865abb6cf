"""The ``trident`` command: state, outputs, dead letters, error style, homes, the UI and the demo.

Stores are built with :class:`DuckDBStore` directly (no Spark), so the outputs are exact.
Entry points also run as child processes with a clean environment (``.venv/bin/trident``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.cli import app
from trident_assets.core.values import OpaqueValue
from trident_assets_tests.children import TRIDENT, clean_env, run_python, run_trident
from trident_assets_tests.conftest import DemoRun

DEAD_LETTERS_DDL = (
    "CREATE TABLE _trident_dead_letters (topology VARCHAR NOT NULL, spout VARCHAR NOT NULL, "
    'txid BIGINT NOT NULL, topic VARCHAR, partition INTEGER, "offset" BIGINT, '
    "reason VARCHAR NOT NULL, value BLOB)"
)


def _commit(store: DuckDBStore, txid: int, counts: dict[str, tuple[int, int | None]]) -> None:
    with store.transaction() as tx:
        counts_map = store.map("word_count__word_counts")
        keys = [(w,) for w in counts]
        counts_map.multi_put(keys, [OpaqueValue(txid, c, p) for c, p in counts.values()])
        store.map("word_count__seen").multi_put(keys, [True] * len(keys))
        tx.conn.execute(
            'CREATE TABLE IF NOT EXISTS "word_count__out_words" (txid BIGINT, "sum" BIGINT)'
        )
        tx.conn.execute('INSERT INTO "word_count__out_words" VALUES (?, ?)', [txid, 10 * txid])
        tx.mark_committed("word_count", txid)


def make_home(root: Path) -> Path:
    """A home whose word_count committed txids 1..3 (the: 2, 5; cow: 1, 5; moon: 1)."""
    home = root / "home"
    with DuckDBStore(home / "state.duckdb") as store:
        store.ensure_map(
            _layout("word_count__word_counts", "opaque", "BIGINT"),
        )
        store.ensure_map(_layout("word_count__seen", "plain", "BOOLEAN"))
        _commit(store, 1, {"the": (2, None), "cow": (1, None)})
        _commit(store, 2, {"the": (5, 2), "moon": (1, None)})
        _commit(store, 3, {"cow": (5, 1)})
        store.conn.execute(DEAD_LETTERS_DDL)
        store.conn.execute(
            "INSERT INTO _trident_dead_letters VALUES "
            "('word_count', 'sentences', 2, 'sentences', 1, 7, 'invalid UTF-8', NULL), "
            "('word_count', 'sentences', 3, 'sentences', 0, 9, 'invalid UTF-8', NULL), "
            "('other', 'lines', 1, 'lines', 0, 0, 'not JSON', NULL)"
        )
    return home


def _layout(table: str, kind: str, value_type: str):  # type: ignore[no-untyped-def]
    from trident_assets.backends.map_layout import MapLayout

    return MapLayout(table, kind, ("word",), ("VARCHAR",), value_type)  # type: ignore[arg-type]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return make_home(tmp_path)


def run(*args: str, home: Path | None = None) -> tuple[int, str, str]:
    extra = ["--home", str(home)] if home is not None else []
    result = CliRunner().invoke(app, [*args, *extra])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


# -- state -----------------------------------------------------------------------------------------


def test_state_list_in_every_format(home: Path) -> None:
    code, out, err = run("state", "list", home=home)
    # the default module (the built-in examples) declares word_count.word_counts, not seen
    assert (code, err) == (
        0,
        "orphaned (declared by no topology in module trident_assets.examples.topologies): "
        "word_count.seen. Remove one with `trident state drop TOPOLOGY STATE`, or pass "
        "--module with the module that declares it\n",
    )
    assert lines(out) == [
        f"states in {home / 'state.duckdb'}",
        "┏━━━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━┓",
        "┃ topology   ┃ state       ┃ kind   ┃ key_columns ┃ value_type ┃ keys ┃ last_txid ┃ orphaned ┃",  # noqa: E501
        "┡━━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━┩",
        "│ word_count │ seen        │ plain  │ word        │ BOOLEAN    │    3 │         3 │ yes      │",  # noqa: E501
        "│ word_count │ word_counts │ opaque │ word        │ BIGINT     │    3 │         3 │ no       │",  # noqa: E501
        "└────────────┴─────────────┴────────┴─────────────┴────────────┴──────┴───────────┴──────────┘",
    ]  # fmt: skip
    code, out, _ = run("state", "list", "--format", "json", home=home)
    assert code == 0
    assert json.loads(out) == [
        {
            "topology": "word_count",
            "state": "seen",
            "kind": "plain",
            "key_columns": "word",
            "value_type": "BOOLEAN",
            "keys": 3,
            "last_txid": 3,
            "orphaned": "yes",
        },
        {
            "topology": "word_count",
            "state": "word_counts",
            "kind": "opaque",
            "key_columns": "word",
            "value_type": "BIGINT",
            "keys": 3,
            "last_txid": 3,
            "orphaned": "no",
        },
    ]
    code, out, _ = run("state", "list", "--format", "csv", home=home)
    assert (code, out) == (
        0,
        "topology,state,kind,key_columns,value_type,keys,last_txid,orphaned\n"
        "word_count,seen,plain,word,BOOLEAN,3,3,yes\n"
        "word_count,word_counts,opaque,word,BIGINT,3,3,no\n",
    )


def test_state_scan_now_and_as_of_each_txid(home: Path) -> None:
    code, out, err = run("state", "scan", "word_count", "word_counts", home=home)
    assert (code, err) == (0, "")
    assert lines(out) == [
        "word_count.word_counts: 3 keys, last committed txid 3",
        "┏━━━━━━┳━━━━━━━┓",
        "┃ word ┃ value ┃",
        "┡━━━━━━╇━━━━━━━┩",
        "│ cow  │     5 │",
        "│ the  │     5 │",
        "│ moon │     1 │",
        "└──────┴───────┘",
    ]
    as_of = {
        txid: run("state", "scan", "word_count", "word_counts", "--txid", str(txid),
                  "--format", "csv", home=home)[1]
        for txid in (1, 2, 3)
    }  # fmt: skip
    assert as_of == {
        1: "word,value\nthe,2\ncow,1\n",
        2: "word,value\nthe,5\ncow,1\nmoon,1\n",
        3: "word,value\ncow,5\nthe,5\nmoon,1\n",
    }
    code, out, _ = run(
        "state", "scan", "word_count", "word_counts", "--txid", "1", "--limit", "1", home=home
    )
    assert lines(out)[0] == "word_count.word_counts: 2 keys, as of txid 1 (largest 1 shown)"
    code, out, _ = run(
        "state", "scan", "word_count", "word_counts", "--txid", "2", "--format", "json", home=home
    )
    assert json.loads(out) == [
        {"word": "the", "value": 5},
        {"word": "cow", "value": 1},
        {"word": "moon", "value": 1},
    ]


def test_state_get_now_as_of_and_missing(home: Path) -> None:
    code, out, _ = run(
        "state", "get", "word_count", "word_counts", "the", "--format", "json", home=home
    )
    assert (code, json.loads(out)) == (0, [{"word": "the", "value": 5}])
    code, out, _ = run(
        "state", "get", "word_count", "word_counts", "the", "--txid", "1", "--format", "csv",
        home=home,
    )  # fmt: skip
    assert (code, out) == (0, "word,value\nthe,2\n")
    assert run("state", "get", "word_count", "word_counts", "moon", "--txid", "1", home=home) == (
        1,
        "",
        "error: key 'moon' is not in word_count.word_counts as of txid 1\n",
    )
    assert run("state", "get", "word_count", "word_counts", "a", "b", home=home) == (
        1,
        "",
        "error: state 'word_counts' of 'word_count' has 1 key column(s) (word); "
        "got 2 value(s): ['a', 'b']\n",
    )


def test_as_of_reads_after_compaction_name_the_oldest_readable_txid(home: Path) -> None:
    with DuckDBStore(home / "state.duckdb") as store:
        # the: txids 1, 2 and cow: 1, 3 lose their older versions; the newest kept is txid 3
        assert store.compact("word_count__word_counts") == {"word_count__word_counts": 2}
        assert store.oldest_readable_txid("word_count__word_counts") == 3
    for txid in ("1", "2"):
        assert run("state", "scan", "word_count", "word_counts", "--txid", txid, home=home) == (
            1,
            "",
            f"error: state 'word_counts' of 'word_count' cannot be read as of txid {txid}: "
            "compaction removed the versions it needs; the oldest txid that can still be "
            "read is 3\n",
        )
    code, out, _ = run(
        "state", "scan", "word_count", "word_counts", "--txid", "3", "--format", "csv", home=home
    )
    assert (code, out) == (0, "word,value\ncow,5\nthe,5\nmoon,1\n")


def test_store_as_of_bound_only_counts_keys_that_lost_versions(tmp_path: Path) -> None:
    from trident_assets.errors import HistoryUnavailableError

    with DuckDBStore(tmp_path / "s.duckdb") as store:
        counts = store.map("t__c", key_columns=["w"], key_types=["VARCHAR"],
                           value_type="BIGINT", kind="opaque")  # fmt: skip
        counts.multi_put([("a",)], [OpaqueValue(1, 1, None)])
        counts.multi_put([("a",)], [OpaqueValue(2, 2, 1)])
        counts.multi_put([("b",)], [OpaqueValue(5, 9, None)])  # one version: nothing lost
        store.compact()
        assert store.oldest_readable_txid("t__c") == 2
        assert store.scan("t__c", as_of=2).to_pylist() == [{"w": "a", "value": 2}]
        with pytest.raises(HistoryUnavailableError) as info:
            store.scan("t__c", as_of=1)
        assert str(info.value) == (
            "map 't__c' cannot be read as of txid 1: compaction removed the versions it "
            "needs; the oldest txid that can still be read is 2"
        )
        counts.multi_put([("b",)], [OpaqueValue(6, 10, 9)])
        store.compact()  # b lost txid 5: reads before 6 are refused now
        assert store.oldest_readable_txid("t__c") == 6
        counts.multi_put([("c",)], [OpaqueValue(7, 1, None)])
        counts.multi_put([("c",)], [OpaqueValue(8, 2, 1)])
        counts.multi_put([("a",)], [OpaqueValue(9, 3, 2)])
        store.compact()  # a's newest kept is 9: the bound only grows
        assert store.oldest_readable_txid("t__c") == 9


def test_as_of_refusals_speak_topology_and_state(home: Path) -> None:
    assert run("state", "scan", "word_count", "word_counts", "--txid", "4", home=home) == (
        1,
        "",
        "error: txid 4 of topology 'word_count' is not committed: the last committed txid is 3\n",
    )
    assert run("state", "scan", "word_count", "seen", "--txid", "1", home=home) == (
        1,
        "",
        "error: state 'seen' of 'word_count' is non-transactional: it stores no txids, so it "
        "cannot be read as of a txid (drop --txid)\n",
    )
    assert run("state", "scan", "word_count", "wordcounts", home=home) == (
        1,
        "",
        "error: topology 'word_count' has no state 'wordcounts'; its states: seen, word_counts\n",
    )
    assert run("state", "get", "wordcount", "word_counts", "the", home=home) == (
        1,
        "",
        f"error: no topology 'wordcount' in state file {home / 'state.duckdb'}; "
        "topologies: word_count\n",
    )
    code, _, err = run("state", "scan", "word_count", "x; drop", home=home)
    assert (code, err.startswith("error: invalid state name 'x; drop'")) == (1, True)


# -- outputs and dead letters ----------------------------------------------------------------------


def test_outputs_per_txid(home: Path) -> None:
    code, out, _ = run("outputs", "word_count", "words", home=home)
    assert (code, lines(out)) == (
        0,
        [
            "word_count.words: 3 rows, txids 1..3",
            "┏━━━━━━┳━━━━━┓",
            "┃ txid ┃ sum ┃",
            "┡━━━━━━╇━━━━━┩",
            "│    1 │  10 │",
            "│    2 │  20 │",
            "│    3 │  30 │",
            "└──────┴─────┘",
        ],
    )
    code, out, _ = run("outputs", "word_count", "words", "--txid", "2", "--format", "json",
                       home=home)  # fmt: skip
    assert (code, json.loads(out)) == (0, [{"txid": 2, "sum": 20}])
    with DuckDBStore(home / "state.duckdb") as store:
        store.conn.execute('DELETE FROM "word_count__out_words" WHERE txid = 1')
    assert run("outputs", "word_count", "words", "--txid", "1", home=home) == (
        1,
        "",
        "error: output 'words' of 'word_count' keeps the rows of txids 2..3 (older txids are "
        "dropped as batches commit); txid 1 is gone\n",
    )
    assert run("outputs", "word_count", "words", "--txid", "9", home=home)[2] == (
        "error: txid 9 of topology 'word_count' is not committed: the last committed txid is 3\n"
    )
    assert run("outputs", "word_count", "counts", home=home)[2] == (
        "error: topology 'word_count' has no output 'counts' (or no batch produced it yet); "
        "its outputs: words\n"
    )


def test_dead_letters_latest_first(home: Path) -> None:
    code, out, _ = run("dead-letters", "--format", "csv", home=home)
    assert (code, out) == (
        0,
        "topology,txid,spout,topic,partition,offset,reason\n"
        "word_count,3,sentences,sentences,0,9,invalid UTF-8\n"
        "word_count,2,sentences,sentences,1,7,invalid UTF-8\n"
        "other,1,lines,lines,0,0,not JSON\n",
    )
    code, out, _ = run("dead-letters", "word_count", "-n", "1", home=home)
    assert (code, lines(out)[0]) == (0, "2 dead letters of word_count (latest 1 shown)")
    assert "│ word_count │    3 │ sentences │ sentences │         0 │      9 │ invalid" in out
    assert run("dead-letters", "nope", home=home)[2] == (
        f"error: no topology 'nope' in state file {home / 'state.duckdb'}; topologies: word_count\n"
    )


# -- homes, foreign files, locks, usage ------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["log", "topics"],
        ["log", "offsets", "t"],
        ["log", "tail", "t"],
        ["log", "add-partitions", "t", "--total", "2"],
        ["state", "list"],
        ["state", "scan", "word_count", "word_counts"],
        ["state", "get", "word_count", "word_counts", "the"],
        ["outputs", "word_count", "words"],
        ["dead-letters"],
        ["ui"],
    ],
)
def test_a_missing_home_is_an_error_and_is_not_created(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "nonexistent"
    assert run(*args, home=missing) == (
        1,
        "",
        f"error: trident home {missing} does not exist; pass --home DIR or set TRIDENT_HOME "
        "(`make demo` fills the default home .trident)\n",
    )
    assert not missing.exists()


def test_a_home_without_state_or_log(tmp_path: Path) -> None:
    assert run("state", "list", home=tmp_path) == (
        1,
        "",
        f"error: no state file {tmp_path / 'state.duckdb'}: nothing has committed in trident "
        f"home {tmp_path} yet; pass --home DIR or --database FILE\n",
    )
    assert run("log", "topics", home=tmp_path) == (
        1,
        "",
        f"error: trident home {tmp_path} has no log; pass --home DIR or set TRIDENT_HOME\n",
    )
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_duckdb_is_named_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "state.duckdb").write_bytes(b"not a database\n")
    assert run("state", "list", home=tmp_path) == (
        1,
        "",
        f"error: {tmp_path / 'state.duckdb'} is not a DuckDB database file (it was left "
        "unchanged): 15 bytes, fewer than the 12288 of a DuckDB file's headers\n",
    )
    assert (tmp_path / "state.duckdb").read_bytes() == b"not a database\n"
    import duckdb

    duckdb.connect(str(tmp_path / "other.duckdb")).close()  # a database, but not a store
    code, _, err = run("state", "list", "--database", str(tmp_path / "other.duckdb"))
    assert (code, err) == (
        1,
        f"error: {tmp_path / 'other.duckdb'} is a DuckDB database but not a trident state store\n",
    )


def test_usage_errors_exit_2(home: Path) -> None:
    assert run("state", "scan", "word_count", "word_counts", "--format", "xml", home=home)[0] == 2
    assert run("state", "scan", "word_count", "word_counts", "--txid", "0", home=home)[0] == 2
    assert run("state", "get", "word_count", home=home)[0] == 2  # no STATE
    assert run("nope")[0] == 2


_HOLD = """
import sys, time
from trident_assets.backends.duckdb_store import DuckDBStore
store = DuckDBStore(sys.argv[1])
print("held", flush=True)
sys.stdin.read()
"""


def test_a_locked_store_fails_fast_naming_the_file_and_wait(home: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(home / "state.duckdb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        started = time.monotonic()
        code, out, err = run("state", "scan", "word_count", "word_counts", home=home)
        fast = time.monotonic() - started
        assert (code, out) == (1, "")
        assert err == (
            f"error: state file {home / 'state.duckdb'} is locked by another process "
            f"(PID {holder.pid}): a running batch, `dagster dev` or the demo. Retry when it is "
            "done, or pass --wait SECONDS to wait\n"
        )
        assert fast < 2.0  # no 30 s wait: DuckDB refuses a read-only open at once
        started = time.monotonic()
        code, _, err = run("state", "list", "--wait", "1", home=home)
        assert code == 1
        assert f"(PID {holder.pid}), still after 1s:" in err
        assert 1.0 <= time.monotonic() - started < 4.0
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert run("state", "list", "--format", "csv", home=home)[0] == 0  # free again


# -- child processes with a clean environment ------------------------------------------------------


def _global_home(root: Path, with_replica: bool) -> Path:
    """A home whose topology ``clicks`` keeps a global count ``total`` (value field ``n``).

    Committed: txid 1 (3), txid 2 (7); published to the home's replica if ``with_replica``.
    """
    from trident_assets.backends.map_layout import MapLayout
    from trident_assets.backends.replica import Replica
    from trident_assets.core.caching import GLOBAL_KEY

    home = root / "home"
    replica = Replica(home / "replica")
    described = {"clicks__total": {"value_field": "n", "global": True}}
    with DuckDBStore(home / "state.duckdb") as store:
        store.ensure_map(MapLayout("clicks__total", "opaque", ("key",), ("VARCHAR",), "BIGINT"))
        for txid, (n, previous) in enumerate([(3, None), (7, 3)], start=1):
            with store.transaction() as tx:
                store.map("clicks__total").multi_put([GLOBAL_KEY], [OpaqueValue(txid, n, previous)])
                tx.mark_committed("clicks", txid)
            if with_replica:
                replica.publish(store, "clicks", txid, ["clicks__total"], [], described)
    return home


@pytest.mark.parametrize("with_replica", [True, False], ids=["replica", "state file"])
def test_a_global_state_reads_without_its_internal_key(tmp_path: Path, with_replica: bool) -> None:
    home = _global_home(tmp_path, with_replica)
    name = "n" if with_replica else "value"  # the value field is published with the replica

    def trident(*args: str) -> tuple[int, str, str]:
        env = clean_env(tmp_path, TRIDENT_HOME=str(home), COLUMNS="80")
        done = run_trident(tmp_path, *args, env=env)
        return done.returncode, done.stdout, done.stderr

    bar = "━" * (len(name) + 2)
    assert trident("state", "scan", "clicks", "total") == (
        0,
        f"clicks.total: 1 keys, last committed txid 2\n┏{bar}┓\n┃ {name} ┃\n┡{bar}┩\n"
        f"│ {7:>{len(name)}} │\n└{bar.replace('━', '─')}┘\n",
        "",
    )
    assert trident("state", "scan", "clicks", "total", "--format", "json") == (
        0,
        f'[{{"{name}": 7}}]\n',
        "",
    )
    assert trident("state", "get", "clicks", "total", "--format", "csv") == (0, f"{name}\n7\n", "")
    assert trident("state", "get", "clicks", "total", "--txid", "1", "--format", "csv") == (
        0,
        f"{name}\n3\n",
        "",
    )


def test_reads_from_the_replica_while_a_writer_holds_the_state_file(tmp_path: Path) -> None:
    """A batch committing holds the DuckDB file; the CLI reads the replica and never waits."""
    home = _global_home(tmp_path, with_replica=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(home / "state.duckdb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        assert run("state", "get", "clicks", "total", "--format", "csv", home=home) == (
            0,
            "n\n7\n",
            "",
        )
        assert run("state", "get", "clicks", "total", "--txid", "1", "--format", "csv", home=home)[
            :2
        ] == (0, "n\n3\n")
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_state_get_without_a_key_is_refused_for_a_keyed_state(home: Path) -> None:
    assert run("state", "get", "word_count", "word_counts", home=home) == (
        1,
        "",
        "error: state 'word_counts' of 'word_count' is keyed by word: give one value per key "
        "column, e.g. `trident state get word_count word_counts VALUE`\n",
    )


def test_commands_as_child_processes_with_a_clean_environment(home: Path, tmp_path: Path) -> None:
    def trident(*args: str) -> subprocess.CompletedProcess[str]:
        return run_trident(tmp_path, *args, env=clean_env(tmp_path, TRIDENT_HOME=str(home)))

    done = trident("state", "list", "--format", "csv")
    assert (done.returncode, done.stdout.splitlines()[-1], done.stderr.splitlines()[0]) == (
        0,
        "word_count,word_counts,opaque,word,BIGINT,3,3,no",
        "orphaned (declared by no topology in module trident_assets.examples.topologies): "
        "word_count.seen. Remove one with `trident state drop TOPOLOGY STATE`, or pass "
        "--module with the module that declares it",
    )
    done = trident("state", "scan", "word_count", "word_counts", "--txid", "1", "--format", "json")
    assert (done.returncode, json.loads(done.stdout)) == (
        0,
        [{"word": "the", "value": 2}, {"word": "cow", "value": 1}],
    )
    done = trident("state", "get", "word_count", "word_counts", "moon", "--format", "csv")
    assert (done.returncode, done.stdout) == (0, "word,value\nmoon,1\n")
    done = trident("outputs", "word_count", "words", "--txid", "3", "--format", "csv")
    assert (done.returncode, done.stdout) == (0, "txid,sum\n3,30\n")
    done = trident("dead-letters", "other", "--format", "csv")
    assert (done.returncode, done.stdout) == (
        0,
        "topology,txid,spout,topic,partition,offset,reason\nother,1,lines,lines,0,0,not JSON\n",
    )
    done = trident("log", "topics", "--home", "/nonexistent")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        "error: trident home /nonexistent does not exist; pass --home DIR or set TRIDENT_HOME "
        "(`make demo` fills the default home .trident)\n",
    )
    assert not Path("/nonexistent").exists()
    done = trident("state", "scan", "word_count", "word_counts", "--txid", "x")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr


CRASH_AT_EXIT = """
import atexit, os, sys
from trident_assets.cli import main
atexit.register(os.abort)  # a native crash as the process exits, as a library aborting would
sys.argv = ["trident", "log", "--help"]
main()
"""


def test_a_native_crash_of_the_cli_prints_every_threads_stack(tmp_path: Path) -> None:
    done = run_python(tmp_path, CRASH_AT_EXIT)
    assert done.returncode == -6
    assert "Usage: trident log" in done.stdout
    assert "Fatal Python error: Aborted" in done.stderr
    assert "trident_assets/cli/__init__.py" in done.stderr, done.stderr
    assert 'File "<string>", line 6 in <module>' in done.stderr, done.stderr


ENDS_WITHOUT_SHUTDOWN = """
import atexit, sys
from trident_assets.cli import main
atexit.register(lambda: print("atexit handlers ran"))
class Finalized:
    def __del__(self):
        print("finalized at interpreter shutdown")
kept = Finalized()
sys.argv = ["trident", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize(
    ("args", "code", "out"),
    [(["log", "--help"], 0, "Usage: trident log"), (["state", "get"], 2, "")],
    ids=["done", "usage-error"],
)
def test_the_cli_ends_with_its_status_after_atexit_and_without_interpreter_shutdown(
    tmp_path: Path, args: list[str], code: int, out: str
) -> None:
    """Module globals are never collected at exit (py4j's __del__ there aborted a demo)."""
    done = run_python(tmp_path, ENDS_WITHOUT_SHUTDOWN, *args)
    assert done.returncode == code, done.stderr
    assert out in done.stdout
    assert done.stdout.endswith("atexit handlers ran\n")
    assert "finalized" not in done.stdout + done.stderr
    if code == 2:
        assert "Missing argument 'topology'" in done.stderr


# -- the demo --------------------------------------------------------------------------------------


def test_demo_refuses_a_home_with_other_data(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    assert run("demo", home=tmp_path) == (
        1,
        "",
        f"error: trident home {tmp_path} holds data the demo did not write (mine.txt); the "
        "demo replaces its home's log, state and Dagster instance: pass --home with another "
        "directory, or remove this one\n",
    )
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_demo_leaves_every_check_evaluated_and_no_step_executing(demo_run: DemoRun) -> None:
    """What the UI shows after the demo: every asset check passed, no step still executing.

    The latest execution of each check is txid 5's, evaluated against the latest
    materialization (what the UI shows: all passed). The demo's no-op re-run of txid 1 (step
    3) selects no checks: run with them, it would evaluate them against txid 1's
    materialization, and the UI would show none for the latest. The killed run of txid 3
    (attempt 0) is failed, its step too (a killed process records nothing itself).
    """
    import asyncio

    import dagster as dg
    from dagster._core.loader import LoadingContextForTest

    assert demo_run.done.returncode == 0, demo_run.done.stderr
    spout_checks = [
        "txids_contiguous",
        "ranges_contiguous",
        "dead_letters_below_threshold",
        "lag_below_threshold",
    ]
    wanted = [
        *(("sentences_batch", c) for c in spout_checks),
        *(("queries_batch", c) for c in spout_checks),
        ("word_counts", "exactly_once"),
    ]
    with dg.DagsterInstance.from_config(str(demo_run.home.resolve() / "dagster")) as instance:
        (noop, *_) = instance.get_runs(
            filters=dg.RunsFilter(tags={"dagster/partition": "0000000001"})
        )
        (txid5,) = instance.get_runs(
            filters=dg.RunsFilter(tags={"dagster/partition": "0000000005"})
        )
        latest = {}
        for asset, check in wanted:
            key = dg.AssetCheckKey(dg.AssetKey(["word_count", asset]), check)
            (record,) = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
            on_latest = asyncio.run(
                record.targets_latest_materialization(LoadingContextForTest(instance))
            )
            latest[asset, check] = (record.status.value, record.run_id, on_latest)
        noop_checks = [
            e
            for e in instance.all_logs(noop.run_id)
            if e.dagster_event is not None and "ASSET_CHECK" in e.dagster_event.event_type_value
        ]
        assert noop.tags.get("trident/attempt") is None, "the no-op re-run is the latest of txid 1"
        assert latest == dict.fromkeys(wanted, ("SUCCEEDED", txid5.run_id, True))
        assert noop_checks == [], "the no-op re-run plans no checks"
        steps = {
            (run.tags["dagster/partition"], run.tags["trident/attempt"], run.status.value): [
                (s.step_key, s.status.value if s.status else None, s.end_time is not None)
                for s in instance.get_run_step_stats(run.run_id)
            ]
            for run in instance.get_runs()
            if run.tags.get("dagster/partition") == "0000000003"
        }
        (killed,) = instance.get_runs(
            filters=dg.RunsFilter(tags={"dagster/partition": "0000000003", "trident/attempt": "0"})
        )
        killed_messages = [e.message for e in instance.all_logs(killed.run_id)][-2:]
    assert steps == {
        ("0000000003", "0", "FAILURE"): [("word_count_batches", "FAILURE", True)],
        ("0000000003", "1", "SUCCESS"): [("word_count_batches", "SUCCESS", True)],
    }
    reason = (
        "run process killed (exit code -9) between its state write and its commit; the "
        "coordinator replays the txid"
    )
    assert killed_messages == [f'Execution of step "word_count_batches" failed: {reason}', reason]


def test_demo_runs_are_tagged_by_their_origin(demo_run: DemoRun) -> None:
    """The UI's Runs page: the coordinator's runs as launched by its sensor, all as the demo's.

    The batch runs (the coordinator's decisions, as its sensor requests them, the killed one
    too) carry ``dagster/sensor_name`` (the UI shows "launched by sensor
    word_count_coordinator"); the re-run of txid 1 is the demo's own, by hand. Read from the
    demo's Dagster instance.
    """
    import dagster as dg

    assert demo_run.done.returncode == 0, demo_run.done.stderr
    with dg.DagsterInstance.from_config(str(demo_run.home.resolve() / "dagster")) as instance:
        runs = instance.get_runs()
    origins = sorted(
        (
            r.tags["dagster/partition"],
            r.tags.get("trident/attempt", "-"),
            r.tags.get("dagster/sensor_name", "-"),
            r.tags.get("trident/launched_by", "-"),
        )
        for r in runs
    )
    coordinator = ("word_count_coordinator", "trident demo")
    assert origins == [
        ("0000000001", "-", "-", "trident demo"),  # the re-run of a committed txid
        ("0000000001", "0", *coordinator),
        ("0000000002", "0", *coordinator),
        ("0000000003", "0", *coordinator),  # killed
        ("0000000003", "1", *coordinator),  # replayed
        ("0000000004", "0", *coordinator),
        ("0000000005", "0", *coordinator),
    ]


def test_demo_tells_its_story_in_one_screen(demo_run: DemoRun) -> None:
    """The whole demo, as `make demo` runs it: a child process, a clean environment.

    The run (``demo_run``) is shared with the UI test over its home (test_demo_ui.py).
    """
    home, done = demo_run.home, demo_run.done
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    out = done.stdout.splitlines()
    assert len(out) <= 30, done.stdout
    assert out[0] == "trident demo in .trident (Dagster and Spark logs: .trident/demo.log)"
    assert (
        out[1] == "1. produced 20,000 sentences into .trident/log (topic sentences, 4 partitions)"
    )
    assert out[3].startswith("   txid 1: 4,000 sentences committed (attempt 0, ")
    assert out[5] == (
        "   txid 3: run in a child process, SIGKILLed between its state write and its commit..."
    )
    assert out[6] == (
        "   txid 3: child exit code -9 (SIGKILL); state and commit marker unchanged "
        "(last committed txid 2)"
    )
    assert out[7].startswith("   txid 3: 4,000 sentences replayed after the crash (attempt 1, ")
    assert out[10] == "   coordinator: word_count: no new records after txid 5"
    assert "3. re-materialized txid 1: already_committed=True, state unchanged=True" in out
    assert any(line.startswith("4. exactly-once check PASSED: ") for line in out)
    assert out[-3] == (f"Read the state: {TRIDENT} state scan word_count word_counts")
    assert out[-2] == "Open the Dagster UI (http://127.0.0.1:3000) with:"
    assert out[-1] == "make ui"  # the demo ran as `make demo` runs it
    logged = (home / "demo.log").read_text()
    assert "DEBUG" in logged  # Dagster's logs and Spark's, not the story's
    assert "jdk.incubator.vector" in logged  # the Spark JVM's one start-up line
    assert "telemetry" not in logged.lower()
    # the README's next step works on what the demo left
    scan = run("state", "scan", "word_count", "word_counts", "--format", "json", home=home)
    assert scan[0] == 0
    # read from the replica, the value under the state's own field name (as in the UI)
    assert sum(row["count"] for row in json.loads(scan[1])) == int(
        next(line for line in out if line.startswith("4. "))
        .split(": ")[1]
        .split(" ")[0]
        .replace(",", "")
    )


DEFAULT_MODULE_IMPORTS = """
import sys
from trident_assets.cli.quarantine import DEFAULT_MODULE, module_topologies
found = module_topologies(DEFAULT_MODULE)
print(DEFAULT_MODULE, sorted(found))
print(sorted({m.split(".")[0] for m in sys.modules} & {"dagster", "pandas"}))
"""


def test_the_cli_default_module_is_the_code_locations_topologies_without_dagster(
    tmp_path: Path,
) -> None:
    """`trident state list|drop|rebuild`, `quarantine add|replay` find the examples fast."""
    from trident_assets.cli.quarantine import module_topologies

    done = run_python(tmp_path, DEFAULT_MODULE_IMPORTS)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "trident_assets.examples.topologies "
        "['gender_age', 'location_db', 'page_views', 'word_count']\n[]\n"
    )
    served = module_topologies("trident_assets.definitions")
    default = module_topologies("trident_assets.examples.topologies")
    assert {n: (t.states, t.static_states) for n, t in served.items()} == {
        n: (t.states, t.static_states) for n, t in default.items()
    }

"""The read commands on real homes: a replica, machine formats, ``--module`` and event windows.

Homes are built with :class:`DuckDBStore` directly (no Spark); commands run as child processes
with a clean environment (``.venv/bin/trident``), in ``tmp_path`` as their current directory.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import trident_assets as ta
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.backends.state_contracts import write_contracts
from trident_assets.errors import ConfigError
from trident_assets.log.store import PartitionedLog
from trident_assets_tests.children import clean_env, run_python, run_trident
from trident_assets_tests.test_cli import make_home

ORDERS_MODULE = """
import trident_assets as ta

topo = ta.TridentTopology("orders")
scheme = ta.JsonScheme({"item": "string", "ts": "string"})
per_minute = (
    topo.new_stream("orders", ta.LogSpout("orders", scheme))
    .group_by("item")
    .window_aggregate(
        ta.EventWindow.tumbling("1 minute", time_field="ts"), ta.Count(), "n",
        spec=ta.StateSpec("per_minute"),
    )
)
"""
"""A user's code location: topology ``orders`` with event-window state ``per_minute``."""

DEAD = [
    "topology,txid,spout,topic,partition,offset,reason",
    "word_count,3,sentences,sentences,0,9,invalid UTF-8",
    "word_count,2,sentences,sentences,1,7,invalid UTF-8",
]


def trident(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_trident(cwd, *args, env=clean_env(cwd, **env))


def _minute(m: int) -> datetime:
    return datetime(2026, 1, 1, 0, m)


def add_orders(home: Path, *, published: bool) -> None:
    """Topology ``orders`` (txids 1, 2) as its run leaves it, beside make_home's word_count.

    Event-window state ``per_minute`` (tumbling 1 minute, count ``n`` per ``item``): finals
    pen [00:00, 00:01) = 2 (txid 2), cup [00:00, 00:01) = 1 (txid 1); open: pen [00:01,
    00:02) = 1. ``published``: txids 1 and 2 are published to the home's replica.
    """
    declared: dict[str, Any] = {}
    exec(ORDERS_MODULE, declared)  # the user's declaration: its contract, as a run stores it
    contract = declared["per_minute"].contract()
    replica = Replica(home / "replica")
    with DuckDBStore(home / "state.duckdb") as store:
        write_contracts(store, [contract])
        store.execute(
            'CREATE TABLE "orders__per_minute" (item VARCHAR, window_start TIMESTAMP, '
            "window_end TIMESTAMP, n BIGINT, txid BIGINT)"
        )
        store.execute(
            'CREATE TABLE "orders__per_minute__finals" (item VARCHAR, window_start TIMESTAMP, '
            "window_end TIMESTAMP, n BIGINT, final_txid BIGINT)"
        )
        rows = {1: [("cup", 0, 1)], 2: [("pen", 0, 2)]}
        for txid in (1, 2):
            with store.transaction() as tx:
                for item, start, n in rows[txid]:
                    store.execute(
                        'INSERT INTO "orders__per_minute__finals" VALUES (?, ?, ?, ?, ?)',
                        [item, _minute(start), _minute(start + 1), n, txid],
                    )
                if txid == 2:
                    store.execute(
                        'INSERT INTO "orders__per_minute" VALUES (?, ?, ?, ?, ?)',
                        ["pen", _minute(1), _minute(2), 1, 2],
                    )
                tx.mark_committed("orders", txid)
            if published:
                replica.publish(
                    store,
                    "orders",
                    txid,
                    [],
                    [],
                    appends={"orders__per_minute__finals": "final_txid"},
                )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """make_home's word_count published to a replica, with dead letters; the user's module."""
    home = make_home(tmp_path)
    (tmp_path / "orders.py").write_text(ORDERS_MODULE)
    replica = Replica(home / "replica")
    with DuckDBStore(home / "state.duckdb") as store:
        for txid in (1, 2, 3):
            replica.publish(
                store, "word_count", txid, ["word_count__word_counts", "word_count__seen"],
                ["word_count__out_words"],
            )  # fmt: skip
    log = PartitionedLog(home / "log")
    log.create_topic("lines", 1)
    producer = log.producer("lines")
    producer.send(b"a line")
    producer.flush()
    return home


# -- dead letters on a home with a replica ---------------------------------------------------------


def test_dead_letters_of_a_home_with_a_replica(home: Path, tmp_path: Path) -> None:
    """The replica's dead letters (published per txid) read with the installed DuckDB."""
    assert (home / "replica" / "_dead_letters" / "word_count").is_dir()
    for extra in ([], ["--database", str(home / "state.duckdb")]):
        done = trident(tmp_path, "dead-letters", "--home", str(home), "--format", "csv", *extra)
        assert (done.returncode, done.stdout.splitlines(), done.stderr) == (0, DEAD, "")
    done = trident(tmp_path, "dead-letters", "word_count", "-n", "1", "--home", str(home))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[0] == "2 dead letters of word_count (latest 1 shown)"
    done = trident(tmp_path, "dead-letters", "word_count", "--format", "json", "--home", str(home))
    assert json.loads(done.stdout)[0] == {
        "topology": "word_count",
        "txid": 3,
        "spout": "sentences",
        "topic": "sentences",
        "partition": 0,
        "offset": 9,
        "reason": "invalid UTF-8",
    }


# -- machine formats: stdout holds the data alone --------------------------------------------------

NOISY_DUCKDB = """
import os
import sys
import duckdb

class Noisy:
    # a connection drawing DuckDB's progress bar for every query but its first statement's

    def __init__(self, conn):
        self._conn, self._armed = conn, False
        conn.execute("SET progress_bar_time = 0")  # as if every query ran over 2 s

    def __getattr__(self, name):
        attr = getattr(self._conn, name)
        if name not in ("execute", "sql") or self._armed:
            return attr
        def first(*args, **kwargs):
            saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            try:
                return attr(*args, **kwargs)
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(null)
                self._armed = True
        return first

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._conn.close()

real = duckdb.connect
duckdb.connect = lambda *args, **kwargs: Noisy(real(*args, **kwargs))
from trident_assets.cli import main
sys.argv = ["trident", *sys.argv[1:]]
main()
"""
"""The CLI with DuckDB drawing its progress bar on stdout for every query after a connection's
first statement (DuckDB draws it for queries that run over 2 s)."""

FORMAT_COMMANDS = [
    ["status"],
    ["state", "list"],
    ["state", "scan", "word_count", "word_counts"],
    ["state", "get", "word_count", "word_counts", "the"],
    ["state", "scan", "orders", "per_minute"],
    ["state", "get", "orders", "per_minute", "pen"],
    ["outputs", "word_count", "words"],
    ["dead-letters"],
    ["quarantine", "list"],
    ["log", "topics"],
    ["log", "offsets", "lines"],
    ["log", "tail", "lines"],
    ["log", "verify"],
]


@pytest.mark.parametrize("args", FORMAT_COMMANDS, ids=[" ".join(a) for a in FORMAT_COMMANDS])
def test_json_and_csv_go_to_stdout_alone(home: Path, tmp_path: Path, args: list[str]) -> None:
    add_orders(home, published=True)
    for fmt in ("json", "csv"):
        done = run_python(tmp_path, NOISY_DUCKDB, *args, "--home", str(home), "--format", fmt)
        assert done.returncode == 0, done.stderr
        if fmt == "json":
            data = json.loads(done.stdout)
            assert isinstance(data, list)
            assert bool(data) == (args != ["quarantine", "list"]), args  # nothing quarantined
        else:
            assert "\r" not in done.stdout
            lines = done.stdout.splitlines()
            assert len(lines) == 1 + len(data), args
            if data:
                assert lines[0] == ",".join(data[0]), args  # the JSON's columns


# -- --module: one rule, the current directory is importable ---------------------------------------


def test_module_is_imported_from_the_current_directory_by_every_command(
    home: Path, tmp_path: Path
) -> None:
    add_orders(home, published=True)
    header = "topology,state,kind,key_columns,value_type,keys,last_txid,orphaned"
    done = trident(tmp_path, "state", "list", "--module", "orders", "--format", "csv",
                   "--home", str(home))  # fmt: skip
    assert (done.returncode, done.stdout.splitlines()) == (
        0,
        [
            header,
            "orders,per_minute,event_window,item,,3,2,no",
            "word_count,seen,plain,word,BOOLEAN,3,3,yes",
            "word_count,word_counts,opaque,word,BIGINT,3,3,yes",
        ],
    )
    assert done.stderr == (
        "orphaned (declared by no topology in module orders): word_count.seen, "
        "word_count.word_counts. Remove one with `trident state drop TOPOLOGY STATE`, or pass "
        "--module with the module that declares it\n"
    )
    # TRIDENT_MODULE, -m and `trident ui`'s check: the same rule
    done = trident(tmp_path, "state", "list", "--format", "csv", "--home", str(home),
                   TRIDENT_MODULE="orders")  # fmt: skip
    assert done.stdout.splitlines()[1] == "orders,per_minute,event_window,item,,3,2,no"
    done = trident(tmp_path, "state", "drop", "orders", "per_minute", "-m", "orders", "--yes",
                   "--home", str(home))  # fmt: skip
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(
        "error: state 'per_minute' of topology 'orders' is still declared in module orders: "
    )
    done = trident(tmp_path, "ui", "--module", "nosuch", "--home", str(home))
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"error: --module 'nosuch': no such module importable from {tmp_path.resolve()} (run "
        "trident in the directory that holds it, or install it)\n",
    )
    done = trident(tmp_path, "quarantine", "add", "nope", "3", "--module", "orders",
                   "--home", str(home))  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        "error: module orders declares no topology 'nope' (declared: orders); pass --module "
        "with the code location that declares it\n",
    )


def test_without_module_a_users_states_are_unknown_never_orphaned(
    home: Path, tmp_path: Path
) -> None:
    add_orders(home, published=True)
    done = trident(tmp_path, "state", "list", "--format", "json", "--home", str(home))
    assert done.returncode == 0
    assert [(r["topology"], r["state"], r["orphaned"]) for r in json.loads(done.stdout)] == [
        ("orders", "per_minute", "unknown"),
        ("word_count", "seen", "yes"),  # the built-in examples declare word_count
        ("word_count", "word_counts", "no"),
    ]
    assert done.stderr.splitlines() == [
        "orphaned (declared by no topology in module trident_assets.examples.topologies): "
        "word_count.seen. Remove one with `trident state drop TOPOLOGY STATE`, or pass "
        "--module with the module that declares it",
        "orphaned unknown: cannot tell whether the states of topology orders are still "
        "declared (no --module given; the built-in examples, module "
        "trident_assets.examples.topologies, do not declare it). Pass --module MODULE (or set "
        "TRIDENT_MODULE) with the code location that declares them",
    ]
    assert "orders.per_minute" not in done.stderr
    done = trident(tmp_path, "state", "drop", "orders", "per_minute", "--yes", "--home", str(home))
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        "error: cannot tell whether state 'per_minute' of topology 'orders' is still declared: "
        "no code location was given and the built-in examples (module "
        "trident_assets.examples.topologies) do not declare topology 'orders'. Nothing was "
        "dropped. Pass --module MODULE (or set TRIDENT_MODULE) with the code location that "
        "declares the topology\n",
    )
    with DuckDBStore(home / "state.duckdb", read_only=True) as store:
        assert store.has_table("orders__per_minute")


# -- event-window states ---------------------------------------------------------------------------


WINDOWS = [
    {"item": "cup", "window_start": "2026-01-01 00:00:00", "window_end": "2026-01-01 00:01:00",
     "n": 1, "final": True, "final_txid": 1},
    {"item": "pen", "window_start": "2026-01-01 00:00:00", "window_end": "2026-01-01 00:01:00",
     "n": 2, "final": True, "final_txid": 2},
    {"item": "pen", "window_start": "2026-01-01 00:01:00", "window_end": "2026-01-01 00:02:00",
     "n": 1, "final": False, "final_txid": None},
]  # fmt: skip


@pytest.mark.parametrize("published", [True, False], ids=["replica", "state file"])
def test_event_window_states_read_from_the_cli(home: Path, tmp_path: Path, published: bool) -> None:
    add_orders(home, published=published)
    if not published:
        import shutil

        shutil.rmtree(home / "replica")
    scan = trident(tmp_path, "state", "scan", "orders", "per_minute", "--home", str(home))
    assert (scan.returncode, scan.stderr) == (0, "")
    assert scan.stdout.splitlines()[0] == (
        "orders.per_minute: 2 final windows, 1 open (not final yet: their values may still "
        "change), last committed txid 2"
    )
    done = trident(tmp_path, "state", "scan", "orders", "per_minute", "--format", "json",
                   "--home", str(home))  # fmt: skip
    assert (done.returncode, json.loads(done.stdout), done.stderr) == (0, WINDOWS, "")
    done = trident(tmp_path, "state", "scan", "orders", "per_minute", "--txid", "1",
                   "--format", "json", "--home", str(home))  # fmt: skip
    assert json.loads(done.stdout) == WINDOWS[:1]
    done = trident(tmp_path, "state", "get", "orders", "per_minute", "pen", "--format", "json",
                   "--home", str(home))  # fmt: skip
    assert (done.returncode, json.loads(done.stdout)) == (0, WINDOWS[1:])
    done = trident(tmp_path, "state", "get", "orders", "per_minute", "mug", "--home", str(home))
    assert (done.returncode, done.stderr) == (
        1,
        "error: key 'mug' has no window in orders.per_minute\n",
    )
    done = trident(tmp_path, "state", "scan", "orders", "per_hour", "--home", str(home))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("error: ")
    assert "has no state 'per_hour'" in done.stderr
    done = trident(tmp_path, "state", "list", "--module", "orders", "--format", "csv",
                   "--home", str(home))  # fmt: skip
    assert done.stdout.splitlines()[1] == "orders,per_minute,event_window,item,,3,2,no"


def test_read_finals_takes_the_state_or_its_name(home: Path, tmp_path: Path) -> None:
    add_orders(home, published=False)
    with DuckDBStore(home / "state.duckdb", read_only=True) as store:
        by_name = ta.read_finals(store, "per_minute")
        assert by_name == ta.read_finals(store, "per_minute", topology="orders")
        assert [(r["item"], r["n"], r["final_txid"]) for r in by_name] == [
            ("cup", 1, 1),
            ("pen", 2, 2),
        ]
        assert [(r["item"], r["n"], r["final"]) for r in ta.read_open(store, "per_minute")] == [
            ("pen", 1, False)
        ]
        with pytest.raises(ConfigError) as info:
            ta.read_finals(store, "per_hour")
        assert str(info.value) == (
            f"no event-window state 'per_hour' in {home / 'state.duckdb'}; event-window "
            "states: orders.per_minute"
        )
        with pytest.raises(ConfigError, match=r"^no event-window state 'per_minute' of topology"):
            ta.read_finals(store, "per_minute", topology="word_count")

"""User code everywhere: every kind of user function in a real topology, run as users run it.

The topology and its functions live in the user's own modules (``userland/``). One test runs
it in a child process with a clean environment (no ``PYSPARK_PYTHON``, another working
directory, the module next to the script only), as ``dagster dev`` and the demo run user
code; the others run in-process. Expected results come from plain Python over the corpus.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trident_assets import UserCodeError
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import JsonScheme, StringScheme
from trident_assets.spark.session import worker_python
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.operations import PyFunction, PyMap
from trident_assets.stream.queries import QueryFunction
from trident_assets.stream.topology import StateSpec, StateUpdater, TridentTopology
from trident_assets_tests.children import clean_env

USERLAND = Path(__file__).parent / "userland"
VOWELS = "aeiou"


def _sorted(rows: list[list[Any]]) -> list[list[Any]]:
    return sorted(rows, key=repr)


def expected(batches: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    """What the userland topology must produce, computed without Spark or trident_assets."""
    outputs: dict[str, dict[str, Any]] = {}
    committed: Counter[str] = Counter()
    first_seen: dict[str, int] = {}

    def put(name: str, txid: int, rows: list[list[Any]]) -> None:
        outputs.setdefault(name, {})[str(txid)] = _sorted(rows)

    for txid, sentences in enumerate(batches, start=1):
        words = [w for s in sentences for w in s.split()]
        counts = Counter(words)
        long = [w for w in words if len(w) > 2]
        put("long_words", txid, [[w] for w in long])
        put("shouted", txid, [[w.upper(), len(w)] for w in long])
        put("positions", txid, [[w, i] for s in sentences for i, w in enumerate(s.split())])
        put("lengths", txid, [[w, len(w)] for w in words])
        put("vowels", txid, [[w, c] for w in words for c in w if c in VOWELS])
        put("letters_grouped", txid, [[w, len(w) * n] for w, n in counts.items()])
        put("letters_global", txid, [[sum(len(w) for w in words)]])
        put("occurrences_grouped", txid, [[w, n] for w, n in counts.items()])
        put("occurrences_global", txid, [[len(words)]])
        put("doubled", txid, [[w, 2 * committed[w]] for w in words])
        committed.update(words)
        for w in words:
            first_seen.setdefault(w, txid)
    every = [w for sentences in batches for s in sentences for w in s.split()]
    glob = "$TRIDENT-GLOBAL$"
    states = {
        "counts": _sorted([[w, n] for w, n in committed.items()]),
        "letters": _sorted([[w, len(w) * n] for w, n in committed.items()]),
        "total_letters": [[glob, sum(len(w) for w in every)]],
        "reduced": _sorted([[w, n] for w, n in committed.items()]),
        "with_e": [[glob, sum("e" in w for w in every)]],
        "first_seen": _sorted([[w, t] for w, t in first_seen.items()]),
    }
    return {"outputs": outputs, "states": states}


def copy_app(tmp_path: Path) -> Path:
    """The user's project (script + module) in a directory of its own, as a user has it."""
    app = tmp_path / "my_project"
    shutil.copytree(USERLAND, app, ignore=shutil.ignore_patterns("__pycache__"))
    return app


def run_child(script: Path, *args: str, tmp_path: Path) -> str:
    """Run ``script`` with a clean environment from another directory; its last stdout line."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


def app_batches(app: Path) -> tuple[tuple[str, ...], ...]:
    """The batches the user's ``app.py`` produces (imported as its own script would be)."""
    sys.path.insert(0, str(app))
    try:
        import app as user_app  # type: ignore[import-not-found]

        return tuple(user_app.BATCHES)
    finally:
        sys.path.remove(str(app))
        sys.modules.pop("app", None)
        sys.modules.pop("word_functions", None)


def test_every_user_function_in_a_clean_child_process(tmp_path: Path) -> None:
    """The regression for PyFunction/PyFilter on PySpark 4 and for the workers' interpreter.

    The script and the user's module sit in their own directory, the process runs from
    another one with no PYSPARK_PYTHON: the workers get the venv's interpreter and the
    user's module by themselves.
    """
    app = copy_app(tmp_path)
    got = json.loads(run_child(app / "app.py", str(tmp_path / "home"), tmp_path=tmp_path))
    want = expected(app_batches(app))
    assert got["outputs"] == want["outputs"]
    assert got["states"] == want["states"]


def test_user_topology_through_dagster_in_a_clean_child_process(tmp_path: Path) -> None:
    """Runs launched by `dagster dev` load the definitions in a fresh process: no
    PYSPARK_PYTHON there either, and the Python workers must still get the venv's interpreter.
    """
    app = copy_app(tmp_path)
    got = json.loads(run_child(app / "dagster_app.py", str(tmp_path / "home"), tmp_path=tmp_path))
    first = expected(app_batches(app)[:1])
    assert got == dict(first["states"]["counts"])


def test_worker_python_prefers_conf_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert worker_python() == sys.executable
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python3")
    assert worker_python() == "/opt/py/bin/python3"
    assert worker_python({"spark.pyspark.python": "/srv/py"}) == "/srv/py"


# -- failures in user code: named, nothing committed, replayable -------------------------------


@pytest.fixture
def userland(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The user's modules imported as a script next to them would import them."""
    monkeypatch.syspath_prepend(str(USERLAND))
    import app as user_app  # type: ignore[import-not-found]

    yield user_app
    sys.modules.pop("app", None)
    sys.modules.pop("word_functions", None)


def _sentences(log: PartitionedLog, *sentences: str) -> None:
    producer = log.producer("sentences")
    for sentence in sentences:
        producer.send(sentence.encode())
    producer.flush()


def test_worker_failure_names_step_function_and_tuple_then_replays(
    spark: Any, tmp_path: Path, userland: Any
) -> None:
    import word_functions  # type: ignore[import-not-found]

    log = PartitionedLog(tmp_path / "log")
    log.create_topic("sentences", 1)
    _sentences(log, "the cow", "a kaboom here")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(userland.build(), spark, store, log, max_spout_pending=1)
    with pytest.raises(UserCodeError) as failed:
        runner.run_batch(1)
    msg = str(failed.value)
    assert msg.startswith("each(sentence) -> sentence, word [PyFunction]: ")
    assert "word_functions.split_words failed on input tuple ('a kaboom here',)" in msg
    assert msg.endswith("ValueError: cannot split a sentence containing 'kaboom'")
    # the user's error alone: Spark's Java and worker traces are not chained to it
    assert failed.value.__cause__ is None
    assert failed.value.__suppress_context__
    assert runner.last_committed() is None, "a failed batch commits nothing"
    assert "userland__counts" not in store.tables()
    # the user fixes the code; the coordinator replays txid 1
    word_functions.FAIL_ON = "no such word"
    try:
        outcome = runner.run_batch(1)
    finally:
        word_functions.FAIL_ON = "kaboom"
    assert outcome.applied
    counts = store.scan("userland__counts").to_pylist()
    assert {r["word"]: r["value"] for r in counts} == {
        "the": 1, "cow": 1, "a": 1, "kaboom": 1, "here": 1
    }  # fmt: skip
    store.close()


class Exploding(QueryFunction):
    def batch_retrieve(self, state: Any, args: Any) -> list[Any]:
        raise KeyError("no such shard")


class TooFew(QueryFunction):
    def batch_retrieve(self, state: Any, args: Any) -> list[Any]:
        return []


class BrokenUpdater(StateUpdater):
    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> Any:
        raise RuntimeError("disk quota")


def _topology(kind: str) -> TridentTopology:
    topo = TridentTopology(f"broken_{kind}")
    s = topo.new_stream("sentences", LogSpout("sentences", StringScheme("sentence")))
    if kind == "query":
        words = s.each("sentence", PyFunction(lambda x: [(x,)], {"word": "string"}), "word")
        from trident_assets import Count

        counts = words.group_by("word").persistent_aggregate(
            StateSpec.opaque("counts"), "word", Count(), "count"
        )
        words.state_query(counts, "word", Exploding(), "found").as_output("found")
    elif kind == "too_few":
        words = s.each("sentence", PyFunction(lambda x: [(x,)], {"word": "string"}), "word")
        from trident_assets import Count

        counts = words.group_by("word").persistent_aggregate(
            StateSpec.opaque("counts"), "word", Count(), "count"
        )
        words.state_query(counts, "word", TooFew(), "found").as_output("found")
    elif kind == "updater":
        s.partition_persist(StateSpec.opaque("broken"), "sentence", BrokenUpdater())
    else:
        s.map(PyMap(lambda sentence: (sentence,), {"a": "string", "b": "string"})).as_output("m")
    return topo


@pytest.mark.parametrize(
    ("kind", "fragments"),
    [
        (
            "query",
            [
                "query(word) -> sentence, word, found: ",
                "test_user_code.Exploding.batch_retrieve failed on a batch of 1 input tuples "
                "starting with [('hello',)]: KeyError: 'no such shard'",
            ],
        ),
        (
            "too_few",
            [
                "query(word) -> sentence, word, found: ",
                "test_user_code.TooFew.batch_retrieve failed on a batch starting with "
                "[('hello',)]: expected one result per input (1), got 0",
            ],
        ),
        (
            "updater",
            [
                "persist(sentence) -> : ",
                "test_user_code.BrokenUpdater.update_state failed on a batch of 1 input tuples "
                "starting with [{'sentence': 'hello'}]: RuntimeError: disk quota",
            ],
        ),
        (
            "map",
            [
                "map -> a, b [PyMap]: ",
                "failed on input tuple ('hello',): expected 2 output values, got 1: ('hello',)",
            ],
        ),
    ],
)
def test_driver_and_contract_failures_are_named(
    spark: Any, tmp_path: Path, kind: str, fragments: list[str]
) -> None:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("sentences", 1)
    _sentences(log, "hello")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(_topology(kind), spark, store, log)
    with pytest.raises(UserCodeError) as failed:
        runner.run_batch(1)
    for fragment in fragments:
        assert fragment in str(failed.value)
    assert runner.last_committed() is None
    store.close()


# -- merge by position of differently typed fields ------------------------------------------------


def test_merge_by_position_reconciles_types(spark: Any, tmp_path: Path) -> None:
    """A string and a number merged by position: legal in Trident, never a run-time cast error."""
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("events", 1)
    producer = log.producer("events")
    for row in ({"word": "cow", "n": 3, "x": 1.5}, {"word": "moon", "n": 4, "x": 2.0}):
        producer.send(json.dumps(row).encode())
    producer.flush()
    topo = TridentTopology("merges")
    ev = topo.new_stream(
        "events", LogSpout("events", JsonScheme({"word": "string", "n": "bigint", "x": "double"}))
    )
    topo.merge(ev.project(["word"]), ev.project(["n"]), fields=["value"]).as_output("mixed")
    topo.merge(ev.project(["n"]), ev.project(["x"]), fields=["number"]).as_output("numbers")
    store = DuckDBStore(tmp_path / "state.duckdb")
    TopologyRunner(topo, spark, store, log).run_batch(1)
    mixed = store.conn.execute('SELECT value FROM "merges__out_mixed" ORDER BY value').fetchall()
    assert mixed == [("3",), ("4",), ("cow",), ("moon",)]
    numbers = store.conn.execute(
        'SELECT number, typeof(number) FROM "merges__out_numbers" ORDER BY number'
    ).fetchall()
    assert numbers == [(1.5, "DOUBLE"), (2.0, "DOUBLE"), (3.0, "DOUBLE"), (4.0, "DOUBLE")]
    store.close()


def test_merge_common_type_rules() -> None:
    from pyspark.sql.types import DoubleType, IntegerType, LongType, NullType, StringType

    from trident_assets.spark.stream_ops import common_type

    assert common_type([IntegerType(), IntegerType()]) == IntegerType()
    assert common_type([IntegerType(), LongType()]) == LongType()
    assert common_type([LongType(), DoubleType()]) == DoubleType()
    assert common_type([NullType(), StringType()]) == StringType()
    assert common_type([StringType(), LongType()]) == StringType()


def test_the_suite_does_not_hide_the_interpreter() -> None:
    """conftest must not set PYSPARK_PYTHON: the session sets it itself (see the child test)."""
    conftest = (Path(__file__).parent / "conftest.py").read_text()
    assert "PYSPARK_PYTHON" not in conftest
    assert os.environ.get("PYSPARK_PYTHON") in (None, sys.executable)


# -- wrong return shapes from user functions ------------------------------------------------------


def _shape_topology(kind: str) -> TridentTopology:
    from trident_assets.stream.operations import PyFlatMap

    topo = TridentTopology(f"shape_{kind}")
    s = topo.new_stream("sentences", LogSpout("sentences", StringScheme("sentence")))
    if kind == "str":
        s.each("sentence", PyFunction(lambda x: x, {"ch": "string"}), "ch").as_output("o")
    elif kind == "bytes":
        s.flat_map(PyFlatMap(lambda x: x.encode(), {"b": "bigint"})).as_output("o")
    elif kind == "not_iterable":
        s.each("sentence", PyFunction(lambda x: 5, {"n": "bigint"}), "n").as_output("o")
    elif kind == "dict":
        s.each("sentence", PyFunction(lambda x: {x: 1}, {"w": "string"}), "w").as_output("o")
    elif kind == "bare_value":
        pair = PyFunction(lambda x: [len(x)], {"n": "bigint", "m": "bigint"})
        s.each("sentence", pair, ["n", "m"]).as_output("o")
    elif kind == "dict_value":
        s.map(PyMap(lambda x: {"w": x}, {"w": "string"})).as_output("o")
    elif kind == "wrong_type":
        s.flat_map(PyFlatMap(lambda x: [(len(x),), (x,)], {"n": "bigint"})).as_output("o")
    else:
        pairs = PyFunction(lambda x: [(x, x)], {"w": "string"})
        s.each("sentence", pairs, "w").as_output("o")
    return topo


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (
            "str",
            "each(sentence) -> sentence, ch [PyFunction]: "
            "trident_assets_tests.test_user_code._shape_topology.<locals>.<lambda> "
            "failed on input tuple ('hello',): "
            "returned a str 'hello' where an iterable of output tuples is expected; return a "
            "list of tuples, e.g. [(value,)]",
        ),
        (
            "bytes",
            "flat_map -> b [PyFlatMap]: "
            "trident_assets_tests.test_user_code._shape_topology.<locals>.<lambda> "
            "failed on input tuple ('hello',): "
            "returned a bytes b'hello' where an iterable of output tuples is expected; return "
            "a list of tuples, e.g. [(value,)]",
        ),
        (
            "not_iterable",
            "each(sentence) -> sentence, n [PyFunction]: "
            "trident_assets_tests.test_user_code._shape_topology.<locals>.<lambda> "
            "failed on input tuple ('hello',): "
            "returned a int 5, which is not iterable, where an iterable of output tuples is "
            "expected; return a list of tuples, e.g. [(value,)]",
        ),
        (
            "dict",
            "each(sentence) -> sentence, w [PyFunction]: "
            "trident_assets_tests.test_user_code._shape_topology.<locals>.<lambda> "
            "failed on input tuple ('hello',): "
            "returned a dict {'hello': 1} where an iterable of output tuples is expected; "
            "return a list of tuples, e.g. [(value,)]",
        ),
        (
            "bare_value",
            "each(sentence) -> sentence, n, m [PyFunction]: "
            "trident_assets_tests.test_user_code._shape_topology.<locals>.<lambda> "
            "failed on input tuple ('hello',): "
            "expected 2 output values, got 1: (5,)",
        ),
        (
            "dict_value",
            "map -> w [PyMap]: "
            "trident_assets_tests.test_user_code._shape_topology.<locals>.<lambda> "
            "failed on input tuple ('hello',): "
            "returned {'w': 'hello'} (a dict) for output field 'w', declared string; return "
            "values of that type",
        ),
        (
            "wrong_type",
            "flat_map -> n [PyFlatMap]: "
            "trident_assets_tests.test_user_code._shape_topology.<locals>.<lambda> "
            "failed on input tuple ('hello',): "
            "returned 'hello' (a str) for output field 'n', declared bigint; return values "
            "of that type",
        ),
        (
            "arity",
            "each(sentence) -> sentence, w [PyFunction]: "
            "trident_assets_tests.test_user_code._shape_topology.<locals>.<lambda> "
            "failed on input tuple ('hello',): "
            "expected 1 output values, got 2: ('hello', 'hello')",
        ),
    ],
)
def test_wrong_return_shapes_fail_the_batch_naming_step_and_tuple(
    spark: Any, tmp_path: Path, kind: str, message: str
) -> None:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("sentences", 1)
    _sentences(log, "hello")
    store = DuckDBStore(tmp_path / "state.duckdb")
    runner = TopologyRunner(_shape_topology(kind), spark, store, log)
    with pytest.raises(UserCodeError) as failed:
        runner.run_batch(1)
    assert str(failed.value) == message
    assert runner.last_committed() is None
    store.close()

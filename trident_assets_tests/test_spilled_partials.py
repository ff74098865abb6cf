"""Spilled partials: executors write them as Parquet, the commit merges them from the files.

Every case runs the same batches with ``trident.partials.spill`` on and off and asserts the
stores end exactly alike: states, new values, partials tables, outcomes and previews.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from trident_assets import ConfigError, Count, Max, Sum
from trident_assets.backends.duckdb_merge import MergeResult
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.spilled_partials import (
    SpilledPartials,
    apply_spilled_partials,
    staged_partials,
)
from trident_assets.errors import StateLayoutError
from trident_assets.spark import spilled
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spark.spilled import SPILL_CONF, SPILL_DIR_CONF, open_spill, spillable
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.topology import StateSpec, TridentTopology
from trident_assets_tests.conftest import new_database
from trident_assets_tests.test_executor import Boom, _fail_at, _log, _out_rows, _send, _word_count

SENTENCES = [
    ["a b c", "a a", "b d", "e"],
    ["c c c", "a e", "f g", "a"],
    ["g", "h h", "a", "b"],
    ["x y", "y z", "z z z", "a"],
    ["q", "r", "s", "t"],
]
"""Four records per txid (``max_batch_size=4``)."""


@contextmanager
def _spilling(spark: Any, on: bool) -> Iterator[None]:
    """``trident.partials.spill`` set while runners are created (they read it then)."""
    spark.conf.set(SPILL_CONF, "true" if on else "false")
    try:
        yield
    finally:
        spark.conf.unset(SPILL_CONF)


def _runner(spark: Any, topo: Any, store: Any, log: Any, *, spill: bool, **kw: Any) -> Any:
    with _spilling(spark, spill):
        return TopologyRunner(topo, spark, store, log, **kw)


def _tables(store: DuckDBStore, topo: TridentTopology, txids: range) -> dict[str, Any]:
    """Everything a commit writes for the topology's states, txid by txid."""
    out: dict[str, Any] = {}
    for name, state in topo.states.items():
        out[f"state:{name}"] = sorted(store.scan(state.table).to_pylist(), key=str)
        for txid in txids:
            out[f"new:{name}:{txid}"] = _out_rows(store, state.new_values_table, txid)
            if txid >= txids.stop - 2:  # the partials table keeps two txids
                out[f"partials:{name}:{txid}"] = _out_rows(store, state.partials_table, txid)
    return out


def _outcome(o: Any) -> tuple[Any, ...]:
    previews = {k: v.to_pylist() for k, v in o.previews.items()}
    return (o.txid, o.applied, o.states, o.tuples_in, o.dead_letters, previews)


def _store(request: pytest.FixtureRequest, tmp_path: Path, backend: str, name: str) -> Any:
    """A fresh state store: a DuckDB file, or a new database on the session's server."""
    if backend == "duckdb":
        return DuckDBStore(tmp_path / f"{name}.duckdb")
    from trident_assets.backends.postgres_store import PostgresStore

    return PostgresStore(new_database(request.getfixturevalue("postgres_server")))


def _staging_tables(store: Any) -> list[str]:
    rows = store.fetch_rows(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
        "AND tablename LIKE '\\_trident\\_spill\\_%' ORDER BY tablename"
    )
    return [r[0] for r in rows]


# in `make test` each store with each spout kind once and each ``pending`` once; the other two
# DuckDB pairs in `make soak`
@pytest.mark.parametrize(
    ("backend", "kind", "pending"),
    [
        ("duckdb", SpoutKind.OPAQUE, 1),
        pytest.param("duckdb", SpoutKind.OPAQUE, 3, marks=pytest.mark.slow),
        pytest.param("duckdb", SpoutKind.TRANSACTIONAL, 1, marks=pytest.mark.slow),
        ("duckdb", SpoutKind.TRANSACTIONAL, 3),
        ("postgres", SpoutKind.OPAQUE, 3),
        ("postgres", SpoutKind.TRANSACTIONAL, 1),
    ],
)
def test_spilled_partials_commit_exactly_what_collected_partials_commit(
    spark: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    backend: str,
    kind: SpoutKind,
    pending: int,
) -> None:
    log = _log(tmp_path, {"sentences": 2})
    for values in SENTENCES:
        _send(log, "sentences", values)
    seen = {}
    for spill in (False, True):
        topo, _ = _word_count("wc", kind=kind)
        store = _store(request, tmp_path, backend, f"state-{spill}")
        runner = _runner(spark, topo, store, log, spill=spill, max_spout_pending=pending)
        assert (runner.spill is not None) is spill
        outcomes = [_outcome(o) for o in runner.run_batches(range(1, 6))]
        seen[spill] = (outcomes, _tables(store, topo, range(1, 6)))
        if spill and backend == "duckdb":
            assert runner.spill.root == Path(f"{store.path}.partials").resolve() / "wc"
            assert list(runner.spill.root.iterdir()) == []  # every txid's files removed
        elif spill:
            assert _staging_tables(store) == []  # every txid's staging table dropped
        store.close()
    assert seen[True] == seen[False]
    outcomes, tables = seen[True]
    assert tables["state:counts"][:3] == [
        {"word": "a", "value": 7},
        {"word": "b", "value": 3},
        {"word": "c", "value": 4},
    ]
    assert outcomes[0][2]["counts"].keys_in == 5  # a b c d e
    assert outcomes[0][5]["state:counts"][0] == {"word": "a", "count": 3}


def _scores(name: str, agg: Any, state: StateSpec) -> tuple[TridentTopology, Any]:
    topo = TridentTopology(name)
    spout = LogSpout(
        "scores",
        JsonScheme({"player": "string", "points": "bigint"}, optional=("points",)),
        SpoutConfig(kind=SpoutKind.TRANSACTIONAL, max_batch_size=3),
    )
    scored = topo.new_stream("scores", spout).group_by("player")
    return topo, scored.persistent_aggregate(state, "points", agg, "points")


@pytest.mark.parametrize("agg", [Sum(), Max()], ids=["sum", "max"])
def test_spilled_sum_and_max_skip_and_count_null_values_alike(
    spark: Any, tmp_path: Path, agg: Any
) -> None:
    log = _log(tmp_path, {"scores": 1})
    records = [
        '{"player": "ann", "points": 3}',
        '{"player": "bob", "points": null}',
        '{"player": "ann", "points": 4}',
        '{"player": "cid", "points": null}',
        '{"player": "cid", "points": null}',
        '{"player": "bob", "points": 7}',
    ]
    _send(log, "scores", records)
    seen = {}
    for spill in (False, True):
        topo, _ = _scores("scores", agg, StateSpec.transactional("points"))
        store = DuckDBStore(tmp_path / f"state-{spill}.duckdb")
        runner = _runner(spark, topo, store, log, spill=spill)
        outcomes = [_outcome(o) for o in runner.run_batches([1, 2])]
        seen[spill] = (outcomes, _tables(store, topo, range(1, 3)))
        store.close()
    assert seen[True] == seen[False]
    outcomes, tables = seen[True]
    # txid 1: ann 3, bob null, ann 4 -> bob's only value is null: bob is not updated
    assert outcomes[0][2]["points"].null_values_skipped == 1
    assert outcomes[0][2]["points"].keys_in == 1
    # txid 2: cid null twice, bob 7
    assert outcomes[1][2]["points"].null_values_skipped == 2
    expected = {"ann": 7 if isinstance(agg, Sum) else 4, "bob": 7}
    assert {r["player"]: r["value"] for r in tables["state:points"]} == expected


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_a_crash_between_write_and_commit_replays_from_new_partials(
    spark: Any, tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    log = _log(tmp_path, {"sentences": 1})
    for values in SENTENCES[:2]:
        _send(log, "sentences", values)
    topo, _ = _word_count("wc")
    store = _store(request, tmp_path, backend, "state")
    runner = _runner(spark, topo, store, log, spill=True, fault=_fail_at("before_commit"))
    with pytest.raises(Boom):
        runner.run_batch(1)
    assert store.last_committed("wc") is None
    if backend == "duckdb":
        assert list(runner.spill.root.iterdir()) == []  # the failed attempt's files removed
        (runner.spill.root / "left-by-a-killed-run").mkdir()
    else:
        assert _staging_tables(store) == []  # the failed attempt's tables dropped
        left = f"{runner.spill.prefix}killed_0"
        store.execute(f'CREATE TABLE "{left}" (w TEXT)')
        assert _staging_tables(store) == [left]
    runner = _runner(spark, topo, store, log, spill=True)  # removes what a killed run left
    if backend == "duckdb":
        assert not runner.spill.root.exists()
    else:
        assert _staging_tables(store) == []
    assert [o.applied for o in runner.run_batches([1, 1, 2])] == [True, False, True]
    counts = {r["word"]: r["value"] for r in store.scan("wc__counts").to_pylist()}
    assert counts == {"a": 5, "b": 2, "c": 4, "d": 1, "e": 2, "f": 1, "g": 1}
    store.close()


def test_files_the_driver_cannot_read_are_refused_before_any_write(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _log(tmp_path, {"sentences": 1})
    _send(log, "sentences", SENTENCES[0])
    topo, _ = _word_count("wc")
    store = DuckDBStore(tmp_path / "state.duckdb")
    written = spilled._write_files

    def elsewhere(*args: Any, **kwargs: Any) -> list[SpilledPartials]:
        """As if the executors wrote the files on their own disks: the driver finds none."""
        return [replace(p, files=()) for p in written(*args, **kwargs)]

    monkeypatch.setattr(spilled, "_write_files", elsewhere)
    runner = _runner(spark, topo, store, log, spill=True, max_spout_pending=1)
    with pytest.raises(ConfigError, match=r"hold 0 rows, but the Spark job wrote 5: .*spillDir"):
        runner.run_batch(1)
    assert store.last_committed("wc") is None
    assert not store.has_table("wc__counts") or store.size("wc__counts") == 0


def test_a_partials_file_gone_before_the_commit_is_refused(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"w": ["a"], "n": [1]}), path)
    schema = pa.schema([("w", pa.string()), ("n", pa.int64())])
    gone = SpilledPartials((str(path), str(tmp_path / "q.parquet")), schema, str(tmp_path), 2)
    store = DuckDBStore(tmp_path / "s.duckdb")
    with (
        pytest.raises(ConfigError, match=r"partials file .*q.parquet is missing"),
        staged_partials(store, "t", gone, ["w"], "n"),
    ):
        pass


def test_null_keys_in_files_are_refused(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"w": ["a", None], "n": [1, 2]}), path)
    parts = SpilledPartials(
        (str(path),), pa.schema([("w", pa.string()), ("n", pa.int64())]), "x", 2
    )
    store = DuckDBStore(tmp_path / "s.duckdb")
    with (
        pytest.raises(StateLayoutError, match="key column 'w' has 1 null value"),
        staged_partials(store, "t", parts, ["w"], "n"),
    ):
        pass


def test_spill_settings_are_checked_when_the_runner_is_created(spark: Any, tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "state.duckdb")

    def conf(**values: str) -> Any:
        return SimpleNamespace(conf=SimpleNamespace(get=lambda k, d=None: values.get(k, d)))

    assert open_spill(conf(), store, "wc") is None
    with pytest.raises(
        ConfigError, match=r"trident\.partials\.spill must be true or false, got .yes."
    ):
        open_spill(conf(**{SPILL_CONF: "yes"}), store, "wc")
    cluster = conf(**{SPILL_CONF: "true", "spark.master": "spark://10.0.0.1:7077"})
    with pytest.raises(ConfigError, match=r"set trident\.partials\.spillDir to a directory"):
        open_spill(cluster, store, "wc")
    shared = tmp_path / "shared"
    (shared / "wc" / "stale").mkdir(parents=True)
    found = open_spill(conf(**{SPILL_CONF: "true", SPILL_DIR_CONF: str(shared)}), store, "wc")
    assert found.root == shared.resolve() / "wc"
    assert not found.root.exists()  # a crashed attempt's leftovers removed
    with pytest.raises(ConfigError, match="needs a DuckDB or PostgreSQL state store"):
        open_spill(conf(**{SPILL_CONF: "true"}), SimpleNamespace(path="pg"), "wc")


def test_only_grouped_sql_combiners_whose_new_values_nobody_reads_spill() -> None:
    topo, counts = _word_count("wc")
    assert spillable(counts, topo)
    topo2, counts2 = _word_count("wc2")
    counts2.new_values_stream().as_output("changes")
    assert not spillable(counts2, topo2)
    topo3 = TridentTopology("g")
    spout = LogSpout("s", JsonScheme({"n": "bigint"}), SpoutConfig())
    total = topo3.new_stream("s", spout).persistent_aggregate(
        StateSpec.opaque("t"), "n", Count(), "c"
    )
    assert not spillable(total, topo3)


def test_dagster_runs_spill_and_bound_duckdb_memory_as_configured(
    spark: Any, tmp_path: Path
) -> None:
    import dagster as dg

    from trident_assets.dagster.factory import trident_definitions
    from trident_assets.dagster.partitions import txid_key
    from trident_assets.dagster.resources import TridentResource
    from trident_assets.examples.word_count import SENTENCES, build_word_count

    trident = TridentResource(
        home=str(tmp_path), spark_conf={SPILL_CONF: "true"}, state_memory_limit="256MB"
    )
    log = trident.log()
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    _send(log, "sentences", SENTENCES * 4)
    topo = build_word_count(max_batch_size=8)
    job = trident_definitions([topo], trident).resolve_implicit_global_asset_job_def()
    try:
        with dg.DagsterInstance.ephemeral() as instance:
            for txid in (1, 2, 3):
                instance.add_dynamic_partitions("word_count_txids", [txid_key(txid)])
                assert job.execute_in_process(
                    partition_key=txid_key(txid), instance=instance
                ).success
    finally:
        spark.conf.unset(SPILL_CONF)
    expected: dict[str, int] = {}
    for sentence in SENTENCES * 4:
        for word in sentence.split():
            expected[word] = expected.get(word, 0) + 1
    with trident.store() as store:
        counts = {r["word"]: r["value"] for r in store.scan("word_count__word_counts").to_pylist()}
        limit = store.fetch_rows("SELECT current_setting('memory_limit')")[0][0]
    assert counts == expected
    assert limit == "244.1 MiB"  # 256 MB
    spilled = tmp_path / "state.duckdb.partials" / "word_count"
    assert spilled.is_dir()
    assert list(spilled.iterdir()) == []


def _files_apply(store: DuckDBStore, parts: SpilledPartials, state_type: Any, txid: int) -> Any:
    with store.transaction(), staged_partials(store, "m", parts, ["w"], "n") as (view, stats):
        return apply_spilled_partials(
            store,
            "m",
            view,
            stats,
            parts,
            key_columns=["w"],
            value_column="n",
            combine="sum",
            state_type=state_type,
            txid=txid,
        )


def _parts(tmp_path: Path, name: str, rows: dict[str, list[Any]]) -> SpilledPartials:
    import pyarrow.parquet as pq

    table = pa.table(rows, pa.schema([("w", pa.string()), ("n", pa.int64())]))
    files: tuple[str, ...] = ()
    if table.num_rows:
        pq.write_table(table, tmp_path / f"{name}.parquet")
        files = (str(tmp_path / f"{name}.parquet"),)
    return SpilledPartials(files, table.schema, str(tmp_path), table.num_rows)


def test_files_follow_the_txid_rules_of_collected_partials(tmp_path: Path) -> None:
    from trident_assets.core.values import StateType
    from trident_assets.errors import StaleTxidError

    store = DuckDBStore(tmp_path / "s.duckdb")
    one = _parts(tmp_path, "one", {"w": ["a", "b"], "n": [2, 3]})
    two = _parts(tmp_path, "two", {"w": ["b", "c"], "n": [10, 1]})
    none = _parts(tmp_path, "none", {"w": [], "n": []})
    transactional = StateType.TRANSACTIONAL
    assert _files_apply(store, one, transactional, 1) == MergeResult(2, 2, 0, None)
    assert _files_apply(store, one, transactional, 1) == MergeResult(2, 0, 2, None)  # replay
    assert _files_apply(store, two, transactional, 2) == MergeResult(2, 2, 0, None)
    assert _files_apply(store, none, transactional, 3) == MergeResult(0, 0, 0, None)
    rows = store.fetch_rows("SELECT w, txid, curr FROM m ORDER BY w")
    assert rows == [("a", 1, 2), ("b", 2, 13), ("c", 2, 1)]
    opaque = DuckDBStore(tmp_path / "o.duckdb")
    _files_apply(opaque, one, StateType.OPAQUE, 1)
    _files_apply(opaque, two, StateType.OPAQUE, 2)
    _files_apply(opaque, two, StateType.OPAQUE, 2)  # a replay recomputes from prev
    assert {r["w"]: r["value"] for r in opaque.scan("m").to_pylist()} == {"a": 2, "b": 13, "c": 1}
    with pytest.raises(StaleTxidError, match=r"Current batch \(1\) is behind state's batch \(2\)"):
        _files_apply(opaque, two, StateType.OPAQUE, 1)
    assert {r["w"]: r["value"] for r in opaque.scan("m").to_pylist()} == {"a": 2, "b": 13, "c": 1}


def test_a_retried_task_replaces_what_its_earlier_attempt_copied(pg_dsn: str) -> None:
    from trident_assets.backends.postgres_store import PostgresStore
    from trident_assets.spark.spilled import PART_COLUMN, TXID_COLUMN, copy_into_staging

    store = PostgresStore(pg_dsn)
    schema = pa.schema([("w", pa.string()), ("n", pa.int64())])
    for tag in (0, 1):
        store.create_unlogged(f"stage_{tag}", schema.append(pa.field(PART_COLUMN, pa.int32())))
    rows = pa.record_batch({"w": ["a", "b", "c"], "n": [1, 2, 3], TXID_COLUMN: [0, 0, 1]})
    task = copy_into_staging(pg_dsn, ["stage_0", "stage_1"], tagged=True)
    for _attempt in range(2):  # the same partition (0 outside Spark) written twice
        (counts,) = list(task(iter([rows])))
        assert counts.to_pydict() == {"tag": [0, 1], "n": [2, 1]}
    assert store.fetch_rows('SELECT w, n, "__trident_part" FROM stage_0 ORDER BY w') == [
        ("a", 1, 0),
        ("b", 2, 0),
    ]
    assert store.fetch_rows("SELECT w, n FROM stage_1") == [("c", 3)]
    store.close()

"""The Arrow split-and-count kernel: the same state, new values and dead letters as Spark's plan."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from trident_assets import Count, Sum
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.arrow_partials import (
    DEAD_COLUMN,
    CountSplit,
    combine_task_partials,
    count_split,
)
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.kernel_plan import (
    ARROW_KERNEL_CONF,
    DEFAULT_MIN_RECORDS,
    MIN_RECORDS_CONF,
    arrow_kernel,
)
from trident_assets.spark.partials import combiner_partials
from trident_assets.spark.schemes import JsonScheme, StringScheme
from trident_assets.spark.txid_tags import TXID_COLUMN
from trident_assets.spouts.config import SpoutConfig
from trident_assets.spouts.file_spout import FileSpout
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.operations import FilterNull, Split
from trident_assets.stream.topology import StateSpec, TridentTopology
from trident_assets_tests.test_executor import _log, _send


def _counted(run: BatchRun) -> dict[str, int]:
    """The dead letters an Arrow kernel counted computing the chunk's ``counts`` partials."""
    topology = run.runner.topology
    job = combiner_partials(run, topology.states["counts"], topology, None)
    return job.run().counted_dead


VALUES: list[bytes] = [
    b"the cow  the",  # a doubled separator: an empty piece, dropped
    b" lead and trail ",
    b"",
    "\u00e9t\u00e9 \u00fcber caf\u00e9".encode(),
    b"tab\tis not a separator",
    b"\xff\xfe bad",  # not UTF-8
    b"\xc0\xaf overlong",  # an overlong encoding of '/'
    b"\xed\xa0\x80 surrogate",  # a UTF-16 surrogate encoded in UTF-8
    b"cow",
    b"the--moon--",
    b"x",
    b"y y",
]
"""Four records per batch: 3 batches, three of them malformed (not valid UTF-8)."""

BAD = {5, 6, 7}


@pytest.fixture(autouse=True)
def _kernel_for_small_batches(spark: Any) -> Any:
    """These batches are tiny: run the kernel on them anyway (no size threshold)."""
    spark.conf.set(MIN_RECORDS_CONF, "0")
    yield
    spark.conf.unset(MIN_RECORDS_CONF)


def _topology(name: str, sep: str = " ", group: tuple[str, ...] = ("word",)) -> TridentTopology:
    topo = TridentTopology(name)
    spout = LogSpout("sentences", StringScheme("sentence"), SpoutConfig(max_batch_size=4))
    stream = topo.new_stream("sentences", spout).each("sentence", Split(sep), "word")
    stream.group_by(list(group)).persistent_aggregate(
        StateSpec.opaque("counts"), "word", Count(), "value"
    )  # no new-values stream: it reads the state, so its chunk would run batch by batch
    return topo


def _expected(sep: str, group: tuple[str, ...]) -> Counter[tuple[str, ...]]:
    counts: Counter[tuple[str, ...]] = Counter()
    for i, raw in enumerate(VALUES):
        if i in BAD:
            continue
        text = raw.decode()
        for word in text.split(sep):
            if word:
                row = {"sentence": text, "word": word}
                counts[tuple(row[g] for g in group)] += 1
    return counts


def _run(
    spark: Any,
    tmp_path: Path,
    name: str,
    kernel: bool,
    sep: str,
    group: tuple[str, ...],
    pending: int,
):
    log = _log(tmp_path / name, {"sentences": 1})
    _send(log, "sentences", VALUES)
    store = DuckDBStore(tmp_path / f"{name}.duckdb")
    spark.conf.set(ARROW_KERNEL_CONF, "true" if kernel else "false")
    try:
        topo = _topology(name, sep, group)
        runner = TopologyRunner(topo, spark, store, log, max_spout_pending=pending)
        outcomes = list(runner.run_batches([1, 2, 3]))
    finally:
        spark.conf.unset(ARROW_KERNEL_CONF)
    assert [o.txid for o in outcomes] == [1, 2, 3]
    state = {
        tuple(r[g] for g in group): r["value"] for r in store.scan(f"{name}__counts").to_pylist()
    }
    partials = [
        store.fetch_rows(f'SELECT * FROM "{name}__counts" WHERE txid = ? ORDER BY ALL', [t])
        for t in (1, 2, 3)
    ]
    dead = store.fetch_rows(
        'SELECT txid, "offset", reason FROM _trident_dead_letters ORDER BY txid, "offset"'
    )
    store.close()
    return state, partials, dead


@pytest.mark.parametrize("pending", [1, 3], ids=["batch-by-batch", "pipelined"])
@pytest.mark.parametrize(
    ("sep", "group"), [(" ", ("word",)), ("--", ("sentence", "word"))], ids=["space", "dashes"]
)
def test_kernel_commits_what_sparks_plan_commits(
    spark: Any, tmp_path: Path, sep: str, group: tuple[str, ...], pending: int
) -> None:
    with_kernel = _run(spark, tmp_path, "k", True, sep, group, pending)
    without = _run(spark, tmp_path, "s", False, sep, group, pending)
    assert with_kernel == without
    state, _versions, dead = with_kernel
    assert state == dict(_expected(sep, group))
    assert dead == [
        (2, 5, "value is not valid UTF-8"),
        (2, 6, "value is not valid UTF-8"),
        (2, 7, "value is not valid UTF-8"),
    ]


def test_a_chunk_of_the_word_count_runs_the_kernel_and_counts_its_dead_letters(
    spark: Any, tmp_path: Path
) -> None:
    log = _log(tmp_path, {"sentences": 2})
    _send(log, "sentences", VALUES)
    with DuckDBStore(tmp_path / "s.duckdb") as store:
        runner = TopologyRunner(_topology("wc"), spark, store, log, max_spout_pending=3)
        batches, pipelined = runner.txid_loop().emit(1, 3)
        assert pipelined
        assert len(batches) == 3
        run = BatchRun(runner, batches)
        prepared = run.plan()()
        assert _counted(run) == {"sentences": 3}
    spark.conf.set(ARROW_KERNEL_CONF, "false")
    try:
        with DuckDBStore(tmp_path / "off.duckdb") as store:
            runner = TopologyRunner(_topology("wc"), spark, store, log, max_spout_pending=3)
            batches, _ = runner.txid_loop().emit(1, 3)
            off = BatchRun(runner, batches)
            off.plan()()
            assert _counted(off) == {}, "trident.partials.arrowKernel=false: Spark's plan"
    finally:
        spark.conf.unset(ARROW_KERNEL_CONF)
    partials = {t: p.partials["counts"] for t, p in prepared.items()}
    assert all(t.column_names == ["word", "value"] for t in partials.values())
    got = Counter(dict.fromkeys([], 0))
    for table in partials.values():
        got.update(dict(zip(*(c.to_pylist() for c in table.columns), strict=True)))
    assert got == Counter({k[0]: v for k, v in _expected(" ", ("word",)).items()})
    assert sum(p.dead["sentences"].num_rows for p in prepared.values()) == 3


def test_only_the_split_and_count_shape_is_eligible() -> None:
    spec = arrow_kernel(_topology("wc").states["counts"], TXID_COLUMN)
    assert spec is not None
    assert spec[0] == CountSplit("sentence", "word", " ", ("word",), TXID_COLUMN, "value")

    def state_of(build: Any) -> Any:
        topo = TridentTopology("t")
        build(topo)
        return topo.states["counts"]

    spout = LogSpout("sentences", StringScheme("sentence"), SpoutConfig())
    json_spout = LogSpout("sentences", JsonScheme({"sentence": "string"}), SpoutConfig())
    shapes = {
        "sum": lambda t: t.new_stream("s", spout).each("sentence", Split(), "word")
        .group_by("word").persistent_aggregate(StateSpec.opaque("counts"), "word", Sum(), "v"),
        "filter between": lambda t: t.new_stream("s", spout).each("sentence", Split(), "word")
        .each(("word",), FilterNull()).group_by("word")
        .persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "v"),
        "json scheme": lambda t: t.new_stream("s", json_spout).each("sentence", Split(), "word")
        .group_by("word").persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "v"),
        "global": lambda t: t.new_stream("s", spout).each("sentence", Split(), "word")
        .persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "v"),
    }  # fmt: skip
    assert {
        name: arrow_kernel(state_of(b), TXID_COLUMN) for name, b in shapes.items()
    } == dict.fromkeys(shapes)


def test_kernel_batches_combine_into_counts_and_dead_letters() -> None:
    spec = CountSplit("s", "w", " ", ("w",), "t", "n")
    batch = pa.record_batch(
        {
            "value": pa.array([b"a b a", None, b"\xff", b"b"], pa.binary()),
            "t": pa.array([1, 1, 2, 2], pa.int64()),
        }
    )
    out = pa.Table.from_batches(list(count_split(spec, iter([batch, batch]))))
    assert out.column_names == ["w", "t", "n", DEAD_COLUMN]
    assert out.to_pylist()[-1] == {"w": None, "t": None, "n": None, DEAD_COLUMN: 4}
    counts, dead = combine_task_partials(spec, pa.concat_tables([out, out]))
    assert dead == 8
    assert sorted(counts.to_pylist(), key=lambda r: (r["t"], r["w"])) == [
        {"w": "a", "t": 1, "n": 8},
        {"w": "b", "t": 1, "n": 4},
        {"w": "b", "t": 2, "n": 4},
    ]


def test_one_batch_runs_the_kernel_and_skips_the_dead_letter_job_when_none(
    spark: Any, tmp_path: Path
) -> None:
    log = _log(tmp_path, {"sentences": 1})
    _send(log, "sentences", [b"a b", b"b"])
    with DuckDBStore(tmp_path / "s.duckdb") as store:
        runner = TopologyRunner(_topology("wc"), spark, store, log, max_spout_pending=1)
        (batch,) = runner.txid_loop().emit(1, 1)[0]
        run = BatchRun.alone(runner, *batch)
        jobs: list[str] = []
        to_arrow = run.to_arrow

        def recorded(label: str, frame: Any) -> Any:
            jobs.append(label)
            return to_arrow(label, frame)

        run.to_arrow = recorded  # type: ignore[method-assign]
        prepared = run.prepare()
    assert jobs == ["kernel:counts"]  # the kernel counted no dead letter: no job collects them
    assert prepared.partials["counts"].to_pylist() in (
        [{"word": "a", "value": 1}, {"word": "b", "value": 2}],
        [{"word": "b", "value": 2}, {"word": "a", "value": 1}],
    )
    assert prepared.dead["sentences"].num_rows == 0


@pytest.mark.parametrize("pending", [1, 3], ids=["batch-by-batch", "pipelined"])
def test_executors_without_pyarrow_fall_back_to_sparks_operators(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pending: int
) -> None:
    """A cluster whose Python lacks pyarrow still runs the word count, on Spark's operators."""
    import trident_assets.spark.partials as partials

    def no_pyarrow(raw: Any, spec: CountSplit) -> Any:
        def fail(batches: Any) -> Any:
            raise ModuleNotFoundError("No module named 'pyarrow'")
            yield  # a generator, as mapInArrow expects

        return raw.select("value", spec.txid).mapInArrow(fail, spec.schema())

    monkeypatch.setattr(partials, "kernel_frame", no_pyarrow)  # one batch or a chunk alike
    log = _log(tmp_path, {"sentences": 1})
    _send(log, "sentences", VALUES)
    try:
        with DuckDBStore(tmp_path / "s.duckdb") as store:
            runner = TopologyRunner(_topology("wc"), spark, store, log, max_spout_pending=pending)
            assert [o.txid for o in runner.run_batches([1, 2, 3])] == [1, 2, 3]
            assert spark.conf.get(ARROW_KERNEL_CONF) == "false", "off for the session"
            state = {r["word"]: r["value"] for r in store.scan("wc__counts").to_pylist()}
            dead = store.fetch_rows('SELECT "offset" FROM _trident_dead_letters ORDER BY 1')
    finally:
        spark.conf.unset(ARROW_KERNEL_CONF)
    assert state == {k[0]: v for k, v in _expected(" ", ("word",)).items()}
    assert dead == [(5,), (6,), (7,)]


def test_small_batches_use_sparks_operators(spark: Any, tmp_path: Path) -> None:
    """Below ``minRecords`` the kernel's Python workers would cost more than it saves."""
    spark.conf.unset(MIN_RECORDS_CONF)
    assert len(VALUES) < DEFAULT_MIN_RECORDS
    log = _log(tmp_path, {"sentences": 1})
    _send(log, "sentences", VALUES)
    with DuckDBStore(tmp_path / "s.duckdb") as store:
        runner = TopologyRunner(_topology("wc"), spark, store, log, max_spout_pending=3)
        batches, _ = runner.txid_loop().emit(1, 3)
        run = BatchRun(runner, batches)
        run.plan()()
        one = BatchRun.alone(runner, *batches[0])
        one.prepare()
        assert (_counted(run), one.counted_dead) == ({}, {})
    spark.conf.set(MIN_RECORDS_CONF, str(len(VALUES)))  # the chunk's 12 records: enough
    with DuckDBStore(tmp_path / "t.duckdb") as store:
        runner = TopologyRunner(_topology("wc"), spark, store, log, max_spout_pending=3)
        batches, _ = runner.txid_loop().emit(1, 3)
        run = BatchRun(runner, batches)
        run.plan()()
        assert _counted(run) == {"sentences": 3}


def _text_files(land: Path) -> None:
    """``VALUES`` as three text files of four lines each (an empty line is no record)."""
    land.mkdir()
    for i in range(3):
        path = land / f"{i}.txt"
        path.write_bytes(b"".join(v + b"\n" for v in VALUES[4 * i : 4 * i + 4]))
        os.utime(path, ns=(1_700_000_000_000_000_000 + i, 1_700_000_000_000_000_000 + i))


def _file_word_count(land: Path) -> TridentTopology:
    topo = TridentTopology("files")
    spout = FileSpout(str(land), StringScheme("sentence"), max_files=1, stable_after=0)
    stream = topo.new_stream("files", spout).each("sentence", Split(" "), "word")
    stream.group_by("word").persistent_aggregate(
        StateSpec.opaque("counts"), "word", Count(), "value"
    )
    return topo


def test_a_chunk_of_a_text_file_spout_runs_the_kernel_and_commits_what_sparks_plan_commits(
    spark: Any, tmp_path: Path
) -> None:
    land = tmp_path / "in"
    _text_files(land)
    log = PartitionedLog(tmp_path / "log")
    with DuckDBStore(tmp_path / "plan.duckdb") as store:
        runner = TopologyRunner(_file_word_count(land), spark, store, log, max_spout_pending=3)
        batches, _ = runner.txid_loop().emit(1, 3)
        run = BatchRun(runner, batches)
        run.plan()()
        assert _counted(run) == {"files": 3}, "the kernel counted the chunk's dead letters"
    results = []
    for kernel in (True, False):
        spark.conf.set(ARROW_KERNEL_CONF, str(kernel).lower())
        try:
            with DuckDBStore(tmp_path / f"{kernel}.duckdb") as store:
                topo = _file_word_count(land)
                runner = TopologyRunner(topo, spark, store, log, max_spout_pending=3)
                assert [o.txid for o in runner.run_batches([1, 2, 3])] == [1, 2, 3]
                state = {r["word"]: r["value"] for r in store.scan("files__counts").to_pylist()}
                dead = store.fetch_rows(
                    'SELECT txid, topic, "offset", reason FROM _trident_dead_letters ORDER BY ALL'
                )
                results.append((state, dead))
        finally:
            spark.conf.unset(ARROW_KERNEL_CONF)
    assert results[0] == results[1]
    state, dead = results[0]
    assert state == {k[0]: v for k, v in _expected(" ", ("word",)).items()}
    uri = f"file://{land}/1.txt"
    assert dead == [(2, uri, n, "value is not valid UTF-8") for n in (2, 3, 4)]

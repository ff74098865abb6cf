"""Smoke test of the benchmark's parts: corpus, ground truth, DuckDB baseline, our pipeline."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench import pipeline, spark_batch
from bench.corpus import TOPIC, CorpusSpec, ground_truth, write_corpus
from bench.run_all import duckdb_baseline, verify
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.spilled import SPILL_CONF
from trident_assets_tests.conftest import JVM_ENV

SPEC = CorpusSpec(batches=2, sentences=301, vocab=500, partitions=2, seed=11)


def _as_dict(table: pa.Table) -> dict[str, int]:
    return dict(
        zip(table.column("word").to_pylist(), table.column("count").to_pylist(), strict=True)
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    return write_corpus(SPEC, tmp_path_factory.mktemp("corpus"))


def test_corpus_is_deterministic_and_its_truth_exact(corpus, tmp_path: Path) -> None:
    log = PartitionedLog(corpus.log_root)
    # each corpus batch is one segment per partition: 151 + 150 sentences
    assert [log.latest_offset(TOPIC, p) for p in range(2)] == [302, 300]
    counted: Counter[str] = Counter()
    for p in range(2):
        for value in log.read(TOPIC, p, 0, log.latest_offset(TOPIC, p) - 1).column("value"):
            words = value.as_py().decode().split(" ")
            assert len(words) == 8
            counted.update(words)
    assert _as_dict(corpus.truth) == dict(counted)
    assert sum(counted.values()) == SPEC.total_words == 4816
    files = [pq.read_table(f).column("value").to_pylist() for f in corpus.files]
    assert [len(f) for f in files] == [301, 301]
    first = log.read(TOPIC, 0, 0, 150).column("value").to_pylist()
    assert [v.encode() for v in files[0][:151]] == first, "file 0 = log batch 0, partition 0"
    assert ground_truth(SPEC).equals(corpus.truth)
    again = write_corpus(SPEC, tmp_path / "again", log_files=False)
    assert again.truth.equals(corpus.truth)
    other = write_corpus(dataclasses.replace(SPEC, seed=12), tmp_path / "other", log_files=False)
    assert not other.truth.equals(corpus.truth)


def test_duckdb_baseline_and_verify(corpus) -> None:
    result, counts = duckdb_baseline(list(corpus.files))
    assert result["words"] == 4816
    check = verify(corpus.truth, counts)
    assert check == {
        "identical": True,
        "keys": corpus.truth.num_rows,
        "truth_keys": corpus.truth.num_rows,
        "missing_or_different": 0,
        "unexpected": 0,
    }
    counts_list = corpus.truth.column("count").to_pylist()
    counts_list[0] += 1
    off_by_one = corpus.truth.set_column(1, "count", pa.array(counts_list, pa.int64()))
    check = verify(corpus.truth, off_by_one)
    assert (check["identical"], check["missing_or_different"], check["unexpected"]) == (
        False,
        1,
        1,
    )
    fewer = verify(corpus.truth, corpus.truth.slice(1))
    assert (fewer["missing_or_different"], fewer["unexpected"]) == (1, 0)


def test_trident_catch_up_run_counts_exactly(corpus, spark, tmp_path: Path) -> None:
    from trident_assets.examples.word_count import build_word_count

    topo = build_word_count(max_batch_size=SPEC.sentences)
    trident = pipeline._trident(corpus.log_root.parent, tmp_path / "state.duckdb", None, None)
    instance = pipeline._instance(tmp_path / "dagster")
    walls = pipeline.drive(topo, trident, instance, [1, 2], catch_up=True)
    assert len(walls) == 1
    stages = pipeline.batch_timings(instance, limit=10)
    assert sorted(stages) == [1, 2]
    assert [stages[t]["tuples_in"] for t in (1, 2)] == [301.0, 301.0]
    assert pipeline.export_counts(tmp_path / "state.duckdb", tmp_path / "c.parquet") == (
        corpus.truth.num_rows
    )
    assert verify(corpus.truth, pq.read_table(tmp_path / "c.parquet"))["identical"]


def test_spark_batch_job_alone_counts_exactly(corpus, spark, tmp_path: Path) -> None:
    """The "Spark batch job alone" row: the log's segment files, chunked jobs, no state."""
    files = spark_batch.batch_files(corpus.log_root, TOPIC, SPEC.sentences, SPEC.partitions, 1)
    assert len(files) == 2, "corpus batch 1 = one segment per partition"
    tables = [
        spark_batch.count_job(
            spark,
            spark_batch.batch_files(corpus.log_root, TOPIC, SPEC.sentences, SPEC.partitions, b),
        ).toArrow()
        for b in range(SPEC.batches)
    ]
    total = pa.concat_tables(tables).group_by("word").aggregate([("count", "sum")])
    assert verify(corpus.truth, total.rename_columns(["word", "count"]))["identical"]
    res = spark_batch.run_in_subprocess(
        corpus.log_root,
        tmp_path / "alone",
        sentences=SPEC.sentences,
        batches=SPEC.batches,
        partitions=SPEC.partitions,
        chunk=1,
        counts=tmp_path / "alone.parquet",
    )
    assert (res["jobs"], res["sentences"]) == (2, 602)
    assert verify(corpus.truth, pq.read_table(tmp_path / "alone.parquet"))["identical"]
    assert spark_batch.summarize(res, 8)["words"] == 4816


def test_dagster_floor_runs_the_do_nothing_job_with_our_event_count(tmp_path: Path) -> None:
    """`python -m bench.dagster_floor`, as documented, in a clean child process."""
    import json
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "bench.dagster_floor", "--runs", "3", "--warm", "1",
         "--reuse-engines"],
        cwd=repo, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["assets"], result["checks"]) == (6, 9)
    assert result["event_log_storage"] == "ReusingSqliteEventLogStorage"
    # run start/success, 6 + 9 planned, 6 + 9 written, step events: the ~54 of a batch run
    assert result["events_per_run"] == 54
    assert len(result["run_walls_s"]) == 3
    after_warm = result["run_walls_s"][1:]
    assert min(after_warm) - 0.001 <= result["median_run_s"] <= max(after_warm) + 0.001


def test_dagster_floor_lineage_is_the_example_word_counts() -> None:
    """``--lineage`` gives the floor's six assets exactly the example's dependency edges."""
    from bench.dagster_floor import LINEAGE
    from trident_assets.dagster.graph import topology_graph

    graph = topology_graph(pipeline.build_topology("example", 10))
    index = {node.key: i for i, node in enumerate(graph.values())}
    edges = {index[n.key]: tuple(index[d] for d in n.deps) for n in graph.values() if n.deps}
    assert list(graph) == [
        "spout:sentences",
        "spout:queries",
        "partials:word_counts",
        "state:word_counts",
        "new_values:word_counts",
        "output:words",
    ]
    assert edges == LINEAGE == {2: (0,), 3: (2,), 4: (3,), 5: (1, 3)}


def test_dagster_floor_with_the_example_lineage_and_dynamic_partitions(tmp_path: Path) -> None:
    """`python -m bench.dagster_floor --lineage --dynamic`: the same events, the full shape."""
    import json
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "bench.dagster_floor", "--runs", "2", "--warm", "1",
         "--lineage", "--dynamic"],
        cwd=repo, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["lineage"], result["dynamic_partitions"]) == (True, True)
    assert (result["assets"], result["checks"], result["events_per_run"]) == (6, 9, 54)
    assert result["event_log_storage"] == "SqliteEventLogStorage"
    assert result["median_run_s"] == result["run_walls_s"][1]


def test_codegen_batches_compares_both_modes_on_the_same_records(tmp_path: Path) -> None:
    """`python -m bench.codegen_batches`, as documented, in a clean child process."""
    import json
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "bench.codegen_batches", "--sizes", "40", "--batches", "1",
         "--warm", "0"],
        cwd=repo, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **JVM_ENV},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    rows = [(r["topology"], r["records_per_batch"], r["same_state"]) for r in result["results"]]
    assert rows == [("words", 40, True), ("clicks", 40, True)]
    for r in result["results"]:
        assert set(r["median_batch_s"]) == {"generated", "interpreted"}
        ratio = r["median_batch_s"]["interpreted"] / r["median_batch_s"]["generated"]
        assert abs(r["interpreted_vs_generated"] - ratio) < 0.01


def test_driver_memory_batch_holds_exactly_its_distinct_keys(spark, tmp_path: Path) -> None:
    """`bench.driver_memory`'s batch on the session: N distinct words, each counted once."""
    from bench import driver_memory

    assert driver_memory.sentences(1, 2).to_pylist() == [
        "k8 k9 k10 k11 k12 k13 k14 k15",
        "k16 k17 k18 k19 k20 k21 k22 k23",
    ]
    assert driver_memory.write_log(tmp_path / "log", 1_600) == 200
    log = PartitionedLog(tmp_path / "log")
    assert [log.latest_offset("sentences", p) for p in range(2)] == [100, 100]
    result = driver_memory.measure(spark, tmp_path, 1_600)
    assert (result["keys"], result["sentences"], result["exact"]) == (1_600, 200, True)
    driver_memory.write_log(tmp_path / "spill" / "log", 1_600)
    spark.conf.set(SPILL_CONF, "true")  # the spill mode: files, and a DuckDB memory limit
    try:
        spilled = driver_memory.measure(spark, tmp_path / "spill", 1_600, "256MB")
    finally:
        spark.conf.unset(SPILL_CONF)
    assert (spilled["keys"], spilled["exact"]) == (1_600, True)
    assert list((tmp_path / "spill" / "state.duckdb.partials" / "word_count").iterdir()) == []
    assert {"spark", "commit", "total"} <= set(result["timings_s"])
    for when in ("peak_before_mib", "peak_after_mib"):
        assert set(result[when]) == {"py", "jvm"}
        assert result[when]["py"] > 0
    assert result["peak_after_mib"]["py"] >= result["peak_before_mib"]["py"]
    sizes = [{**result, "kernel": kernel} for kernel in ("on", "off", "off")]
    report = {
        "machine_line": "a machine.",
        "driver_memory": "4g",
        "duckdb_memory": "256MB",
        "sizes": sizes,
    }
    table = driver_memory.render(report)
    assert table.startswith("Machine: a machine. One txid per size")
    assert "DuckDB state (memory_limit 256MB)." in table
    assert "| 1,600 | Arrow kernel | " in table
    assert "| 1,600 | Spark's operators | " in table
    last = table.rstrip().splitlines()[-1]
    assert last.startswith("Spark's operators, from 1,600 to 1,600 keys (1x): ")
    assert last.endswith("commit time per key 1.00x (1.0 = linear).")
    assert set(result["py_rss_peak_mib"]) == {"job", "commit"}

"""Smoke test of ``bench.event_windows`` at its smallest size: both systems' windows agree.

Ours (``TopologyRunner`` catch-up) and the Spark Structured Streaming query (append mode) run
in-process on the session's SparkSession over the same tiny corpus; their final windows must
equal the numpy ground truth exactly, which must itself equal the plain-Python model of
``trident_assets_tests.event_window_model.reference_windows``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from bench import event_windows as ev
from trident_assets.core.event_windows import EventWindow
from trident_assets_tests.event_window_model import reference_windows

SPEC = ev.EvSpec(
    batches=4, sentences=60, vocab=30, words_per_sentence=3, batch_seconds=30, late=0.05, seed=5
)


def test_truth_matches_the_reference_model() -> None:
    truth = ev.ground_truth(SPEC)
    cdf = ev.zipf_cdf(SPEC)
    batches = []
    for i in range(SPEC.batches):
        ids, ts = ev.batch_data(SPEC, i, cdf)
        batches.append(
            [(f"w{w}", int(t) * 1000, None) for row, t in zip(ids, ts, strict=True) for w in row]
        )
    window = EventWindow.tumbling("1 minute", time_field="ts", allowed_lateness="10 s")
    ref = reference_windows(window, batches)
    finals = sorted(
        (r["word"], r["window_start_us"], r["window_end_us"], r["count"])
        for r in truth.finals.to_pylist()
    )
    opened = sorted(
        (r["word"], r["window_start_us"], r["window_end_us"], r["count"])
        for r in truth.open.to_pylist()
    )
    assert finals == sorted(f[:4] for f in ref.finals)
    assert opened == sorted(ref.open)
    assert truth.late_words == len(ref.late) == 24
    assert (truth.finals.num_rows, truth.open.num_rows) == (32, 30)
    assert truth.late_by_batch == [0, 0, 9, 15]
    assert truth.rules_differ == 0


def test_ours_and_spark_ss_windows_agree(spark: Any, tmp_path: Path) -> None:
    corpus = ev.write_corpus(SPEC, tmp_path / "corpus")
    truth = ev.ground_truth(SPEC)
    topo = ev.build_topology(SPEC.sentences, SPEC.lateness_s)
    _wall, series = ev.catchup(
        spark, topo, corpus.root, tmp_path / "state.duckdb", list(range(1, 5))
    )
    assert [s["late_records"] for s in series] == truth.late_by_batch
    assert [s["open_windows"] for s in series][-1] == truth.open.num_rows
    assert series[-1]["final_windows"] == truth.finals.num_rows
    sizes = ev.export_windows(tmp_path / "state.duckdb", tmp_path / "ours")
    assert sizes == {
        "finals": truth.finals.num_rows,
        "open": truth.open.num_rows,
        "late_dead_letters": truth.late_words,
        "new_values_rows": truth.finals.num_rows,
    }
    provider = "spark.sql.streaming.stateStore.providerClass"
    before = spark.conf.get(provider, None)
    spark.conf.set(provider, ev.PROVIDERS["hdfs"])
    try:
        ss = ev.ss_query(spark, corpus.files_dir, tmp_path / "ss", SPEC.lateness_s)
    finally:
        if before is None:
            spark.conf.unset(provider)
        else:
            spark.conf.set(provider, before)
    assert ss["data_batches"] == 4
    assert ss["sentences"] == SPEC.batches * SPEC.sentences
    result = ev.compare(truth, tmp_path / "ours", sum(s["late_records"] for s in series),
                        tmp_path / "ss" / "windows", ss["final_watermark"])  # fmt: skip
    assert result["ours_vs_truth_finals"]["identical"]
    assert result["ours_vs_truth_open"]["identical"]
    assert result["spark_vs_truth_finals"]["identical"]
    assert result["ours_vs_spark_finals"] == {
        "identical": True,
        "windows": truth.finals.num_rows,
        "missing_or_different": 0,
        "unexpected": 0,
    }
    assert result["all_exact"]
    spark_finals = pq.read_table(tmp_path / "ss" / "windows" / "finals.parquet")
    assert spark_finals.num_rows == truth.finals.num_rows

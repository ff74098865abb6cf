"""The warm-up of `trident ui`'s Spark Connect server: its batches, log and topology, a failure.

The warm-up on a running server is tested with `trident ui` itself
(:mod:`trident_assets_tests.test_ui_warm_spark`).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from trident_assets.log.records import LOG_SCHEMA
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.warm_up import (
    append_batch,
    synthetic_batch,
    warm_up,
    warm_up_server,
    warm_up_topology,
)


def test_synthetic_batch_is_log_records_of_six_words_each_a_new_word_per_record() -> None:
    table = synthetic_batch(3, first=6)
    assert table.schema == LOG_SCHEMA
    assert table.to_pylist() == [
        {
            "topic": "sentences",
            "partition": offset % 2,
            "offset": offset,
            "timestamp": datetime.fromtimestamp((1_700_000_000_000 + offset) / 1000, UTC),
            "key": None,
            "value": value,
            "headers": None,
        }
        for offset, value in [
            (6, b"went and w6 the over moon"),
            (7, b"to the w7 the moon moon"),
            (8, b"store cow w8 the man moon"),
        ]
    ]


def test_a_warm_up_batch_is_appended_in_small_segments_and_planned_whole(tmp_path: Path) -> None:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("sentences", 2)
    first = append_batch(log, 1, synthetic_batch(1_500))["sentences"]
    second = append_batch(log, 2, synthetic_batch(4, first=1_500))["sentences"]
    assert (first.txid, first.record_count, first.offsets_metadata()) == (
        1,
        1_500,
        {"sentences@0": [0, 749], "sentences@1": [0, 749]},
    )
    assert second.offsets_metadata() == {"sentences@0": [750, 751], "sentences@1": [750, 751]}
    assert len(log.segment_files("sentences", 0, 0, 749)) == 2  # 500 + 250 records
    assert log.read("sentences", 1, 750, 751).column("value").to_pylist() == [
        b"cow moon w1501 the store moon",
        b"over went w1503 the the moon",
    ]


def test_warm_up_topology_is_the_word_counts_counting_stream() -> None:
    topo = warm_up_topology()
    assert (topo.name, list(topo.spouts), list(topo.states), list(topo.outputs)) == (
        "warm_up",
        ["sentences"],
        ["word_counts"],
        [],
    )


def test_a_failed_warm_up_is_one_line_and_nothing_after_a_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever fails (here the session: no server answers), one line names it, then quiet.

    The failure is made here, not left to Spark: a session of this process (the suite's
    local one) would refuse a remote session first, with another message.
    """
    from trident_assets.spark import session

    def refuse(**_: object) -> None:
        raise ConnectionRefusedError("no Spark Connect server at sc://127.0.0.1:1")

    monkeypatch.setattr(session, "build_spark_session", refuse)
    lines: list[str] = []
    warm_up_server("sc://127.0.0.1:1", tmp_path, lines.append, threading.Event()).join(60)
    assert lines == [
        "Spark Connect warm-up failed, ignored (ConnectionRefusedError: "
        "no Spark Connect server at sc://127.0.0.1:1)"
    ]
    stopping = threading.Event()
    stopping.set()
    quiet: list[str] = []
    warm_up_server("sc://127.0.0.1:1", tmp_path, quiet.append, stopping).join(60)
    assert quiet == []
    assert list(tmp_path.iterdir()) == []


def test_no_warm_up_batch_starts_after_the_budget_and_its_log_is_removed(tmp_path: Path) -> None:
    assert warm_up(None, tmp_path, (5_000,), budget_s=-1.0) == 0
    assert list(tmp_path.iterdir()) == []

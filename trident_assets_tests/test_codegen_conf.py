"""Small batches run interpreted, large ones with Spark's generated code: the same results.

``trident.codegen.minRecords`` (Spark conf) decides per batch or chunk; the suite's batches
are small, so most tests run interpreted. Here one topology with every kind of expression
the engine builds (a strict JSON scheme with dead letters, a sliding event-time window with
late and unreadable records, a grouped Sum with nulls) runs the same batches both ways.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import trident_assets as ta
from trident_assets.backends.window_store import read_finals, read_open
from trident_assets.errors import ConfigError
from trident_assets.spark.codegen_conf import (
    CODEGEN_MIN_RECORDS_CONF,
    DEFAULT_CODEGEN_MIN_RECORDS,
    INTERPRETED,
    codegen_conf,
)

WINDOW = ta.EventWindow.sliding("10 s", "5 s", time_field="ts", allowed_lateness="5 s")
BATCHES = [
    ['{"page":"a","ts":"2026-01-01 00:00:01","n":1}', '{"page":"b","ts":"2026-01-01 00:00:12"}'],
    [
        '{"page":"a","ts":"2026-01-01 00:00:03","n":2}',
        '{"page":"b","ts":null,"n":3}',  # unreadable event time
        '{"page":"b","ts":"junk","n":4}',
        "{not json",  # the scheme's dead letter
        '{"page":"c","ts":"2026-01-01 00:00:21","n":"x"}',  # a member of the wrong kind
        '{"page":"c","ts":"2026-01-01 00:00:20","n":7}',  # the watermark moves to 00:00:15
    ],
    [
        '{"page":"a","ts":"2026-01-01 00:00:02","n":5}',  # late: both its windows are final
        '{"page":"a","ts":"2026-01-01 00:00:31","n":6}',
        '{"page":"c","ts":"2026-01-01 00:00:33","n":null}',
    ],
]


def topology() -> Any:
    topo = ta.TridentTopology("clicks")
    scheme = ta.JsonScheme({"page": "string", "ts": "string", "n": "bigint"}, optional=("ts", "n"))
    spout = ta.LogSpout("clicks", scheme, ta.SpoutConfig(kind=ta.SpoutKind.TRANSACTIONAL))
    stream = topo.new_stream("clicks", spout)
    stream.group_by("page").window_aggregate(
        WINDOW, ta.Count(), "views", spec=ta.StateSpec("page_views")
    )
    stream.group_by("page").persistent_aggregate(ta.StateSpec("n_total"), "n", ta.Sum(), "n")
    return topo


@pytest.fixture
def min_records(spark: Any) -> Iterator[Any]:
    """Set the session's ``trident.codegen.minRecords`` for a test; unset afterwards."""

    def set_to(value: str) -> None:
        spark.conf.set(CODEGEN_MIN_RECORDS_CONF, value)

    yield set_to
    spark.conf.unset(CODEGEN_MIN_RECORDS_CONF)


def _compiled(spark: Any) -> int:
    """How many classes Spark has generated and compiled in this JVM so far."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def _run(spark: Any, home: Path) -> tuple[dict[str, Any], list[int]]:
    """The batches through a fresh store; everything they left, and the classes compiled."""
    log = ta.PartitionedLog(home / "log")
    log.create_topic("clicks", 1)
    store = ta.DuckDBStore(home / "state.duckdb")
    topo = topology()
    runner = ta.TopologyRunner(topo, spark, store, log)
    whole_stage = spark.conf.get("spark.sql.codegen.wholeStage")
    compiled = []
    outcomes = []
    for txid, batch in enumerate(BATCHES, start=1):
        producer = log.producer("clicks")
        for record in batch:
            producer.send(record.encode())
        producer.flush()
        before = _compiled(spark)
        outcome = runner.run_batch(txid)
        compiled.append(_compiled(spark) - before)
        window = outcome.windows["page_views"]
        outcomes.append((outcome.dead_letters, window.late_records, window.unreadable_records))
        assert spark.conf.get("spark.sql.codegen.wholeStage") == whole_stage, "restored"
    state = topo.states["page_views"]
    left = {
        "outcomes": outcomes,
        "finals": read_finals(store, state),
        "open": read_open(store, state),
        "n_total": sorted(store.scan(topo.states["n_total"].table).to_pylist(), key=str),
        "dead": store.fetch_rows(
            "SELECT txid, spout, reason, decode(value) FROM _trident_dead_letters "
            "ORDER BY txid, reason, decode(value)"
        ),
    }
    store.close()
    return left, compiled


def test_generated_and_interpreted_jobs_leave_the_same_state(
    spark: Any, tmp_path: Path, min_records: Any
) -> None:
    # Spark's defaults: no earlier batch (two runners race in one session elsewhere) left
    # its interpreted settings behind
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"
    assert spark.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"
    min_records("0")  # every job generates code
    generated, compiled_generated = _run(spark, tmp_path / "generated")
    min_records("1000000000")  # no job does
    interpreted, compiled_interpreted = _run(spark, tmp_path / "interpreted")
    assert interpreted == generated
    # generated: each batch compiles its own code (its literals differ); interpreted: only
    # the few schema-keyed helpers (orderings) Spark generates in either mode
    assert sum(compiled_interpreted) <= 3 < 9 <= sum(compiled_generated)
    # what the batches must give, so that both agreeing means something
    assert generated["outcomes"] == [(0, 0, 0), (4, 0, 2), (1, 1, 0)]
    assert [(r["page"], r["value"]) for r in generated["n_total"]] == [
        ("a", 14),
        ("b", 7),
        ("c", 7),
    ]
    late = (
        "late record: its window [2026-01-01 00:00:00.000000 UTC, 2026-01-01 00:00:10.000000 UTC) "
        "is final (window_end <= watermark 2026-01-01 00:00:15.000000 UTC)"
    )
    assert [(t, s, r) for t, s, r, _ in generated["dead"]] == [
        (2, "window:page_views", "event time field 'ts' is null"),
        (
            2,
            "window:page_views",
            "event time field 'ts' value 'junk' is not a timestamp (ISO-8601, e.g. "
            "2026-01-31 12:00:00)",
        ),
        (2, "clicks", "member 'n' is a string, declared bigint"),
        (2, "clicks", "value is not valid JSON (RFC 8259)"),
        (3, "window:page_views", late),
    ]


def test_the_threshold_and_a_bad_value(spark: Any, tmp_path: Path, min_records: Any) -> None:
    assert codegen_conf(spark, DEFAULT_CODEGEN_MIN_RECORDS - 1) == INTERPRETED
    assert codegen_conf(spark, DEFAULT_CODEGEN_MIN_RECORDS) == {}
    min_records("5")
    assert codegen_conf(spark, 4) == INTERPRETED
    assert codegen_conf(spark, 5) == {}
    min_records("many")
    with pytest.raises(ConfigError, match=r"trident.codegen.minRecords='many' must be a non-neg"):
        codegen_conf(spark, 1)
    # refused before any write: the batch leaves nothing behind
    log = ta.PartitionedLog(tmp_path / "log")
    log.create_topic("clicks", 1)
    producer = log.producer("clicks")
    producer.send(json.dumps({"page": "a", "ts": "2026-01-01 00:00:01"}).encode())
    producer.flush()
    store = ta.DuckDBStore(tmp_path / "state.duckdb")
    runner = ta.TopologyRunner(topology(), spark, store, log)
    with pytest.raises(ConfigError, match=r"trident\.codegen\.minRecords='many'"):
        runner.run_batch(1)
    assert store.last_committed("clicks") is None
    store.close()

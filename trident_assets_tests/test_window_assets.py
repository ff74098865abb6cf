"""Window finals as a time-partitioned Dagster asset: completion, exactly-once, rollup, check.

The page-views example (10-minute tumbling windows, 1 minute lateness, hourly finals, daily
rollup) runs in-process with a test instance; each txid reads exactly the records produced
just before it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from trident_assets.core.event_windows import EventWindow
from trident_assets.core.window_partitions import completion_time, newly_complete
from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.finals_asset import fingerprint
from trident_assets.dagster.finals_check import FINALS_CHECKS_SENSOR
from trident_assets.dagster.in_flight import batches_pool
from trident_assets.dagster.partitions import txid_key
from trident_assets.dagster.resources import TridentResource
from trident_assets.errors import ConfigError
from trident_assets.examples.downstream import daily_rollup
from trident_assets.examples.page_views import TOPIC, build_page_views, seed_rows

FINALS = dg.AssetKey(["page_views", "views_10m_finals"])
STATE = dg.AssetKey(["page_views", "views_10m"])
ROLLUP = dg.AssetKey(["page_views", "daily_page_views"])
M = 60_000_000
LOCK_HOLDER = """
import sys, time, duckdb
conn = duckdb.connect(sys.argv[1])
conn.execute("BEGIN TRANSACTION")
print("locked", flush=True)
time.sleep(600)
"""
"""A process holding the state file open for writing (as a running batch does)."""


def hour(h: int) -> str:
    return f"2026-01-01-{h:02d}:00"


def test_completion_time_of_tumbling_and_sliding_windows() -> None:
    tumbling = EventWindow.tumbling("10 minutes", time_field="ts")
    sliding = EventWindow.sliding("10 minutes", "5 minutes", time_field="ts")
    assert completion_time(tumbling, 60 * M) == 60 * M
    assert completion_time(tumbling, 65 * M) == 70 * M, "unaligned: the window across p_end"
    assert completion_time(sliding, 60 * M) == 65 * M, "last start 55 min, ends 65 min"
    ranges = [(0, 60 * M), (60 * M, 120 * M)]
    assert newly_complete(sliding, ranges, None, 64 * M) == []
    assert newly_complete(sliding, ranges, 64 * M, 125 * M) == [(0, 60 * M), (60 * M, 120 * M)]
    assert newly_complete(sliding, ranges, 65 * M, 125 * M) == [(60 * M, 120 * M)]
    with pytest.raises(ConfigError, match=r"^session windows have no completion time"):
        completion_time(EventWindow.session("5 minutes", time_field="ts"), 60 * M)


def test_window_partitions_name_must_be_a_window_state(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"window_partitions names 'nope': no tumbling"):
        trident_definitions(
            [build_page_views()],
            TridentResource(home=str(tmp_path)),
            window_partitions={"nope": dg.DailyPartitionsDefinition(start_date="2026-01-01")},
        )


def produce(trident: TridentResource, rows: list[dict[str, Any]]) -> None:
    producer = trident.log().producer(TOPIC)
    for row in rows:
        producer.send(json.dumps(row).encode())
    producer.flush()


@contextmanager
def make_world(tmp_path: Path, state_dsn: str | None = None) -> Iterator[Any]:
    """The page-views definitions, their resource and a test instance (state: DuckDB or PG)."""
    trident = TridentResource(home=str(tmp_path), state_dsn=state_dsn)
    trident.log().create_topic(TOPIC, 1)
    topo = build_page_views(max_batch_size=None)
    defs = trident_definitions([topo], trident, assets=daily_rollup())
    checks = dg.define_asset_job(
        "finals_checks", selection=dg.AssetSelection.checks_for_assets(FINALS)
    )
    rollup = dg.define_asset_job("rollup", selection=dg.AssetSelection.assets(ROLLUP))
    defs = dg.Definitions.merge(defs, dg.Definitions(jobs=[checks, rollup]))
    with dg.DagsterInstance.ephemeral() as instance:
        yield trident, defs, instance


@pytest.fixture
def world(tmp_path: Path, spark):
    with make_world(tmp_path) as made:
        yield made


def run_txid(defs: dg.Definitions, instance: dg.DagsterInstance, txid: int) -> list[str]:
    """Run txid ``txid`` of the topology; the finals partitions its run materialized."""
    instance.add_dynamic_partitions("page_views_txids", [txid_key(txid)])
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        partition_key=txid_key(txid),
        instance=instance,
        asset_selection=[dg.AssetKey(["page_views", "views_batch"]), STATE],
    )
    assert result.success
    return [e.partition for e in result.get_asset_materialization_events() if e.asset_key == FINALS]


def finals_metadata(instance: dg.DagsterInstance, partition: str) -> dict[str, Any]:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=FINALS, asset_partitions=[partition]), limit=10
    ).records
    assert len(records) == 1
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def assert_first_hour(instance: dg.DagsterInstance) -> dict[str, Any]:
    """The seeded day's first hour: 18 windows, final in txids 1 and 2; its metadata."""
    first = finals_metadata(instance, hour(0))
    assert {k: first[k] for k in ("windows", "total", "final_txids", "txid", "watermark")} == {
        "windows": 18,
        "total": 24.0,
        "final_txids": [1, 2],
        "txid": 2,
        "watermark": "2026-01-01 01:56:30",
    }
    return first


def check_result(defs: dg.Definitions, instance: dg.DagsterInstance) -> tuple[bool, dict]:
    result = defs.resolve_job_def("finals_checks").execute_in_process(
        instance=instance, raise_on_error=False
    )
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation.passed, {k: v.value for k, v in evaluation.metadata.items()}


PASSED = (
    True,
    {
        "partitions_checked": 24,
        "materialized_twice": [],
        "changed_partitions": {},
        "duplicate_windows": [],
    },
)
"""The finals check over the seeded day: every partition checked, nothing wrong."""


def assert_day_rollup(result: Any) -> None:
    """The daily rollup of the seeded day: 16 views per page in 36 windows."""
    (mat,) = result.get_asset_materialization_events()
    rollup = mat.materialization.metadata
    assert rollup["views_per_page"].value == {"blog": 16, "docs": 16, "home": 16}
    assert (rollup["total_views"].value, rollup["windows"].value) == (48, 36)


def test_the_finals_check_before_any_commit_passes_with_nothing_to_check(world) -> None:
    """A catch-up run's first steps may run the check before the state store exists."""
    trident, defs, instance = world
    assert check_result(defs, instance) == (
        True,
        {
            "partitions_checked": 0,
            "state": f"no state store at {trident.state_location} yet",
        },
    )


@pytest.mark.filterwarnings("ignore::dagster.BetaWarning")  # evaluate_automation_conditions
def test_finals_partitions_are_materialized_once_by_the_completing_txid(world) -> None:
    trident, defs, instance = world
    rows = seed_rows()
    # the finals check runs after each run that materialized finals partitions, and only then
    # (its sensor's only target is that check: the count of requests is that check's)
    sensor = defs.resolve_sensor_def(FINALS_CHECKS_SENSOR)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    check = next(iter(defs.asset_checks))
    assert check.check_keys == {dg.AssetCheckKey(FINALS, "finals_unchanged")}
    assert check.node_def.pool == batches_pool("page_views", None, trident.database)
    cursor = None

    def check_requested() -> int:
        nonlocal cursor
        result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
        cursor = result.cursor
        return result.total_requested

    produce(trident, rows[:24])  # 00:00 .. 00:57:30: watermark 00:56:30
    assert run_txid(defs, instance, 1) == []
    assert check_requested() == 0
    produce(trident, rows[24:48])  # 01:00 .. 01:57:30: watermark 01:56:30 completes 00:00
    assert run_txid(defs, instance, 2) == [hour(0)]
    assert check_requested() == 1
    # a late record and one whose event time is unreadable: dead letters, counted apart
    produce(trident, [{"page": "docs", "ts": "2026-01-01 00:30:00"}, {"page": "x", "ts": "junk"}])
    assert run_txid(defs, instance, 3) == []
    assert check_requested() == 0
    produce(trident, rows[48:])  # 2026-01-02 00:05: watermark 00:04 completes all of Jan 1st
    # the hours without windows first, then 01:00 (windows): the asset's latest event has windows
    assert run_txid(defs, instance, 4) == [*(hour(h) for h in range(2, 24)), hour(1)]
    assert check_requested() == 1
    assert run_txid(defs, instance, 2) == [], "a replayed txid materializes nothing"
    assert check_requested() == 0
    assert instance.get_materialized_partitions(FINALS) == {hour(h) for h in range(24)}

    first = assert_first_hour(instance)
    assert first["late_records"] == 0
    assert first["reported_late"] is False
    # a preview of the partition's windows, as a state's materializations have
    from trident_assets.backends.state_store import open_state_store
    from trident_assets.dagster.previews import markdown_table

    with open_state_store(trident.database, read_only=True) as store:
        hour0 = store.fetch_arrow(
            'SELECT * FROM "page_views__views_10m__finals" WHERE window_start < ? '
            "ORDER BY page, window_start",
            [datetime(2026, 1, 1, 1)],
        )
    preview = first["preview"].splitlines()
    assert preview[:2] == [
        "| page | window_start | window_end | views | final_txid |",
        "|---|---|---|---|---|",
    ]
    assert preview[-2:] == ["", "10 of 18 rows"]
    assert "\n".join(preview[:-2]) == markdown_table(hour0.slice(0, 10))
    second = finals_metadata(instance, hour(1))
    assert (second["windows"], second["total"], second["final_txids"], second["txid"]) == (
        18,
        24.0,
        [2, 4],
        4,
    )
    assert second["late_records"] == 1, "the late record of txid 3, in the dead letters"
    assert second["unreadable_records"] == 1, "txid 3's record whose event time is 'junk'"
    assert second["watermark"] == "2026-01-02 00:04:00"
    empty = finals_metadata(instance, hour(5))
    assert (empty["windows"], empty["total"], empty["final_txids"]) == (0, 0.0, [])

    # the state's txid materializations carry the watermark as a number (plotted per txid)
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=STATE, asset_partitions=[txid_key(4)]), limit=1
    ).records[0]
    meta = record.asset_materialization.metadata
    assert meta["watermark_epoch_s"].value == 1767312240.0  # 2026-01-02 00:04:00 UTC
    assert meta["late_records"].value == 0
    assert meta["dead_letters_preview"].value == "_no dead letters in txid 4_"
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=STATE, asset_partitions=[txid_key(3)]), limit=1
    ).records[0]
    meta = record.asset_materialization.metadata
    assert (meta["late_records"].value, meta["unreadable_records"].value) == (1, 1)
    assert meta["dead_letters_preview"].value == (
        "| topic | partition | offset | reason |\n|---|---|---|---|\n"
        "| page_view_events | 0 | 49 | event time field 'ts' value 'junk' is not a timestamp "
        "(ISO-… |\n"
        "| page_view_events | 0 | 48 | late record: its window [2026-01-01 00:30:00.000000 UTC, "
        "20… |"
    )

    # the daily rollup loads the day's 24 hourly partitions through the IO manager, from the
    # read replica: it runs while another process holds the state file's write lock
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(trident.database)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        # (opening the store itself would wait 30 s, then raise StoreLockedError)
        result = defs.resolve_job_def("rollup").execute_in_process(
            partition_key="2026-01-01", instance=instance
        )
    finally:
        holder.kill()
        holder.wait()
    assert_day_rollup(result)

    # the check passes; a changed final row or a window emitted twice fails it
    assert check_result(defs, instance) == PASSED
    with trident.store() as store:
        store.execute(
            "UPDATE page_views__views_10m__finals SET views = views + 1 WHERE page = 'home' "
            "AND window_start = TIMESTAMP '2026-01-01 00:00:00'"
        )
        store.execute(
            "INSERT INTO page_views__views_10m__finals SELECT * FROM "
            "page_views__views_10m__finals WHERE page = 'docs' "
            "AND window_start = TIMESTAMP '2026-01-01 01:10:00'"
        )
        now0 = fingerprint(
            store.fetch_arrow(
                'SELECT * FROM "page_views__views_10m__finals" WHERE window_start >= ? '
                "AND window_start < ?",
                [datetime(2026, 1, 1), datetime(2026, 1, 1, 1)],
            ),
            ["page"],
            "views",
        )
    assert now0["total"] == 25
    passed, meta = check_result(defs, instance)
    assert passed is False
    changed = meta["changed_partitions"]
    assert sorted(changed) == [hour(0), hour(1)]
    assert changed[hour(0)]["recorded"] == {
        "windows": 18,
        "total": 24.0,
        "fingerprint": first["fingerprint"],
    }
    assert changed[hour(0)]["now"] == {
        "windows": 18,
        "total": 25.0,
        "fingerprint": now0["hash"],
    }
    assert (changed[hour(1)]["now"]["windows"], changed[hour(1)]["now"]["total"]) == (19, 26.0), (
        "docs has 2 views in [01:10, 01:20): the copied row adds a 19th window"
    )
    assert meta["duplicate_windows"] == ["docs 2026-01-01 01:10:00 2026-01-01 01:20:00 x2"]
    assert meta["materialized_twice"] == []

    # a run that committed txid 2 but stopped before reporting: its re-run reports the hour
    instance.wipe_assets([FINALS])
    assert run_txid(defs, instance, 2) == [hour(0)]
    assert finals_metadata(instance, hour(0))["reported_late"] is True
    assert run_txid(defs, instance, 2) == [], "reported once: nothing on the next replay"


def test_finals_partitions_on_a_postgres_state_store(tmp_path: Path, spark, pg_dsn: str) -> None:
    """The same partitions, metadata, replica rollup and check with the state in PostgreSQL."""
    with make_world(tmp_path, pg_dsn) as (trident, defs, instance):
        rows = seed_rows()
        produce(trident, rows[:24])
        assert run_txid(defs, instance, 1) == []
        produce(trident, rows[24:48])
        assert run_txid(defs, instance, 2) == [hour(0)]
        produce(trident, [{"page": "docs", "ts": "2026-01-01 00:30:00"}])  # late
        assert run_txid(defs, instance, 3) == []
        produce(trident, rows[48:])
        assert run_txid(defs, instance, 4) == [*(hour(h) for h in range(2, 24)), hour(1)]
        assert run_txid(defs, instance, 2) == [], "a replayed txid materializes nothing"
        with trident.store() as store:
            assert type(store).__name__ == "PostgresStore"
        assert_first_hour(instance)
        second = finals_metadata(instance, hour(1))
        assert (second["final_txids"], second["late_records"], second["watermark"]) == (
            [2, 4],
            1,
            "2026-01-02 00:04:00",
        )
        record = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=STATE, asset_partitions=[txid_key(4)]), limit=1
        ).records[0]
        assert record.asset_materialization.metadata["watermark_epoch_s"].value == 1767312240.0
        result = defs.resolve_job_def("rollup").execute_in_process(
            partition_key="2026-01-01", instance=instance
        )
        assert_day_rollup(result)
        assert check_result(defs, instance) == PASSED

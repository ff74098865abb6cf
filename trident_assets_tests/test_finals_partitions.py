"""A finals asset's partitions end at the watermark; its latest event is a partition with windows.

The page-views example in-process (as in test_window_assets): its definitions loaded after
the seeded day was committed have exactly that day's 24 hourly partitions (not every hour up
to today); an hour the watermark completes after they loaded is materialized all the same;
the last materialization of a txid is the latest partition that has windows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.finals_asset import partitions_end
from trident_assets.dagster.finals_reader import committed_watermarks
from trident_assets.examples.downstream import daily_rollup
from trident_assets.examples.page_views import build_page_views, seed_rows
from trident_assets_tests.test_window_assets import (
    FINALS,
    ROLLUP,
    assert_day_rollup,
    hour,
    make_world,
    produce,
    run_txid,
)

HOURLY = dg.HourlyPartitionsDefinition(start_date="2026-01-01-00:00")
NOW = datetime(2026, 12, 1, 23, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("watermark", "end"),
    [
        (None, None),  # nothing committed: the partitions follow the clock
        (datetime(2026, 1, 2, 0, 4, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)),
        (datetime(2026, 12, 1, 21, 59, tzinfo=UTC), datetime(2026, 12, 1, 21, tzinfo=UTC)),
        (datetime(2026, 12, 1, 22, 30, tzinfo=UTC), None),  # the previous hour: current data
        (datetime(2026, 12, 1, 23, 5, tzinfo=UTC), None),  # the current hour
    ],
)
def test_partitions_end_at_the_partition_of_the_watermark(
    watermark: datetime | None, end: datetime | None
) -> None:
    assert partitions_end(HOURLY, watermark, NOW) == end


def _finals_partitions(defs: dg.Definitions) -> list[str]:
    return defs.resolve_assets_def(FINALS).partitions_def.get_partition_keys()


def test_partitions_end_at_the_watermark_and_later_hours_are_still_reported(
    tmp_path: Path, spark
) -> None:
    with make_world(tmp_path) as (trident, defs, instance):
        assert _finals_partitions(defs)[-1] > hour(23), "no watermark yet: up to the clock"
        produce(trident, seed_rows())  # one txid: watermark 2026-01-02 00:04 closes Jan 1st
        done = run_txid(defs, instance, 1)
        # the hours without windows first, then those with: the latest event has windows
        assert done == [*(hour(h) for h in range(2, 24)), hour(0), hour(1)]
        (latest,) = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=FINALS), limit=1, ascending=False
        ).records
        assert latest.asset_materialization.partition == hour(1)
        assert latest.asset_materialization.metadata["windows"].value == 18

        assert committed_watermarks(
            trident.state_location, [build_page_views().states["views_10m"]]
        ) == {"page_views/views_10m": datetime(2026, 1, 2, 0, 4, tzinfo=UTC)}
        # definitions loaded now (a reloaded code location): the day's 24 hours, no more
        reloaded = dg.Definitions.merge(
            trident_definitions(
                [build_page_views(max_batch_size=None)], trident, assets=daily_rollup()
            ),
            dg.Definitions(
                jobs=[dg.define_asset_job("rollup", selection=dg.AssetSelection.assets(ROLLUP))]
            ),
        )
        assert _finals_partitions(reloaded) == [hour(h) for h in range(24)]
        result = reloaded.resolve_job_def("rollup").execute_in_process(
            partition_key="2026-01-01", instance=instance
        )
        assert_day_rollup(result)

        # a record at 02:30 on Jan 2nd: its watermark (02:29) closes 00:00 and 01:00 of Jan
        # 2nd, after the end those definitions loaded with; both are materialized
        produce(trident, [{"page": "docs", "ts": "2026-01-02 02:30:00"}])
        assert run_txid(reloaded, instance, 2) == ["2026-01-02-01:00", "2026-01-02-00:00"]
        assert instance.get_materialized_partitions(FINALS) == {
            *(hour(h) for h in range(24)),
            "2026-01-02-00:00",
            "2026-01-02-01:00",
        }


def test_no_watermark_without_a_store_or_while_it_is_held(tmp_path: Path) -> None:
    """The definitions then load with partitions that follow the clock (nothing waits)."""
    from trident_assets.backends.duckdb_store import DuckDBStore

    state = build_page_views().states["views_10m"]
    path = tmp_path / "state.duckdb"
    assert committed_watermarks(str(path), [state]) == {}, "no store yet"
    with DuckDBStore(path):  # a writer in this process (another process: StoreLockedError)
        assert committed_watermarks(str(path), [state]) == {}
    assert committed_watermarks(str(path), [state]) == {}, "a store no window committed to"

"""Page views per page per 10 minutes (event time), with hourly finals and a daily rollup.

JSON records ``{"page": ..., "ts": "2026-01-01 00:02:30"}`` on topic ``page_view_events``
-> ``group_by("page").window_aggregate(tumbling 10 minutes, allowed lateness 1 minute,
Count -> views)``, state ``views_10m``. In Dagster (:mod:`trident_assets.dagster.window_assets`)
its final windows are the hourly asset ``page_views/views_10m_finals``; the example asset
``page_views/daily_page_views`` (:func:`~trident_assets.examples.downstream.daily_rollup`,
daily partitions) loads a day's 24 hourly partitions through the TridentIOManager and sums the
views per page. This module imports no Dagster.

:func:`produce_seed` writes the sample data: :func:`seed_rows`, two hours of views on
2026-01-01 and one record the next day that closes the day (its watermark passes midnight).

Seed a trident home (then `dagster dev` runs it)::

    python -m trident_assets.examples.page_views .trident
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from typing import Any

from trident_assets.core.aggregators import Count
from trident_assets.core.event_windows import EventWindow
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.graph import StateSpec
from trident_assets.stream.topology import TridentTopology

__all__ = [
    "TOPIC",
    "build_page_views",
    "produce_seed",
    "seed_rows",
]

TOPIC = "page_view_events"
PAGES = ("home", "docs", "blog")
SEED_DAY = datetime(2026, 1, 1)
STATE = "views_10m"


def build_page_views(
    name: str = "page_views", *, topic: str = TOPIC, max_batch_size: int | None = 16
) -> TridentTopology:
    """Declare the topology: state ``views_10m`` (views per page per 10-minute window)."""
    topo = TridentTopology(name)
    spout = LogSpout(
        topic,
        JsonScheme({"page": "string", "ts": "string"}),
        SpoutConfig(kind=SpoutKind.TRANSACTIONAL, max_batch_size=max_batch_size),
    )
    topo.new_stream("views", spout).group_by("page").window_aggregate(
        EventWindow.tumbling("10 minutes", time_field="ts", allowed_lateness="1 minute"),
        Count(),
        "views",
        spec=StateSpec(STATE),
    )
    return topo


def seed_rows() -> list[dict[str, Any]]:
    """The sample views: 48 on 2026-01-01 and one the next day.

    Views every 150 s from 00:00:00 to 01:57:30 (pages in turn), then one at
    2026-01-02 00:05:00, whose watermark (00:04:00) completes every partition of Jan 1st.
    """
    rows = [
        {"page": PAGES[i % 3], "ts": (SEED_DAY + timedelta(seconds=150 * i)).isoformat(sep=" ")}
        for i in range(48)
    ]
    rows.append({"page": "home", "ts": "2026-01-02 00:05:00"})
    return rows


def produce_seed(log: Any, *, topic: str = TOPIC) -> None:
    """Create ``topic`` (one partition, if missing) and append :func:`seed_rows`."""
    if topic not in log.topics():
        log.create_topic(topic, 1)
    producer = log.producer(topic)
    for row in seed_rows():
        producer.send(json.dumps(row).encode())
    producer.flush()


if __name__ == "__main__":
    from pathlib import Path

    from trident_assets.log.store import PartitionedLog

    home = Path(sys.argv[1] if len(sys.argv) > 1 else ".trident")
    produce_seed(PartitionedLog(home / "log"))
    print(f"seeded {len(seed_rows())} page views into {home / 'log'} topic {TOPIC}")

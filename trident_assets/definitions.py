"""The code location `dagster dev` loads: the example topologies over ``$TRIDENT_HOME``.

Environment: ``TRIDENT_HOME`` (log and state directory, default ``.trident``),
``TRIDENT_MAX_BATCH_SIZE`` (records per word-count batch, default 50000),
``TRIDENT_MAX_CATCH_UP`` (txids one sensor-launched run may process, default 10),
``TRIDENT_STATE_DSN`` (a ``postgresql://`` DSN: the state in PostgreSQL instead of
``$TRIDENT_HOME/state.duckdb``), ``TRIDENT_SPARK_REMOTE`` (a Spark Connect URL the runs use,
as ``trident ui`` sets it for its warm Spark; unset: local Spark in each run's process).
"""

from __future__ import annotations

import os

from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.examples.downstream import downstream_assets
from trident_assets.examples.gender_age import build_gender_age
from trident_assets.examples.location_db import build_location_db
from trident_assets.examples.page_views import build_page_views, daily_rollup
from trident_assets.examples.word_count import build_word_count

word_count = build_word_count(max_batch_size=int(os.environ.get("TRIDENT_MAX_BATCH_SIZE", "50000")))

page_views = build_page_views()
"""Views per page per 10 minutes (event time); seed it with
``python -m trident_assets.examples.page_views $TRIDENT_HOME``."""

topologies = [word_count, build_gender_age(), build_location_db(), page_views]
"""The topologies of this code location (``trident quarantine`` finds them here by name)."""

defs = trident_definitions(
    topologies,
    TridentResource(
        home=os.environ.get("TRIDENT_HOME", ".trident"),
        state_dsn=os.environ.get("TRIDENT_STATE_DSN") or None,
    ),
    max_catch_up=int(os.environ.get("TRIDENT_MAX_CATCH_UP", "10")),
    assets=[*downstream_assets(word_count.name), *daily_rollup(page_views.name)],
)

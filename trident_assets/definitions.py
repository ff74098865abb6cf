"""The code location `dagster dev` loads: the example topologies over ``$TRIDENT_HOME``.

Environment: ``TRIDENT_HOME`` (log and state directory, default ``.trident``),
``TRIDENT_MAX_BATCH_SIZE`` (records per word-count batch, default 50000; the topologies
themselves are declared in :mod:`trident_assets.examples.topologies`),
``TRIDENT_MAX_CATCH_UP`` (txids one sensor-launched run may process, default 10),
``TRIDENT_STATE_DSN`` (a ``postgresql://`` DSN: the state in PostgreSQL instead of
``$TRIDENT_HOME/state.duckdb``), ``TRIDENT_SPARK_REMOTE`` (a Spark Connect URL the runs use,
as ``trident ui`` sets it for its warm Spark; unset: local Spark in each run's process),
``TRIDENT_LIVE`` (``all`` or topology names: those run live, as ``trident ui --live`` sets it;
:mod:`trident_assets.dagster.live`).
"""

from __future__ import annotations

import os

from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.examples.downstream import daily_rollup, downstream_assets
from trident_assets.examples.topologies import page_views, topologies, word_count

__all__ = ["defs", "page_views", "topologies", "word_count"]

defs = trident_definitions(
    topologies,
    TridentResource(
        home=os.environ.get("TRIDENT_HOME", ".trident"),
        state_dsn=os.environ.get("TRIDENT_STATE_DSN") or None,
    ),
    max_catch_up=int(os.environ.get("TRIDENT_MAX_CATCH_UP", "10")),
    assets=[*downstream_assets(word_count.name), *daily_rollup(page_views.name)],
)

"""The example topologies, declared without Dagster: what `trident` commands find by default.

``trident state list|drop|rebuild`` and ``trident quarantine add|replay`` look topologies up by
name in a module (``--module``); this one is their default. It imports no Dagster, so those
commands start in a fraction of a second. The code location `dagster dev` loads
(:mod:`trident_assets.definitions`) serves these same topologies.

Environment: ``TRIDENT_MAX_BATCH_SIZE`` (records per word-count batch, default 50000).
"""

from __future__ import annotations

import os

from trident_assets.examples.gender_age import build_gender_age
from trident_assets.examples.location_db import build_location_db
from trident_assets.examples.page_views import build_page_views
from trident_assets.examples.word_count import build_word_count

__all__ = ["page_views", "topologies", "word_count"]

word_count = build_word_count(max_batch_size=int(os.environ.get("TRIDENT_MAX_BATCH_SIZE", "50000")))

page_views = build_page_views()
"""Views per page per 10 minutes (event time); seed it with
``python -m trident_assets.examples.page_views $TRIDENT_HOME``."""

topologies = [word_count, build_gender_age(), build_location_db(), page_views]
"""Every example topology."""

"""The code location `dagster dev` loads: the example topologies over ``$TRIDENT_HOME``."""

from __future__ import annotations

import os

from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.examples.word_count import build_word_count

defs = trident_definitions(
    [build_word_count()],
    TridentResource(home=os.environ.get("TRIDENT_HOME", ".trident")),
)

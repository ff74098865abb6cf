"""Turn declared topologies into Dagster definitions (assets, sensors, resources, executor)."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from trident_assets.dagster.assets import topology_assets
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.sensors import coordinator_sensor
from trident_assets.stream.topology import TridentTopology

__all__ = ["trident_definitions"]


def trident_definitions(
    topologies: Sequence[TridentTopology], trident: TridentResource
) -> dg.Definitions:
    """Definitions for ``topologies``: their assets and coordinator sensors, run in-process.

    The in-process executor keeps one SparkSession (one JVM) per run instead of one per step.
    """
    return dg.Definitions(
        assets=[topology_assets(t) for t in topologies],
        sensors=[coordinator_sensor(t) for t in topologies],
        resources={"trident": trident},
        executor=dg.in_process_executor,
    )

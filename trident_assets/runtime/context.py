"""What an engine's batch reads of its runner: :class:`RunContext`.

A :class:`~trident_assets.spark.executor.TopologyRunner` provides it, and so does a
rebuild's replay (:mod:`trident_assets.spark.rebuild`), which runs batches of one state
without a runner of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Hashable

    import pyarrow as pa

    from trident_assets.backends.state_store import StateStore
    from trident_assets.spouts.coordinator import BatchCoordinator
    from trident_assets.stream.topology import TridentTopology

__all__ = ["RunContext"]


class RunContext(Protocol):
    """The topology, its engine session, log and store, and the points a batch reports."""

    topology: TridentTopology
    spark: Any
    """The engine's session (a SparkSession, classic or Spark Connect)."""
    store: StateStore
    log: Any
    """The embedded log or a Kafka cluster the spouts read."""
    spill: Any
    """How executors write partials for the store (None: collected to the driver)."""
    empty_tables: dict[Hashable, pa.Table]
    """Empty Arrow tables of the topology's frames, found once per runner (by a key naming
    the frame: :func:`~trident_assets.spark.node_frames.empty_table`)."""

    def fault(self, point: str) -> None:
        """Called at the named points of a batch (the chaos tests kill the process there)."""

    def coordinator(self, spout_id: str) -> BatchCoordinator:
        """The batch coordinator of one spout."""

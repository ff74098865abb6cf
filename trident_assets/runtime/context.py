"""What a batch needs of the runner that runs it: the interface between runtime and engine.

A :class:`~trident_assets.spark.executor.TopologyRunner` provides it, and so does a
rebuild's replay (:mod:`trident_assets.spark.rebuild`), which runs batches of one state
without a runner of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
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
    no_dead_letters: dict[str, pa.Table]
    """Per spout: an empty table of its dead letters (found once per runner)."""

    def fault(self, point: str) -> None:
        """Called at the named points of a batch (the chaos tests kill the process there)."""

    def coordinator(self, spout_id: str) -> BatchCoordinator:
        """The batch coordinator of one spout."""

"""The interfaces between the runner, a txid's run and the state kinds that read it.

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
    from trident_assets.spouts.ranges import BatchPlan
    from trident_assets.stream.graph import Node
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = ["BatchContext", "ChunkContext", "RunContext"]


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


class BatchContext(Protocol):
    """One txid's run as the state kinds see it: its DataFrames and what it has counted.

    :class:`~trident_assets.spark.batch_run.BatchRun` (a chunk of one) provides it; each
    state kind's module (single joins, windows, state queries, the apply of every kind)
    reads through it. What
    it has counted (nulls, value types, dead letters counted or collected) the run keeps
    from what each state's batch input returned
    (:class:`~trident_assets.runtime.outcomes.StateInput`): state kinds read it, never
    write it.
    """

    txid: int
    runner: RunContext
    spark: Any
    plans: dict[str, BatchPlan]
    """Per spout: the offset ranges this txid reads."""
    spill: bool
    """Whether a combiner's partials may be written by the executors (never in a rebuild)."""
    nulls: dict[str, int]
    """Per Sum/Min/Max state: the null values its partials skipped this batch."""
    value_types: dict[str, pa.DataType]
    """Arrow type of each combiner state's batch partials (typing empty query results)."""
    counted_dead: dict[str, int]
    """Spouts whose dead letters a Spark job already counted: how many."""
    folded_dead: dict[str, pa.Table]
    """Spouts whose dead letters a state's own Spark job collected."""
    spilled: list[Any]
    """Cleanups of the partials the executors wrote (run once the batch has committed)."""

    def frame(self, node: Node) -> Any:
        """The node's DataFrame this batch, built once."""

    def raw(self, node: Node) -> Any:
        """The spout node's raw records this batch, read once."""

    def is_empty(self, node: Node) -> bool:
        """True when ``node`` certainly has no tuples this batch."""

    def collect(self, node: Node) -> pa.Table:
        """The node's tuples this batch, as Arrow."""

    def state_input(self, state: TridentState) -> Any:
        """What the commit applies to ``state`` (partials, tuples or rows)."""

    def empty_dead_letters(self, sid: str) -> pa.Table:
        """An empty table of spout ``sid``'s dead letters."""

    def fold_dead(self, node: Node) -> tuple[str, Any] | None:
        """``(spout id, dead letters frame)`` a state's job over ``node`` may collect."""

    def uncounted_spout(self, node: Node) -> str | None:
        """The one spout upstream of ``node`` whose dead letters are still to collect."""

    # as a chunk of one txid (:class:`~trident_assets.spark.partials.TaggedFrames`)
    txids: list[int]
    """``[txid]``."""

    def tagged(self, node: Node) -> Any:
        """``node``'s DataFrame, every tuple tagged as the chunk's first (0)."""

    def tagged_raw(self, spout: Node) -> Any:
        """``spout``'s raw records, tagged 0."""

    def records(self, spout: Node) -> int:
        """How many records ``spout`` reads this batch."""

    def has_no_tuples(self, node: Node) -> bool:
        """The same as :meth:`is_empty`."""


class ChunkContext(Protocol):
    """A chunk of several txids sharing one Spark job, as a state kind's chunk job sees it."""

    runner: RunContext
    txids: list[int]
    batches: list[tuple[int, dict[str, BatchPlan]]]
    """The chunk's txids with their spouts' plans, ascending."""
    live: set[str]
    """Spouts that read records in the chunk."""
    first: BatchContext
    """The chunk's first txid as a chunk of one, for frames of streams that receive nothing."""
    event_tops: dict[str, int | None]
    """Per event-time window: an upper bound of its largest event time after the chunk."""

    def frame(self, node: Node) -> Any:
        """The node's DataFrame over the whole chunk (tagged with each tuple's txid)."""

    def tagged_raw(self, spout: Node) -> Any:
        """``spout``'s raw records over the whole chunk (tagged with each record's txid)."""

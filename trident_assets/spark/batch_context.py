"""What an engine's batch reads of its runner and of its chunk (two protocols), what a job finds.

:class:`RunContext` is what a chunk's run reads of its runner: a
:class:`~trident_assets.spark.executor.TopologyRunner` provides it, and so does a rebuild's
replay (:mod:`trident_assets.spark.rebuild`), which runs batches of one state without a
runner of its own. :class:`BatchContext` is what a state kind's engine reads of a chunk's
run (:class:`~.batch_run.BatchRun`). The engines (:mod:`~trident_assets.spark.state_engines`)
never write into it: what their jobs find they return
(:class:`~trident_assets.runtime.outcomes.StateInput`, :class:`PartialsJob`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Self

if TYPE_CHECKING:
    import pyarrow as pa

    from trident_assets.backends.spilled_partials import SpilledPartials
    from trident_assets.backends.state_store import StateStore
    from trident_assets.runtime.txid_loop import Batches
    from trident_assets.spark.frame_schemas import EmptyTables
    from trident_assets.spark.spilled import Cleanup, Spill
    from trident_assets.spouts.coordinator import BatchCoordinator
    from trident_assets.spouts.ranges import BatchPlan
    from trident_assets.stream.graph import Node
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = ["BatchContext", "ChunkPartials", "PartialsJob", "RunContext"]


@dataclass(frozen=True)
class ChunkPartials:
    """What a state's partials job found, per txid of the chunk."""

    tables: dict[int, pa.Table | SpilledPartials]
    """The partials of each txid (key columns, the output column; a global state: one row)."""
    nulls: dict[int, int] = field(default_factory=dict)
    """Per txid, the null values a Sum/Min/Max skipped (absent: none counted)."""
    counted_dead: dict[str, int] = field(default_factory=dict)
    """Per spout, the dead letters the Arrow kernel met over the whole chunk."""
    folded_dead: dict[str, pa.Table] = field(default_factory=dict)
    """Per spout, the dead letters the job collected along (a chunk of one)."""


@dataclass(frozen=True)
class PartialsJob:
    """A state's partials, planned: its value type now, its Spark job when run."""

    value_type: pa.DataType | None
    """The Arrow type of the state's partial values (types empty query results; None: no
    such type, e.g. an event window's rows)."""
    run: Callable[[], ChunkPartials]
    """The Spark job (touches only Spark: may run in another thread)."""
    event_top: int | None = None
    """An event-time window's upper bound of its largest event time after the chunk (None:
    none known, or another kind)."""
    cleanups: tuple[Cleanup, ...] = ()
    """Remove what the job's executors write (once the chunk's txids have committed)."""


class RunContext(Protocol):
    """The topology, its Spark session, log and store, and the points a batch reports."""

    topology: TridentTopology
    spark: Any
    """The Spark session (classic or Spark Connect)."""
    store: StateStore
    log: Any
    """The embedded log or a Kafka cluster the spouts read."""
    spill: Spill | None
    """How executors write partials for the store (None: collected to the driver)."""
    empty_tables: EmptyTables
    """Empty Arrow tables of the topology's frames, found once per runner."""
    pipelinable: bool
    """Whether its txids may share a Spark job (:func:`~trident_assets.planner.pipelinable`)."""

    def fault(self, point: str) -> None:
        """Called at the named points of a batch (the chaos tests kill the process there)."""

    def coordinator(self, spout_id: str) -> BatchCoordinator:
        """The batch coordinator of one spout."""


class BatchContext(Protocol):
    """A chunk's DataFrames: of one txid (a kind's batch input and apply), or of several.

    A chunk of several is read by the jobs a kind shares across its txids (combiner
    partials, event-time windows), its frames tagged with each tuple's batch.
    """

    runner: RunContext
    spark: Any
    txid: int
    """The chunk's first txid (a chunk of one: its only)."""
    plans: dict[str, BatchPlan]
    """The first txid's ranges per spout."""
    txids: list[int]
    batches: Batches
    live: set[str]
    """Spouts that read records in the chunk."""
    spill: bool
    """Whether a combiner's partials may be written by the executors (never in a rebuild)."""
    value_types: dict[str, pa.DataType]
    """Arrow type of each combiner state's batch partials (typing empty query results)."""
    inflight_tops: dict[str, int | None]
    """Per event-time window: a bound of its largest event time after the chunk in flight."""
    nulls: dict[str, int]
    """Per Sum/Min/Max state: the null values its partials skipped this batch."""

    @property
    def first(self) -> Self:
        """The chunk's first txid as a chunk of one: it builds the streams without tuples."""

    def chunk_of_one(self, txid: int) -> Self:
        """The chunk's ``txid`` as a new chunk of one, typed by the value types known so far."""

    def planned(self, state: TridentState, job: PartialsJob) -> Callable[[], ChunkPartials]:
        """``job``'s Spark job; what its planning and its run find is kept by the chunk."""

    def frame(self, node: Node) -> Any:
        """The node's DataFrame, built once."""

    def raw(self, node: Node) -> Any:
        """The spout node's raw records, read once."""

    def is_empty(self, node: Node) -> bool:
        """True when ``node`` certainly has no tuples in the chunk."""

    def collect(self, node: Node) -> pa.Table:
        """The node's tuples, as Arrow."""

    def state_input(self, state: TridentState) -> Any:
        """What the commit applies to ``state`` (partials, tuples or rows)."""

    def tagged(self, node: Node) -> Any:
        """``node``'s DataFrame with its batch tag (a chunk of one: every tuple tagged 0)."""

    def tagged_raw(self, spout: Node) -> Any:
        """``spout``'s raw records, tagged."""

    def records(self, spout: Node) -> int:
        """How many records ``spout`` reads in the chunk."""

    def empty_table(self, key: str, df: Any) -> pa.Table:
        """:func:`~.frame_schemas.empty_arrow` of ``df``, a frame that ``key`` names."""

    def to_arrow(self, key: str, df: Any) -> pa.Table:
        """``df.toArrow()``, ``df`` a frame that ``key`` names."""

    def empty_dead_letters(self, sid: str) -> pa.Table:
        """An empty table of spout ``sid``'s dead letters."""

    def fold_dead(self, node: Node) -> tuple[str, Any] | None:
        """``(spout id, dead letters frame)`` a state's job over ``node`` may collect."""

    def uncounted_spout(self, node: Node) -> str | None:
        """The one spout upstream of ``node`` whose dead letters are still to collect."""

"""The runner of a topology on Spark: :class:`TopologyRunner`.

Everything but the engine is :class:`~trident_assets.runtime.runner.Runner`'s (the order of
work for one txid is told there). This subclass binds a Spark session: at creation it checks
the declared value types on the DataFrames (analysis only, before any job or write), ships
the package and the user's modules to the executors and opens the partials' spill target;
its txid loop runs on :class:`~trident_assets.spark.execution.SparkExecution`; it catches up
a state built from the log (:mod:`~trident_assets.spark.backfill`) and runs the quarantine
(:mod:`~trident_assets.spark.quarantine_runs`).

The rest of the Spark layer, one concept per module:

* :mod:`~trident_assets.spark.batch_run`: the one frame builder, a chunk of N >= 1 txids;
* :mod:`~trident_assets.spark.batch_commit`: a txid's commit phase;
* :mod:`~trident_assets.spark.partials`: a combiner state's per-key partials;
* :mod:`~trident_assets.spark.state_engines`: each state kind's batch input and apply;
* :mod:`~trident_assets.spark.state_query`: ``state_query`` lookups;
* :mod:`~trident_assets.spark.rebuild`: rebuilding one state from the log.

Data moves between Spark and the state store (DuckDB or PostgreSQL) only as Arrow tables.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trident_assets.backends.compaction import CompactionPolicy
from trident_assets.backends.replica import DEFAULT_KEEP_TXIDS, Replica
from trident_assets.planner import all_nodes
from trident_assets.runtime.backfill_plans import BackfillOutcome
from trident_assets.runtime.batch_tables import DEAD_LETTERS
from trident_assets.runtime.outcomes import GLOBAL_COLUMN, BatchOutcome, StateOutcome
from trident_assets.runtime.runner import (
    DEFAULT_COMPACTION,
    DEFAULT_MAX_SPOUT_PENDING,
    Fault,
    Runner,
)
from trident_assets.spark.backfill import catch_up_one
from trident_assets.spark.code_shipping import ship_package, ship_user_modules, topology_code
from trident_assets.spark.declared_types import check_value_types
from trident_assets.spark.execution import SparkExecution
from trident_assets.spark.quarantine_runs import quarantine, replay_quarantined
from trident_assets.spark.spilled import open_spill
from trident_assets.spark.user_errors import user_code_errors

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "DEAD_LETTERS",
    "GLOBAL_COLUMN",
    "BackfillOutcome",
    "BatchOutcome",
    "StateOutcome",
    "TopologyRunner",
]


class TopologyRunner(Runner):
    """Runs batches of one topology against a Spark session, a log and a state store."""

    def __init__(
        self,
        topology: TridentTopology,
        spark: Any,
        store: StateStore,
        log: Any,
        *,
        fault: Fault | None = None,
        compaction: CompactionPolicy | None = DEFAULT_COMPACTION,
        max_spout_pending: int = DEFAULT_MAX_SPOUT_PENDING,
        replica: Replica | None = None,
        keep_txids: int = DEFAULT_KEEP_TXIDS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """Bind the topology to its runtime resources.

        ``compaction``: when to compact a state's versioned log after a batch commits
        (None: never; ``store.compact`` by hand). ``max_spout_pending``: how many
        consecutive txids :meth:`run_batches` may process in one Spark job (1: one by one).
        ``replica``: where each committed txid is published for lock-free readers (the
        TridentIOManager, the CLI); txids committed but not yet published (a crash between
        the two) are published first. ``keep_txids``: how many recent txids the replica
        keeps readable as of a txid. ``clock``: the time (seconds) a txid is stamped with
        when it commits, for duration windows (default ``time.time``).
        """
        self.spark = spark
        self.spill: Any = None
        """How executors write partials for the store (``trident.partials.spill``; None:
        collected to the driver)."""
        super().__init__(
            topology,
            store,
            log,
            fault=fault,
            compaction=compaction,
            max_spout_pending=max_spout_pending,
            replica=replica,
            keep_txids=keep_txids,
            clock=clock or time.time,
        )

    def start_engine(self) -> None:
        """Check the declared value types (DataFrame analysis only), ship the code, open spill."""
        check_value_types(self)
        ship_package(self.spark)
        ship_user_modules(topology_code(all_nodes(self.topology)))
        self.spill = open_spill(self.spark, self.store, self.topology.name)

    def execution(self) -> SparkExecution:
        """Spark as the txid loop's engine."""
        return SparkExecution(self)

    def catch_up_one(self, state: TridentState, txid: int, first: int) -> bool:
        """See :func:`~trident_assets.spark.backfill.catch_up_one`."""
        return catch_up_one(self, state, txid, first)

    def engine_errors(self) -> contextlib.AbstractContextManager[None]:
        """A user function's failure on a Spark worker, re-raised as its UserCodeError."""
        return user_code_errors()

    def quarantine(self, txid: int, error: str) -> BatchOutcome:
        """Set poison batch ``txid`` aside: commit it with no state change, keep its ranges.

        See :func:`~trident_assets.spark.quarantine_runs.quarantine`.
        """
        return quarantine(self, txid, error)

    def replay_quarantined(self, txid: int | None = None) -> BatchOutcome:
        """Process quarantined ``txid``'s records as the next txid.

        See :func:`~trident_assets.spark.quarantine_runs.replay_quarantined`.
        """
        return replay_quarantined(self, txid)

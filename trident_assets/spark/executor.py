"""The runner of a topology on Spark: :class:`TopologyRunner`.

Everything but the engine is :class:`~trident_assets.runtime.runner.Runner`'s (the order of
work for one txid is told there). This subclass binds a Spark session: at creation it checks
the declared value types on the DataFrames (analysis only, before any job or write), ships
the package and the user's modules to the executors and opens the partials' spill target;
its txid loop runs on :class:`~trident_assets.spark.execution.SparkExecution`; it catches up
a state built from the log (:mod:`~trident_assets.spark.backfill`) and runs the quarantine
(:mod:`~trident_assets.spark.quarantine_runs`).

The rest of the Spark layer, one concept per module, is mapped in ``docs/architecture.md``.
Data moves between Spark and the state store (DuckDB or PostgreSQL) only as Arrow tables.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Unpack

from trident_assets.planner import all_nodes
from trident_assets.runtime.runner import Runner, RunnerOptions
from trident_assets.spark.backfill import catch_up_one
from trident_assets.spark.code_shipping import ship_package, ship_user_modules, topology_code
from trident_assets.spark.declared_types import check_value_types
from trident_assets.spark.execution import SparkExecution
from trident_assets.spark.frame_schemas import EmptyTables
from trident_assets.spark.quarantine_runs import quarantine, replay_quarantined
from trident_assets.spark.spilled import Spill, open_spill
from trident_assets.spark.user_errors import worker_errors

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore
    from trident_assets.stream.topology import TridentTopology

__all__ = ["TopologyRunner"]


class TopologyRunner(Runner):
    """Runs batches of one topology against a Spark session, a log and a state store."""

    def __init__(
        self,
        topology: TridentTopology,
        spark: Any,
        store: StateStore,
        log: Any,
        **options: Unpack[RunnerOptions],
    ) -> None:
        """Bind the topology to a Spark session, its store and its log.

        ``options``: those of :class:`~trident_assets.runtime.runner.Runner` (``fault``,
        ``compaction``, ``max_spout_pending`` (how many consecutive txids may share one
        Spark job), ``replica``, ``keep_txids``, ``clock``).
        """
        self.spark = spark
        self.spill: Spill | None = None  # trident.partials.spill (see RunContext.spill)
        self.empty_tables = EmptyTables()
        super().__init__(topology, store, log, **options)

    def start_engine(self) -> None:
        """Check the declared value types (DataFrame analysis only), ship the code, open spill."""
        check_value_types(self)
        ship_package(self.spark)
        ship_user_modules(topology_code(all_nodes(self.topology)))
        self.spill = open_spill(self.spark, self.store, self.topology.name)

    def execution(self) -> SparkExecution:
        """Spark as the txid loop's engine."""
        return SparkExecution(self)

    catch_up_one = catch_up_one
    """Apply committed ``txid`` to a state being built from the log: :func:`.catch_up_one`."""

    def engine_errors(self) -> contextlib.AbstractContextManager[None]:
        """A Spark worker's failure, re-raised as the error it was (a store's or the user's)."""
        return worker_errors()

    quarantine = quarantine
    """Set a poison batch aside: :func:`~trident_assets.spark.quarantine_runs.quarantine`."""
    replay_quarantined = replay_quarantined
    """Process a quarantined txid's records as the next txid: :func:`.replay_quarantined`."""

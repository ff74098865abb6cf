"""The runner of one topology: its txids, their commits, and what it reports, on any engine.

Order of work for txid ``N`` (Trident's batch phase, then its commit phase):

1. If the topology already committed ``N``: nothing runs; the outcome says so.
2. Each spout's coordinator fixes the batch's offset ranges; the engine reads them and the
   scheme decodes them (failed records become dead letters).
3. The engine computes every stream; each state gets its batch input (per-key partials,
   tuples or rows); queries read the state as committed before this batch.
4. ONE store transaction applies every state (one set-based statement each), records the
   new values, outputs and dead letters, makes the spout ranges final, and marks ``N``
   committed (:func:`~trident_assets.runtime.commit.commit`, the one way a txid commits;
   the runner is its target). A crash anywhere leaves the old state or the new, never a mix.
5. The committed txid is published to the read replica, then compacted if the policy says.

Steps 2-3 run on the engine through the one txid loop (:mod:`.txid_loop`: consecutive txids
share one job, up to ``max_spout_pending``, and commit one by one, in order). The checks at
creation (contracts, joining spouts, states to build from the log) are :mod:`.startup`'s.

:class:`Runner` holds all of it but the engine: Spark's subclass is
:class:`~trident_assets.spark.executor.TopologyRunner`.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypedDict

from trident_assets.backends.compaction import CompactionPolicy, maybe_compact
from trident_assets.backends.duckdb_spout_meta import DuckDBSpoutMetaStore
from trident_assets.backends.quarantine import QuarantineEntry, entries
from trident_assets.backends.replica import DEFAULT_KEEP_TXIDS, Replica
from trident_assets.backends.state_contracts import (
    delete_state_rows,
    record_left,
    write_contracts,
)
from trident_assets.backends.txid_rows import ensure_dead_letters_table
from trident_assets.core.txids import validate_txid
from trident_assets.errors import ConfigError
from trident_assets.names import STATES_LEFT_TABLE
from trident_assets.planner import pipelinable
from trident_assets.runtime.backfill_plans import BackfillOutcome
from trident_assets.runtime.commit import PROGRESS_TABLE, progress
from trident_assets.runtime.outcomes import BatchOutcome
from trident_assets.runtime.publishing import described as describe
from trident_assets.runtime.publishing import (
    publish,
    publish_missing,
    publish_tables,
    table_publishers,
)
from trident_assets.runtime.startup import joining_spouts, plan_startup
from trident_assets.runtime.txid_loop import Execution, TxidLoop
from trident_assets.spouts.coordinator import BatchCoordinator
from trident_assets.spouts.ranges import BatchPlan, partition_sort_key

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore
    from trident_assets.core.commit import CommitMarker
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "Fault",
    "Runner",
    "RunnerOptions",
]

DEFAULT_COMPACTION = CompactionPolicy()
DEFAULT_MAX_SPOUT_PENDING = 10
"""How many consecutive txids may share one engine job (Trident's ``max.spout.pending``)."""

Fault = Callable[[str], None]
"""Called at named points of a batch; the crash tests kill the process there: ``after_emit``,
``after_state_write``, ``before_commit`` (inside the store transaction), ``after_commit``
(committed, the replica and tables not yet published) and ``after_table_commit`` (after each
lakehouse table commit, before the next); a state caught up from the log or rebuilt prefixes
them (``backfill_before_commit``, ``rebuild_after_state_write``, ...)."""


class RunnerOptions(TypedDict, total=False):
    """The options of a runner (see :meth:`Runner.__init__`), for its engines' subclasses."""

    fault: Fault | None
    compaction: CompactionPolicy | None
    max_spout_pending: int
    replica: Replica | None
    keep_txids: int
    clock: Callable[[], float] | None


class Runner(ABC):
    """Runs the txids of one topology against a log and a state store, on an engine.

    The engine's subclass (Spark's :class:`~trident_assets.spark.executor.TopologyRunner`)
    provides the txid loop's :class:`~trident_assets.runtime.txid_loop.Execution`, the
    catch-up of one txid of a state built from the log, and its checks at creation.
    """

    def __init__(
        self,
        topology: TridentTopology,
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
        consecutive txids :meth:`run_batches` may process in one engine job (1: one by one).
        ``replica``: where each committed txid is published for lock-free readers (the
        TridentIOManager, the CLI); txids committed but not yet published (a crash between
        the two) are published first. ``keep_txids``: how many recent txids the replica
        keeps readable as of a txid. ``clock``: the time (seconds) a txid is stamped with
        when it commits, for duration windows (default ``time.time``).
        """
        if max_spout_pending < 1:
            msg = f"max_spout_pending must be >= 1, got {max_spout_pending}"
            raise ConfigError(msg)
        # Checked at creation: the topology and the store are known, and nothing
        # (coordinator emission, Spark job, spout metadata, state write) has happened yet,
        # so a refused declaration leaves the store exactly as it was.
        startup = plan_startup(topology, store, log)
        self._pending_contracts = startup.pending_contracts
        self._absent = startup.absent
        self._building = startup.building
        self._joining = startup.joining
        self.compaction = compaction
        self.max_spout_pending = max_spout_pending
        self.pipelinable = pipelinable(topology)
        self.topology = topology
        self.store = store
        self.log = log
        self.fault = fault or (lambda _point: None)
        self.clock = clock or time.time
        self.meta = DuckDBSpoutMetaStore(store)  # creates its table: after the checks
        self._joins_after = joining_spouts(topology, store, self.meta, startup.last)
        """Spouts added to the topology after txid N: name -> N (they start at N + 1)."""
        self.start_engine()  # the engine's checks: before any job or write
        ensure_dead_letters_table(store)
        self.replica = replica
        self.keep_txids = keep_txids
        if replica is not None:
            publish_missing(replica, store, topology)
        self.tables = table_publishers(topology, store)
        """The lakehouse tables of the topology, published after each commit."""
        publish_tables(self.tables, store, self.fault, self._building)

    marker: CommitMarker | None = None
    """The topology's commit marker is the store's (:func:`~.commit.commit`'s target)."""
    what: str | None = None

    @property
    def scope(self) -> str:
        """The commit scope: the topology name."""
        return self.topology.name

    @property
    def states(self) -> dict[str, TridentState]:
        """The topology's states, which each txid commits."""
        return self.topology.states

    @property
    def outputs(self) -> dict[str, Any]:
        """The topology's outputs, which each txid writes."""
        return self.topology.outputs

    def last_committed(self) -> int | None:
        """The last committed txid of the topology."""
        return self.store.last_committed(self.scope)

    def coordinator(self, spout_id: str) -> BatchCoordinator:
        """The batch coordinator of one spout."""
        spout = self.topology.spouts[spout_id].args["spout"]
        return BatchCoordinator(
            self.topology.name,
            spout_id,
            spout.source(self.log),
            spout.config,
            self.meta,
            self._joins_after.get(spout_id, 0),
        )

    def backlog(self) -> int:
        """Records available to the next batch across all spouts (before batch-size limits)."""
        return sum(self.backlog_by_spout().values())

    def backlog_by_spout(self) -> dict[str, int]:
        """Per spout: records after its last final ranges.

        A txid emitted but not committed (a killed run's) counts: it is replayed.
        """
        waiting: dict[str, int] = {}
        for spout_id, node in self.topology.spouts.items():
            source = node.args["spout"].source(self.log)
            done = self.meta.latest_before(self.topology.name, spout_id, 1 << 62, True)
            waiting[spout_id] = 0
            for partition in source.partitions():
                prev = done.get(partition)
                start = source.earliest(partition) if prev is None else prev.next_offset
                waiting[spout_id] += max(0, source.latest(partition) - start)
        return waiting

    def lag(self, plans: dict[str, BatchPlan]) -> dict[str, dict[str, int]]:
        """Per spout, per partition: records in the source after the ranges of ``plans``.

        A partition ``plans`` does not cover counts from its earliest offset.
        """
        lag: dict[str, dict[str, int]] = {}
        for spout_id, node in self.topology.spouts.items():
            source = node.args["spout"].source(self.log)
            plan = plans.get(spout_id)
            ends = {} if plan is None else {r.partition: r.next_offset for r in plan.ranges}
            lag[spout_id] = {
                p: max(0, source.latest(p) - ends.get(p, source.earliest(p)))
                for p in sorted(source.partitions(), key=partition_sort_key)
            }
        return lag

    def run_batch(self, txid: int) -> BatchOutcome:
        """Process and commit batch ``txid`` exactly once.

        Raises:
            OutOfOrderCommitError: an earlier txid has not committed; nothing was read.
            BatchUnavailableError: a transactional replay can no longer be read.
        """
        validate_txid(txid)
        with contextlib.closing(self.run_batches([txid])) as outcomes:
            return next(outcomes)

    def run_batches(self, txids: Iterable[int]) -> Generator[BatchOutcome]:
        """Process and commit ``txids`` (ascending) exactly once each, yielding each outcome.

        Consecutive txids share one Spark job, up to ``max_spout_pending`` at a time, when
        the topology allows (see :mod:`trident_assets.spark.batch_run`); every txid still
        commits on its own, in order, in its own transaction, and is yielded once it has.
        A txid committed before yields an outcome with ``applied=False``.

        Raises:
            OutOfOrderCommitError: an earlier txid has not committed; nothing was read.
            BatchUnavailableError: a transactional replay can no longer be read.
        """
        ordered = [validate_txid(t) for t in txids]
        with self.engine_errors():
            yield from self.txid_loop().run(ordered)

    def backfill(self) -> list[BackfillOutcome]:
        """Build the topology's new states from the log of its committed txids, exactly once.

        For each state added to the topology after it committed txids ``1..N``: txids
        ``first..N`` (``first`` is 1, or the first readable txid for
        ``backfill="from_retained"``) are replayed from the ranges the spouts recorded,
        through that state's subgraph alone, one transaction per txid holding the state's
        writes and its progress; a crash resumes at the next txid. Txids the topology commits
        meanwhile (another process) are caught up too. The state then joins the topology's
        next batch. Runs automatically before the first batch; returns what it applied.

        Raises:
            BatchUnavailableError: a txid's ranges are no longer readable; what was applied
                stays, the next call resumes there.
        """
        outcomes: list[BackfillOutcome] = []
        with self.engine_errors():
            for name, first in sorted(self._building.items()):
                state = self.topology.states[name]
                done = progress(self.store, self.scope).get(name, (first, first - 1))[1]
                outcome = BackfillOutcome(name, first, done)
                while done < (self.last_committed() or 0):
                    done += 1
                    if self.catch_up_one(state, done, first):
                        outcome.applied.append(done)
                outcome.last_txid = done
                outcomes.append(outcome)
                if done >= first and self.replica is not None:  # readers see it whole
                    described = describe(self.topology).get(state.table)
                    self.replica.replace_map(self.store, state.table, done, described)
                if done < first:  # nothing to replay: it starts at ``first``
                    self._pending_contracts.append(replace(state.contract(), first_txid=first))
                self._joining.add(name)
        self._building = {}
        return outcomes

    def txid_loop(self) -> TxidLoop:
        """The one loop over this runner's txids, on its engine."""
        return TxidLoop(self, self.execution())

    # -- what the engine provides ----------------------------------------------------------

    @abstractmethod
    def start_engine(self) -> None:
        """Check the topology on the engine and set it up, before any job or write."""

    @abstractmethod
    def execution(self) -> Execution:
        """The engine's side of the txid loop."""

    @abstractmethod
    def catch_up_one(self, state: TridentState, txid: int, first: int) -> bool:
        """Apply committed ``txid`` to ``state`` being built from the log; False if done before."""

    def engine_errors(self) -> contextlib.AbstractContextManager[None]:
        """Where a user function failed on the engine's workers: its error, re-raised."""
        return contextlib.nullcontext()

    def ensure_built(self) -> None:
        """Build the states still to be built from the log (:meth:`backfill`), if any."""
        if self._building:
            self.backfill()

    def coordinators(self) -> dict[str, BatchCoordinator]:
        """The batch coordinator of each spout."""
        return {sid: self.coordinator(sid) for sid in self.topology.spouts}

    def declared(self, txid: int, write: Callable[[], BatchOutcome]) -> BatchOutcome:
        """In ``txid``'s commit transaction: the states' bookkeeping, then ``write``.

        Contracts of new states are written; states built from the log join (their progress
        and any record that they had left are removed); stored states this declaration
        lacks are recorded as missing the txids from ``txid`` on.
        """
        pending, self._pending_contracts = self._pending_contracts, []
        joining, self._joining = self._joining, set()
        try:
            write_contracts(self.store, pending)
            for table in (PROGRESS_TABLE, STATES_LEFT_TABLE):  # they join: no progress, not left
                delete_state_rows(self.store, table, self.scope, joining)
            record_left(self.store, self.scope, self._absent, txid - 1)
            return write()
        except BaseException:
            self._pending_contracts = pending  # rolled back: write them with the next commit
            self._joining = joining
            raise

    def published(self, outcome: BatchOutcome, timings: dict[str, float]) -> None:
        """Publish committed ``outcome`` to the replica and the tables; compact its states."""
        if self.replica is not None or self.tables:
            self.fault("after_commit")  # committed, not yet published: readers lag one txid
        if self.replica is not None:
            t_publish = time.perf_counter()
            publish(self.replica, self.store, self.topology, outcome.txid, self.keep_txids)
            timings["publish"] = time.perf_counter() - t_publish
        if self.tables:
            t_tables = time.perf_counter()
            outcome.published = publish_tables(self.tables, self.store, self.fault, self._building)
            timings["publish_tables"] = time.perf_counter() - t_tables
        if self.compaction is not None:
            t_compact = time.perf_counter()
            live = {s.table: s.size for s in outcome.states.values() if s.size is not None}
            outcome.compacted = maybe_compact(self.store, live, self.compaction)
            timings["compact"] = time.perf_counter() - t_compact

    # -- the quarantine ------------------------------------------------------------------------

    def quarantined(self, *, pending_only: bool = True) -> list[QuarantineEntry]:
        """The topology's quarantine entries (those not replayed yet by default)."""
        return entries(self.store, self.scope, pending_only=pending_only)

    # -- event windows -------------------------------------------------------------------------

    def window_finals(self, state: str) -> list[dict[str, Any]]:
        """The final windows of event-window state ``state`` as rows, each emitted once.

        Key fields, ``window_start``, ``window_end`` (naive UTC), the value, ``final_txid``;
        ordered by key and window.
        """
        from trident_assets.backends.window_store import read_finals

        return read_finals(self.store, self.topology.states[state])  # type: ignore[arg-type]

    def window_open(self, state: str) -> list[dict[str, Any]]:
        """Early results: the windows of ``state`` not final yet (``final`` False)."""
        from trident_assets.backends.window_store import read_open

        return read_open(self.store, self.topology.states[state])  # type: ignore[arg-type]

    def committed_plans(self, txid: int) -> dict[str, BatchPlan]:
        """The recorded ranges of committed ``txid`` (spouts whose ranges were cleaned up omitted).

        Read only: a committed batch is final, so nothing is planned, recorded or re-read.
        """
        plans: dict[str, BatchPlan] = {}
        for spout_id, node in self.topology.spouts.items():
            stored = self.meta.ranges(self.scope, spout_id, txid)
            if stored is not None and stored[1]:
                kind = node.args["spout"].config.kind
                plans[spout_id] = BatchPlan.of(
                    self.scope, spout_id, txid, kind, stored[0], replay=True
                )
        return plans

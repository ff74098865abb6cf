"""Committing one txid: the one function every path commits through, and its markers.

:func:`commit` commits a txid from what the engine prepared for it
(:class:`~trident_assets.runtime.outcomes.Prepared`), whoever asked for it: the txid loop, a
quarantine, a quarantine replay, a state caught up from the log, a rebuild's shadow map, a
state asset of one's own (:mod:`~trident_assets.runtime.state_asset`). One
store transaction asks each state's engine only to apply its state (:class:`TxidEngine`),
writes the outputs, new values and dead letters (:mod:`~trident_assets.backends.txid_rows`),
makes the spout ranges final, records what the txid read, and moves a commit marker; a txid
that committed before applies nothing. Then the target publishes and compacts it. What
differs between the paths is the :class:`CommitTarget`: where the marker is kept, which
states it holds, and what follows the commit:

* the topology's marker in the store (:class:`~trident_assets.core.commit.StoreMarker`, the
  default): live batches and the quarantine, published and compacted;
* :class:`CatchUpMarker`: a state being built from the log keeps its progress in the store
  table ``_trident_backfills`` (``first_txid``, ``done_txid``); its first txid also writes
  its contract. A crash resumes at the next txid exactly;
* :class:`ShadowMarker`: a rebuild's shadow map, in memory (the swap that ends the rebuild
  is one transaction of its own).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from trident_assets.backends.quarantine import add_entries, mark_replayed
from trident_assets.backends.replica import PARTIALS_KEPT
from trident_assets.backends.spout_history import record_history
from trident_assets.backends.state_contracts import write_contracts
from trident_assets.backends.txid_rows import store_dead_letters, store_rows
from trident_assets.core.commit import CommitMarker, StoreTransaction, commit_batch
from trident_assets.core.txids import validate_txid
from trident_assets.errors import DiskFullError, TridentError, is_disk_full
from trident_assets.names import BACKFILLS_TABLE
from trident_assets.runtime.outcomes import (
    Applied,
    BatchOutcome,
    Prepared,
    dead_letter_rows,
    head_rows,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from trident_assets.backends.state_store import StateStore
    from trident_assets.core.contracts import StateContract
    from trident_assets.spouts.coordinator import BatchCoordinator
    from trident_assets.spouts.ranges import BatchPlan
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "PROGRESS_TABLE",
    "CatchUpMarker",
    "CommitTarget",
    "ShadowMarker",
    "StateAlone",
    "TxidEngine",
    "commit",
    "progress",
]

PROGRESS_TABLE = BACKFILLS_TABLE
"""Per (topology, state) being built from the log: its first txid and the last it applied."""


class StateTables(Protocol):
    """What a commit asks of a state itself: the tables of its rows per txid."""

    @property
    def partials_table(self) -> str:
        """Its per-key partials of each recent txid."""

    @property
    def new_values_table(self) -> str:
        """Its new values of each recent txid."""


S = TypeVar("S", bound=StateTables)
"""The states a target holds and its engine applies (a topology's ``TridentState``, a state
asset's ``StateTarget``)."""
S_co = TypeVar("S_co", bound=StateTables, covariant=True)
S_contra = TypeVar("S_contra", bound=StateTables, contravariant=True)


class TxidEngine(Protocol[S_contra]):
    """What a txid's commit asks of the engine inside its transaction (Spark's: ``SparkTxid``)."""

    def apply(self, state: S_contra, batch: Any, nulls: int) -> Applied:
        """Apply ``batch`` to ``state`` (its kind's engine), with previews of what it did."""

    def late_input(
        self, state: S_contra, new_values: dict[str, pa.Table], expired: dict[str, pa.Table]
    ) -> tuple[Any, int]:
        """``state``'s batch input and nulls skipped, read from this batch's new values."""

    def late_output(
        self, name: str, new_values: dict[str, pa.Table], expired: dict[str, pa.Table]
    ) -> pa.Table:
        """Output ``name``'s tuples, read from this batch's new values."""


class CommitTarget(Protocol[S_co]):
    """What a txid commits to (a topology's runner, :class:`StateAlone`), and what follows."""

    topology: TridentTopology
    store: StateStore
    marker: CommitMarker | None
    what: str | None

    @property
    def scope(self) -> str:
        """The commit scope."""

    @property
    def states(self) -> Mapping[str, S_co]:
        """The states each txid applies, by name."""

    @property
    def outputs(self) -> Mapping[str, Any]:
        """The outputs each txid writes, by name."""

    def fault(self, point: str) -> None:
        """Called at the named points of a commit (the chaos tests kill the process there)."""

    def coordinator(self, spout_id: str) -> BatchCoordinator:
        """The batch coordinator of one spout (it makes the txid's ranges final)."""

    def lag(self, plans: dict[str, BatchPlan]) -> dict[str, dict[str, int]]:
        """Per spout, per partition: records in the source after ``plans``."""

    def declared(self, txid: int, write: Callable[[], BatchOutcome]) -> BatchOutcome:
        """Inside ``txid``'s transaction: the declaration's bookkeeping, then ``write``."""

    def published(self, outcome: BatchOutcome, timings: dict[str, float]) -> None:
        """After the commit of ``outcome``: publish it (replica, tables), compact its states."""


@dataclass
class StateAlone(Generic[S]):
    """One state committed alone, under a scope of its own, published by no commit.

    A state built from the log (:class:`CatchUpMarker`), a rebuild's shadow map
    (:class:`ShadowMarker`) or a state asset reads no new range: only the state and its new
    values are written (the txid's other tables are the topology's, committed before); the
    replica learns of it once it joins or is swapped in. ``faults`` gets each point, prefixed.
    """

    store: StateStore
    topology: TridentTopology
    scope: str
    states: Mapping[str, S]
    marker: CommitMarker | None
    what: str | None
    faults: Callable[[str], None]
    prefix: str
    outputs: Mapping[str, Any] = field(default_factory=dict)

    def fault(self, point: str) -> None:
        """The point, prefixed (e.g. ``backfill_after_state_write``)."""
        self.faults(f"{self.prefix}{point}")

    def coordinator(self, spout_id: str) -> BatchCoordinator:
        """Never asked: a state alone reads no new range."""
        raise AssertionError(spout_id)

    def lag(self, plans: dict[str, BatchPlan]) -> dict[str, dict[str, int]]:
        """None: a state alone reads no new range."""
        return {}

    def declared(self, txid: int, write: Callable[[], BatchOutcome]) -> BatchOutcome:
        """No bookkeeping: ``write``."""
        return write()

    def published(self, outcome: BatchOutcome, timings: dict[str, float]) -> None:
        """Nothing: published once it joins the topology or is swapped in."""


def commit(
    target: CommitTarget[S],
    txid: int,
    plans: dict[str, BatchPlan],
    prepared: Prepared,
    engine: TxidEngine[S] | None = None,
    timings: dict[str, float] | None = None,
    share: int = 1,
) -> BatchOutcome:
    """Commit ``txid`` to ``target`` from its ``prepared`` batch, then publish and compact.

    ``plans``: the ranges the txid read. ``engine`` applies each state inside the
    transaction and computes what reads this batch's new values (None: nothing to apply,
    a quarantined txid). ``timings``: what the txid took so far (its share of a chunk of
    ``share`` txids). Returns the txid's outcome (``applied=False`` when it had committed
    before). Strict order and committed-is-final come from the target's marker.

    Raises:
        ConfigError: ``txid`` is not an integer >= 1; nothing was changed.
        OutOfOrderCommitError: an earlier txid has not committed; nothing was changed.
        DiskFullError: the device of the state file filled up; nothing was committed.
    """
    validate_txid(txid)
    timings = dict(timings or {})
    recorded = plans if prepared.recorded is None else prepared.recorded
    t_commit = time.perf_counter()
    write = partial(_write, target, txid, plans, recorded, prepared, engine)
    with _disk_full(target.store, txid, target.what or f"topology {target.scope!r}"):
        result = commit_batch(
            target.store,
            target.scope,
            txid,
            lambda _tx: target.declared(txid, write),
            target.marker,
        )
    outcome = result.result or BatchOutcome(target.scope, txid, False, recorded)
    timings["commit"] = time.perf_counter() - t_commit
    if outcome.applied:
        outcome.lag = target.lag(recorded)
        target.published(outcome, timings)
    timings["total"] = sum(timings.values())
    outcome.timings_s = timings
    outcome.pipelined = share
    return outcome


def _write(
    target: CommitTarget[S],
    txid: int,
    plans: dict[str, BatchPlan],
    recorded: dict[str, BatchPlan],
    prepared: Prepared,
    engine: TxidEngine[S] | None,
) -> BatchOutcome:
    """Every write of ``txid`` inside its open transaction; its outcome."""
    store, scope = target.store, target.scope
    outcome = BatchOutcome(scope, txid, True, recorded, prepared.tuples_in)
    new_values: dict[str, pa.Table] = {}
    expired: dict[str, pa.Table] = {}
    state_dead: dict[str, pa.Table] = {}
    outputs = dict(prepared.outputs)
    if engine is not None:  # None: nothing to apply (a quarantined txid)
        for name, state in target.states.items():
            batch, nulls = prepared.partials.get(name), prepared.nulls.get(name, 0)
            if batch is None:  # reads this batch's new values: computed now
                batch, nulls = engine.late_input(state, new_values, expired)
            applied = engine.apply(state, batch, nulls)
            if applied.partials is not None:
                store_rows(store, state.partials_table, txid, applied.partials, PARTIALS_KEPT)
            if applied.new_values is not None:
                new_values[name] = applied.new_values
            if applied.expired is not None:
                expired[name] = applied.expired
            if applied.window is not None:
                outcome.windows[name] = applied.window
            state_dead |= applied.dead
            outcome.states[name] = applied.outcome
            outcome.previews |= applied.previews
        target.fault("after_state_write")
        for name in target.outputs:
            if name not in outputs:
                outputs[name] = engine.late_output(name, new_values, expired)
    for name, table in outputs.items():
        store_rows(store, target.topology.output_table(name), txid, table)
        outcome.outputs[name] = table.num_rows
        outcome.previews[f"output:{name}"] = head_rows(table)
    for name, table in new_values.items():
        store_rows(store, target.states[name].new_values_table, txid, table)
        outcome.previews.setdefault(f"new_values:{name}", head_rows(table))
    all_dead = {**prepared.dead, **state_dead}
    if recorded or all_dead:  # what the txid read (a state alone read no new range)
        outcome.dead_letters = store_dead_letters(store, scope, txid, all_dead)
        outcome.dead_letters_by_spout = {sid: t.num_rows for sid, t in all_dead.items()}
        for sid, dead in all_dead.items():
            outcome.previews[f"dead_letters:{sid}"] = dead_letter_rows(dead)
        for spout_id, plan in recorded.items():
            target.coordinator(spout_id).commit(plan)
        record_history(store, scope, txid, {s: p.ranges for s, p in plans.items()})
    if prepared.quarantine is not None:
        ranges = {sid: p.ranges for sid, p in recorded.items() if p.record_count}
        add_entries(store, scope, txid, ranges, prepared.quarantine)
        outcome.quarantined = sum(p.record_count for p in recorded.values())
    if prepared.replays is not None:
        mark_replayed(store, scope, prepared.replays, txid)
        outcome.reprocessed_txid = prepared.replays
    target.fault("before_commit")
    return outcome


@contextlib.contextmanager
def _disk_full(store: StateStore, txid: int, what: str) -> Iterator[None]:
    """A full device while committing ``txid``: :class:`DiskFullError` naming the way out."""
    try:
        yield
    except TridentError:
        raise
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        msg = (
            f"no space left on device committing txid {txid} of {what} to state file "
            f"{store.path}: nothing of it was committed. Free space on that device, then "
            f"run txid {txid} again"
        )
        raise DiskFullError(msg) from exc


def progress(store: StateStore, topology: str) -> dict[str, tuple[int, int]]:
    """Per state of ``topology`` whose catch-up has not joined yet: ``(first, done)`` txids."""
    if not store.has_table(PROGRESS_TABLE):
        return {}
    rows = store.fetch_rows(
        f"SELECT state, first_txid, done_txid FROM {PROGRESS_TABLE} WHERE topology = ?",
        [topology],
    )
    return {str(s): (int(f), int(d)) for s, f, d in rows}


@dataclass
class CatchUpMarker:
    """A state being built from the log: its progress row is its commit marker.

    Before its first txid (``first``) the state has no row: it counts as committed up to
    ``first - 1``, and the commit of ``first`` writes the state's contract (``first_txid``
    included) and creates the progress table.
    """

    store: StateStore
    topology: str
    contract: StateContract
    first: int

    def last_committed(self, tx: StoreTransaction, scope: str) -> int | None:
        """The last txid the state's catch-up applied (``first - 1`` before its first)."""
        row = progress(self.store, self.topology).get(self.contract.state)
        return self.first - 1 if row is None else row[1]

    def mark_committed(self, tx: StoreTransaction, scope: str, txid: int) -> None:
        """Record ``txid`` as the state's progress (and its contract, at its first txid)."""
        if txid == self.first:
            write_contracts(self.store, [replace(self.contract, first_txid=self.first)])
            self.store.execute(
                f"CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (topology VARCHAR NOT NULL, "
                "state VARCHAR NOT NULL, first_txid BIGINT NOT NULL, done_txid BIGINT NOT NULL, "
                "PRIMARY KEY (topology, state))"
            )
        self.store.execute(
            f"INSERT INTO {PROGRESS_TABLE} (topology, state, first_txid, done_txid) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (topology, state) DO UPDATE SET "
            "done_txid = excluded.done_txid",
            [self.topology, self.contract.state, self.first, txid],
        )


@dataclass
class ShadowMarker:
    """A rebuild's shadow map: the last txid replayed into it, kept in memory."""

    done: int

    def last_committed(self, tx: StoreTransaction, scope: str) -> int | None:
        """The last txid replayed into the shadow."""
        return self.done

    def mark_committed(self, tx: StoreTransaction, scope: str, txid: int) -> None:
        """``txid`` is in the shadow once its transaction commits."""
        self.done = txid

"""Building a state from the log of committed txids: catch-up of a new state, and rebuild.

Both replay what each committed txid read (:mod:`trident_assets.backends.spout_history`),
through the state's own subgraph only: the spouts it reads, the operations between them and
the state. No other state, output, dead-letter table or spout position is touched.

* **Catch-up** (:class:`~trident_assets.spark.executor.TopologyRunner` does it before its
  first batch, or on :meth:`~trident_assets.spark.executor.TopologyRunner.backfill`): a state
  added to a topology that committed txids ``1..N`` applies txids ``first..N`` one by one,
  each in its own store transaction that also records the progress (table
  ``_trident_backfills``: ``first_txid``, ``done_txid``), so a crash resumes at the next txid
  exactly. The state's contract is written in the first of them (``first_txid`` included).
  The state then joins the topology's batches at ``N+1`` (its progress row is removed in
  that commit).
* **Rebuild** (:func:`rebuild_state`, ``trident state rebuild``): a persistent aggregate of a
  DuckDB store is recomputed into a shadow map, then swapped in by one transaction at the
  last committed txid: readers see the old values or the new ones, never a mix.

Refused before any write, naming the state: a state that reads another state (a state query,
a new-values stream, a single join), and txids whose ranges were not recorded or whose
records retention deleted (unless the state is declared ``backfill="from_retained"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from trident_assets.backends.map_layout import (
    CATALOG_TABLE,
    COMPACTIONS_TABLE,
    SEQ_COLUMN,
    log_table,
    quote_ident,
    seq_name,
)
from trident_assets.backends.spout_history import SpoutJoins, read_history, spout_joins
from trident_assets.backends.state_batches import TOTALS_TABLE
from trident_assets.backends.state_contracts import (
    TABLE as CONTRACTS_TABLE,
)
from trident_assets.backends.state_contracts import (
    delete_state_rows,
    stored_contracts,
    write_contracts,
)
from trident_assets.backends.verified import forget_checkpoint
from trident_assets.core.contracts import StateContract
from trident_assets.errors import BatchUnavailableError, ConfigError, StateContractError
from trident_assets.planner import readers_of, upstream
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spark.batch_tables import store_rows
from trident_assets.spark.state_apply import apply_state
from trident_assets.spouts.ranges import BatchPlan, PartitionRange
from trident_assets.stream.single_join import SINGLE_JOIN, SINGLE_JOIN_EXPIRED
from trident_assets.stream.trident_windows import TRIDENT_WINDOW

if TYPE_CHECKING:
    from trident_assets.backends.replica import Replica
    from trident_assets.backends.state_store import StateStore
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "PROGRESS_TABLE",
    "BackfillOutcome",
    "RebuildOutcome",
    "catch_up_one",
    "drop_progress",
    "plan_backfill",
    "plan_rejoin",
    "progress",
    "rebuild_state",
    "replay_refusal",
]

PROGRESS_TABLE = "_trident_backfills"


@dataclass
class BackfillOutcome:
    """What a catch-up did for one state: the txids it applied (in this call), from ``first``."""

    state: str
    first_txid: int
    last_txid: int
    applied: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RebuildOutcome:
    """A rebuilt state: the txids recomputed and the keys it holds after the swap."""

    topology: str
    state: str
    first_txid: int
    last_txid: int
    keys: int


# -- what can be replayed ------------------------------------------------------------------------


def _state_name(state: Any) -> str:
    spec = getattr(state, "spec", None)
    return str(getattr(spec, "name", None) or getattr(state, "name", "?"))


def replay_refusal(state: TridentState) -> str | None:
    """Why ``state`` cannot be built from the log of its spouts alone (None: it can)."""
    if "event_window" in state.node.args:
        return (
            "it is an event-window state: building one from the log is not supported yet "
            "(its late records and watermarks are decided batch by batch)"
        )
    if SINGLE_JOIN in state.node.args:
        return (
            "it is a single join: its pending halves and expiries depend on the state as it "
            "was at each txid, not on the log alone"
        )
    if TRIDENT_WINDOW in state.node.args:
        return (
            "it is a window: the windows it fired before were emitted then, and its open "
            "windows depend on the tuples and times of every txid"
        )
    for node in upstream([state.node.parents[0] if state.node.parents else state.node]):
        if node.kind == "query":
            return (
                f"it reads state {_state_name(node.args.get('state'))!r} through a state "
                "query, whose values at each past txid are not kept"
            )
        if node.kind == "new_values":
            return (
                f"it reads the new values of state {_state_name(node.args.get('state'))!r}, "
                "which are kept for recent txids only"
            )
        if node.kind == SINGLE_JOIN_EXPIRED:
            return "it reads the expired halves of a single join, which depend on its state"
        if node.kind == "spout" and not callable(getattr(node.args["spout"], "source", None)):
            return f"its spout {node.args['spout_id']!r} cannot re-read recorded offset ranges"
    return None


def _txid_text(txids: Iterable[int]) -> str:
    """``1..3, 5`` for {1, 2, 3, 5}."""
    ordered = sorted(set(txids))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}..{ordered[j]}")
        i = j + 1
    return ", ".join(parts)


def _unreadable(
    topology: TridentTopology,
    store: StateStore,
    log: Any,
    spouts: Iterable[str],
    last: int,
    joins: SpoutJoins,
    first: int = 1,
) -> tuple[dict[tuple[str, int], list[PartitionRange]], set[int], set[int]]:
    """The history of txids ``first..last`` of ``spouts``; txids unrecorded; unreadable.

    Unrecorded: a spout that was part of the txid has no recorded range. Unreadable: the
    log no longer holds a range (retention, a re-created topic, a lost partition). One read
    of the history; each partition's bounds are asked once.
    """
    spout_ids = sorted(spouts)
    history = read_history(store, topology.name, spout_ids, first, last)
    missing = {
        t
        for t in range(first, last + 1)
        for s in spout_ids
        if (s, t) not in history and not joins.absent(s, t)
    }
    gone: set[int] = set()
    for sid in spout_ids:
        source = topology.spouts[sid].args["spout"].source(log)
        existing = set(source.partitions())
        bounds: dict[str, tuple[int, int, str | None]] = {}
        for (s, txid), ranges in history.items():
            if s != sid:
                continue
            for r in ranges:
                if r.count == 0:
                    continue
                if r.partition not in existing:
                    gone.add(txid)
                    continue
                if r.partition not in bounds:
                    get_id = getattr(source, "topic_id", None)
                    bounds[r.partition] = (
                        source.earliest(r.partition),
                        source.latest(r.partition),
                        None if get_id is None else get_id(r.partition),
                    )
                earliest, latest, topic_id = bounds[r.partition]
                deleted = r.first_offset < earliest or r.next_offset > latest
                if deleted or (r.topic_id is not None and r.topic_id != topic_id):
                    gone.add(txid)
    return history, missing, gone - missing


def plan_backfill(
    topology: TridentTopology, store: StateStore, log: Any, name: str, last: int
) -> int:
    """The first txid new state ``name`` is built from (``last + 1``: nothing to replay).

    A spout added to the topology after txids it was not part of read nothing in them
    (:class:`~trident_assets.backends.spout_history.SpoutJoins`): a state fed only by spouts
    new since txid ``last`` has nothing to replay and covers txids from ``last + 1`` (every
    record its spouts read); a state fed by older and newer spouts replays what each read.
    Nothing is written.

    Raises:
        StateContractError: the state cannot be replayed, or part of txids ``1..last`` is
            unrecorded or no longer readable and the state is not ``backfill="from_retained"``.
    """
    state = topology.states[name]
    head = (
        f"state {name!r} is new in topology {topology.name!r}, which has committed txids 1..{last}"
    )
    refusal = replay_refusal(state)
    if refusal is not None:
        msg = (
            f"{head}: it cannot be built from the log of those txids because {refusal}. "
            "Nothing was run or written. Declare it in a new topology (a new topology name "
            "reads its spouts from the start, into tables of its own), or remove it from "
            "this topology"
        )
        raise StateContractError(msg)
    joins = spout_joins(store, topology.name)
    spouts = state.contract().spouts
    if all(joins.absent_through(s, last) for s in spouts):
        return last + 1
    _, missing, gone = _unreadable(topology, store, log, spouts, last, joins)
    bad = missing | gone
    if not bad:
        return 1
    first = max(bad) + 1
    if state.spec.backfill == "from_retained":
        return first
    what = []
    if gone:
        what.append(
            f"txid(s) {_txid_text(gone)} can no longer be read (retention deleted records "
            "they read, or their topic or partition was re-created)"
        )
    if missing:
        what.append(
            f"the offset ranges of txid(s) {_txid_text(missing)} were not recorded (committed "
            "before this version kept them)"
        )
    start = (
        f"txid {first}, the first txid from which the log is complete"
        if first <= last
        else f"txid {first}, the next txid (no committed txid can be replayed)"
    )
    msg = (
        f"{head}: it is built from the log of those txids before it joins, but "
        f"{' and '.join(what)}. Nothing was run or written. Declare it with "
        f'StateSpec({name!r}, ..., backfill="from_retained") to build it from {start} '
        f"(its contract then records first_txid={first}), or declare it in a new topology "
        "(a new topology name reads its spouts from their earliest retained offsets, into "
        "tables of its own)"
    )
    raise StateContractError(msg)


def plan_rejoin(
    topology: TridentTopology, store: StateStore, log: Any, name: str, left_after: int, last: int
) -> int:
    """The first txid a state declared again after leaving the topology is caught up from.

    The state's stored values cover txids up to ``left_after``; the topology committed
    ``left_after + 1..last`` without it. Those txids are replayed into it before it rejoins
    (``last + 1`` when there are none). Nothing is written.

    Raises:
        StateContractError: those txids cannot be replayed into it (it reads another state,
            or their ranges were not recorded or are no longer readable).
    """
    if left_after >= last:
        return last + 1
    state = topology.states[name]
    head = (
        f"state {name!r} of topology {topology.name!r} left the topology after txid "
        f"{left_after} (txids {left_after + 1}..{last} committed without it) and is declared "
        "again: it is caught up from the log of those txids before it rejoins"
    )
    way_out = (
        "Nothing was run or written. Rename it (a new state is built from the retained log), "
        "or take it out of the declaration, drop its stored values (`trident state drop "
        f"{topology.name} {name}`) and declare it again (it is then built anew)"
    )
    refusal = replay_refusal(state)
    if refusal is not None:
        msg = f"{head}, but {refusal}. {way_out}"
        raise StateContractError(msg)
    joins = spout_joins(store, topology.name)
    spouts = state.contract().spouts
    _, missing, gone = _unreadable(topology, store, log, spouts, last, joins, left_after + 1)
    if missing or gone:
        msg = (
            f"{head}, but txid(s) {_txid_text(missing | gone)} can no longer be replayed "
            f"(ranges not recorded, or records deleted by retention). {way_out}"
        )
        raise StateContractError(msg)
    return left_after + 1


# -- progress ------------------------------------------------------------------------------------


def progress(store: StateStore, topology: str) -> dict[str, tuple[int, int]]:
    """Per state of ``topology`` whose catch-up has not joined yet: ``(first, done)`` txids."""
    if not store.has_table(PROGRESS_TABLE):
        return {}
    rows = store.fetch_rows(
        f"SELECT state, first_txid, done_txid FROM {PROGRESS_TABLE} WHERE topology = ?",
        [topology],
    )
    return {str(s): (int(f), int(d)) for s, f, d in rows}


def drop_progress(store: StateStore, topology: str, states: Iterable[str]) -> None:
    """Forget the progress of ``states`` (in the commit where they join the topology)."""
    delete_state_rows(store, PROGRESS_TABLE, topology, states)


def _plans(
    topology: TridentTopology, txid: int, history: dict[tuple[str, int], list[PartitionRange]]
) -> dict[str, BatchPlan]:
    plans: dict[str, BatchPlan] = {}
    for (sid, t), ranges in history.items():
        if t == txid:
            kind = topology.spouts[sid].args["spout"].config.kind
            plans[sid] = BatchPlan.of(topology.name, sid, txid, kind, ranges, replay=True)
    return plans


def _read_plans(runner: Any, state: TridentState, txid: int) -> dict[str, BatchPlan]:
    """The recorded ranges of ``txid`` for ``state``'s spouts, checked readable."""
    topo = runner.topology
    spouts = state.contract().spouts
    plans = _plans(topo, txid, read_history(runner.store, topo.name, spouts, txid, txid))
    unrecorded = [sid for sid in spouts if sid not in plans]
    if unrecorded:  # the rare case: one grouped read of the history, not one per txid
        joins = spout_joins(runner.store, topo.name)
    for sid in unrecorded:
        if joins.absent(sid, txid):  # added to the topology later: it read nothing here
            kind = topo.spouts[sid].args["spout"].config.kind
            plans[sid] = BatchPlan.of(topo.name, sid, txid, kind, [], replay=True)
    for sid in spouts:
        if sid not in plans:
            msg = (
                f"cannot build state {state.spec.name!r} of topology {topo.name!r} from txid "
                f"{txid}: the offset ranges spout {sid!r} read were not recorded"
            )
            raise BatchUnavailableError(msg)
        try:
            runner.coordinator(sid).check_readable(txid, plans[sid].ranges)
        except BatchUnavailableError as exc:
            msg = f"cannot build state {state.spec.name!r} of topology {topo.name!r}: {exc}"
            raise BatchUnavailableError(msg) from None
    return plans


def catch_up_one(runner: Any, state: TridentState, txid: int, first: int) -> bool:
    """Apply committed ``txid`` to new ``state`` alone, with its progress, in one transaction.

    The Spark work runs first (the state's subgraph over the txid's recorded ranges); the
    transaction applies it only if the state's progress is ``txid - 1`` (``first - 1`` before
    its first txid, which also writes its contract). Returns False when ``txid`` was applied
    before (by another attempt).
    """
    store = runner.store
    topo = runner.topology
    name = state.spec.name
    run = BatchRun(runner, txid, _read_plans(runner, state, txid))
    batch = run.state_input(state)
    with store.transaction():
        row = progress(store, topo.name).get(name)
        done = first - 1 if row is None else row[1]
        if done >= txid:
            return False
        if done != txid - 1:  # a bug, not a user error: catch-up goes txid by txid
            msg = f"state {name!r} caught up to txid {done}, cannot apply txid {txid}"
            raise AssertionError(msg)
        if row is None:
            write_contracts(store, [replace(state.contract(), first_txid=first)])
            store.execute(
                f"CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (topology VARCHAR NOT NULL, "
                "state VARCHAR NOT NULL, first_txid BIGINT NOT NULL, done_txid BIGINT NOT NULL, "
                "PRIMARY KEY (topology, state))"
            )
        apply_state(run, state, batch)
        runner.fault("backfill_after_state_write")
        new = run.new_values.get(name)
        if new is not None:
            store_rows(store, state.new_values_table, txid, new)
        store.execute(
            f"INSERT INTO {PROGRESS_TABLE} (topology, state, first_txid, done_txid) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (topology, state) DO UPDATE SET "
            "done_txid = excluded.done_txid",
            [topo.name, name, first, txid],
        )
    runner.fault("backfill_after_commit")
    return True


# -- rebuild -------------------------------------------------------------------------------------


class _Shadow:
    """``state`` writing to ``table`` instead of its own (the rebuild's shadow map)."""

    def __init__(self, state: TridentState, table: str) -> None:
        self._state = state
        self.table = table
        self.partials_table = f"{table}__partials"
        self.new_values_table = f"{table}__new_values"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


@dataclass
class _Replay:
    """What a BatchRun needs of a runner, for a rebuild (no TopologyRunner, no contract check)."""

    topology: TridentTopology
    spark: Any
    store: StateStore
    log: Any
    fault: Callable[[str], None] = lambda _point: None

    def coordinator(self, spout_id: str) -> Any:
        from trident_assets.backends.duckdb_spout_meta import DuckDBSpoutMetaStore
        from trident_assets.spouts.coordinator import BatchCoordinator

        spout = self.topology.spouts[spout_id].args["spout"]
        meta = DuckDBSpoutMetaStore(self.store)
        return BatchCoordinator(
            self.topology.name, spout_id, spout.source(self.log), spout.config, meta
        )


def _drop_map(store: StateStore, table: str) -> None:
    store.execute(f"DROP VIEW IF EXISTS {quote_ident(table)}")
    store.execute(f"DROP TABLE IF EXISTS {log_table(table)}")
    store.execute(f"DROP SEQUENCE IF EXISTS {seq_name(table)}")
    store.execute(f'DELETE FROM "{CATALOG_TABLE}" WHERE table_name = ?', [table])
    for side in (COMPACTIONS_TABLE, TOTALS_TABLE):
        if store.has_table(side):
            store.execute(f'DELETE FROM "{side}" WHERE table_name = ?', [table])
    store.execute(f'DROP TABLE IF EXISTS "{table}__partials"')
    store.execute(f'DROP TABLE IF EXISTS "{table}__new_values"')


def _rebuild_refusal(topology: TridentTopology, store: StateStore, name: str) -> str | None:
    if name not in topology.states:
        names = ", ".join(sorted(topology.states)) or "none"
        return f"topology {topology.name!r} declares no state {name!r}; its states: {names}"
    state = topology.states[name]
    a = state.node.args
    if "agg" not in a or SINGLE_JOIN in a:
        return (
            f"state {name!r} is not a persistent_aggregate: only persistent_aggregate "
            "states can be rebuilt"
        )
    if store.dialect.is_postgres:
        return "rebuilding a state is available for DuckDB state stores only"
    refusal = replay_refusal(state)
    if refusal is not None:
        return f"state {name!r} cannot be recomputed from the log: {refusal}"
    return None


def rebuild_state(
    topology: TridentTopology,
    state: str,
    spark: Any,
    store: StateStore,
    log: Any,
    *,
    fault: Callable[[str], None] | None = None,
    replica: Replica | None = None,
    leave_dependents: bool = False,
) -> RebuildOutcome:
    """Recompute ``state`` from the log of its committed txids and swap it in atomically.

    Every committed txid from the state's ``first_txid`` on is replayed through the state's
    subgraph as declared now (e.g. after a bug fix) into a shadow map; then one transaction,
    at a txid boundary (the topology's last committed txid, unchanged since the replay),
    replaces the state's rows (with their txid versions), its recent partials, its total
    (Count/Sum) and its contract (the declaration's, with the stored ``first_txid``). Other
    states, outputs and spout positions are untouched. ``fault`` is called at
    ``rebuild_before_swap``. With a ``replica``, the rebuilt map is then republished whole
    (:meth:`Replica.replace_map`).

    States computed from this state's values (:func:`~trident_assets.planner.readers_of`:
    through a state query or its new values) cannot be recomputed with it: the rebuild is
    refused unless ``leave_dependents``, which keeps them as they are.

    Raises:
        ConfigError: the state is unknown, not a persistent aggregate, in a PostgreSQL
            store, fed by another state, read by other states (without
            ``leave_dependents``), has no stored values, or is still being built.
        StateContractError: its table belongs to another state, or the declaration stores
            values of another layout (other keys or state type).
        BatchUnavailableError: a txid's ranges were not recorded or the log no longer holds
            them; nothing was changed.
    """
    refusal = _rebuild_refusal(topology, store, state)
    head = f"cannot rebuild state {state!r} of topology {topology.name!r}"
    if refusal is not None:
        msg = f"{head}: {refusal}. Nothing was run or written"
        raise ConfigError(msg)
    ts = topology.states[state]
    last = store.last_committed(topology.name)
    stored = {(c.topology, c.state): c for c in stored_contracts(store)}
    have = stored.get((topology.name, state))
    if last is None or have is None or store.layout(ts.table) is None:
        msg = (
            f"{head}: it has no stored values yet (nothing to rebuild). Nothing was run or "
            "written; run the topology, which builds it"
        )
        raise ConfigError(msg)
    readers = [r for r in readers_of(topology, state) if (topology.name, r) in stored]
    if readers and not leave_dependents:
        names = ", ".join(repr(r) for r in readers)
        msg = (
            f"{head}: state(s) {names} were computed from its values (through a state query "
            "or its new values), which the rebuild replaces, and cannot be recomputed from "
            "the log. Nothing was run or written. Rebuild with leave_dependents=True "
            "(`trident state rebuild --leave-dependents`) to keep them as they are, or "
            "declare the topology under a new name (a new topology name reads its spouts "
            "from the start, into tables of its own)"
        )
        raise ConfigError(msg)
    if state in progress(store, topology.name):
        msg = (
            f"{head}: it is still being built from the log. Nothing was run or written; run "
            "the topology (or TopologyRunner.backfill()) to finish building it"
        )
        raise ConfigError(msg)
    declared = replace(ts.contract(), first_txid=have.first_txid)
    for field_ in ("table", "state_type", "key_fields"):
        if getattr(have, field_) != getattr(declared, field_):
            msg = (
                f"{head}: its {field_} is declared {getattr(declared, field_)!r} but stored "
                f"as {getattr(have, field_)!r}; a rebuild keeps the state's layout. Nothing "
                "was run or written. Rename the state (a new state is built from the log), "
                f"or drop it (`trident state drop {topology.name} {state}`) and run the "
                "topology to build it anew"
            )
            raise StateContractError(msg)
    joins = spout_joins(store, topology.name)
    _, missing, gone = _unreadable(topology, store, log, declared.spouts, last, joins)
    bad = {t for t in missing | gone if t >= have.first_txid}
    if bad:
        msg = (
            f"{head}: it covers txids {have.first_txid}..{last}, but txid(s) "
            f"{_txid_text(bad)} can no longer be replayed (ranges not recorded, or records "
            "deleted by retention). Nothing was changed. Raise the log's retention before it "
            "deletes history you may need to rebuild from, or rename the state and declare "
            'it with backfill="from_retained"'
        )
        raise BatchUnavailableError(msg)
    shadow_name = f"{ts.table}__rebuild"
    shadow: Any = _Shadow(ts, shadow_name)
    replay = _Replay(topology, spark, store, log, fault or (lambda _point: None))
    with store.transaction():  # a crashed earlier rebuild's leftovers
        _drop_map(store, shadow_name)
    store.forget_layouts()
    built = have.first_txid - 1
    while True:
        target = store.last_committed(topology.name) or 0
        for txid in range(built + 1, target + 1):
            run = BatchRun(replay, txid, _read_plans(replay, ts, txid))
            batch = run.state_input(ts)
            with store.transaction():
                apply_state(run, shadow, batch)
            built = txid
        replay.fault("rebuild_before_swap")
        with store.transaction():
            if (store.last_committed(topology.name) or 0) != built:
                continue  # the topology committed meanwhile: replay that too
            _swap(store, ts.table, shadow_name, declared)
            keys = store.size(ts.table)
            break
    store.forget_layouts()
    if replica is not None:
        described = {"value_field": ts.value_field, "global": not ts.group}
        replica.replace_map(store, ts.table, built, described)
    return RebuildOutcome(topology.name, state, have.first_txid, built, keys)


def _swap(store: StateStore, table: str, shadow: str, contract: StateContract) -> None:
    """Replace ``table``'s rows, recent partials and contract by the shadow's (one transaction).

    The state's ``exactly_once`` checkpoint is dropped with them.
    """
    old, new = store.layout(table), store.layout(shadow)
    if new is None:  # no txid wrote a key: the rebuilt state is empty
        new = old
    if (
        old is None
        or new is None
        or (old.key_types, old.value_type)
        != (
            new.key_types,
            new.value_type,
        )
    ):
        msg = (
            f"cannot rebuild table {table!r}: the recomputed values are stored as "
            f"{None if new is None else new.describe()}, the state as "
            f"{None if old is None else old.describe()}. Nothing was changed; rename the state "
            "(a new state is built from the log)"
        )
        raise StateContractError(msg)
    cols = ", ".join(quote_ident(c) for c in old.key_columns)
    old_max = store.fetch_rows(f"SELECT coalesce(max({SEQ_COLUMN}), 0) FROM {log_table(table)}")
    store.execute(f"DELETE FROM {log_table(table)}")
    if store.layout(shadow) is not None:
        new_max = store.fetch_rows(
            f"SELECT coalesce(max({SEQ_COLUMN}), 0) FROM {log_table(shadow)}"
        )
        # the shadow's versions keep their order, numbered at or below the state's last
        # number: the state's sequence continues above them
        store.execute(
            f"INSERT INTO {log_table(table)} ({cols}, {SEQ_COLUMN}, txid, curr, prev) "
            f"SELECT {cols}, {SEQ_COLUMN} - ? + ?, txid, curr, prev FROM {log_table(shadow)}",
            [int(new_max[0][0]), int(old_max[0][0])],
        )
    if store.has_table(COMPACTIONS_TABLE):
        store.execute(f'DELETE FROM "{COMPACTIONS_TABLE}" WHERE table_name = ?', [table])
    if store.has_table(TOTALS_TABLE):  # a Count/Sum state's total: the rebuilt values' own
        store.execute(f'DELETE FROM "{TOTALS_TABLE}" WHERE table_name = ?', [table])
        store.execute(
            f'UPDATE "{TOTALS_TABLE}" SET table_name = ? WHERE table_name = ?', [table, shadow]
        )
    if store.has_table(f"{shadow}__partials"):
        store.execute(f'DROP TABLE IF EXISTS "{table}__partials"')
        store.execute(f'CREATE TABLE "{table}__partials" AS SELECT * FROM "{shadow}__partials"')
    _drop_map(store, shadow)
    store.execute(
        f"DELETE FROM {CONTRACTS_TABLE} WHERE topology = ? AND state = ?",
        [contract.topology, contract.state],
    )
    write_contracts(store, [contract])
    # the rebuilt values were never verified: the next exactly_once check recomputes them all
    forget_checkpoint(store, contract.topology, contract.state)

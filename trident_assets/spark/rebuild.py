"""Rebuilding a state: recomputed from the log of its committed txids, swapped in atomically.

:func:`rebuild_state` (``trident state rebuild``): a persistent aggregate of a DuckDB store is
recomputed into a shadow map, txid by txid through the one commit function
(:func:`~trident_assets.runtime.commit.commit`, the shadow alone as its target, its marker
in memory), then
swapped in by one transaction at the last committed txid: readers see the old values or the
new ones, never a mix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from trident_assets.backends.map_layout import log_table, quote_ident, seq_name
from trident_assets.backends.spout_history import spout_joins
from trident_assets.backends.state_batches import TOTALS_TABLE
from trident_assets.backends.state_contracts import (
    stored_contracts,
    write_contracts,
)
from trident_assets.backends.verified import forget_checkpoint
from trident_assets.core.contracts import StateContract
from trident_assets.errors import BatchUnavailableError, ConfigError, StateContractError
from trident_assets.names import CATALOG_TABLE, COMPACTIONS_TABLE, CONTRACTS_TABLE, SEQ_COLUMN
from trident_assets.planner import readers_of
from trident_assets.runtime.backfill_plans import replay_refusal, txid_text, unreadable_txids
from trident_assets.runtime.commit import ShadowMarker, StateAlone, commit, progress
from trident_assets.runtime.outcomes import Prepared
from trident_assets.spark.backfill import read_plans
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spark.execution import SparkTxid
from trident_assets.spark.frame_schemas import EmptyTables
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.backends.replica import Replica
    from trident_assets.backends.state_store import StateStore
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = ["RebuildOutcome", "rebuild_state"]


@dataclass(frozen=True)
class RebuildOutcome:
    """A rebuilt state: the txids recomputed and the keys it holds after the swap."""

    topology: str
    state: str
    first_txid: int
    last_txid: int
    keys: int


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
    spill: None = None
    empty_tables: EmptyTables = field(default_factory=EmptyTables)

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
    if not state_kind(state.node).map_state:
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
    _, missing, gone = unreadable_txids(topology, store, log, declared.spouts, last, joins)
    bad = {t for t in missing | gone if t >= have.first_txid}
    if bad:
        msg = (
            f"{head}: it covers txids {have.first_txid}..{last}, but txid(s) "
            f"{txid_text(bad)} can no longer be replayed (ranges not recorded, or records "
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
    built = ShadowMarker(have.first_txid - 1)
    what = f"the rebuild of state {state!r}"
    alone = StateAlone(
        store, topology, shadow_name, {state: shadow}, built, what, replay.fault, "rebuild_"
    )
    while True:
        target = store.last_committed(topology.name) or 0
        for txid in range(built.done + 1, target + 1):
            run = BatchRun.alone(replay, txid, read_plans(replay, ts, txid))
            prepared = Prepared({state: run.state_input(ts)}, {}, {}, {})
            commit(alone, txid, {}, prepared, SparkTxid(run))
        replay.fault("rebuild_before_swap")
        with store.transaction():
            if (store.last_committed(topology.name) or 0) != built.done:
                continue  # the topology committed meanwhile: replay that too
            _swap(store, ts.table, shadow_name, declared)
            keys = store.size(ts.table)
            break
    store.forget_layouts()
    if replica is not None:
        described = {"value_field": ts.value_field, "global": not ts.group}
        replica.replace_map(store, ts.table, built.done, described)
    return RebuildOutcome(topology.name, state, have.first_txid, built.done, keys)


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

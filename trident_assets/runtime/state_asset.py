"""A state asset of one's own (the TridentIOManager's): its partials through the one commit.

:class:`StateAsset` is what its txids commit to, a state alone that publishes itself;
:class:`AssetBatch` applies a txid's partials as a topology's combiner states are applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trident_assets.backends.replica import DEFAULT_KEEP_TXIDS, Replica
from trident_assets.backends.state_batches import StateTarget, apply_state_batch, state_total
from trident_assets.runtime.commit import StateAlone
from trident_assets.runtime.outcomes import Applied, StateOutcome
from trident_assets.stream.topology import TridentTopology

if TYPE_CHECKING:
    import pyarrow as pa

    from trident_assets.backends.state_store import StateStore
    from trident_assets.runtime.outcomes import BatchOutcome

__all__ = ["AssetBatch", "StateAsset"]


@dataclass
class StateAsset(StateAlone[StateTarget]):
    """A state asset's commits, each published to ``replica`` keeping ``keep_txids`` txids."""

    replica: Replica | None = None
    keep_txids: int = DEFAULT_KEEP_TXIDS

    @classmethod
    def of(
        cls,
        store: StateStore,
        scope: str,
        state: StateTarget,
        replica: Replica | None = None,
        keep_txids: int = DEFAULT_KEEP_TXIDS,
    ) -> StateAsset:
        """State ``state`` under commit scope ``scope`` (a topology of it alone) in ``store``."""
        what, states = f"state asset {scope!r}", {state.table: state}
        topology = TridentTopology(scope)  # its commit scope, holding nothing else
        return cls(
            store, topology, scope, states, None, what, lambda _point: None, "",
            replica=replica, keep_txids=keep_txids,
        )  # fmt: skip

    def published(self, outcome: BatchOutcome, timings: dict[str, float]) -> None:
        """Publish the state as of committed ``outcome`` to the replica, then compact it."""
        if self.replica is None:
            return
        for table, state in self.states.items():
            described = {"value_field": state.value_column, "global": not state.key_columns}
            self.replica.publish(
                self.store, self.scope, outcome.txid, [table], [], {table: described}
            )
            self.replica.compact(table, self.keep_txids)


@dataclass(frozen=True)
class AssetBatch:
    """The engine of one txid of a state asset: it applies the txid's partials."""

    store: StateStore
    txid: int

    def apply(self, state: StateTarget, batch: pa.Table, nulls: int) -> Applied:
        """Apply partials ``batch`` to ``state``; its keys counted, size and total after."""
        merged = apply_state_batch(self.store, state, batch, self.txid)
        size, total = self.store.size(state.table), state_total(self.store, state.table)
        done = (merged.keys_in, merged.keys_updated, merged.keys_skipped, size, total)
        return Applied(StateOutcome(state.table, state.table, *done))

    def late_input(
        self, state: StateTarget, new_values: dict[str, pa.Table], expired: dict[str, pa.Table]
    ) -> tuple[Any, int]:
        """Never asked: a state asset's batch is prepared."""
        raise AssertionError(state)

    def late_output(
        self, name: str, new_values: dict[str, pa.Table], expired: dict[str, pa.Table]
    ) -> pa.Table:
        """Never asked: a state asset has no output."""
        raise AssertionError(name)

"""A state asset's batch of partials committed through the one commit, as the IO manager does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trident_assets.runtime.commit import commit
from trident_assets.runtime.outcomes import BatchOutcome, Prepared
from trident_assets.runtime.state_asset import AssetBatch, StateAsset

if TYPE_CHECKING:
    import pyarrow as pa

    from trident_assets.backends.state_batches import StateTarget
    from trident_assets.backends.state_store import StateStore


def commit_partials(
    store: StateStore, scope: str, target: StateTarget, partials: pa.Table, txid: int
) -> BatchOutcome:
    """Apply ``partials`` to ``target`` and commit ``txid`` to ``scope`` (nothing published)."""
    prepared = Prepared({target.table: partials}, {}, {}, {})
    return commit(StateAsset.of(store, scope, target), txid, {}, prepared, AssetBatch(store, txid))

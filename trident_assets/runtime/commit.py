"""Committing one txid: the one function every path commits through, and its markers.

A live batch, a quarantined txid, a quarantine replay, a state caught up from the log and a
rebuild's shadow map each commit a txid the same way (:func:`commit_txid`): one store
transaction applies the batch's writes and moves a commit marker, and a txid that committed
before applies nothing. What differs is where the marker is kept:

* the topology's marker in the store (:class:`~trident_assets.core.commit.StoreMarker`, the
  default): live batches and the quarantine;
* :class:`CatchUpMarker`: a state being built from the log keeps its progress in the store
  table ``_trident_backfills`` (``first_txid``, ``done_txid``); its first txid also writes
  its contract. A crash resumes at the next txid exactly;
* :class:`ShadowMarker`: a rebuild's shadow map, in memory (the swap that ends the rebuild
  is one transaction of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from trident_assets.backends.state_batches import StateTarget, apply_state_batch
from trident_assets.backends.state_contracts import delete_state_rows, write_contracts
from trident_assets.core.commit import CommitMarker, CommitResult, StoreTransaction, commit_batch
from trident_assets.core.txids import validate_txid
from trident_assets.errors import ConfigError, DiskFullError, TridentError, is_disk_full
from trident_assets.names import BACKFILLS_TABLE

if TYPE_CHECKING:
    import pyarrow as pa

    from trident_assets.backends.duckdb_merge import MergeResult
    from trident_assets.backends.state_store import StateStore
    from trident_assets.core.contracts import StateContract

__all__ = [
    "PROGRESS_TABLE",
    "CatchUpMarker",
    "ShadowMarker",
    "commit_state_batch",
    "commit_txid",
    "drop_progress",
    "progress",
]

R = TypeVar("R")

PROGRESS_TABLE = BACKFILLS_TABLE
"""Per (topology, state) being built from the log: its first txid and the last it applied."""


def commit_txid(
    store: StateStore,
    scope: str,
    txid: int,
    apply: Callable[[], R],
    marker: CommitMarker | None = None,
    what: str | None = None,
) -> CommitResult[R]:
    """Apply ``txid`` to ``scope`` exactly once, in strict order, in one store transaction.

    ``apply`` does every write of the txid inside the transaction; ``marker`` says where
    the scope's last committed txid is kept (default: the store's topology marker);
    ``what`` names what is committed in errors (default: ``topology 'SCOPE'``).

    Raises:
        OutOfOrderCommitError: an earlier txid has not committed; nothing was changed.
        DiskFullError: the device of the state file filled up; nothing was committed.
    """
    try:
        return commit_batch(store, scope, txid, lambda _tx: apply(), marker)
    except TridentError:
        raise
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        msg = (
            f"no space left on device committing txid {txid} of {what or f'topology {scope!r}'} "
            f"to state file {store.path}: nothing of it was committed. Free space on that "
            f"device, then run txid {txid} again"
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


def drop_progress(store: StateStore, topology: str, states: Iterable[str]) -> None:
    """Forget the progress of ``states`` (in the commit where they join the topology)."""
    delete_state_rows(store, PROGRESS_TABLE, topology, states)


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


def commit_state_batch(
    store: StateStore, scope: str, target: StateTarget, partials: pa.Table, txid: int
) -> CommitResult[MergeResult]:
    """Apply ``partials`` to ``target`` and commit ``txid`` to ``scope``, in one transaction.

    Strict order and committed-is-final come from the scope's commit marker: an earlier
    uncommitted txid raises OutOfOrderCommitError; a committed txid changes nothing
    (``result.applied`` is False).

    Raises:
        ConfigError: ``txid`` is not an integer >= 1, or the batch lacks a column.
    """
    validate_txid(txid)
    missing = [
        c for c in (*target.key_columns, target.value_column) if c not in partials.schema.names
    ]
    if missing:
        msg = (
            f"state {target.table!r}: the batch lacks columns {missing}; it has "
            f"{partials.schema.names} (expected key columns {list(target.key_columns)} and "
            f"value column {target.value_column!r})"
        )
        raise ConfigError(msg)
    return commit_txid(store, scope, txid, lambda: apply_state_batch(store, target, partials, txid))

"""The commit protocol: batches commit in strict txid order, and a committed batch is final.

A *scope* (a state, or a topology whose states share one store) records its last committed
txid in the store, in the same transaction as the values it guards. For batch ``txid``:

* ``txid <= last``: already committed -> nothing is applied, the result says so;
* ``txid == last + 1`` (or the first txid when nothing is committed): apply, then record;
* anything else: :class:`~trident_assets.errors.OutOfOrderCommitError`, nothing changes.

An ad-hoc batch (``txid is None``) is applied without touching the marker.

Where the marker lives is the caller's choice (a :class:`CommitMarker`): by default the
store's own per-scope marker; a state being built from the log keeps its progress as its
marker instead, and a shadow map being rebuilt keeps one in memory.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from trident_assets.errors import ConfigError, OutOfOrderCommitError

__all__ = [
    "CommitDecision",
    "CommitMarker",
    "CommitResult",
    "CommitStore",
    "StoreTransaction",
    "commit_batch",
    "decide_commit",
]

R = TypeVar("R")
"""What applying the batch returned."""

FIRST_TXID = 1
"""The txid of a topology's first batch."""


class CommitDecision(enum.Enum):
    """What to do with a batch."""

    APPLY = "apply"
    ALREADY_COMMITTED = "already_committed"


def decide_commit(scope: str, last_committed: int | None, txid: int) -> CommitDecision:
    """Decide whether batch ``txid`` may commit to ``scope`` after ``last_committed``.

    Raises:
        ConfigError: ``txid`` is not a positive integer.
        OutOfOrderCommitError: an earlier txid has not committed yet.
    """
    if isinstance(txid, bool) or not isinstance(txid, int) or txid < FIRST_TXID:
        msg = f"txid must be an integer >= {FIRST_TXID}, got {txid!r} for {scope!r}"
        raise ConfigError(msg)
    if last_committed is not None and txid <= last_committed:
        return CommitDecision.ALREADY_COMMITTED
    expected = FIRST_TXID if last_committed is None else last_committed + 1
    if txid == expected:
        return CommitDecision.APPLY
    done = "no txid yet" if last_committed is None else f"up to txid {last_committed}"
    msg = (
        f"refusing to commit txid {txid} to {scope!r}: it has committed {done}, so txid "
        f"{expected} must commit first (batches commit in strict txid order). Nothing was changed; "
        f"run txid {expected} (the coordinator sensor does this) and then retry txid {txid}."
    )
    raise OutOfOrderCommitError(msg)


class StoreTransaction(Protocol):
    """One open transaction of a state store."""

    def last_committed(self, scope: str) -> int | None:
        """Return the last txid committed to ``scope``, or None."""

    def mark_committed(self, scope: str, txid: int) -> None:
        """Record ``txid`` as committed to ``scope`` (effective when the transaction commits)."""


class CommitMarker(Protocol):
    """Where a scope's last committed txid is read and recorded, inside a transaction."""

    def last_committed(self, tx: StoreTransaction, scope: str) -> int | None:
        """Return the last txid committed to ``scope``, or None."""

    def mark_committed(self, tx: StoreTransaction, scope: str, txid: int) -> None:
        """Record ``txid`` as committed to ``scope`` in transaction ``tx``."""


class StoreMarker:
    """The store's own per-scope commit marker (the default :class:`CommitMarker`)."""

    def last_committed(self, tx: StoreTransaction, scope: str) -> int | None:
        """The transaction's view of the scope's marker."""
        return tx.last_committed(scope)

    def mark_committed(self, tx: StoreTransaction, scope: str, txid: int) -> None:
        """Move the scope's marker to ``txid``."""
        tx.mark_committed(scope, txid)


class CommitStore(Protocol):
    """A store whose writes can be grouped into one atomic transaction."""

    def transaction(self) -> AbstractContextManager[StoreTransaction]:
        """Open a transaction: committed on normal exit, rolled back on an exception."""


@dataclass(frozen=True, slots=True)
class CommitResult(Generic[R]):
    """The outcome of :func:`commit_batch`."""

    scope: str
    txid: int | None
    applied: bool
    """False: the batch had committed before, and nothing was applied."""
    previous: int | None
    """The scope's last committed txid before this call."""
    result: R | None = None


def commit_batch(
    store: CommitStore,
    scope: str,
    txid: int | None,
    apply: Callable[[StoreTransaction], R],
    marker: CommitMarker | None = None,
) -> CommitResult[R]:
    """Apply batch ``txid`` to ``scope`` exactly once, atomically with its commit marker.

    ``apply`` runs inside the store transaction and must do all of the batch's writes there.
    If it raises, the transaction rolls back and the error propagates. ``marker``: where the
    scope's last committed txid is kept (default: the store's own marker).

    Raises:
        OutOfOrderCommitError: an earlier txid has not committed; nothing was changed.
    """
    marker = marker or StoreMarker()
    with store.transaction() as tx:
        previous = marker.last_committed(tx, scope)
        if txid is None:
            return CommitResult(scope, None, True, previous, apply(tx))
        if decide_commit(scope, previous, txid) is CommitDecision.ALREADY_COMMITTED:
            return CommitResult(scope, txid, False, previous)
        result = apply(tx)
        marker.mark_committed(tx, scope, txid)
    return CommitResult(scope, txid, True, previous, result)

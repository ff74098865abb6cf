"""Stored value wrappers that make replays idempotent: Trident's OpaqueValue and TransactionalValue.

Contract (Trident's ``OpaqueValue.java`` / ``TransactionalValue.java``):

* ``TransactionalValue(txid, val)``: ``val`` is the value after applying batch ``txid``.
* ``OpaqueValue(curr_txid, curr, prev)``: ``curr`` is the value after batch ``curr_txid``,
  ``prev`` the value before it. A replay of ``curr_txid`` recomputes from ``prev``.

A stored txid of ``None`` (written outside any transaction, e.g. an ad-hoc query stream) is
treated as older than every txid. Java throws a NullPointerException there; rolling forward is
the only reading under which such a value is not lost, so that is what we do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from trident_assets.errors import StaleTxidError

__all__ = ["OpaqueValue", "StateType", "TransactionalValue"]

T = TypeVar("T")
"""The type of the aggregated value a state stores."""


class StateType(enum.Enum):
    """Which replay guarantee a state gives (Trident's ``StateType``)."""

    NON_TRANSACTIONAL = "non_transactional"
    TRANSACTIONAL = "transactional"
    OPAQUE = "opaque"


def _is_newer(batch_txid: int | None, stored_txid: int | None) -> bool:
    return batch_txid is None or stored_txid is None or stored_txid < batch_txid


@dataclass(frozen=True, slots=True)
class OpaqueValue(Generic[T]):
    """An opaque-state value: ``[curr_txid, curr, prev]``.

    Example:
        >>> OpaqueValue(2, 4, 1).update(3, 6)
        OpaqueValue(curr_txid=3, curr=6, prev=4)
    """

    curr_txid: int | None
    curr: T | None
    prev: T | None = None

    def update(self, txid: int | None, new: T | None) -> OpaqueValue[T]:
        """Return the value after batch ``txid`` set it to ``new``.

        A newer txid rolls ``curr`` into ``prev``; the same txid (a replay) keeps ``prev``.

        Raises:
            StaleTxidError: ``txid`` is behind ``curr_txid``.
        """
        if _is_newer(txid, self.curr_txid):
            return OpaqueValue(txid, new, self.curr)
        if txid == self.curr_txid:
            return OpaqueValue(txid, new, self.prev)
        raise StaleTxidError(self._behind(txid))

    def get(self, txid: int | None) -> T | None:
        """Return the value batch ``txid`` must build on: ``curr``, or ``prev`` on a replay.

        Raises:
            StaleTxidError: ``txid`` is behind ``curr_txid``.
        """
        if _is_newer(txid, self.curr_txid):
            return self.curr
        if txid == self.curr_txid:
            return self.prev
        raise StaleTxidError(self._behind(txid))

    def _behind(self, txid: int | None) -> str:
        return (
            f"Current batch ({txid}) is behind state's batch: {self!r}. The state was written by "
            "a later txid; point this topology at a fresh state table or replay from that txid."
        )

    def to_list(self) -> list[Any]:
        """Return the serialized form ``[curr_txid, curr, prev]``."""
        return [self.curr_txid, self.curr, self.prev]


@dataclass(frozen=True, slots=True)
class TransactionalValue(Generic[T]):
    """A transactional-state value: ``[txid, val]``; ``val`` already includes batch ``txid``."""

    txid: int | None
    val: T | None

    def to_list(self) -> list[Any]:
        """Return the serialized form ``[txid, val]``."""
        return [self.txid, self.val]

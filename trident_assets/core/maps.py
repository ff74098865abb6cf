"""Trident's map-state wrappers: OpaqueMap, TransactionalMap and NonTransactionalMap.

Each wraps a :class:`~trident_assets.core.protocols.BackingMap` and adds the txid logic of
Storm's ``OpaqueMap.java``, ``TransactionalMap.java`` and ``NonTransactionalMap.java``:

* every ``multi_update`` does exactly one backing ``multi_get`` and at most one ``multi_put``;
* a key written earlier in the same batch (since ``begin_commit``) reads its new value
  (the intra-batch cache of ``CachedBatchReadsMap``);
* duplicate keys in one ``multi_update`` each see the same stored value; the last write wins.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from trident_assets.core.protocols import BackingMap, Key, ValueUpdater
from trident_assets.core.values import OpaqueValue, StateType, TransactionalValue

__all__ = [
    "map_state_of",
    "NonTransactionalMap",
    "OpaqueMap",
    "TransactionalMap",
]

T = TypeVar("T")
"""The type of value stored."""


@dataclass(frozen=True, slots=True)
class ReplaceUpdater:
    """An updater that ignores the stored value and returns ``value``."""

    value: Any

    def __call__(self, stored: Any) -> Any:
        """Return the replacement value."""
        return self.value


@dataclass(frozen=True, slots=True)
class CachedRead(Generic[T]):
    """A value read for the current batch; ``cached`` if this batch already wrote it."""

    value: T | None
    cached: bool


class CachedBatchReadsMap(Generic[T]):
    """Remembers what the current batch wrote, so later reads in the batch see it.

    ``multi_get`` always reads every key from the delegate (as Storm does) and then overrides
    the keys written since the last :meth:`reset`.
    """

    def __init__(self, delegate: BackingMap[T]) -> None:
        """Wrap ``delegate``."""
        self.delegate = delegate
        self._written: dict[Key, T | None] = {}

    def reset(self) -> None:
        """Forget this batch's writes (called at begin_commit and commit)."""
        self._written.clear()

    def multi_get(self, keys: Sequence[Key]) -> list[CachedRead[T]]:
        """Read ``keys``; keys this batch wrote come back with ``cached=True``."""
        stored = self.delegate.multi_get(keys)
        return [
            CachedRead(self._written[key], True)
            if key in self._written
            else CachedRead(value, False)
            for key, value in zip(keys, stored, strict=True)
        ]

    def multi_put(self, keys: Sequence[Key], values: Sequence[T]) -> None:
        """Write through to the delegate and remember the writes."""
        self.delegate.multi_put(keys, values)
        self._written.update(zip(keys, values, strict=True))


class _TxMap(ABC, Generic[T]):
    """Shared begin/commit handling: remember the txid and reset the batch cache."""

    def __init__(self, backing: BackingMap[Any]) -> None:
        self.backing: CachedBatchReadsMap[Any] = CachedBatchReadsMap(backing)
        self.curr_txid: int | None = None

    def begin_commit(self, txid: int | None) -> None:
        """Start batch ``txid``: later updates are stamped with it."""
        self.curr_txid = txid
        self.backing.reset()

    def commit(self, txid: int | None) -> None:
        """End the batch."""
        self.curr_txid = None
        self.backing.reset()

    def multi_put(self, keys: Sequence[Key], values: Sequence[T | None]) -> None:
        """Set each key's value (as ``multi_update`` with replacing updaters)."""
        self.multi_update(keys, [ReplaceUpdater(v) for v in values])

    @abstractmethod
    def multi_update(self, keys: Sequence[Key], updaters: Sequence[ValueUpdater]) -> list[T | None]:
        """Apply ``updaters[i]`` to ``keys[i]`` under the current txid."""


class OpaqueMap(_TxMap[T]):
    """A map state that is exactly-once with transactional and opaque spouts.

    Stores ``OpaqueValue`` per key. A replay of the stored txid recomputes from ``prev``, so
    a replayed batch may differ from the failed attempt and still counts once.
    """

    def multi_get(self, keys: Sequence[Key]) -> list[T | None]:
        """Return each key's value as the current batch sees it."""
        return [self._visible(read) for read in self.backing.multi_get(keys)]

    def _visible(self, read: CachedRead[OpaqueValue[T]]) -> T | None:
        if read.value is None:
            return None
        return read.value.curr if read.cached else read.value.get(self.curr_txid)

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[ValueUpdater]) -> list[T | None]:
        """Apply the updaters; every key is written, even if unchanged.

        Raises:
            StaleTxidError: a stored txid is ahead of the current batch.
        """
        reads = self.backing.multi_get(keys)
        results: list[T | None] = []
        new_values: list[OpaqueValue[T]] = []
        for read, updater in zip(reads, updaters, strict=True):
            new = updater(self._visible(read))
            results.append(new)
            if read.value is None:
                new_values.append(OpaqueValue(self.curr_txid, new))
            else:
                new_values.append(read.value.update(self.curr_txid, new))
        self.backing.multi_put(keys, new_values)
        return results


class TransactionalMap(_TxMap[T]):
    """A map state that is exactly-once with transactional spouts only.

    Stores ``TransactionalValue`` per key. A key whose stored txid equals the current batch
    (and that this batch has not written) is skipped: the batch was applied already.
    """

    def multi_get(self, keys: Sequence[Key]) -> list[T | None]:
        """Return each key's stored value."""
        return [None if r.value is None else r.value.val for r in self.backing.multi_get(keys)]

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[ValueUpdater]) -> list[T | None]:
        """Apply the updaters, skipping keys already at this txid; only changed keys are written."""
        reads = self.backing.multi_get(keys)
        results: list[T | None] = []
        changed_keys: list[Key] = []
        changed: list[TransactionalValue[T]] = []
        txid = self.curr_txid
        for key, read, updater in zip(keys, reads, updaters, strict=True):
            stored = read.value
            if stored is not None and txid is not None and stored.txid == txid and not read.cached:
                results.append(stored.val)
                continue
            new = TransactionalValue(txid, updater(None if stored is None else stored.val))
            results.append(new.val)
            changed_keys.append(key)
            changed.append(new)
        if changed_keys:
            self.backing.multi_put(changed_keys, changed)
        return results

    def multi_put(self, keys: Sequence[Key], values: Sequence[T | None]) -> None:
        """Overwrite each key unconditionally, stamped with the current txid."""
        self.backing.multi_put(keys, [TransactionalValue(self.curr_txid, v) for v in values])


class NonTransactionalMap(Generic[T]):
    """A map state with no replay protection: a replayed batch counts twice (at-least-once)."""

    def __init__(self, backing: BackingMap[T]) -> None:
        """Wrap ``backing``."""
        self.backing = backing

    def begin_commit(self, txid: int | None) -> None:
        """Do nothing: this state keeps no txids."""

    def commit(self, txid: int | None) -> None:
        """Do nothing: this state keeps no txids."""

    def multi_get(self, keys: Sequence[Key]) -> list[T | None]:
        """Return each key's stored value."""
        return self.backing.multi_get(keys)

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[ValueUpdater]) -> list[T | None]:
        """Apply the updaters to the stored values and write all keys."""
        stored = self.backing.multi_get(keys)
        new = [u(v) for u, v in zip(updaters, stored, strict=True)]
        self.backing.multi_put(keys, new)
        return new

    def multi_put(self, keys: Sequence[Key], values: Sequence[T]) -> None:
        """Set each key's value."""
        self.backing.multi_put(keys, values)


def map_state_of(state_type: StateType, backing: BackingMap[Any]) -> Any:
    """The map state of ``state_type`` (opaque, transactional or not) over ``backing``."""
    if state_type is StateType.OPAQUE:
        return OpaqueMap(backing)
    if state_type is StateType.TRANSACTIONAL:
        return TransactionalMap(backing)
    return NonTransactionalMap(backing)

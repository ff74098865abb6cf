"""In-memory state: a dict backing map and a store with transactional rollback (tests, demos)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from trident_assets.core.protocols import Key
from trident_assets.errors import TridentError

__all__ = ["MemoryBackingMap", "MemoryStore"]

T = TypeVar("T")
"""The stored value type."""


class MemoryBackingMap(Generic[T]):
    """A backing map over a dict."""

    def __init__(self) -> None:
        self.data: dict[Key, T] = {}

    def multi_get(self, keys: Sequence[Key]) -> list[T | None]:
        """Return each key's value or None."""
        return [self.data.get(tuple(k)) for k in keys]

    def multi_put(self, keys: Sequence[Key], values: Sequence[T]) -> None:
        """Store each value."""
        for key, value in zip(keys, values, strict=True):
            self.data[tuple(key)] = value

    def items(self) -> Iterator[tuple[Key, T]]:
        """Iterate over (key, value)."""
        return iter(list(self.data.items()))


class _MemoryTransaction:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def last_committed(self, scope: str) -> int | None:
        return self.store.commits.get(scope)

    def mark_committed(self, scope: str, txid: int) -> None:
        self.store.commits[scope] = txid


class MemoryStore:
    """A process-local store of named maps and commit markers with all-or-nothing transactions."""

    def __init__(self) -> None:
        self.maps: dict[str, MemoryBackingMap[Any]] = {}
        self.commits: dict[str, int] = {}
        self._in_tx = False

    def map(self, name: str) -> MemoryBackingMap[Any]:
        """Return the backing map called ``name`` (created empty on first use)."""
        return self.maps.setdefault(name, MemoryBackingMap())

    def last_committed(self, scope: str) -> int | None:
        """Return the last committed txid of ``scope``."""
        return self.commits.get(scope)

    @contextmanager
    def transaction(self) -> Iterator[_MemoryTransaction]:
        """Snapshot everything; restore it if the block raises."""
        if self._in_tx:
            msg = "MemoryStore transactions do not nest; finish the open one first"
            raise TridentError(msg)
        saved_maps = {name: dict(m.data) for name, m in self.maps.items()}
        saved_commits = dict(self.commits)
        self._in_tx = True
        try:
            yield _MemoryTransaction(self)
        except BaseException:
            for name in list(self.maps):
                if name in saved_maps:
                    self.maps[name].data = saved_maps[name]
                else:
                    del self.maps[name]
            self.commits = saved_commits
            raise
        finally:
            self._in_tx = False

"""Backing-map helpers: an LRU read/write-through cache, chunking, and the global-key snapshot.

Storm's ``CachedMap``, ``MicroBatchIBackingMap`` and ``SnapshottableMap``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from trident_assets.core.protocols import BackingMap, Key, MapState, ValueUpdater
from trident_assets.errors import ConfigError

__all__ = ["GLOBAL_KEY", "CachedMap", "ChunkedMap", "SnapshottableMap"]

T = TypeVar("T")
"""The type of value stored."""

GLOBAL_KEY: Key = ("$TRIDENT-GLOBAL$",)
"""The key under which an ungrouped (global) aggregate is stored."""

_MISSING = object()


class CachedMap(Generic[T]):
    """An LRU read/write-through cache in front of a backing map.

    ``multi_get`` fetches only the keys it does not hold (absent keys are cached too);
    ``multi_put`` updates the cache and writes through. Another writer to the same backend
    is not seen until the key is evicted.
    """

    def __init__(self, delegate: BackingMap[T], cache_size: int = 1000) -> None:
        """Cache up to ``cache_size`` keys of ``delegate``.

        Raises:
            ConfigError: ``cache_size`` is not positive.
        """
        if cache_size <= 0:
            msg = f"CachedMap cache_size must be a positive number of keys, got {cache_size!r}"
            raise ConfigError(msg)
        self.delegate = delegate
        self.cache_size = cache_size
        self._cache: OrderedDict[Key, T | None] = OrderedDict()

    def _remember(self, key: Key, value: T | None) -> None:
        self._cache[key] = value
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def multi_get(self, keys: Sequence[Key]) -> list[T | None]:
        """Return cached values, reading the missing keys in one delegate call."""
        found: dict[Key, Any] = {}
        missing: list[Key] = []
        for key in keys:
            value = self._cache.get(key, _MISSING)
            if value is _MISSING:
                if key not in found:
                    missing.append(key)
                    found[key] = _MISSING
            else:
                self._cache.move_to_end(key)
                found[key] = value
        if missing:
            for key, value in zip(missing, self.delegate.multi_get(missing), strict=True):
                found[key] = value
                self._remember(key, value)
        return [found[key] for key in keys]

    def multi_put(self, keys: Sequence[Key], values: Sequence[T]) -> None:
        """Cache and write through."""
        for key, value in zip(keys, values, strict=True):
            self._remember(key, value)
        self.delegate.multi_put(keys, values)


class ChunkedMap(Generic[T]):
    """Splits very large multi-gets and multi-puts into consecutive chunks (0 = no limit)."""

    def __init__(self, delegate: BackingMap[T], max_get: int = 0, max_put: int = 0) -> None:
        """Wrap ``delegate``; one delegate call per chunk of ``max_get`` / ``max_put`` keys.

        Raises:
            ConfigError: a chunk size is negative.
        """
        if max_get < 0 or max_put < 0:
            msg = f"ChunkedMap chunk sizes must be >= 0 (0 = unlimited), got {max_get}, {max_put}"
            raise ConfigError(msg)
        self.delegate = delegate
        self.max_get = max_get
        self.max_put = max_put

    @staticmethod
    def _chunks(n: int, size: int) -> list[slice]:
        if size == 0 or n <= size:
            return [slice(0, n)]
        return [slice(i, i + size) for i in range(0, n, size)]

    def multi_get(self, keys: Sequence[Key]) -> list[T | None]:
        """Read in chunks; results come back in key order."""
        out: list[T | None] = []
        for part in self._chunks(len(keys), self.max_get):
            out.extend(self.delegate.multi_get(keys[part]))
        return out

    def multi_put(self, keys: Sequence[Key], values: Sequence[T]) -> None:
        """Write in chunks."""
        for part in self._chunks(len(keys), self.max_put):
            self.delegate.multi_put(keys[part], values[part])


class SnapshottableMap(Generic[T]):
    """A map state that also exposes one global value stored under a fixed key."""

    def __init__(self, map_state: MapState[T], key: Key = GLOBAL_KEY) -> None:
        """Expose ``map_state[key]`` as a Snapshottable."""
        self.map_state = map_state
        self.key = key

    def begin_commit(self, txid: int | None) -> None:
        """Delegate to the map state."""
        self.map_state.begin_commit(txid)

    def commit(self, txid: int | None) -> None:
        """Delegate to the map state."""
        self.map_state.commit(txid)

    def multi_get(self, keys: Sequence[Key]) -> list[T | None]:
        """Delegate to the map state."""
        return self.map_state.multi_get(keys)

    def multi_update(self, keys: Sequence[Key], updaters: Sequence[ValueUpdater]) -> list[T | None]:
        """Delegate to the map state."""
        return self.map_state.multi_update(keys, updaters)

    def multi_put(self, keys: Sequence[Key], values: Sequence[T | None]) -> None:
        """Delegate to the map state."""
        self.map_state.multi_put(keys, values)

    def get(self) -> T | None:
        """Return the global value."""
        return self.map_state.multi_get([self.key])[0]

    def update(self, updater: ValueUpdater) -> T | None:
        """Update the global value and return it."""
        return self.map_state.multi_update([self.key], [updater])[0]

    def set(self, value: T | None) -> None:
        """Replace the global value."""
        self.map_state.multi_put([self.key], [value])

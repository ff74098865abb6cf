"""CachedMap, ChunkedMap and SnapshottableMap."""

from __future__ import annotations

import pytest

from trident_assets import (
    CachedMap,
    CombinerValueUpdater,
    ConfigError,
    Count,
    OpaqueMap,
    OpaqueValue,
    SnapshottableMap,
)
from trident_assets.backends.memory import MemoryBackingMap
from trident_assets.core.caching import GLOBAL_KEY, ChunkedMap


class RecordingMap(MemoryBackingMap):
    def __init__(self) -> None:
        super().__init__()
        self.gets: list[list] = []
        self.puts: list[list] = []

    def multi_get(self, keys):
        self.gets.append(list(keys))
        return super().multi_get(keys)

    def multi_put(self, keys, values):
        self.puts.append(list(keys))
        super().multi_put(keys, values)


def test_cached_map_reads_only_missing_keys_and_caches_absence() -> None:
    inner = RecordingMap()
    inner.data = {("a",): 1}
    cache = CachedMap(inner, cache_size=10)
    assert cache.multi_get([("a",), ("b",)]) == [1, None]
    assert cache.multi_get([("b",), ("a",), ("a",)]) == [None, 1, 1]
    assert inner.gets == [[("a",), ("b",)]], "second read served from cache, absent key included"
    cache.multi_put([("b",)], [7])
    assert inner.puts == [[("b",)]], "writes go through"
    assert cache.multi_get([("b",)]) == [7]
    assert len(inner.gets) == 1


def test_cached_map_evicts_least_recently_used() -> None:
    inner = RecordingMap()
    inner.data = {("a",): 1, ("b",): 2, ("c",): 3}
    cache = CachedMap(inner, cache_size=2)
    cache.multi_get([("a",)])
    cache.multi_get([("b",)])
    cache.multi_get([("a",)])  # a is now most recent
    cache.multi_get([("c",)])  # evicts b
    inner.gets.clear()
    cache.multi_get([("a",), ("b",)])
    assert inner.gets == [[("b",)]]


def test_cached_map_rejects_bad_size() -> None:
    with pytest.raises(ConfigError, match="cache_size must be a positive"):
        CachedMap(MemoryBackingMap(), cache_size=0)


def test_chunked_map_splits_calls_in_order() -> None:
    inner = RecordingMap()
    chunked = ChunkedMap(inner, max_get=2, max_put=3)
    keys = [(i,) for i in range(5)]
    chunked.multi_put(keys, list(range(5)))
    assert inner.puts == [keys[0:3], keys[3:5]]
    assert chunked.multi_get(keys) == [0, 1, 2, 3, 4]
    assert inner.gets == [keys[0:2], keys[2:4], keys[4:5]]
    unlimited = ChunkedMap(RecordingMap())
    unlimited.multi_put(keys, list(range(5)))
    assert len(unlimited.delegate.puts) == 1
    with pytest.raises(ConfigError, match=">= 0"):
        ChunkedMap(inner, max_get=-1)


def test_snapshottable_map_global_value() -> None:
    backing = MemoryBackingMap()
    snap = SnapshottableMap(OpaqueMap(backing))
    snap.begin_commit(1)
    assert snap.get() is None
    assert snap.update(CombinerValueUpdater(Count(), 3)) == 3
    snap.commit(1)
    snap.begin_commit(2)
    snap.set(10)
    snap.commit(2)
    assert snap.get() == 10
    assert backing.data == {GLOBAL_KEY: OpaqueValue(2, 10, 3)}

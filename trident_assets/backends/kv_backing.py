"""A key-value state's backing map (a Redis Cluster's or memcached's) and reads of it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from trident_assets.backends.kv_target import REDIS_CLUSTER, KeyValueTarget
from trident_assets.backends.memcached_map import MemcachedBackingMap
from trident_assets.backends.redis_cluster_map import RedisClusterBackingMap
from trident_assets.core.values import OpaqueValue, TransactionalValue
from trident_assets.errors import KeyValueStoreError

__all__ = ["current_value", "open_backing", "read_latest", "refuse_as_of", "state_size"]


def open_backing(target: KeyValueTarget, txid: int | None = None) -> Any:
    """The backing map of ``target`` (``multi_get``/``multi_put`` of values, ``scan``, ``close``).

    The store's client library is imported when the map is opened (``redis``, ``pymemcache``).
    ``txid``: the txid it is written for, named by a Redis Cluster's errors.
    """
    if target.store == REDIS_CLUSTER:
        return RedisClusterBackingMap(target, txid=txid)
    return MemcachedBackingMap(target)


def current_value(stored: Any) -> Any:
    """The value a stored record holds as committed: ``curr`` (opaque), ``val``, the value."""
    if isinstance(stored, OpaqueValue):
        return stored.curr
    if isinstance(stored, TransactionalValue):
        return stored.val
    return stored


def read_latest(target: KeyValueTarget, key_fields: Sequence[str], value_field: str) -> pa.Table:
    """Every key of the state with its latest value (``key_fields`` + ``value_field``), by key.

    Values written by a txid that has not committed yet (one that failed after its
    executors wrote) are read too: the servers keep no commit marker.

    Raises:
        KeyValueStoreError: the store cannot list its keys (memcached).
    """
    backing = open_backing(target)
    try:
        rows = sorted(((k, current_value(v)) for k, v in backing.scan()), key=lambda r: repr(r[0]))
    finally:
        backing.close()
    columns: dict[str, list[Any]] = {f: [k[i] for k, _ in rows] for i, f in enumerate(key_fields)}
    columns[value_field] = [v for _, v in rows]
    return pa.table(columns)


def state_size(target: KeyValueTarget, txid: int | None = None) -> int | None:
    """How many keys the state holds on its servers; None for memcached (unknown).

    A Redis Cluster state: the sum of its key counters, which its writes keep atomically
    (:class:`~trident_assets.backends.redis_cluster_map.RedisClusterBackingMap`). memcached
    cannot count exactly: no atomic write of a key and a counter, and unannounced evictions.

    Raises:
        KeyValueStoreError: a node did not answer (naming the state and ``txid``, the txid
            whose writes it is read after).
    """
    if target.store != REDIS_CLUSTER:
        return None
    backing = RedisClusterBackingMap(target, txid=txid)
    try:
        return backing.size()
    finally:
        backing.close()


def refuse_as_of(target: KeyValueTarget, txid: int) -> KeyValueStoreError:
    """The error for a read of the state as of ``txid``: the servers keep the latest only."""
    return KeyValueStoreError(
        f"{target.label} cannot be read as of txid {txid}: its servers keep each key's latest "
        "value only (and the value before it, opaque), no history; read the latest value, "
        "or keep the state in the topology's store (StateSpec) for as-of reads"
    )

"""A key-value state's backing map in a Redis Cluster (redis-py's ``RedisCluster``).

``multi_get``/``multi_put`` send one pipeline per master touched, one ``MGET``/``MSET`` per
hash slot in it (a cluster refuses multi-key commands across slots). Each write pipeline ends
with ``WAIT min_replicas timeout`` on the same connection, so a batch's writes are on a
replica of every master they touched before the txid can commit; fewer acknowledgements
refuse the batch (:class:`~trident_assets.errors.KeyValueStoreError`). A moved slot or a
lost connection (a failover) refreshes the cluster's layout and retries the whole call:
writes are values computed before the call, so a retry writes the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from trident_assets.backends.kv_target import KeyValueTarget, decode_key
from trident_assets.errors import KeyValueStoreError

if TYPE_CHECKING:
    from trident_assets.core.protocols import Key

__all__ = ["RedisClusterBackingMap", "connect_cluster"]

R = TypeVar("R")
ATTEMPTS = 4
"""Tries of one call across a slot move or failover (the layout is refreshed between)."""


def connect_cluster(target: KeyValueTarget) -> Any:
    """A ``RedisCluster`` client over ``target``'s startup nodes.

    Raises:
        KeyValueStoreError: no startup node answered.
    """
    from redis.cluster import ClusterNode, RedisCluster
    from redis.exceptions import RedisClusterException, RedisError

    nodes = [ClusterNode(host, port) for host, port in target.servers]
    try:
        return RedisCluster(
            startup_nodes=nodes,
            socket_connect_timeout=2,
            socket_timeout=10,
        )
    except (RedisClusterException, RedisError) as exc:
        servers = ", ".join(f"{h}:{p}" for h, p in target.servers)
        msg = (
            f"{target.label}: no Redis Cluster node answered at {servers} ({exc}); start the "
            "cluster or fix the state's startup nodes"
        )
        raise KeyValueStoreError(msg) from exc


class RedisClusterBackingMap:
    """Bulk reads and acknowledged bulk writes of one state's values in a Redis Cluster."""

    def __init__(self, target: KeyValueTarget, client: Any = None) -> None:
        """Over ``client`` (a ``RedisCluster``), else a new client of ``target``'s nodes."""
        self.target = target
        self.client = client if client is not None else connect_cluster(target)

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()

    def _by_node(self, keys: Sequence[str]) -> dict[Any, dict[int, list[int]]]:
        """Per master node, per hash slot: the positions in ``keys`` of its keys."""
        grouped: dict[Any, dict[int, list[int]]] = {}
        for i, key in enumerate(keys):
            slot = self.client.keyslot(key)
            node = self.client.nodes_manager.get_node_from_slot(slot)
            grouped.setdefault(node, {}).setdefault(slot, []).append(i)
        return grouped

    def _retrying(self, call: Callable[[], R]) -> R:
        """Run ``call``, refreshing the cluster layout after a moved slot or a lost node."""
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import ResponseError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        for attempt in range(ATTEMPTS):
            try:
                return call()
            except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
                moved = str(exc).split(" ", 1)[0] in ("MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN")
                if attempt == ATTEMPTS - 1 or not (moved or not isinstance(exc, ResponseError)):
                    raise
                self.client.nodes_manager.initialize()
        msg = "unreachable"
        raise AssertionError(msg)

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Each key's stored value (None where absent): one MGET per slot, pipelined per master."""
        encoded = [self.target.encode(k) for k in keys]
        return self._retrying(lambda: self._get(encoded))

    def _get(self, encoded: list[str]) -> list[Any]:
        out: list[Any] = [None] * len(encoded)
        for node, slots in self._by_node(encoded).items():
            pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
            for positions in slots.values():
                pipe.mget([encoded[i] for i in positions])
            for positions, values in zip(slots.values(), pipe.execute(), strict=True):
                for i, data in zip(positions, values, strict=True):
                    out[i] = self.target.decode_value(data)
        return out

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Store the values: one MSET per slot and a WAIT, pipelined per master.

        Raises:
            KeyValueStoreError: a master's replicas did not acknowledge the writes in time.
        """
        encoded = [self.target.encode(k) for k in keys]
        data = [self.target.encode_value(v) for v in values]
        self._retrying(lambda: self._put(encoded, data))

    def _put(self, encoded: list[str], data: list[bytes]) -> None:
        target = self.target
        for node, slots in self._by_node(encoded).items():
            pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
            for positions in slots.values():
                pipe.mset({encoded[i]: data[i] for i in positions})
            pipe.execute_command("WAIT", target.min_replicas, target.wait_timeout_ms)
            acked = pipe.execute()[-1]
            if int(acked) < target.min_replicas:
                msg = (
                    f"{target.label}: master {node.name} acknowledged the batch's writes on "
                    f"{acked} replica(s) within {target.wait_timeout_ms} ms, fewer than the "
                    f"{target.min_replicas} required; the txid is not committed. Bring its "
                    "replicas back (or lower min_replicas), then run the txid again"
                )
                raise KeyValueStoreError(msg)

    def scan(self) -> Iterator[tuple[Key, Any]]:
        """Every ``(key, stored value)`` of the state: SCAN by its prefix on each master."""
        prefix = self.target.prefix
        for node in self.client.get_primaries():
            conn = self.client.get_redis_connection(node)
            batch: list[bytes] = []
            for name in conn.scan_iter(match=f"{prefix}*", count=1000):
                batch.append(name)
                if len(batch) >= 1000:
                    yield from self._decode_scanned(batch)
                    batch = []
            if batch:
                yield from self._decode_scanned(batch)

    def _decode_scanned(self, names: list[bytes]) -> Iterator[tuple[Key, Any]]:
        prefix = self.target.prefix
        found = self._get([n.decode() for n in names])
        for name, value in zip(names, found, strict=True):
            if value is not None:
                yield decode_key(prefix, name), value

"""A key-value state's backing map in a Redis Cluster (redis-py's ``RedisCluster``).

``multi_get`` sends one pipeline per master touched, one ``MGET`` per hash slot in it (a
cluster refuses multi-key commands across slots). ``multi_put`` sends each master touched one
script (:data:`WRITE_SCRIPT`) that sets the keys it serves and, for each key it creates, adds
one to the state's key counter of the key's hash slot (a counter key per slot, hash-tagged into
that slot, so it lives on the same master). The script runs atomically, so a key is counted
exactly when it is created, across failed and re-run txids, Spark task retries and call
retries alike: :meth:`~RedisClusterBackingMap.size` sums the counters, the number of keys the
state holds, without listing them (``multi_delete``'s script takes one off for each key it
deletes). Each write pipeline ends with ``WAIT min_replicas timeout`` on the same connection,
so a batch's writes are on a replica of every master they touched before the txid can commit;
fewer acknowledgements refuse the batch (:class:`~trident_assets.errors.KeyValueStoreError`).
A moved slot or a lost connection (a failover) refreshes the cluster's layout and retries the
whole call: writes are values computed before the call, so a retry writes the same bytes (and
counts no key twice).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from trident_assets.backends.kv_target import KeyValueTarget, decode_key
from trident_assets.errors import KeyValueStoreError

if TYPE_CHECKING:
    from trident_assets.core.protocols import Key

__all__ = ["SIZE_MARK", "RedisClusterBackingMap", "connect_cluster", "size_key"]

R = TypeVar("R")
ATTEMPTS = 4
"""Tries of one call across a slot move or failover (the layout is refreshed between)."""
SLOTS = 16384
"""A Redis Cluster's hash slots."""
SIZE_MARK = "~size"
"""After a state's prefix: its key counters (``~`` never appears in an encoded data key)."""
RETRIED = ("MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN")
"""Error replies after which the layout is refreshed and the call retried."""
SCRIPT_RETRIED = ("Script attempted to access a non local key", "while the cluster is down")
"""A script's errors for a key of a slot its master no longer serves (a slot moved) and for
a cluster down (a failover under way): retried as :data:`RETRIED`."""

WRITE_SCRIPT = """#!lua flags=allow-cross-slot-keys
local n = tonumber(ARGV[1])
local created = 0
for i = 1, n do
  if not redis.call('SET', ARGV[1 + i], ARGV[1 + n + i], 'GET') then
    redis.call('INCR', ARGV[1 + 2 * n + i])
    created = created + 1
  end
end
return created
"""
"""Set ``n`` keys on one master (``ARGV``: n, the keys, their values, each key's slot
counter); a key that did not exist adds one to its counter, right after its ``SET`` (a key
of a slot the master no longer serves stops the script before that key is written or
counted). Returns the keys created."""

SIZE_SCRIPT = """#!lua flags=no-writes,allow-cross-slot-keys
local total = 0
for i = 1, #ARGV do
  total = total + tonumber(redis.call('GET', ARGV[i]) or '0')
end
return total
"""
"""The sum of the counters named in ``ARGV`` (one master's slots)."""

DELETE_SCRIPT = """#!lua flags=allow-cross-slot-keys
local n = tonumber(ARGV[1])
local deleted = 0
for i = 1, n do
  if redis.call('DEL', ARGV[1 + i]) == 1 then
    redis.call('DECR', ARGV[1 + n + i])
    deleted = deleted + 1
  end
end
return deleted
"""
"""Delete ``n`` keys on one master (``ARGV``: n, the keys, each key's slot counter); a key
that existed takes one from its counter, right after its ``DEL``. Returns the keys deleted."""


@cache
def _slot_tags() -> tuple[str, ...]:
    """For each hash slot, a short hash tag that hashes to it (found once per process)."""
    from redis.crc import key_slot

    tags: dict[int, str] = {}
    candidate = 0
    while len(tags) < SLOTS:
        tag = str(candidate)
        tags.setdefault(key_slot(tag.encode()), tag)
        candidate += 1
    return tuple(tags[slot] for slot in range(SLOTS))


def size_key(prefix: str, slot: int) -> str:
    """The key counter of hash slot ``slot`` of the state under ``prefix`` (in that slot)."""
    return f"{prefix}{SIZE_MARK}{{{_slot_tags()[slot]}}}"


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

    def __init__(self, target: KeyValueTarget, client: Any = None, txid: int | None = None) -> None:
        """Over ``client`` (a ``RedisCluster``), else a new client of ``target``'s nodes.

        ``txid``: the txid the map is written or counted for (named when a node fails).
        """
        self.target = target
        self.txid = txid
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

    def _retrying(self, call: Callable[[], R], doing: str) -> R:
        """Run ``call``, refreshing the cluster layout after a moved slot or a lost node.

        Raises:
            KeyValueStoreError: a node still did not answer (or the cluster was still down)
                after :data:`ATTEMPTS` tries; the message names ``doing``, the state, the txid
                and what to do.
        """
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import ResponseError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        for attempt in range(ATTEMPTS):
            try:
                return call()
            except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
                text = str(exc)
                moved = text.split(" ", 1)[0] in RETRIED or any(m in text for m in SCRIPT_RETRIED)
                if not (moved or not isinstance(exc, ResponseError)):
                    raise
                if attempt == ATTEMPTS - 1:
                    raise self._unanswered(doing, exc) from exc
                self.client.nodes_manager.initialize()
        msg = "unreachable"
        raise AssertionError(msg)

    def _unanswered(self, doing: str, exc: Exception) -> KeyValueStoreError:
        """The error of a call the cluster did not answer after every try."""
        label, txid = self.target.label, self.txid
        what = f"{type(exc).__name__}: {exc}"
        if txid is None:
            after = "bring the node back (or wait until a replica takes its place), then try again"
        else:
            after = (
                f"txid {txid} is not committed. Bring the node back (or wait until a replica "
                "takes its place), then run the txid again: its re-run writes the same values"
            )
        msg = (
            f"{label}: the Redis Cluster did not answer while {doing} ({what}; "
            f"{ATTEMPTS} tries); {after}"
        )
        return KeyValueStoreError(msg)

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Each key's stored value (None where absent): one MGET per slot, pipelined per master."""
        encoded = [self.target.encode(k) for k in keys]
        return self._retrying(lambda: self._get(encoded), "reading keys")

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
        """Store the values: one :data:`WRITE_SCRIPT` and a WAIT per master.

        ``keys`` are distinct. A key created adds one to its slot's counter, atomically with
        its write.

        Raises:
            KeyValueStoreError: a master's replicas did not acknowledge the writes in time.
        """
        encoded = [self.target.encode(k) for k in keys]
        data = [self.target.encode_value(v) for v in values]
        self._retrying(lambda: self._put(encoded, data), "writing keys")

    def multi_delete(self, keys: Sequence[Key]) -> None:
        """Delete the keys: one :data:`DELETE_SCRIPT` and a WAIT per master.

        A key deleted takes one from its slot's counter, atomically with its delete.

        Raises:
            KeyValueStoreError: a master's replicas did not acknowledge the deletes in time.
        """
        encoded = [self.target.encode(k) for k in keys]
        if encoded:
            self._retrying(lambda: self._put(encoded, None), "deleting keys")

    def _put(self, encoded: list[str], data: list[bytes] | None) -> int:
        """Write ``data`` under ``encoded`` (None: delete the keys), then WAIT for replicas.

        Returns the keys created (written) or deleted (deleted).
        """
        target = self.target
        changed = 0
        for node, slots in self._by_node(encoded).items():
            names: list[str] = []
            counters: list[str] = []
            positions: list[int] = []
            for slot, in_slot in slots.items():
                counter = size_key(target.prefix, slot)
                names.extend(encoded[i] for i in in_slot)
                counters.extend([counter] * len(in_slot))
                positions.extend(in_slot)
            pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
            if data is None:
                pipe.execute_command("EVAL", DELETE_SCRIPT, 0, len(names), *names, *counters)
            else:
                stored = [data[i] for i in positions]
                args = (len(names), *names, *stored, *counters)
                pipe.execute_command("EVAL", WRITE_SCRIPT, 0, *args)
            pipe.execute_command("WAIT", target.min_replicas, target.wait_timeout_ms)
            done, acked = pipe.execute()
            changed += int(done)
            if int(acked) < target.min_replicas:
                msg = (
                    f"{target.label}: master {node.name} acknowledged the batch's writes on "
                    f"{acked} replica(s) within {target.wait_timeout_ms} ms, fewer than the "
                    f"{target.min_replicas} required; the txid is not committed. Bring its "
                    "replicas back (or lower min_replicas), then run the txid again"
                )
                raise KeyValueStoreError(msg)
        return changed

    def size(self) -> int:
        """How many keys the state holds: the sum of its slots' counters (one script per master).

        Every key ever written, committed or not (a txid that failed after its executors
        wrote left its keys on the servers), as :meth:`scan` finds them.
        """
        return self._retrying(self._size, "reading its key count")

    def _size(self) -> int:
        prefix = self.target.prefix
        by_node: dict[Any, list[str]] = {}
        for slot in range(SLOTS):
            node = self.client.nodes_manager.get_node_from_slot(slot)
            by_node.setdefault(node, []).append(size_key(prefix, slot))
        total = 0
        for node, counters in by_node.items():
            conn = self.client.get_redis_connection(node)
            total += int(conn.execute_command("EVAL", SIZE_SCRIPT, 0, *counters))
        return total

    def scan(self) -> Iterator[tuple[Key, Any]]:
        """Every ``(key, stored value)`` of the state: SCAN by its prefix on each master.

        The state's key counters (:data:`SIZE_MARK`) are not keys of the state.
        """
        prefix = self.target.prefix
        counters = f"{prefix}{SIZE_MARK}".encode()
        for node in self.client.get_primaries():
            conn = self.client.get_redis_connection(node)
            batch: list[bytes] = []
            for name in conn.scan_iter(match=f"{prefix}*", count=1000):
                if name.startswith(counters):
                    continue
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

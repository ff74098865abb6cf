"""State specs whose values live in a key-value cluster: Trident's MemcachedState and its kin.

``RedisClusterState.opaque("word_counts", ["127.0.0.1:7000", ...])`` and
``MemcachedState.opaque("word_counts", ["127.0.0.1:11211", ...])`` are :class:`StateSpec`
objects: ``persistent_aggregate`` takes them where it takes ``StateSpec.opaque(name)``. The
state's values (``[txid, curr, prev]`` opaque, ``[txid, val]`` transactional, the plain value
non-transactional) are read and written in batches by the Spark executors, each partition its
own keys; the commit marker stays in the topology's store (see
:mod:`trident_assets.spark.kv_state`). Server lists are checked here, before any write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError
from trident_assets.stream.graph import StateSpec

__all__ = [
    "KeyValueStateSpec",
    "MemcachedState",
    "RedisClusterState",
    "refuse_key_value",
]


def parse_servers(what: str, servers: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """``servers`` (``"host:port"`` strings) as ``(host, port)`` pairs, checked.

    Raises:
        ConfigError: the list is empty, an entry is not ``host:port`` with a port in
            1..65535, or an entry repeats.
    """
    if isinstance(servers, str | bytes) or not isinstance(servers, Sequence) or not servers:
        msg = (
            f"{what} needs a non-empty list of 'host:port' servers, got {servers!r}; "
            "e.g. ['127.0.0.1:7000', '127.0.0.1:7001']"
        )
        raise ConfigError(msg)
    parsed: list[tuple[str, int]] = []
    for entry in servers:
        host, sep, port = str(entry).rpartition(":")
        if not isinstance(entry, str) or not sep or not host or not port.isdigit():
            msg = f"{what}: server {entry!r} is not 'host:port' (e.g. '127.0.0.1:7000')"
            raise ConfigError(msg)
        number = int(port)
        if not 1 <= number <= 65535:
            msg = f"{what}: server {entry!r} has port {number}, outside 1..65535"
            raise ConfigError(msg)
        if (host, number) in parsed:
            msg = f"{what}: server {entry!r} is listed twice"
            raise ConfigError(msg)
        parsed.append((host, number))
    return tuple(parsed)


@dataclass(frozen=True, slots=True)
class KeyValueStateSpec(StateSpec):
    """A state kept in a key-value store (``store``) at ``servers`` (``"host:port"``)."""

    servers: tuple[str, ...] = ()
    store: ClassVar[str] = ""
    """The store's name in messages and docs (``redis-cluster``, ``memcached``)."""

    def __post_init__(self) -> None:
        """Validate the name, the backfill mode and the servers."""
        StateSpec.__post_init__(self)
        parse_servers(f"{self.store} state {self.name!r}", self.servers)

    @property
    def addresses(self) -> tuple[tuple[str, int], ...]:
        """The servers as ``(host, port)`` pairs."""
        return parse_servers(f"{self.store} state {self.name!r}", self.servers)

    @classmethod
    def _make(
        cls, name: str, servers: Sequence[str], state_type: StateType, options: dict[str, Any]
    ) -> Any:
        parse_servers(f"{cls.store} state {name!r}", servers)
        return cls(name, state_type, servers=tuple(servers), **options)

    @classmethod
    def opaque(cls, name: str, servers: Sequence[str], **options: Any) -> Any:  # type: ignore[override]
        """An opaque state: exactly-once with transactional and opaque spouts."""
        return cls._make(name, servers, StateType.OPAQUE, options)

    @classmethod
    def transactional(cls, name: str, servers: Sequence[str], **options: Any) -> Any:  # type: ignore[override]
        """A transactional state: exactly-once with transactional spouts only."""
        return cls._make(name, servers, StateType.TRANSACTIONAL, options)

    @classmethod
    def non_transactional(cls, name: str, servers: Sequence[str], **options: Any) -> Any:  # type: ignore[override]
        """A non-transactional state: at-least-once (replays count twice)."""
        return cls._make(name, servers, StateType.NON_TRANSACTIONAL, options)


@dataclass(frozen=True, slots=True)
class RedisClusterState(KeyValueStateSpec):
    """A state in a Redis Cluster, reached through any of its ``startup_nodes``.

    Each partition's writes are acknowledged by ``min_replicas`` replicas of every master
    they touched (``WAIT min_replicas wait_timeout_ms``) before the txid commits; fewer
    acknowledgements fail the txid (it runs again once the replicas are back).
    """

    min_replicas: int = 1
    wait_timeout_ms: int = 2000
    store: ClassVar[str] = "redis-cluster"

    def __post_init__(self) -> None:
        """Validate the name, the servers and the replication options."""
        KeyValueStateSpec.__post_init__(self)
        for option, least in (("min_replicas", 0), ("wait_timeout_ms", 1)):
            value = getattr(self, option)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                msg = (
                    f"redis-cluster state {self.name!r}: {option} must be an integer >= "
                    f"{least}, got {value!r}"
                )
                raise ConfigError(msg)


@dataclass(frozen=True, slots=True)
class MemcachedState(KeyValueStateSpec):
    """A state spread over memcached ``servers`` by consistent hashing (Trident's MemcachedState).

    memcached keeps no data over a restart and cannot list its keys: a restarted server is
    detected (its state sentinel is gone) and refused; scans are refused.
    """

    store: ClassVar[str] = "memcached"


def refuse_key_value(spec: StateSpec, operation: str) -> None:
    """Refuse a key-value ``spec`` for ``operation``, whose state stays in the topology's store.

    Raises:
        ConfigError: ``spec`` is a :class:`KeyValueStateSpec`.
    """
    if isinstance(spec, KeyValueStateSpec):
        msg = (
            f"{spec.store} state {spec.name!r}: {operation} cannot keep its state in a "
            "key-value store (those hold persistent_aggregate states); give it a StateSpec, "
            "which keeps it in the topology's store"
        )
        raise ConfigError(msg)

"""Where a key-value state lives and how its keys and values are written there.

A :class:`KeyValueTarget` is small and picklable: the driver builds it from the state's spec
and ships it to the executors, which open the backing map of their
partition. Every key of a state starts with the state's prefix
(``trident:<topology>:<state>:``), so two states never share a key; the rest is the key's
values as compact JSON in URL-safe base64 (decodable, so a Redis scan returns the key fields).
Values are the JSON of Trident's serializers (:mod:`trident_assets.core.serializers`):
``[txid, curr, prev]`` opaque, ``[txid, val]`` transactional, the value non-transactional.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass
from typing import Any

from trident_assets.core.protocols import Key
from trident_assets.core.serializers import serializer_for
from trident_assets.core.values import StateType
from trident_assets.errors import StateLayoutError
from trident_assets.names import validate_identifier

__all__ = [
    "MEMCACHED",
    "REDIS_CLUSTER",
    "KeyValueTarget",
    "decode_key",
    "encode_key",
    "state_prefix",
    "target_of",
]

REDIS_CLUSTER = "redis-cluster"
"""The ``store`` of a Redis Cluster state."""
MEMCACHED = "memcached"
"""The ``store`` of a memcached state."""
MEMCACHED_KEY_LIMIT = 250
"""memcached's longest key, in bytes."""


def state_prefix(topology: str, state: str) -> str:
    """The prefix of every key of ``state`` of ``topology`` (both validated identifiers)."""
    validate_identifier(topology, "topology")
    validate_identifier(state, "state")
    return f"trident:{topology}:{state}:"


@dataclass(frozen=True)
class KeyValueTarget:
    """One key-value state: its store, servers, key prefix and replay guarantee."""

    store: str
    """:data:`REDIS_CLUSTER` or :data:`MEMCACHED`."""
    servers: tuple[tuple[str, int], ...]
    prefix: str
    state_type: StateType
    label: str
    """How errors name the state (``memcached state 'word_counts' of topology 'wc'``)."""
    min_replicas: int = 1
    """Redis: replicas that must acknowledge a partition's writes (``WAIT``)."""
    wait_timeout_ms: int = 2000
    """Redis: how long ``WAIT`` waits for them."""

    def to_json(self) -> str:
        """The target as JSON (an asset's metadata; :meth:`from_json` reads it back)."""
        servers = [f"{h}:{p}" for h, p in self.servers]
        return json.dumps(asdict(self) | {"servers": servers, "state_type": self.state_type.value})

    @classmethod
    def from_json(cls, text: str) -> KeyValueTarget:
        """The target :meth:`to_json` wrote."""
        raw = json.loads(text)
        servers = tuple((h, int(p)) for h, _, p in (s.rpartition(":") for s in raw["servers"]))
        return cls(**raw | {"servers": servers, "state_type": StateType(raw["state_type"])})

    def encode(self, key: Key) -> str:
        """The store key of ``key`` (:func:`encode_key` under this state's prefix)."""
        return encode_key(self.prefix, key, self.store)

    def encode_value(self, value: Any) -> bytes:
        """The stored bytes of a state value (an OpaqueValue, TransactionalValue or value).

        Raises:
            StateLayoutError: the value is not JSON (e.g. a Decimal or a date).
        """
        try:
            return serializer_for(self.state_type).serialize(value)
        except TypeError as exc:
            msg = (
                f"{self.label}: value {value!r} cannot be stored as JSON ({exc}); aggregate "
                "to ints, floats, strings or lists of them"
            )
            raise StateLayoutError(msg) from exc

    def decode_value(self, data: bytes | None) -> Any:
        """The state value stored as ``data`` (None where absent)."""
        return None if data is None else serializer_for(self.state_type).deserialize(data)


def encode_key(prefix: str, key: Key, store: str) -> str:
    """``prefix`` + the key's values as compact JSON in unpadded URL-safe base64.

    Raises:
        StateLayoutError: a key value is not JSON, or (memcached) the key is over 250 bytes.
    """
    try:
        text = json.dumps(list(key), separators=(",", ":"), ensure_ascii=False)
    except TypeError as exc:
        msg = f"key {key!r} cannot be stored as JSON ({exc})"
        raise StateLayoutError(msg) from exc
    encoded = prefix + base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    if store == MEMCACHED and len(encoded) > MEMCACHED_KEY_LIMIT:
        msg = (
            f"key {key!r} is {len(encoded)} bytes as a memcached key (limit "
            f"{MEMCACHED_KEY_LIMIT}); group by shorter values or use a Redis Cluster state"
        )
        raise StateLayoutError(msg)
    return encoded


def decode_key(prefix: str, stored: str | bytes) -> Key:
    """The key tuple :func:`encode_key` encoded as ``stored``."""
    text = stored.decode() if isinstance(stored, bytes) else stored
    body = text[len(prefix) :]
    raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    return tuple(json.loads(raw))


def target_of(state: Any) -> KeyValueTarget:
    """Where ``state`` (a TridentState with a ``KeyValueStateSpec``) keeps its values."""
    spec, topology = state.spec, state.topology.name
    return KeyValueTarget(
        store=spec.store,
        servers=spec.addresses,
        prefix=state_prefix(topology, spec.name),
        state_type=spec.state_type,
        label=f"{spec.store} state {spec.name!r} of topology {topology!r}",
        min_replicas=getattr(spec, "min_replicas", 1),
        wait_timeout_ms=getattr(spec, "wait_timeout_ms", 2000),
    )

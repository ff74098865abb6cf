"""JSON serializers for stored values, byte-compatible with Trident's JSON*Serializer classes.

Opaque: ``[curr_txid, curr, prev]``; transactional: ``[txid, val]``; non-transactional: the
plain JSON of the value.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, TypeVar

from trident_assets.core.values import OpaqueValue, StateType, TransactionalValue
from trident_assets.errors import StateLayoutError

__all__ = [
    "JSONNonTransactionalSerializer",
    "JSONOpaqueSerializer",
    "JSONTransactionalSerializer",
    "Serializer",
    "serializer_for",
]

T = TypeVar("T")
"""The deserialized value type."""


class Serializer(Protocol[T]):
    """Turns a stored value into bytes and back."""

    def serialize(self, value: T) -> bytes:
        """Return the bytes of ``value``."""

    def deserialize(self, data: bytes) -> T:
        """Return the value stored as ``data``."""


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _loads_list(data: bytes, arity: int, kind: str) -> list[Any]:
    obj = json.loads(data)
    if not isinstance(obj, list) or len(obj) != arity:
        msg = f"stored bytes {data[:80]!r} are not a valid {kind} value (a JSON list of {arity})"
        raise StateLayoutError(msg)
    return obj


class JSONOpaqueSerializer:
    """``OpaqueValue`` <-> ``[curr_txid, curr, prev]``."""

    def serialize(self, value: OpaqueValue[Any]) -> bytes:
        """Serialize an opaque value."""
        return _dumps(value.to_list())

    def deserialize(self, data: bytes) -> OpaqueValue[Any]:
        """Deserialize an opaque value."""
        txid, curr, prev = _loads_list(data, 3, "opaque")
        return OpaqueValue(txid, curr, prev)


class JSONTransactionalSerializer:
    """``TransactionalValue`` <-> ``[txid, val]``."""

    def serialize(self, value: TransactionalValue[Any]) -> bytes:
        """Serialize a transactional value."""
        return _dumps(value.to_list())

    def deserialize(self, data: bytes) -> TransactionalValue[Any]:
        """Deserialize a transactional value."""
        txid, val = _loads_list(data, 2, "transactional")
        return TransactionalValue(txid, val)


class JSONNonTransactionalSerializer:
    """Any JSON-able value <-> its JSON."""

    def serialize(self, value: Any) -> bytes:
        """Serialize a plain value."""
        return _dumps(value)

    def deserialize(self, data: bytes) -> Any:
        """Deserialize a plain value."""
        return json.loads(data)


def serializer_for(
    state_type: StateType,
) -> JSONOpaqueSerializer | JSONTransactionalSerializer | JSONNonTransactionalSerializer:
    """Return the default serializer for a state type."""
    if state_type is StateType.OPAQUE:
        return JSONOpaqueSerializer()
    if state_type is StateType.TRANSACTIONAL:
        return JSONTransactionalSerializer()
    return JSONNonTransactionalSerializer()

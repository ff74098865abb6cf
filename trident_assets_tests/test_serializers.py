"""JSON serializers, byte-compatible with Trident's."""

from __future__ import annotations

import pytest

from trident_assets import (
    OpaqueValue,
    StateLayoutError,
    StateType,
    TransactionalValue,
)
from trident_assets.core.serializers import (
    JSONNonTransactionalSerializer,
    JSONOpaqueSerializer,
    JSONTransactionalSerializer,
    serializer_for,
)


def test_round_trips_and_exact_bytes() -> None:
    opaque = JSONOpaqueSerializer()
    assert opaque.serialize(OpaqueValue(3, 10, 7)) == b"[3,10,7]"
    assert opaque.serialize(OpaqueValue(1, 5)) == b"[1,5,null]"
    assert opaque.deserialize(b"[3,10,7]") == OpaqueValue(3, 10, 7)
    tx = JSONTransactionalSerializer()
    assert tx.serialize(TransactionalValue(3, 10)) == b"[3,10]"
    assert tx.deserialize(b"[3,10]") == TransactionalValue(3, 10)
    plain = JSONNonTransactionalSerializer()
    assert plain.serialize(10) == b"10"
    assert plain.deserialize(plain.serialize({"a": [1, "é"]})) == {"a": [1, "é"]}


def test_bad_bytes_name_the_kind() -> None:
    with pytest.raises(StateLayoutError, match="not a valid opaque value"):
        JSONOpaqueSerializer().deserialize(b"[1,2]")
    with pytest.raises(StateLayoutError, match="not a valid transactional value"):
        JSONTransactionalSerializer().deserialize(b"5")


def test_serializer_for() -> None:
    assert isinstance(serializer_for(StateType.OPAQUE), JSONOpaqueSerializer)
    assert isinstance(serializer_for(StateType.TRANSACTIONAL), JSONTransactionalSerializer)
    assert isinstance(serializer_for(StateType.NON_TRANSACTIONAL), JSONNonTransactionalSerializer)

"""OpaqueValue and TransactionalValue: Storm's test-opaque-value plus the seeds' examples."""

from __future__ import annotations

import dataclasses

import pytest

from trident_assets import OpaqueValue, StaleTxidError, StateType, TransactionalValue


def test_opaque_value_get_follows_storm() -> None:
    value = OpaqueValue(8, "v1", "v0")
    assert value.get(None) == "v1"
    assert value.get(100) == "v1"
    assert value.get(9) == "v1"
    assert value.get(8) == "v0", "a replay of txid 8 must build on prev"
    with pytest.raises(StaleTxidError, match=r"Current batch \(7\) is behind state's batch"):
        value.get(7)


def test_opaque_value_update_returns_new_values() -> None:
    value = OpaqueValue(8, "v1", "v0")
    replay = value.update(8, "v2")
    newer = value.update(9, "v2")
    assert replay == OpaqueValue(8, "v2", "v0"), "replay keeps the old prev"
    assert newer == OpaqueValue(9, "v2", "v1"), "a new txid rolls curr into prev"
    assert value == OpaqueValue(8, "v1", "v0"), "the original is unchanged"
    with pytest.raises(StaleTxidError, match="behind"):
        value.update(3, "x")


def test_values_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        OpaqueValue(1, 2).curr = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        TransactionalValue(1, 2).val = 3  # type: ignore[misc]


def test_seed_opaque_example_value4_prev1_txid2() -> None:
    stored = OpaqueValue(2, 4, 1)
    partial = 2
    assert stored.update(3, stored.get(3) + partial) == OpaqueValue(3, 6, 4)
    assert stored.update(2, stored.get(2) + partial) == OpaqueValue(2, 3, 1)


def test_null_txids() -> None:
    adhoc = OpaqueValue(None, 5, 1)
    assert adhoc.get(None) == 5
    assert adhoc.update(None, 7) == OpaqueValue(None, 7, 5), "a null txid always rolls forward"
    assert adhoc.get(4) == 5, "a value written outside a txid is older than any txid"
    assert adhoc.update(4, 9) == OpaqueValue(4, 9, 5)
    assert OpaqueValue(3, 5).update(None, 6) == OpaqueValue(None, 6, 5)


def test_serialized_forms_and_state_types() -> None:
    assert OpaqueValue(3, 10, 7).to_list() == [3, 10, 7]
    assert OpaqueValue(1, 5).to_list() == [1, 5, None]
    assert TransactionalValue(3, 10).to_list() == [3, 10]
    assert {t.value for t in StateType} == {"non_transactional", "transactional", "opaque"}

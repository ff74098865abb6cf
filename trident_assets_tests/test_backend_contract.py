"""Storm's StateTest sequences through the map wrappers, on every backing map.

The same txid logic must hold whichever store holds the values: MemoryBackingMap and the SQL
backing map on DuckDB and on PostgreSQL are driven through OpaqueMap, TransactionalMap and
NonTransactionalMap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.memory import MemoryBackingMap
from trident_assets.backends.postgres_store import PostgresStore
from trident_assets.core.aggregators import CombinerValueUpdater, Count, apply_combiner
from trident_assets.core.caching import SnapshottableMap
from trident_assets.core.maps import NonTransactionalMap, OpaqueMap, TransactionalMap
from trident_assets.core.protocols import BackingMap
from trident_assets.core.values import OpaqueValue, TransactionalValue
from trident_assets.errors import StaleTxidError

MakeBacking = Callable[[str], BackingMap[Any]]


@pytest.fixture(params=["memory", "duckdb", "postgres"])
def make_backing(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeBacking]:
    """Return a factory of fresh, empty backing maps (one per name)."""
    if request.param == "memory":
        yield lambda name: MemoryBackingMap()
        return
    if request.param == "postgres":
        store: Any = PostgresStore(request.getfixturevalue("pg_dsn"))
    else:
        store = DuckDBStore(tmp_path / "contract.duckdb")
    yield lambda name: store.map(name)
    store.close()


def single_get(state: Any, key: str) -> Any:
    return state.multi_get([(key,)])[0]


def single_update(state: Any, key: str, amount: int) -> Any:
    return state.multi_update([(key,)], [CombinerValueUpdater(Count(), amount)])[0]


def test_opaque_map_state_test_sequence(make_backing: MakeBacking) -> None:
    backing = make_backing("opaque")
    state = OpaqueMap(backing)
    state.begin_commit(1)
    assert single_get(state, "a") is None
    assert single_update(state, "a", 1) == 1  # intra-batch caching
    assert single_get(state, "a") == 1
    assert single_update(state, "a", 2) == 3
    assert single_get(state, "a") == 3
    state.commit(1)
    state.begin_commit(1)  # replay of txid 1: recomputes from prev
    assert single_get(state, "a") is None
    assert single_update(state, "a", 2) == 2
    state.commit(1)
    state.begin_commit(2)
    assert single_get(state, "a") == 2
    assert single_update(state, "a", 3) == 5
    assert single_update(state, "a", 1) == 6
    state.commit(2)
    assert backing.multi_get([("a",)]) == [OpaqueValue(2, 6, 2)]


def test_transactional_map_state_test_sequence(make_backing: MakeBacking) -> None:
    backing = make_backing("transactional")
    state = TransactionalMap(backing)
    state.begin_commit(1)
    assert single_get(state, "a") is None
    assert single_update(state, "a", 1) == 1
    assert single_update(state, "a", 2) == 3
    state.commit(1)
    state.begin_commit(1)  # replay: already applied, skipped
    assert single_get(state, "a") == 3
    assert single_update(state, "a", 1) == 3
    assert single_update(state, "a", 2) == 3
    state.commit(1)
    state.begin_commit(2)
    assert single_get(state, "a") == 3
    assert single_update(state, "a", 3) == 6
    assert single_update(state, "a", 1) == 7
    state.commit(2)
    assert backing.multi_get([("a",)]) == [TransactionalValue(2, 7)]


def test_non_transactional_map_counts_replays_twice(make_backing: MakeBacking) -> None:
    backing = make_backing("plain")
    state = NonTransactionalMap(backing)
    for _ in range(2):
        state.begin_commit(1)
        assert single_update(state, "a", 2) in (2, 4)
        state.commit(1)
    assert single_get(state, "a") == 4
    assert backing.multi_get([("a",)]) == [4]


def test_opaque_behind_is_refused(make_backing: MakeBacking) -> None:
    state = OpaqueMap(make_backing("behind"))
    state.begin_commit(5)
    single_update(state, "a", 1)
    state.commit(5)
    state.begin_commit(4)
    with pytest.raises(StaleTxidError, match=r"Current batch \(4\) is behind state's batch"):
        single_update(state, "a", 1)
    with pytest.raises(StaleTxidError, match="behind"):
        single_get(state, "a")


def test_multi_update_many_keys_and_duplicates(make_backing: MakeBacking) -> None:
    state = OpaqueMap(make_backing("many"))
    state.begin_commit(1)
    keys = [("a",), ("b",), ("a",)]
    new = state.multi_update(keys, [CombinerValueUpdater(Count(), n) for n in (1, 2, 5)])
    assert new == [1, 2, 5]  # duplicates each see the stored value; the last write wins
    state.commit(1)
    state.begin_commit(2)
    assert state.multi_get([("b",), ("a",), ("zz",)]) == [2, 5, None]


def test_multi_put_then_get_and_null_txid(make_backing: MakeBacking) -> None:
    state = OpaqueMap(make_backing("put"))
    state.begin_commit(None)
    state.multi_put([("x",), ("y",)], [10, 20])
    state.commit(None)
    state.begin_commit(1)
    assert state.multi_get([("x",), ("y",)]) == [10, 20]
    assert single_update(state, "x", 1) == 11
    state.commit(1)


def test_snapshottable_global_value(make_backing: MakeBacking) -> None:
    snap = SnapshottableMap(TransactionalMap(make_backing("global")))
    snap.begin_commit(1)
    assert snap.update(CombinerValueUpdater(Count(), 3)) == 3
    snap.commit(1)
    snap.begin_commit(1)
    assert snap.update(CombinerValueUpdater(Count(), 3)) == 3
    snap.commit(1)
    snap.begin_commit(2)
    assert snap.update(CombinerValueUpdater(Count(), 4)) == 7
    assert snap.get() == 7
    snap.commit(2)


def test_compound_keys(make_backing: MakeBacking) -> None:
    backing = make_backing("compound")
    backing.multi_put([("a", 1), ("a", 2)], [TransactionalValue(1, 10), TransactionalValue(1, 20)])
    assert backing.multi_get([("a", 2), ("a", 1), ("b", 1)]) == [
        TransactionalValue(1, 20),
        TransactionalValue(1, 10),
        None,
    ]


def test_seed_transactional_man_dog_apple_under_txid_3(make_backing: MakeBacking) -> None:
    """The seeds' transactional example: txid 3 skips dog (already 3), applies man."""
    backing = make_backing("seed_tx")
    backing.multi_put(
        [("man",), ("dog",), ("apple",)],
        [TransactionalValue(1, 3), TransactionalValue(3, 4), TransactionalValue(2, 10)],
    )
    state = TransactionalMap(backing)
    state.begin_commit(3)
    assert apply_combiner(state, Count(), [("man",), ("dog",)], [2, 1]) == [5, 4]
    state.commit(3)
    assert backing.multi_get([("man",), ("dog",), ("apple",)]) == [
        TransactionalValue(3, 5),
        TransactionalValue(3, 4),
        TransactionalValue(2, 10),
    ]


@pytest.mark.parametrize(
    ("txid", "expected"), [(3, OpaqueValue(3, 6, 4)), (2, OpaqueValue(2, 3, 1))]
)
def test_seed_opaque_partial_2_under_txid_3_then_2(
    make_backing: MakeBacking, txid: int, expected: OpaqueValue[int]
) -> None:
    """The seeds' opaque example: [2, 4, 1] + 2 under txid 3 is [3, 6, 4]; under txid 2 (a
    replay) it recomputes from prev: [2, 3, 1]."""
    backing = make_backing(f"seed_opaque_{txid}")
    backing.multi_put([("k",)], [OpaqueValue(2, 4, 1)])
    state = OpaqueMap(backing)
    state.begin_commit(txid)
    apply_combiner(state, Count(), [("k",)], [2])
    state.commit(txid)
    assert backing.multi_get([("k",)]) == [expected]

"""The one-statement merge (apply_partials) and the Python-combiner bulk path, on both stores."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from trident_assets.backends.backing_map import SqlBackingMap
from trident_assets.backends.duckdb_merge import (
    MergeResult,
    apply_partials,
    apply_partials_python,
)
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.memory import MemoryBackingMap
from trident_assets.core.aggregators import CombinerAggregator, Max, Min, Sum, apply_combiner
from trident_assets.core.maps import NonTransactionalMap, OpaqueMap, TransactionalMap
from trident_assets.core.values import StateType
from trident_assets.errors import (
    AggregationError,
    ConfigError,
    StaleTxidError,
    StateLayoutError,
    TridentError,
)

OPAQUE, TRANS, PLAIN = StateType.OPAQUE, StateType.TRANSACTIONAL, StateType.NON_TRANSACTIONAL


@pytest.fixture
def store(open_store: Any) -> Any:
    """A DuckDB store, then a PostgreSQL store (the same tests run on both)."""
    return open_store()


def batch(pairs: list[tuple[Any, Any]], value_type: pa.DataType | None = None) -> pa.Table:
    return pa.table(
        {
            "w": pa.array([k for k, _ in pairs]),
            "n": pa.array([v for _, v in pairs], type=value_type),
        }
    )


def apply(
    store: DuckDBStore, pairs, state_type, txid, combine="sum", table="t", **kw
) -> MergeResult:
    return apply_partials(
        store,
        table,
        batch(pairs),
        key_columns=["w"],
        value_column="n",
        combine=combine,
        state_type=state_type,
        txid=txid,
        **kw,
    )


def rows(store: DuckDBStore, table: str = "t") -> list[tuple]:
    """Every row of map view ``table``, ordered by all columns (NULLs last)."""
    found = store.fetch_rows(f'SELECT * FROM "{table}"')
    return sorted(found, key=lambda r: tuple((v is None, 0 if v is None else v) for v in r))


def new_values(result: MergeResult) -> dict:
    table = result.new_values
    return dict(
        zip(
            table.column(0).to_pylist(),
            table.column(table.num_columns - 1).to_pylist(),
            strict=True,
        )
    )


# -- opaque ---------------------------------------------------------------------------------------


def test_opaque_sum_roll_forward_and_replay_from_prev(store: DuckDBStore) -> None:
    r = apply(store, [("a", 1), ("b", 2), ("a", 3)], OPAQUE, 1)
    assert (r.keys_in, r.keys_updated, r.keys_skipped) == (2, 2, 0)
    assert rows(store) == [("a", 1, 4, None), ("b", 1, 2, None)]
    apply(store, [("a", 10), ("c", 5)], OPAQUE, 2)
    assert rows(store) == [("a", 2, 14, 4), ("b", 1, 2, None), ("c", 2, 5, None)]
    # replay of txid 2 with DIFFERENT partials: recomputed from prev, the failed attempt discarded
    r = apply(store, [("a", 100), ("c", 7), ("b", 1)], OPAQUE, 2, return_new_values=True)
    assert (r.keys_in, r.keys_updated, r.keys_skipped) == (3, 3, 0)
    assert rows(store) == [("a", 2, 104, 4), ("b", 2, 3, 2), ("c", 2, 7, None)]
    assert new_values(r) == {"a": 104, "b": 3, "c": 7}
    # replay again: still from prev
    apply(store, [("a", 1)], OPAQUE, 2)
    assert rows(store)[0] == ("a", 2, 5, 4)
    apply(store, [("a", 1)], OPAQUE, 3)
    assert rows(store)[0] == ("a", 3, 6, 5)


def test_opaque_min(store: DuckDBStore) -> None:
    apply(store, [("a", 5), ("a", 3), ("a", 4)], OPAQUE, 1, "min")
    assert rows(store) == [("a", 1, 3, None)]
    apply(store, [("a", 1)], OPAQUE, 2, "min")
    assert rows(store) == [("a", 2, 1, 3)]
    apply(store, [("a", 4)], OPAQUE, 2, "min")  # replay: min(prev=3, 4)
    assert rows(store) == [("a", 2, 3, 3)]


def test_opaque_max(store: DuckDBStore) -> None:
    apply(store, [("a", 1), ("a", 3)], OPAQUE, 1, "max")
    assert rows(store) == [("a", 1, 3, None)]
    apply(store, [("a", 9)], OPAQUE, 2, "max")
    assert rows(store) == [("a", 2, 9, 3)]
    apply(store, [("a", 2)], OPAQUE, 2, "max")  # replay: max(prev=3, 2)
    assert rows(store) == [("a", 2, 3, 3)]


def test_opaque_behind_raises_and_changes_nothing(store: DuckDBStore) -> None:
    apply(store, [("a", 1), ("b", 1)], OPAQUE, 5)
    before = rows(store)
    with pytest.raises(
        StaleTxidError, match=r"Current batch \(4\) is behind state's batch \(5\) at key \(a\)"
    ):
        apply(store, [("a", 1), ("new", 1)], OPAQUE, 4)
    assert rows(store) == before
    assert not store.in_transaction


def test_behind_inside_open_transaction_rolls_it_back(store: DuckDBStore) -> None:
    apply(store, [("a", 1)], OPAQUE, 5)

    def batch_4() -> None:
        with store.transaction() as tx:
            tx.mark_committed("topo", 4)
            apply(store, [("a", 1)], OPAQUE, 4)

    with pytest.raises(StaleTxidError):
        batch_4()
    assert store.last_committed("topo") is None
    assert rows(store) == [("a", 5, 1, None)]


def test_opaque_null_txid_rolls_forward(store: DuckDBStore) -> None:
    apply(store, [("a", 1)], OPAQUE, 3)
    apply(store, [("a", 2)], OPAQUE, None)
    assert rows(store) == [("a", None, 3, 1)]
    apply(store, [("a", 2)], OPAQUE, None)
    assert rows(store) == [("a", None, 5, 3)]
    apply(store, [("a", 10)], OPAQUE, 1)  # a stored NULL txid is older than every txid
    assert rows(store) == [("a", 1, 15, 5)]


# -- transactional and non-transactional ------------------------------------------------------


@pytest.mark.parametrize(
    ("combine", "expected_1", "expected_2"),
    [("sum", 3, 13), ("min", 1, 1), ("max", 2, 10)],
)
def test_transactional_apply_and_replay_skip(
    store: DuckDBStore, combine: str, expected_1: int, expected_2: int
) -> None:
    r = apply(store, [("a", 1), ("a", 2)], TRANS, 1, combine)
    assert (r.keys_in, r.keys_updated, r.keys_skipped) == (1, 1, 0)
    assert rows(store) == [("a", 1, expected_1, None)]
    r = apply(store, [("a", 50), ("b", 7)], TRANS, 1, combine, return_new_values=True)
    assert (r.keys_in, r.keys_updated, r.keys_skipped) == (2, 1, 1)
    assert rows(store) == [("a", 1, expected_1, None), ("b", 1, 7, None)]
    assert new_values(r) == {"a": expected_1, "b": 7}
    apply(store, [("a", 10)], TRANS, 2, combine)
    assert rows(store)[0] == ("a", 2, expected_2, None)


def test_transactional_null_txid_always_applies(store: DuckDBStore) -> None:
    apply(store, [("a", 1)], TRANS, None)
    r = apply(store, [("a", 1)], TRANS, None)
    assert (r.keys_updated, r.keys_skipped) == (1, 0)
    assert rows(store) == [("a", None, 2, None)]
    apply(store, [("a", 1)], TRANS, 1)
    r = apply(store, [("a", 1)], TRANS, 1)
    assert r.keys_skipped == 1
    assert rows(store) == [("a", 1, 3, None)]


def test_transactional_older_txid_applies_and_regresses(store: DuckDBStore) -> None:
    apply(store, [("a", 1)], TRANS, 5)
    apply(store, [("a", 1)], TRANS, 3)
    assert rows(store) == [("a", 3, 2, None)]


def test_non_transactional_replay_counts_twice(store: DuckDBStore) -> None:
    r1 = apply(store, [("a", 1), ("a", 1)], PLAIN, 1)
    r2 = apply(store, [("a", 1), ("a", 1)], PLAIN, 1, return_new_values=True)
    assert (
        (r2.keys_in, r2.keys_updated, r2.keys_skipped)
        == (1, 1, 0)
        == (r1.keys_in, r1.keys_updated, r1.keys_skipped)
    )
    assert rows(store) == [("a", None, 4, None)]
    assert new_values(r2) == {"a": 4}


# -- batches, types and layout --------------------------------------------------------------------


def test_compound_keys_and_extra_columns(store: DuckDBStore) -> None:
    b = pa.table(
        {"city": ["x", "x", "y"], "day": [1, 1, 2], "n": [1.5, 2.0, 4.0], "junk": [0, 0, 0]}
    )
    r = apply_partials(
        store,
        "c",
        b,
        key_columns=["city", "day"],
        value_column="n",
        combine="sum",
        state_type=OPAQUE,
        txid=1,
        return_new_values=True,
    )
    assert r.keys_in == 2
    assert rows(store, "c") == [("x", 1, 1, 3.5, None), ("y", 2, 1, 4.0, None)]
    assert sorted(r.new_values.to_pylist(), key=lambda d: d["city"]) == [
        {"city": "x", "day": 1, "n": 3.5},
        {"city": "y", "day": 2, "n": 4.0},
    ]
    assert store.layout("c").key_types == ("VARCHAR", "BIGINT")
    assert store.layout("c").value_type == "DOUBLE"


def test_batch_in_any_order_with_compound_and_dictionary_keys(store: DuckDBStore) -> None:
    """Distinct keys in any order (PostgreSQL sorts them, skips GROUP BY); a repeated
    compound key is combined, whichever of its columns repeats."""
    city = pa.array(["y", "x", "x", "y"]).dictionary_encode()
    repeated = {"city": ["x", "y", "x", "x"], "day": [2, 2, 2, 1], "n": [10, 20, 30, 5]}
    batches = [
        (pa.table({"city": city, "day": [2, 2, 1, 1], "n": [1, 2, 3, 4]}), "sum"),
        (pa.table(repeated), "max"),
    ]
    results = [
        apply_partials(
            store,
            "c",
            b,
            key_columns=["city", "day"],
            value_column="n",
            combine=combine,
            state_type=TRANS,
            txid=txid,
            return_new_values=True,
        )
        for txid, (b, combine) in enumerate(batches, start=1)
    ]
    assert [(r.keys_in, r.keys_updated, r.keys_skipped) for r in results] == [(4, 4, 0), (3, 3, 0)]
    assert sorted(results[1].new_values.to_pylist(), key=lambda d: (d["city"], d["day"])) == [
        {"city": "x", "day": 1, "n": 5},
        {"city": "x", "day": 2, "n": 30},
        {"city": "y", "day": 2, "n": 20},
    ]
    assert rows(store, "c") == [
        ("x", 1, 2, 5, None),
        ("x", 2, 2, 30, None),
        ("y", 1, 1, 4, None),
        ("y", 2, 2, 20, None),
    ]


def test_float_keys_equal_in_sql_are_one_key(store: DuckDBStore) -> None:
    """0.0 and -0.0 differ bytewise but are one key in SQL: the batch combines them."""
    r = apply(store, [(0.0, 1), (-0.0, 2), (1.5, 4)], OPAQUE, 1)
    assert (r.keys_in, r.keys_updated) == (2, 2)
    assert [row[1:] for row in rows(store)] == [(1, 3, None), (1, 4, None)]


def test_decimal_and_string_values(store: DuckDBStore) -> None:
    b = pa.table(
        {"w": ["a", "a"], "n": pa.array([Decimal("1.25"), Decimal("2.50")], pa.decimal128(10, 2))}
    )
    apply_partials(
        store,
        "dec",
        b,
        key_columns=["w"],
        value_column="n",
        combine="sum",
        state_type=TRANS,
        txid=1,
    )
    assert rows(store, "dec") == [("a", 1, Decimal("3.75"), None)]
    assert store.layout("dec").value_type == "DECIMAL(38,2)"
    apply(store, [("k", "pear"), ("k", "apple")], OPAQUE, 1, "min", table="s")
    apply(store, [("k", "banana")], OPAQUE, 2, "max", table="s")
    assert rows(store, "s") == [("k", 2, "banana", "apple")]


def test_int_batch_into_double_state_and_incompatible_types(store: DuckDBStore) -> None:
    apply_partials(
        store,
        "d",
        batch([("a", 1.5)]),
        key_columns=["w"],
        value_column="n",
        combine="sum",
        state_type=OPAQUE,
        txid=1,
    )
    apply(store, [("a", 2)], OPAQUE, 2, table="d")
    assert rows(store, "d") == [("a", 2, 3.5, 1.5)]
    apply(store, [("a", 2)], OPAQUE, 1, table="i")
    with pytest.raises(StateLayoutError, match="its values are BIGINT, the batch's DOUBLE"):
        apply_partials(
            store,
            "i",
            batch([("a", 1.5)]),
            key_columns=["w"],
            value_column="n",
            combine="sum",
            state_type=OPAQUE,
            txid=2,
        )
    with pytest.raises(
        StateLayoutError, match="it holds opaque values, the batch is transactional"
    ):
        apply(store, [("a", 1)], TRANS, 2, table="i")
    b = pa.table({"word": ["a"], "n": [1]})
    with pytest.raises(
        StateLayoutError, match=r"its key columns are \['w'\], the batch's \['word'\]"
    ):
        apply_partials(
            store,
            "i",
            b,
            key_columns=["word"],
            value_column="n",
            combine="sum",
            state_type=OPAQUE,
            txid=2,
        )
    assert rows(store, "i") == [("a", 1, 2, None)]


def test_null_key_refused_before_any_write(store: DuckDBStore) -> None:
    b = pa.table({"w": ["a", None], "n": [1, 2]})
    with pytest.raises(StateLayoutError, match="key column 'w' has 1 null value"):
        apply_partials(
            store,
            "t",
            b,
            key_columns=["w"],
            value_column="n",
            combine="sum",
            state_type=OPAQUE,
            txid=1,
        )
    with pytest.raises(StateLayoutError, match="key column 'w' has 1 null value"):
        apply_partials_python(
            store, "t", b, key_columns=["w"], value_column="n", agg=Sum(), state_type=OPAQUE, txid=1
        )
    assert store.tables() == []


def test_sum_of_null_value_is_refused(store: DuckDBStore) -> None:
    with pytest.raises(AggregationError, match="Sum got a null value in 'n'"):
        apply(store, [("a", None), ("a", 1)], OPAQUE, 1)
    assert store.tables() == []


def test_min_skips_null_partials(store: DuckDBStore) -> None:
    apply(store, [("a", 5)], OPAQUE, 1, "min")
    apply_partials(
        store,
        "t",
        batch([("a", None), ("b", None)], pa.int64()),
        key_columns=["w"],
        value_column="n",
        combine="min",
        state_type=OPAQUE,
        txid=2,
    )
    assert rows(store) == [("a", 2, 5, 5), ("b", 2, None, None)]


def test_bigint_overflow_is_a_layout_error(store: DuckDBStore) -> None:
    apply(store, [("a", 2**62)], PLAIN, None)
    with pytest.raises(StateLayoutError, match="does not fit BIGINT"):
        apply(store, [("a", 2**62)], PLAIN, None)
    assert rows(store) == [("a", None, 2**62, None)]


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"combine": "avg"}, ConfigError, "combine must be one of sum, min, max, got 'avg'"),
        ({"txid": -1}, ConfigError, "txid must be a non-negative 64-bit integer or None"),
        ({"txid": True}, ConfigError, "txid must be"),
        ({"state_type": "opaque"}, ConfigError, "state_type must be a StateType"),
        ({"key_columns": ["nope"]}, ConfigError, r"batch has no column\(s\) \['nope'\]"),
        ({"key_columns": []}, ConfigError, "at least one column"),
        ({"value_column": "w"}, ConfigError, "is also a key column"),
        ({"key_columns": ['w"']}, ConfigError, "invalid key column name"),
    ],
)
def test_bad_arguments(store: DuckDBStore, kwargs: dict, error: type, fragment: str) -> None:
    args = {
        "key_columns": ["w"],
        "value_column": "n",
        "combine": "sum",
        "state_type": OPAQUE,
        "txid": 1,
    }
    args.update(kwargs)
    with pytest.raises(error, match=fragment):
        apply_partials(store, "t", batch([("a", 1)]), **args)
    assert store.tables() == []


def test_sum_of_strings_is_refused(store: DuckDBStore) -> None:
    with pytest.raises(ConfigError, match="combine='sum' needs a numeric value column"):
        apply(store, [("a", "x")], OPAQUE, 1)


def test_empty_batch(store: DuckDBStore) -> None:
    empty = pa.table({"w": pa.array([], pa.string()), "n": pa.array([], pa.int64())})
    r = apply_partials(
        store,
        "t",
        empty,
        key_columns=["w"],
        value_column="n",
        combine="sum",
        state_type=TRANS,
        txid=1,
        return_new_values=True,
    )
    assert (r.keys_in, r.keys_updated, r.keys_skipped, r.new_values.num_rows) == (0, 0, 0, 0)


def test_runs_inside_open_transaction(store: DuckDBStore) -> None:
    seen: list = []

    def batch_then_fail() -> None:
        with store.transaction():
            apply(store, [("a", 1)], OPAQUE, 1)
            seen.extend(rows(store))
            raise RuntimeError("later failure")

    with pytest.raises(RuntimeError, match="later failure"):
        batch_then_fail()
    assert seen == [("a", 1, 1, None)]
    assert store.tables() == []


def test_fast_path_tables_read_back_through_backing_map(store: DuckDBStore) -> None:
    apply(store, [("a", 1)], OPAQUE, 1)
    apply(store, [("a", 2)], OPAQUE, 2)
    m = OpaqueMap(store.map("t"))
    m.begin_commit(2)
    assert m.multi_get([("a",)]) == [1]  # txid 2 is being replayed: reads prev
    m.begin_commit(3)
    assert m.multi_get([("a",)]) == [3]


# -- the Python combiner path -------------------------------------------------------------------


class Product(CombinerAggregator[int]):
    def init(self, values: tuple) -> int:
        return values[0]

    def combine(self, a: int, b: int) -> int:
        return a * b

    def zero(self) -> int:
        return 1


def test_python_path_one_read_one_write(
    store: DuckDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_get, real_put = SqlBackingMap.multi_get, SqlBackingMap.multi_put

    def spy_get(self, keys):
        calls.append(f"get{len(keys)}")
        return real_get(self, keys)

    def spy_put(self, keys, values):
        calls.append(f"put{len(keys)}")
        return real_put(self, keys, values)

    monkeypatch.setattr(SqlBackingMap, "multi_get", spy_get)
    monkeypatch.setattr(SqlBackingMap, "multi_put", spy_put)
    b = batch([("a", 2), ("b", 3), ("a", 5)])
    r = apply_partials_python(
        store,
        "p",
        b,
        key_columns=["w"],
        value_column="n",
        agg=Product(),
        state_type=OPAQUE,
        txid=1,
        return_new_values=True,
    )
    assert calls == ["get2", "put2"]
    assert (r.keys_in, r.keys_updated, r.keys_skipped) == (2, 2, 0)
    assert r.new_values.to_pylist() == [{"w": "a", "n": 10}, {"w": "b", "n": 3}]
    apply_partials_python(
        store,
        "p",
        batch([("a", 3)]),
        key_columns=["w"],
        value_column="n",
        agg=Product(),
        state_type=OPAQUE,
        txid=2,
    )
    apply_partials_python(
        store,
        "p",
        batch([("a", 7)]),
        key_columns=["w"],
        value_column="n",
        agg=Product(),
        state_type=OPAQUE,
        txid=2,
    )
    assert rows(store, "p") == [("a", 2, 70, 10), ("b", 1, 3, None)]


def test_python_path_transactional_skip_and_behind(store: DuckDBStore) -> None:
    kw = {"key_columns": ["w"], "value_column": "n", "agg": Sum()}
    apply_partials_python(store, "p", batch([("a", 1)]), state_type=TRANS, txid=1, **kw)
    r = apply_partials_python(
        store,
        "p",
        batch([("a", 1), ("b", 2)]),
        state_type=TRANS,
        txid=1,
        return_new_values=True,
        **kw,
    )
    assert (r.keys_in, r.keys_updated, r.keys_skipped) == (2, 1, 1)
    assert r.new_values.to_pylist() == [{"w": "a", "n": 1}, {"w": "b", "n": 2}]
    apply_partials_python(store, "o", batch([("a", 1)]), state_type=OPAQUE, txid=4, **kw)
    with pytest.raises(StaleTxidError, match="behind"):
        apply_partials_python(store, "o", batch([("a", 1)]), state_type=OPAQUE, txid=3, **kw)
    assert rows(store, "o") == [("a", 4, 1, None)]


# -- agreement with the pure-Python wrappers ------------------------------------------------------

WRAPPERS = {OPAQUE: OpaqueMap, TRANS: TransactionalMap, PLAIN: NonTransactionalMap}
AGGS = {"sum": Sum(), "min": Min(), "max": Max()}


def _memory_apply(
    backing: MemoryBackingMap, pairs, state_type, txid, agg: CombinerAggregator
) -> dict:
    combined: dict = {}
    for k, v in pairs:
        combined[(k,)] = agg.combine(combined[(k,)], v) if (k,) in combined else v
    state = WRAPPERS[state_type](backing)
    state.begin_commit(txid)
    keys = list(combined)
    new = apply_combiner(state, agg, keys, [combined[k] for k in keys])
    state.commit(txid)
    return {k[0]: v for k, v in zip(keys, new, strict=True)}


def _memory_rows(backing: MemoryBackingMap, state_type: StateType) -> list[tuple]:
    out = []
    for (k,), v in backing.items():
        if state_type is OPAQUE:
            out.append((k, v.curr_txid, v.curr, v.prev))
        elif state_type is TRANS:
            out.append((k, v.txid, v.val, None))
        else:
            out.append((k, None, v, None))
    return sorted(out)


@pytest.mark.parametrize("state_type", [OPAQUE, TRANS, PLAIN])
@pytest.mark.parametrize("combine", ["sum", "min", "max"])
def test_fast_path_agrees_with_python_wrappers(
    store: DuckDBStore, state_type: StateType, combine: str
) -> None:
    rng = random.Random(f"{state_type.value}-{combine}")
    memory = MemoryBackingMap()
    agg = AGGS[combine]
    txid = 0
    for step in range(25):
        if step == 0 or rng.random() < 0.7:
            txid += 1  # a new batch; otherwise a replay of the last txid (different partials)
        size = rng.randrange(1 if step == 0 else 0, 40)
        pairs = [(f"k{rng.randrange(30)}", rng.randrange(-50, 50)) for _ in range(size)]
        b = pa.table(
            {
                "w": pa.array([k for k, _ in pairs], pa.string()),
                "n": pa.array([v for _, v in pairs], pa.int64()),
            }
        )
        fast = apply_partials(
            store,
            "fast",
            b,
            key_columns=["w"],
            value_column="n",
            combine=combine,
            state_type=state_type,
            txid=txid,
            return_new_values=True,
        )
        slow = apply_partials_python(
            store,
            "slow",
            b,
            key_columns=["w"],
            value_column="n",
            agg=agg,
            state_type=state_type,
            txid=txid,
            return_new_values=True,
        )
        expected_new = _memory_apply(memory, pairs, state_type, txid, agg)
        assert new_values(fast) == expected_new == new_values(slow), f"step {step} txid {txid}"
        assert (fast.keys_in, fast.keys_updated, fast.keys_skipped) == (
            slow.keys_in,
            slow.keys_updated,
            slow.keys_skipped,
        )
        expected_rows = _memory_rows(memory, state_type)
        assert rows(store, "fast") == expected_rows == rows(store, "slow"), f"step {step}"


def test_store_transaction_error_is_trident_error() -> None:
    assert issubclass(StaleTxidError, TridentError)

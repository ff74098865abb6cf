"""single_join: declaration, the bulk join (DuckDB and PostgreSQL) against the core, Spark, soak."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from trident_assets.backends import join_state
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.join_batch_columns import combine_sides
from trident_assets.backends.join_pending_table import pending_count
from trident_assets.backends.memory import MemoryBackingMap
from trident_assets.core.join import (
    ARRIVED_TS,
    ARRIVED_TXID,
    DuplicateJoinSideError,
    JoinInputError,
    SingleJoin,
    apply_join_batch,
    expiry_cutoff,
)
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError, FieldNotFoundError, StaleTxidError, StateLayoutError
from trident_assets.examples.gender_age import build_gender_age, produce_seed, seed_rows
from trident_assets.log.store import PartitionedLog
from trident_assets.names import JOIN_META_TABLE
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.topology import TridentTopology

GENDER_AGE = [("gender", ["id", "gender"]), ("age", ["id", "age"])]


def apply_join_sides(
    store: Any,
    spec: SingleJoin,
    table: str,
    txid: int,
    rows_by_side: Mapping[str, pa.Table],
    *,
    batch_ts: float | None = None,
) -> Any:
    """Apply batch ``txid`` given one Arrow table per side."""
    batch = combine_sides(spec, rows_by_side)
    return join_state.apply_join_batch(store, spec, table, txid, batch, batch_ts=batch_ts)


TYPES = {"id": pa.int64(), "gender": pa.string(), "age": pa.int64()}
Rows = Mapping[str, Sequence[tuple[Any, ...]]]


def seed_spec(**kw: Any) -> SingleJoin:
    return SingleJoin(GENDER_AGE, ["id", "gender", "age"], **kw)


def arrow_sides(spec: SingleJoin, rows: Rows, types: Mapping[str, pa.DataType]) -> dict[str, Any]:
    """One Arrow table per side (empty for a side without rows)."""
    out = {}
    for side, fields in spec.inputs:
        side_rows = rows.get(side, [])
        out[side] = pa.table(
            {f: pa.array([r[i] for r in side_rows], types[f]) for i, f in enumerate(fields)}
        )
    return out


class Bulk:
    """The DuckDB bulk join over one pending table, fed Python rows."""

    def __init__(self, store: DuckDBStore, spec: SingleJoin, types: Mapping[str, Any] = TYPES):
        self.store, self.spec, self.types = store, spec, types

    def run(self, txid: int, rows: Rows, batch_ts: float | None = None) -> Any:
        sides = arrow_sides(self.spec, rows, self.types)
        return apply_join_sides(self.store, self.spec, "pending", txid, sides, batch_ts=batch_ts)

    def pending(self) -> dict[Any, Any]:
        return read_pending(self.store, self.spec, "pending")


def read_pending(store: Any, spec: SingleJoin, table: str) -> dict[Any, dict[str, Any]]:
    """The pending entries in the core's layout (key -> entry dict), read whole.

    A side's row is a struct (DuckDB) or its JSON text (PostgreSQL).
    """
    if not store.has_table(table):
        return {}
    out: dict[Any, dict[str, Any]] = {}
    for row in store.fetch_arrow(f'SELECT * FROM "{table}"').to_pylist():
        key = tuple(row[f"key_{f}"] for f in spec.join_fields or ())
        entry: dict[str, Any] = {ARRIVED_TXID: row[ARRIVED_TXID], ARRIVED_TS: row[ARRIVED_TS]}
        for side, fields in spec.inputs:
            value = row[f"side_{side}"]
            if isinstance(value, str):
                value = json.loads(value)
            if value is not None:
                entry[side] = [value[f] for f in fields]
        out[key] = entry
    return out


def expired_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return [
        (r["id"], r["side"], r["arrived_txid"], r["reason"], json.loads(r["values_json"]))
        for r in table.to_pylist()
    ]


@pytest.fixture
def store(open_store: Any) -> Any:
    """A DuckDB store, then a PostgreSQL store (the pending-halves tests run on both)."""
    return open_store()


# ----------------------------------------------------------------------------- declaration


def _json_spout(topic: str, fields: dict[str, str]) -> LogSpout:
    return LogSpout(topic, JsonScheme(fields))


def _streams(topo: TridentTopology) -> tuple[Any, Any]:
    g = topo.new_stream("gender", _json_spout("genders", {"id": "bigint", "gender": "string"}))
    a = topo.new_stream("age", _json_spout("ages", {"id": "bigint", "age": "int"}))
    return g, a


def test_declaration_registers_the_state_the_joined_stream_and_the_expired_output() -> None:
    topo = build_gender_age(timeout_batches=4)
    state = topo.states["join"]
    assert state.spec.state_type is StateType.OPAQUE
    assert state.table == "gender_age__join"
    assert state.group == ("id",)
    assert topo.outputs["people"].fields == ("id", "gender", "age")
    assert topo.outputs["people"].node.kind == "new_values"
    assert topo.outputs["join_expired"].fields == (
        "id",
        "side",
        "arrived_txid",
        "arrived_ts",
        "reason",
        "values_json",
    )
    spec = state.node.args["single_join"]
    assert spec.sides == ("gender", "age")
    assert spec.join_fields == ("id",)
    assert spec.locations == {"id": ("gender", 0), "gender": ("gender", 1), "age": ("age", 1)}


def test_joined_stream_is_usable_downstream() -> None:
    topo = TridentTopology("t")
    g, a = _streams(topo)
    joined = topo.single_join("j", [g, a], out_fields=["gender", "age"], timeout_batches=2)
    assert joined.fields == ("gender", "age")
    assert joined.project(["age"]).as_output("ages_only").fields == ("age",)


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"out_fields": ["id", "height"]}, ConfigError, "out field 'height' is not a field"),
        ({"out_fields": ["id"], "timeout_s": 5.0}, ConfigError, "no event_time"),
        ({"out_fields": ["id"], "event_time": "ts"}, FieldNotFoundError, "non-existent field"),
        ({"out_fields": ["id"], "sides": ["x", "x"]}, ConfigError, "repeat"),
        ({"out_fields": ["id"], "sides": ["x"]}, ConfigError, "2 streams but 1 side"),
        ({"out_fields": ["id"], "on_duplicate": "first"}, ConfigError, "on_duplicate"),
        ({"out_fields": ["id"], "timeout_batches": 0}, ConfigError, "timeout_batches"),
        ({"out_fields": ["id"], "join_fields": ["age"]}, ConfigError, "not fields of side"),
        ({"out_fields": ["id"], "num_buckets": 1}, ConfigError, "num_buckets must be >= 2"),
    ],
)
def test_invalid_declarations_fail_before_anything_runs(
    kw: dict[str, Any], error: type[Exception], match: str
) -> None:
    topo = TridentTopology("t")
    g, a = _streams(topo)
    with pytest.raises(error, match=match):
        topo.single_join("j", [g, a], **kw)
    assert topo.states == {}
    assert topo.outputs == {}


def test_more_declaration_errors() -> None:
    topo = TridentTopology("t")
    g, a = _streams(topo)
    with pytest.raises(ConfigError, match="at least two Streams"):
        topo.single_join("j", [g], out_fields=["id"])
    other = TridentTopology("u")
    g2, _ = _streams(other)
    with pytest.raises(ConfigError, match="belongs to topology 'u'"):
        topo.single_join("j", [g, g2], out_fields=["id"])
    s = topo.new_stream("s", _json_spout("s", {"side": "bigint", "v": "string"}))
    s2 = topo.new_stream("s2", _json_spout("s2", {"side": "bigint", "w": "string"}))
    with pytest.raises(ConfigError, match=r"clash with the expired output's fields"):
        topo.single_join("k", [s, s2], out_fields=["v", "w"])
    g.as_output("j_expired")
    with pytest.raises(ConfigError, match="already has an output 'j_expired'"):
        topo.single_join("j", [g, a], out_fields=["id"])
    topo.single_join("j2", [g, a], out_fields=["id"])
    with pytest.raises(ConfigError, match="already has a state 'j2'"):
        topo.single_join("j2", [g, a], out_fields=["id"], sides=["p", "q"])


# ---------------------------------------------------------------- the bulk path, by example


def test_within_one_batch_all_ten_ids_join_in_completion_order(store: DuckDBStore) -> None:
    genders, ages = seed_rows()
    bulk = Bulk(store, seed_spec(timeout_batches=3))
    res = bulk.run(
        1,
        {
            "gender": [(r["id"], r["gender"]) for r in genders],
            "age": [(r["id"], r["age"]) for r in ages],
        },
    )
    # genders create entries, then the ages (9..0) complete them in their order
    assert res.joined.to_pylist() == [
        {"id": i, "gender": "male" if i % 2 == 0 else "female", "age": i + 20}
        for i in range(9, -1, -1)
    ]
    assert res.joined.schema == pa.schema(
        [("id", pa.int64()), ("gender", pa.string()), ("age", pa.int64())]
    )
    assert (res.pending_after, res.keys_in, res.expired.num_rows) == (0, 10, 0)
    assert bulk.pending() == {}


def test_across_batches_halves_wait_in_state(store: DuckDBStore) -> None:
    bulk = Bulk(store, seed_spec(timeout_batches=30))
    r1 = bulk.run(1, {"gender": [(i, "male" if i % 2 == 0 else "female") for i in range(10)]})
    assert (r1.joined.num_rows, r1.pending_after) == (0, 10)
    assert bulk.pending()[(3,)] == {"gender": [3, "female"], "arrived_txid": 1, "arrived_ts": None}
    r2 = bulk.run(2, {"age": [(i, i + 20) for i in range(9, 4, -1)]})
    assert [r["id"] for r in r2.joined.to_pylist()] == [9, 8, 7, 6, 5]
    r3 = bulk.run(3, {"age": [(i, i + 20) for i in range(4, -1, -1)]})
    assert r3.joined.to_pylist()[-1] == {"id": 0, "gender": "male", "age": 20}
    assert (r2.pending_after, r3.pending_after) == (5, 0)
    assert store.fetch_rows(
        f"SELECT last_txid, pending FROM {JOIN_META_TABLE} WHERE table_name = 'pending'"
    ) == [(3, 0)]


def test_expiry_at_the_exact_batch_boundary(store: DuckDBStore) -> None:
    # T = 4, B = 3: rotations every 2 batches; txids 2 and 3 both expire at txid 8
    spec = seed_spec(timeout_batches=4)
    assert spec.batch_expiry is not None
    assert (spec.batch_expiry.expires_at(2), spec.batch_expiry.expires_at(3)) == (8, 8)
    bulk = Bulk(store, spec)
    bulk.run(2, {"gender": [(1, "a")]})
    bulk.run(3, {"gender": [(2, "b"), (3, "c")]})
    for txid in (4, 5, 6):
        assert bulk.run(txid, {}).expired.num_rows == 0
    # txid 7: id 3's partner arrives exactly T = 4 batches after it: still joins
    assert bulk.run(7, {"age": [(3, 30)]}).joined.to_pylist() == [
        {"id": 3, "gender": "c", "age": 30}
    ]
    # txid 8: ids 1 (age 6 = T*B/(B-1)) and 2 (age 5) expire; 2's late partner starts anew
    res = bulk.run(8, {"age": [(2, 40)]})
    assert res.joined.num_rows == 0
    assert expired_rows(res.expired) == [
        (1, "gender", 2, "timeout_batches", {"id": 1, "gender": "a"}),
        (2, "gender", 3, "timeout_batches", {"id": 2, "gender": "b"}),
    ]
    assert bulk.pending() == {(2,): {"age": [2, 40], "arrived_txid": 8, "arrived_ts": None}}
    for txid in range(9, 14):  # reported once; the new entry expires at rotation 7 = txid 14
        assert bulk.run(txid, {}).expired.num_rows == 0
    assert expired_rows(bulk.run(14, {}).expired) == [
        (2, "age", 8, "timeout_batches", {"id": 2, "age": 40})
    ]


def test_expiry_at_the_exact_event_time_boundary(store: DuckDBStore) -> None:
    # timeout 3 s, B = 4: rotations every 1 s of event time
    bulk = Bulk(store, seed_spec(timeout_s=3.0, num_buckets=4))
    bulk.run(1, {"gender": [(1, "m")]}, batch_ts=0.5)
    bulk.run(2, {"gender": [(2, "f")]}, batch_ts=1.0)
    assert bulk.run(3, {}, batch_ts=3.999).expired.num_rows == 0
    res = bulk.run(4, {"age": [(2, 20)]}, batch_ts=4.0)  # id 1: age 3.5 > T; id 2: age 3.0
    assert res.expired.to_pylist() == [
        {
            "id": 1,
            "side": "gender",
            "arrived_txid": 1,
            "arrived_ts": 0.5,
            "reason": "timeout_s",
            "values_json": '{"id":1,"gender":"m"}',
        }
    ]
    assert res.joined.to_pylist() == [{"id": 2, "gender": "f", "age": 20}]
    assert res.pending_after == 0


def test_duplicate_side_raises_by_default_and_writes_nothing(store: DuckDBStore) -> None:
    bulk = Bulk(store, seed_spec(timeout_batches=10))
    bulk.run(1, {"gender": [(5, "male")]})
    before = (bulk.pending(), store.fetch_rows(f"SELECT * FROM {JOIN_META_TABLE}"))
    with pytest.raises(DuplicateJoinSideError) as err:
        bulk.run(2, {"age": [(1, 10)], "gender": [(5, "female")]})
    assert (err.value.key, err.value.side) == ((5,), "gender")
    assert "join key (5,) received side 'gender' twice" in str(err.value)
    assert "pending since txid 1" in str(err.value)
    assert (bulk.pending(), store.fetch_rows(f"SELECT * FROM {JOIN_META_TABLE}")) == before
    with pytest.raises(DuplicateJoinSideError, match=r"join key \(6,\) received side 'age'"):
        bulk.run(2, {"age": [(6, 1), (6, 2)]})  # twice within one batch
    # once a join completes, the same side may come again: age row 1 completes id 5 and
    # row 2 starts a new entry (a third would be a duplicate again)
    res = bulk.run(2, {"age": [(5, 50), (5, 51)]})
    assert res.joined.to_pylist() == [{"id": 5, "gender": "male", "age": 50}]
    assert bulk.pending() == {(5,): {"age": [5, 51], "arrived_txid": 2, "arrived_ts": None}}
    with pytest.raises(DuplicateJoinSideError, match=r"\(7,\) received side 'age'"):
        bulk.run(3, {"gender": [(7, "m")], "age": [(7, 1), (7, 2), (7, 3)]})


def test_keep_latest_replaces_the_side_and_keeps_the_entry_age(store: DuckDBStore) -> None:
    bulk = Bulk(store, seed_spec(timeout_batches=4, on_duplicate="keep_latest"))
    bulk.run(1, {"gender": [(1, "male")]})
    bulk.run(2, {"gender": [(1, "female"), (1, "other")]})
    assert bulk.pending() == {(1,): {"gender": [1, "other"], "arrived_txid": 1, "arrived_ts": None}}
    assert bulk.run(3, {"age": [(1, 30)]}).joined.to_pylist() == [
        {"id": 1, "gender": "other", "age": 30}
    ]
    bulk.run(5, {"gender": [(3, "m")]})
    bulk.run(7, {"gender": [(3, "f")]})
    assert bulk.run(9, {}).expired.num_rows == 0
    assert expired_rows(bulk.run(10, {}).expired) == [
        (3, "gender", 5, "timeout_batches", {"id": 3, "gender": "f"})
    ]


def test_three_inputs_with_a_two_field_key(store: DuckDBStore) -> None:
    spec = SingleJoin(
        [
            ("user", ["id", "region", "name"]),
            ("order", ["region", "id", "amount"]),
            ("click", ["id", "page", "region"]),
        ],
        ["region", "id", "name", "amount", "page"],
        timeout_batches=2,
        num_buckets=2,
    )
    types = {
        "id": pa.int64(),
        "region": pa.string(),
        "name": pa.string(),
        "amount": pa.float64(),
        "page": pa.string(),
    }
    bulk = Bulk(store, spec, types)
    bulk.run(1, {"user": [(1, "eu", "ann"), (2, "us", "bob"), (3, "eu", "cy")]})
    r2 = bulk.run(2, {"order": [("eu", 1, 9.5), ("us", 1, 1.0)], "click": [(2, "/x", "us")]})
    assert (r2.joined.num_rows, r2.pending_after) == (0, 4)
    r3 = bulk.run(3, {"click": [(1, "/a", "eu"), (1, "/b", "us")], "order": [("us", 2, 3.0)]})
    assert [tuple(r.values()) for r in r3.joined.to_pylist()] == [
        ("us", 2, "bob", 3.0, "/x"),
        ("eu", 1, "ann", 9.5, "/a"),
    ]
    assert r3.pending_after == 2
    r4 = bulk.run(4, {})
    assert [(r["id"], r["region"], r["side"]) for r in r4.expired.to_pylist()] == [
        (3, "eu", "user")
    ]
    r6 = bulk.run(6, {})
    assert [
        (r["id"], r["region"], r["side"], r["arrived_txid"]) for r in r6.expired.to_pylist()
    ] == [
        (1, "us", "order", 2),
        (1, "us", "click", 2),
    ]
    assert r6.pending_after == 0


def test_replayed_or_older_txid_is_refused_and_changes_nothing(store: DuckDBStore) -> None:
    bulk = Bulk(store, seed_spec(timeout_batches=5))
    bulk.run(1, {"gender": [(1, "m")]})
    bulk.run(2, {"age": [(1, 7)], "gender": [(2, "f")]})
    before = bulk.pending()
    with pytest.raises(StaleTxidError, match="join batch 2 is not after the last batch"):
        bulk.run(2, {"age": [(1, 7)]})
    with pytest.raises(StaleTxidError):
        bulk.run(1, {})
    assert bulk.pending() == before


def test_bad_input_and_foreign_tables_are_refused(store: DuckDBStore) -> None:
    spec = seed_spec()
    with pytest.raises(JoinInputError, match="missing: \\['age'\\]"):
        apply_join_sides(store, spec, "p", 1, {"gender": pa.table({"id": [1], "gender": ["m"]})})
    sides = arrow_sides(spec, {}, TYPES)
    with pytest.raises(JoinInputError, match="integer txid >= 1"):
        apply_join_sides(store, spec, "p", 0, sides)
    with pytest.raises(JoinInputError, match="batch_ts must be a finite number"):
        apply_join_sides(store, spec, "p", 1, sides, batch_ts=float("nan"))
    store.execute("CREATE TABLE other (x INTEGER)")
    with pytest.raises(StateLayoutError, match="not the pending layout"):
        apply_join_sides(store, spec, "other", 1, sides)
    assert pending_count(store, "p") == 0


# ------------------------------------------------- the bulk path against the pure core model


class Model:
    """The pure core over a dict, with every expired key as a candidate (the reference)."""

    def __init__(self, spec: SingleJoin) -> None:
        self.spec = spec
        self.backing: MemoryBackingMap[Any] = MemoryBackingMap()

    def run(self, txid: int, rows: Rows, batch_ts: float | None) -> Any:
        cutoff = expiry_cutoff(self.spec, txid, batch_ts)
        cands = [k for k, v in self.backing.data.items() if k != self.spec.meta_key and v]
        cands = [k for k in cands if cutoff.matches(self.backing.data[k])]
        return apply_join_batch(
            self.spec, self.backing, txid, rows, batch_ts=batch_ts, expiry_candidates=cands
        )

    def pending(self) -> dict[Any, Any]:
        return {k: v for k, v in self.backing.data.items() if k != self.spec.meta_key and v}


def _random_rows(rng: random.Random, spec: SingleJoin, nkeys: int) -> dict[str, list[Any]]:
    rows: dict[str, list[Any]] = {}
    for side, fields in spec.inputs:
        out = []
        for _ in range(rng.choice([0, 0, 1, 2, 3, 5])):
            key = rng.choice([*range(nkeys), None])
            out.append(tuple(key if f == "id" else f"{side}{rng.randint(0, 99)}" for f in fields))
        rows[side] = out
    return rows


RANDOM_CASES = [
    (2, "error", {"timeout_batches": 3}),
    (2, "keep_latest", {"timeout_s": 2.5}),
    (3, "keep_latest", {"timeout_batches": 3}),
    (3, "error", {"timeout_s": 2.5}),
]
"""On DuckDB all four in `make test`; on PostgreSQL the two with ``timeout_s`` (each
``on_duplicate`` and each number of sides once; the tests above run every expiry and duplicate
rule on both stores), the other two in `make soak`."""


@pytest.mark.parametrize(
    ("open_store", "nsides", "on_duplicate", "timeouts"),
    [
        pytest.param(
            store, *case,
            id=f"{store}-{case[0]}-{case[1]}-{next(iter(case[2]))}",
            marks=pytest.mark.slow if store == "postgres" and "timeout_s" not in case[2] else (),
        )
        for store in ("duckdb", "postgres")
        for case in RANDOM_CASES
    ],
    indirect=["open_store"],
)  # fmt: skip
def test_bulk_join_matches_the_core_on_random_batches(
    nsides: int, on_duplicate: str, timeouts: dict[str, Any], open_store: Any
) -> None:
    rng = random.Random(f"{nsides}{on_duplicate}{timeouts}")
    inputs = [(f"s{i}", ["id", f"v{i}"] if i % 2 == 0 else [f"v{i}", "id"]) for i in range(nsides)]
    spec = SingleJoin(
        inputs,
        ["id", *(f"v{i}" for i in range(nsides))],
        on_duplicate=on_duplicate,  # type: ignore[arg-type]
        num_buckets=rng.choice([2, 3]),
        **timeouts,
    )
    types = {"id": pa.int64(), **{f"v{i}": pa.string() for i in range(nsides)}}
    model = Model(spec)
    errors = joins = expired = 0
    with contextlib.nullcontext(open_store()) as store:  # DuckDB, then PostgreSQL
        bulk = Bulk(store, spec, types)
        ts = 0.0
        for txid in range(1, 41):
            ts += rng.choice([0.0, 0.4, 1.0, 1.7])
            rows = _random_rows(rng, spec, 6 if on_duplicate == "keep_latest" else 3 * nsides)
            failure: DuplicateJoinSideError | None = None
            try:
                want = model.run(txid, rows, ts)
            except DuplicateJoinSideError as exc:
                failure = exc
            if failure is not None:
                with pytest.raises(DuplicateJoinSideError) as got:
                    bulk.run(txid, rows, ts)
                assert str(got.value) == str(failure)
                errors += 1
                continue
            got_res = bulk.run(txid, rows, ts)
            assert [tuple(r.values()) for r in got_res.joined.to_pylist()] == want.joined
            want_exp = sorted(
                (repr(h.key), side, h.arrived_txid, h.reason, h.arrived_ts, list(h.rows[side]))
                for h in want.expired
                for side in h.sides_present
            )
            got_exp = sorted(
                (
                    repr((r["id"],)),
                    r["side"],
                    r["arrived_txid"],
                    r["reason"],
                    r["arrived_ts"],
                    list(json.loads(r["values_json"]).values()),
                )
                for r in got_res.expired.to_pylist()
            )
            assert got_exp == want_exp
            assert got_res.pending_after == want.pending_after
            assert bulk.pending() == model.pending()
            joins += len(want.joined)
            expired += len(want.expired)
    assert min(errors, joins, expired) > 0 or on_duplicate == "keep_latest"
    assert joins > 0
    assert expired > 0


# -------------------------------------------------------------------------- Spark end to end


class Boom(RuntimeError):
    pass


def _table_rows(store: Any, table: str) -> list[tuple[Any, ...]]:
    return sorted(store.fetch_rows(f'SELECT * FROM "{table}"'), key=repr)


def test_gender_age_end_to_end_with_crash_and_replay(
    spark: Any, tmp_path: Path, open_store: Any
) -> None:
    log = PartitionedLog(tmp_path / "log")
    produce_seed(log)
    topo = build_gender_age(timeout_batches=1, num_buckets=2)  # txid a expires at a + 2
    point: list[str] = []

    def fault(where: str) -> None:
        if point and where == point[0]:
            raise Boom(where)

    with open_store() as store:
        runner = TopologyRunner(topo, spark, store, log, fault=fault)
        first = runner.run_batch(1)  # genders 0..4 and ages 9..5: nothing matches
        assert first.outputs == {"people": 0, "join_expired": 0}
        assert first.states["join"].size == 10

        def snapshot() -> Any:
            return (
                _table_rows(store, "gender_age__join"),
                _table_rows(store, "gender_age__out_people"),
                _table_rows(store, JOIN_META_TABLE),
                runner.last_committed(),
            )

        before = snapshot()
        point.append("after_state_write")  # crash between the state write and the commit
        with pytest.raises(Boom):
            runner.run_batch(2)
        assert snapshot() == before
        point.clear()

        second = runner.run_batch(2)
        assert second.applied
        assert second.outputs == {"people": 10, "join_expired": 0}
        people = store.fetch_rows(
            "SELECT id, gender, age FROM gender_age__out_people WHERE txid = 2 ORDER BY id"
        )
        genders, ages = seed_rows()
        age_of = {r["id"]: r["age"] for r in ages}
        assert people == [(r["id"], r["gender"], age_of[r["id"]]) for r in genders]
        assert pending_count(store, "gender_age__join") == 0

        after = snapshot()
        replay = runner.run_batch(2)  # a committed batch is final
        assert not replay.applied
        assert snapshot() == after

        # a lone half expires into its own output (T = 1, B = 2: txid 3 expires at txid 5)
        producer = log.producer("genders")
        producer.send(b'{"id": 42, "gender": "female"}')
        producer.flush()
        assert runner.run_batch(3).states["join"].size == 1
        expired = store.fetch_rows(
            "SELECT txid, id, side, arrived_txid, reason, values_json "
            "FROM gender_age__out_join_expired"
        )
        assert expired == []
        assert runner.run_batch(4).outputs == {"people": 0, "join_expired": 0}
        outcome = runner.run_batch(5)
        assert outcome.outputs == {"people": 0, "join_expired": 1}
        assert store.fetch_rows(
            "SELECT txid, id, side, arrived_txid, reason, values_json "
            "FROM gender_age__out_join_expired"
        ) == [(5, 42, "gender", 3, "timeout_batches", '{"id":42,"gender":"female"}')]


# ------------------------------------------------------------------------------------ soak


@pytest.mark.slow
def test_soak_one_million_ids_fifty_batches_one_percent_never_matched(tmp_path: Path) -> None:
    rng = np.random.default_rng(20240611)
    ids, batches, timeout = 1_000_000, 50, 5
    spec = seed_spec(timeout_batches=timeout)
    expiry = spec.batch_expiry
    assert expiry is not None
    all_ids = np.arange(ids, dtype=np.int64)
    lonely = rng.choice(ids, ids // 100, replace=False)
    is_lonely = np.zeros(ids, dtype=bool)
    is_lonely[lonely] = True
    first_side = rng.integers(0, 2, ids)  # 0: gender first, 1: age first
    t1 = rng.integers(1, batches + 1, ids)
    t2 = np.minimum(t1 + rng.integers(0, timeout + 1, ids), batches)
    last = max(expiry.expires_at(t) for t in range(1, batches + 1))

    def side_rows(side: int, txid: int) -> np.ndarray:
        first = (t1 == txid) & (first_side == side)
        second = (t2 == txid) & (first_side != side) & ~is_lonely
        picked = all_ids[first | second]
        return rng.permutation(picked)

    joined: list[np.ndarray] = []
    expired: list[pa.Table] = []
    with DuckDBStore(tmp_path / "soak.duckdb") as store:
        for txid in range(1, last + 1):
            g, a = side_rows(0, txid), side_rows(1, txid)
            sides = {
                "gender": pa.table({"id": g, "gender": np.where(g % 3 == 0, "f", "m")}),
                "age": pa.table({"id": a, "age": a % 90}),
            }
            res = apply_join_sides(store, spec, "soak", txid, sides)
            joined.append(res.joined.column("id").to_numpy())
            age = res.joined.column("age").to_numpy()
            assert np.array_equal(age, res.joined.column("id").to_numpy() % 90)
            txids = pa.array(np.full(res.expired.num_rows, txid, dtype=np.int64))
            expired.append(res.expired.append_column("txid", txids))
        assert pending_count(store, "soak") == 0

    got = np.concatenate(joined)
    assert got.size == ids - lonely.size
    assert np.unique(got).size == got.size  # every match exactly once
    assert not is_lonely[got].any()
    exp = pa.concat_tables(expired)
    exp_ids = exp.column("id").to_numpy()
    assert np.array_equal(np.sort(exp_ids), np.sort(lonely))  # each lonely id exactly once
    arrived = exp.column("arrived_txid").to_numpy()
    assert np.array_equal(arrived, t1[exp_ids])
    boundary = np.array([expiry.expires_at(int(t)) for t in range(batches + 1)])
    assert np.array_equal(exp.column("txid").to_numpy(), boundary[arrived])  # exactly on time
    sides = np.array(exp.column("side").to_pylist())
    assert np.array_equal(sides == "age", first_side[exp_ids] == 1)


def test_bulk_entry_point_takes_a_prebuilt_batch(store: DuckDBStore) -> None:
    spec = seed_spec()

    batch = combine_sides(spec, arrow_sides(spec, {"gender": [(1, "m")], "age": [(1, 3)]}, TYPES))
    assert batch.column_names == ["__side", "__v0", "__ts", "__v1"]
    res = join_state.apply_join_batch(store, spec, "p", 1, batch)
    assert res.joined.to_pylist() == [{"id": 1, "gender": "m", "age": 3}]

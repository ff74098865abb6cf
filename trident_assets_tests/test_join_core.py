"""The exactly-once keyed join core: declaration, batch semantics, expiry, replay, soak."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from trident_assets.backends.memory import MemoryBackingMap, MemoryStore
from trident_assets.core.commit import CommitResult, commit_batch
from trident_assets.core.join import (
    DuplicateJoinSideError,
    ExpiredHalf,
    ExpiryCutoff,
    JoinBatchResult,
    JoinInputError,
    SingleJoin,
    apply_join_batch,
    expiry_cutoff,
    expiry_reason,
)
from trident_assets.core.maps import NonTransactionalMap, OpaqueMap
from trident_assets.core.protocols import Key
from trident_assets.core.values import OpaqueValue
from trident_assets.errors import ConfigError, StaleTxidError, StateLayoutError
from trident_assets_tests.memory_meta import CountingBackingMap

PENDING = "join_pending"
SCOPE = "join"

GENDER_AGE = [("gender", ["id", "gender"]), ("age", ["id", "age"])]


class Boom(Exception):
    """A failure injected after the join wrote its state."""


class CountingState:
    """Counts the bulk calls the join makes on the pending state."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gets: list[list[Key]] = []
        self.puts: list[tuple[list[Key], list[Any]]] = []

    def begin_commit(self, txid: int | None) -> None:
        self.inner.begin_commit(txid)

    def commit(self, txid: int | None) -> None:
        self.inner.commit(txid)

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        self.gets.append(list(keys))
        return self.inner.multi_get(keys)

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        self.puts.append((list(keys), list(values)))
        self.inner.multi_put(keys, values)


class Harness:
    """A join whose pending state is an OpaqueMap over a MemoryStore map, run via commit_batch."""

    def __init__(self, spec: SingleJoin) -> None:
        self.spec = spec
        self.store = MemoryStore()
        self.backing = self.store.maps[PENDING] = CountingBackingMap()
        self.pending = CountingState(OpaqueMap(self.backing))

    def candidates(self, txid: int, batch_ts: float | None) -> list[Key]:
        """The store's one candidate query: visible or prev entries older than the cutoff."""
        cutoff = expiry_cutoff(self.spec, txid, batch_ts)
        out = []
        for key, value in self.backing.items():
            if key == self.spec.meta_key:
                continue
            if any(e is not None and cutoff.matches(e) for e in (value.curr, value.prev)):
                out.append(key)
        return out

    def run(
        self,
        txid: int,
        rows: Mapping[str, Sequence[Sequence[Any]]],
        *,
        batch_ts: float | None = None,
        fail: bool = False,
        scan: bool = True,
    ) -> CommitResult[JoinBatchResult]:
        def apply(_tx: object) -> JoinBatchResult:
            self.pending.begin_commit(txid)
            cands = self.candidates(txid, batch_ts) if scan else []
            result = apply_join_batch(
                self.spec,
                self.pending,
                txid,
                rows,
                batch_ts=batch_ts,
                expiry_candidates=cands,
            )
            self.pending.commit(txid)
            if fail:
                raise Boom(txid)
            return result

        return commit_batch(self.store, SCOPE, txid, apply)

    def result(self, txid: int, rows: Mapping[str, Sequence[Sequence[Any]]], **kw: Any) -> Any:
        """Run ``txid``; first run any skipped txids as empty batches (as the coordinator would)."""
        last = self.store.commits.get(SCOPE, 0)
        for skipped in range(last + 1, txid):
            assert self.run(skipped, {}, **kw).result.expired == []
        res = self.run(txid, rows, **kw)
        assert res.applied
        return res.result

    def visible(self) -> dict[Key, Any]:
        """The pending entries as the next batch would see them (meta key excluded)."""
        return {
            k: v.curr
            for k, v in self.backing.items()
            if v.curr is not None and k != self.spec.meta_key
        }

    def snapshot(self) -> tuple[dict[Key, Any], dict[str, int]]:
        return copy.deepcopy(self.backing.data), dict(self.store.commits)


def seed_spec(**kw: Any) -> SingleJoin:
    return SingleJoin(GENDER_AGE, ["id", "gender", "age"], **kw)


def seed_batches() -> list[dict[str, list[tuple[Any, ...]]]]:
    """SingleJoinExample: genders for ids 0..9 first, then ages (i + 20) for ids 9..0."""
    genders = [(i, "male" if i % 2 == 0 else "female") for i in range(10)]
    ages = [(i, i + 20) for i in range(9, -1, -1)]
    return [
        {"gender": genders[:5]},
        {"gender": genders[5:]},
        {"age": ages[:5]},
        {"age": ages[5:]},
    ]


# ----------------------------------------------------------------------------- declaration


def test_declaration_resolves_join_fields_and_locations() -> None:
    spec = SingleJoin(
        [("a", ["x", "id", "k", "s"]), ("b", ["k", "s", "id", "y"]), ("c", ["id", "k", "s", "y"])],
        ["id", "y", "x"],
        join_fields=None,
    )
    assert spec.join_fields == ("id", "k", "s")  # the intersection, in the first input's order
    assert spec.locations == {"id": ("a", 1), "y": ("b", 3), "x": ("a", 0)}  # first input wins
    assert spec.key_indexes == {"a": (1, 2, 3), "b": (2, 0, 1), "c": (0, 1, 2)}
    assert spec.sides == ("a", "b", "c")
    assert spec.inputs == (
        ("a", ("x", "id", "k", "s")),
        ("b", ("k", "s", "id", "y")),
        ("c", ("id", "k", "s", "y")),
    )
    assert spec.meta_key == ("$TRIDENT-JOIN-META$", "id", "k", "s")
    assert dict(spec.inputs)["b"] == ("k", "s", "id", "y")
    assert hash(spec) == hash(
        SingleJoin(
            [
                ("a", ("x", "id", "k", "s")),
                ("b", ("k", "s", "id", "y")),
                ("c", ["id", "k", "s", "y"]),
            ],
            ("id", "y", "x"),
        )
    )


def test_explicit_join_fields_may_be_a_subset_of_the_common_fields() -> None:
    spec = SingleJoin(
        [("l", ["id", "day", "v"]), ("r", ["day", "id", "w"])],
        ["v", "w", "day"],
        join_fields=["id"],
    )
    assert spec.join_fields == ("id",)
    assert spec.locations["day"] == ("l", 1)


def test_out_field_missing_names_the_field_and_what_exists() -> None:
    with pytest.raises(ConfigError) as err:
        SingleJoin(GENDER_AGE, ["gender", "height"])
    message = str(err.value)
    assert "out field 'height' is not a field of any input" in message
    assert "gender: [id, gender]; age: [id, age]" in message


@pytest.mark.parametrize(
    ("inputs", "out", "kw", "match"),
    [
        ([("a", ["id", "x"]), ("b", ["y", "z"])], ["x"], {}, "no field in common"),
        ([("a", ["id", "x"])], ["x"], {}, "at least two inputs"),
        ("ab", ["x"], {}, "at least two inputs"),
        ([("a", ["id"]), ("a", ["id"])], ["id"], {}, "side 'a' appears twice"),
        ([("arrived_txid", ["id"]), ("b", ["id"])], ["id"], {}, "is reserved"),
        ([("", ["id"]), ("b", ["id"])], ["id"], {}, "non-empty string"),
        ([("a", ["id", "id"]), ("b", ["id"])], ["id"], {}, r"names \[id\] more than once"),
        ([("a", "id"), ("b", ["id"])], ["id"], {}, "must be a list of field names"),
        ([("a", ["id"]), ("b", ["id"])], [], {}, "at least one field"),
        ([("a", ["id"]), ("b", ["id"])], ["id", "id"], {}, "more than once"),
        ([("a", ["id", "x"]), ("b", ["id"])], ["x"], {"join_fields": ["x"]}, "side 'b'"),
        ([("a", ["id"]), ("b", ["id"])], ["id"], {"join_fields": []}, "at least one field"),
        ([("a", ["id"]), ("b", ["id"])], ["id"], {"timeout_batches": 0}, "timeout_batches"),
        ([("a", ["id"]), ("b", ["id"])], ["id"], {"timeout_s": -1.0}, "timeout_s"),
        ([("a", ["id"]), ("b", ["id"])], ["id"], {"num_buckets": 1}, "num_buckets must be >= 2"),
        (
            [("a", ["id"]), ("b", ["id"])],
            ["id"],
            {"timeout_batches": 3, "num_buckets": 1},
            "num_buckets must be >= 2",
        ),
        ([("a", ["id"]), ("b", ["id"])], ["id"], {"on_duplicate": "first"}, "on_duplicate"),
    ],
)
def test_invalid_declarations_raise_config_error(
    inputs: Any, out: Any, kw: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        SingleJoin(inputs, out, **kw)


# ---------------------------------------------------------------------- the seed example


def test_seed_example_joins_all_ten_ids_once_with_one_read_and_one_write_per_batch() -> None:
    h = Harness(seed_spec(timeout_batches=30))
    results = [h.result(txid, rows) for txid, rows in enumerate(seed_batches(), start=1)]

    assert [r.joined for r in results] == [
        [],
        [],
        [(9, "female", 29), (8, "male", 28), (7, "female", 27), (6, "male", 26), (5, "female", 25)],
        [(4, "male", 24), (3, "female", 23), (2, "male", 22), (1, "female", 21), (0, "male", 20)],
    ]
    assert [r.pending_after for r in results] == [5, 10, 5, 0]
    assert [r.expired for r in results] == [[], [], [], []]
    assert len(h.pending.gets) == 4
    assert len(h.pending.puts) == 4
    # OpaqueMap.multi_put reads the stored values once more to stamp prev: 2 reads, 1 write.
    assert (h.backing.get_calls, h.backing.put_calls) == (8, 4)
    assert h.visible() == {}
    assert h.backing.data[h.spec.meta_key].curr == {"pending": 0, "last_txid": 4}
    assert h.store.commits == {SCOPE: 4}


def test_pending_entries_have_the_documented_json_layout() -> None:
    h = Harness(seed_spec(timeout_batches=30))
    h.result(1, {"gender": [(7, "female")]}, batch_ts=None)
    stored = h.backing.data[(7,)]
    assert stored == OpaqueValue(
        1, {"gender": [7, "female"], "arrived_txid": 1, "arrived_ts": None}
    )
    assert json.loads(json.dumps(stored.curr)) == stored.curr
    assert h.pending.puts[0] == (
        [h.spec.meta_key, (7,)],
        [
            {"pending": 1, "last_txid": 1},
            {"gender": [7, "female"], "arrived_txid": 1, "arrived_ts": None},
        ],
    )
    # the read: meta key first, then the touched keys, then the candidates
    assert h.pending.gets[0] == [h.spec.meta_key, (7,)]


def test_rows_of_one_key_in_one_batch_complete_each_other_and_write_nothing_for_it() -> None:
    h = Harness(seed_spec())
    res = h.result(1, {"age": [(3, 33)], "gender": [(3, "male"), (4, "female")]})
    assert res == JoinBatchResult([(3, "male", 33)], [], 1)
    assert (3,) not in h.backing.data
    assert h.pending.puts[0][0] == [h.spec.meta_key, (4,)]


# ------------------------------------------------------------------ replay and failures


def test_replay_of_a_committed_txid_is_a_no_op() -> None:
    h = Harness(seed_spec(timeout_batches=5))
    batches = seed_batches()
    for txid, rows in enumerate(batches[:3], start=1):
        h.result(txid, rows)
    before = h.snapshot()
    gets = len(h.pending.gets)
    replay = h.run(3, batches[2])
    assert not replay.applied  # already committed
    assert replay.result is None
    assert h.snapshot() == before
    assert len(h.pending.gets) == gets  # not even read
    # a different batch under the same txid (opaque spout) is also skipped
    assert not h.run(2, {"age": [(0, 99)]}).applied  # already committed
    assert h.snapshot() == before
    res = h.result(4, batches[3])
    assert [row[0] for row in res.joined] == [4, 3, 2, 1, 0]


def test_a_failed_attempt_leaves_nothing_and_the_retry_matches_a_clean_run() -> None:
    clean = Harness(seed_spec(timeout_batches=5))
    clean_results = [clean.result(t, rows) for t, rows in enumerate(seed_batches(), start=1)]

    h = Harness(seed_spec(timeout_batches=5))
    batches = seed_batches()
    for txid, rows in enumerate(batches[:2], start=1):
        h.result(txid, rows)
    before = h.snapshot()
    with pytest.raises(Boom):
        h.run(3, batches[2], fail=True)
    assert h.snapshot() == before
    # a failing attempt with a different (opaque) batch, failing inside the join itself
    with pytest.raises(DuplicateJoinSideError):
        h.run(3, {"gender": [(1, "male")]})
    assert h.snapshot() == before
    retried = [h.result(3, batches[2]), h.result(4, batches[3])]
    assert retried == clean_results[2:]
    assert h.backing.data == clean.backing.data


def test_opaque_replay_after_a_partial_commit_recomputes_from_prev() -> None:
    # The state write of txid 3 landed but its commit marker did not (a non-atomic store):
    # running txid 3 again through the OpaqueMap, even with different rows, counts once.
    spec = seed_spec(timeout_batches=5)
    backing: MemoryBackingMap[Any] = MemoryBackingMap()
    pending = OpaqueMap(backing)
    batches = seed_batches()
    for txid, rows in enumerate(batches[:2], start=1):
        pending.begin_commit(txid)
        apply_join_batch(spec, pending, txid, rows)
        pending.commit(txid)

    pending.begin_commit(3)
    first = apply_join_batch(spec, pending, 3, {"age": [(9, 29), (8, 28)]})
    pending.commit(3)
    assert first.joined == [(9, "female", 29), (8, "male", 28)]
    assert first.pending_after == 8

    pending.begin_commit(3)
    second = apply_join_batch(spec, pending, 3, {"age": [(9, 39), (8, 38), (10, 50)]})
    pending.commit(3)
    assert second.joined == [(9, "female", 39), (8, "male", 38)]
    assert second.pending_after == 9  # 10 pending before txid 3, minus ids 9 and 8, plus id 10
    pending.begin_commit(4)
    assert pending.multi_get([(7,), (8,), (9,), (10,), spec.meta_key]) == [
        {"gender": [7, "female"], "arrived_txid": 2, "arrived_ts": None},
        None,
        None,
        {"age": [10, 50], "arrived_txid": 3, "arrived_ts": None},
        {"pending": 9, "last_txid": 3},
    ]


def test_a_plain_or_transactional_state_refuses_a_txid_it_has_already_recorded() -> None:
    spec = seed_spec()
    state = NonTransactionalMap(MemoryBackingMap())
    apply_join_batch(spec, state, 1, {"gender": [(1, "m")]})
    apply_join_batch(spec, state, 3, {"gender": [(2, "f")]})  # gaps are allowed
    with pytest.raises(StaleTxidError, match="join batch 3 is not after the last batch"):
        apply_join_batch(spec, state, 3, {"age": [(1, 5)]})
    with pytest.raises(StaleTxidError):
        apply_join_batch(spec, state, 2, {"age": [(1, 5)]})


# ------------------------------------------------------------------------------- expiry


def test_exact_expiry_boundary_in_batches() -> None:
    # T = 4 batches, B = 3: a rotation every 2 batches (txids 2, 4, 6, 8, ...).
    h = Harness(seed_spec(timeout_batches=4))
    e = h.spec.batch_expiry
    assert e is not None
    assert (e.expires_at(2), e.expires_at(3)) == (8, 8)

    assert h.result(2, {"gender": [("a", "f")]}).pending_after == 1
    res = h.result(3, {"gender": [("b", "m"), ("c", "f"), ("d", "m")]})
    assert res.pending_after == 4
    for txid in (4, 5, 6):
        assert h.result(txid, {}) == JoinBatchResult([], [], 4)
    # txid 7: c's partner arrives after exactly T = 4 batches: still joins
    assert h.result(7, {"age": [("c", 30)]}) == JoinBatchResult([("c", "f", 30)], [], 3)
    # txid 8: a (age 6 = T*B/(B-1)) and b, d (age 5 = T+1) expire; d's late partner starts anew
    res = h.result(8, {"age": [("d", 40)]})
    assert res.joined == []
    assert res.expired == [
        ExpiredHalf(("a",), ("gender",), 2, "timeout_batches"),
        ExpiredHalf(("d",), ("gender",), 3, "timeout_batches"),
        ExpiredHalf(("b",), ("gender",), 3, "timeout_batches"),
    ]
    assert res.expired[1].rows == {"gender": ("d", "m")}
    assert res.expired[1].arrived_ts is None
    assert res.pending_after == 1
    assert h.visible() == {("d",): {"age": ["d", 40], "arrived_txid": 8, "arrived_ts": None}}
    # reported once: nothing more until d's new entry (rotation 4) expires at rotation 7 = txid 14
    for txid in range(9, 14):
        assert h.result(txid, {}) == JoinBatchResult([], [], 1)
    assert h.result(14, {}) == JoinBatchResult(
        [], [ExpiredHalf(("d",), ("age",), 8, "timeout_batches")], 0
    )
    assert h.result(15, {}) == JoinBatchResult([], [], 0)


def test_without_candidates_an_expired_entry_is_reported_when_it_is_next_touched() -> None:
    h = Harness(seed_spec(timeout_batches=4))
    h.result(2, {"gender": [("a", "f"), ("b", "m")]})
    assert h.result(20, {}, scan=False) == JoinBatchResult([], [], 2)
    res = h.result(21, {"age": [("a", 1)]}, scan=False)
    assert res == JoinBatchResult([], [ExpiredHalf(("a",), ("gender",), 2, "timeout_batches")], 2)
    res = h.result(22, {})  # the store's candidate query finds b, and not a's new entry
    assert res == JoinBatchResult([], [ExpiredHalf(("b",), ("gender",), 2, "timeout_batches")], 1)


def test_candidates_that_are_absent_or_not_expired_are_ignored() -> None:
    spec = seed_spec(timeout_batches=4)
    state = CountingState(NonTransactionalMap(MemoryBackingMap()))
    apply_join_batch(spec, state, 1, {"gender": [(1, "m")]})
    res = apply_join_batch(spec, state, 2, {}, expiry_candidates=[(1,), [2], (1,), spec.meta_key])
    assert res == JoinBatchResult([], [], 1)
    assert state.gets[1] == [spec.meta_key, (1,), (2,)]
    assert state.puts[1] == ([spec.meta_key], [{"pending": 1, "last_txid": 2}])
    with pytest.raises(JoinInputError, match="expiry candidate"):
        apply_join_batch(spec, state, 3, {}, expiry_candidates=[(1, 2)])


def test_event_time_expiry_and_cutoff() -> None:
    # timeout 3 s, B = 4: rotations every 1 s of event time
    h = Harness(seed_spec(timeout_s=3.0, num_buckets=4))
    h.result(1, {"gender": [(1, "m")]}, batch_ts=0.5)
    h.result(2, {"gender": [(2, "f")]}, batch_ts=1.0)
    assert expiry_cutoff(h.spec, 3, 3.999) == ExpiryCutoff(None, 0.0)
    assert h.result(3, {}, batch_ts=3.999).expired == []
    res = h.result(4, {"age": [(2, 20)]}, batch_ts=4.0)  # id 1: age 3.5 > T; id 2: age 3.0
    assert res.expired == [ExpiredHalf((1,), ("gender",), 1, "timeout_s")]
    assert res.expired[0].arrived_ts == 0.5
    assert res.joined == [(2, "f", 20)]
    assert res.pending_after == 0
    with pytest.raises(JoinInputError, match="pass batch_ts"):
        h.run(5, {})
    with pytest.raises(JoinInputError, match="batch_ts must be a finite number"):
        h.run(5, {}, batch_ts=float("nan"))


def test_batch_timeout_is_checked_before_event_time() -> None:
    spec = seed_spec(timeout_batches=2, timeout_s=10.0, num_buckets=2)
    entry = {"gender": [1, "m"], "arrived_txid": 1, "arrived_ts": 0.0}
    assert expiry_reason(spec, entry, 2, 5.0) is None
    assert expiry_reason(spec, entry, 4, 5.0) == "timeout_batches"
    assert expiry_reason(spec, entry, 4, 100.0) == "timeout_batches"
    assert expiry_reason(spec, entry, 3, 20.0) == "timeout_s"
    assert expiry_cutoff(spec, 4, 20.0) == ExpiryCutoff(1, 10.0)
    assert ExpiryCutoff(1, 10.0).matches(entry)
    assert not ExpiryCutoff(0, 0.0).matches(entry)
    assert not ExpiryCutoff(None, None).matches(entry)


def test_no_timeout_means_halves_pend_forever() -> None:
    h = Harness(seed_spec())
    h.result(1, {"gender": [(1, "m")]})
    assert expiry_cutoff(h.spec, 10_000) == ExpiryCutoff(None, None)
    assert h.result(10_000, {}, scan=False) == JoinBatchResult([], [], 1)
    assert h.result(10_001, {"age": [(1, 7)]}).joined == [(1, "m", 7)]


# --------------------------------------------------------------------- duplicates, 3-way


def test_duplicate_side_raises_naming_the_key_and_side_and_writes_nothing() -> None:
    h = Harness(seed_spec(timeout_batches=10))
    h.result(1, {"gender": [(5, "male")]})
    before = h.snapshot()
    puts = len(h.pending.puts)
    with pytest.raises(DuplicateJoinSideError) as err:
        h.run(2, {"age": [(1, 10)], "gender": [(5, "female")]})
    assert err.value.key == (5,)
    assert err.value.side == "gender"
    assert "join key (5,) received side 'gender' twice" in str(err.value)
    assert "pending since txid 1" in str(err.value)
    assert len(h.pending.puts) == puts
    assert h.snapshot() == before
    with pytest.raises(DuplicateJoinSideError, match=r"join key \(6,\) received side 'age'"):
        h.run(2, {"age": [(6, 1), (6, 2)]})  # twice within one batch
    # after a join completes, the same side may come again: it starts a new entry
    assert h.result(2, {"age": [(5, 50)]}).joined == [(5, "male", 50)]
    assert h.result(3, {"gender": [(5, "male")]}).pending_after == 1


def test_keep_latest_replaces_the_side_and_keeps_the_entry_age() -> None:
    h = Harness(seed_spec(timeout_batches=4, on_duplicate="keep_latest"))
    h.result(1, {"gender": [(1, "male")]})
    h.result(2, {"gender": [(1, "female")]})
    assert h.visible() == {(1,): {"gender": [1, "female"], "arrived_txid": 1, "arrived_ts": None}}
    assert h.result(3, {"age": [(1, 30)]}).joined == [(1, "female", 30)]
    # within one batch, sides are applied in input order, each side's rows in list order
    res = h.result(4, {"age": [(2, 40)], "gender": [(2, "m"), (2, "f")]})
    assert res == JoinBatchResult([(2, "f", 40)], [], 0)
    # the age is kept: the entry from txid 5 expires at txid 10 although it was replaced at
    # txid 7 (an entry from txid 7 would last until txid 12)
    assert h.spec.batch_expiry is not None
    assert (h.spec.batch_expiry.expires_at(5), h.spec.batch_expiry.expires_at(7)) == (10, 12)
    h.result(5, {"gender": [(3, "m")]})
    h.result(7, {"gender": [(3, "f")]})
    assert h.result(9, {}).expired == []
    res = h.result(10, {})
    assert res.expired == [ExpiredHalf((3,), ("gender",), 5, "timeout_batches")]
    assert res.expired[0].rows == {"gender": (3, "f")}


def test_three_way_join_with_a_two_field_key() -> None:
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
    assert spec.join_fields == ("id", "region")
    h = Harness(spec)
    r1 = h.result(1, {"user": [(1, "eu", "ann"), (2, "us", "bob"), (3, "eu", "cy")]})
    assert r1.pending_after == 3
    r2 = h.result(2, {"order": [("eu", 1, 9.5), ("us", 1, 1.0)], "click": [(2, "/x", "us")]})
    assert r2 == JoinBatchResult([], [], 4)
    assert h.visible()[(1, "eu")] == {
        "user": [1, "eu", "ann"],
        "order": ["eu", 1, 9.5],
        "arrived_txid": 1,
        "arrived_ts": None,
    }
    r3 = h.result(3, {"click": [(1, "/a", "eu"), (1, "/b", "us")], "order": [("us", 2, 3.0)]})
    assert r3.joined == [("us", 2, "bob", 3.0, "/x"), ("eu", 1, "ann", 9.5, "/a")]
    assert r3.pending_after == 2  # (3, eu): user only; (1, us): order and click
    # T = 2, B = 2: a rotation every 2 batches; txid 1 expires at txid 4, txid 2 at txid 6
    res = h.result(4, {})
    assert res.expired == [ExpiredHalf((3, "eu"), ("user",), 1, "timeout_batches")]
    assert h.result(5, {}) == JoinBatchResult([], [], 1)
    res = h.result(6, {})
    assert res.expired == [ExpiredHalf((1, "us"), ("order", "click"), 2, "timeout_batches")]
    assert res.expired[0].rows == {"order": ("us", 1, 1.0), "click": (1, "/b", "us")}
    assert res.pending_after == 0


# ---------------------------------------------------------------------------- bad input


def test_bad_batches_raise_join_input_error_before_anything_is_read() -> None:
    spec = seed_spec()
    state = CountingState(NonTransactionalMap(MemoryBackingMap()))
    with pytest.raises(JoinInputError, match=r"\[height\], which are not sides of this join"):
        apply_join_batch(spec, state, 1, {"height": [(1, 2)]})
    with pytest.raises(JoinInputError, match="a row of side 'age' has 3 values"):
        apply_join_batch(spec, state, 1, {"age": [(1, 2, 3)]})
    with pytest.raises(JoinInputError, match="integer txid >= 1"):
        apply_join_batch(spec, state, 0, {})
    with pytest.raises(JoinInputError, match="integer txid >= 1"):
        apply_join_batch(spec, state, None, {})  # type: ignore[arg-type]
    assert state.gets == []


def test_a_state_that_is_not_a_pending_map_is_refused() -> None:
    spec = seed_spec()
    backing: MemoryBackingMap[Any] = MemoryBackingMap()
    backing.data[(1,)] = {"count": 3}
    with pytest.raises(StateLayoutError, match=r"pending join entry for key \(1,\)"):
        apply_join_batch(spec, backing, 1, {"age": [(1, 2)]})
    backing.data = {spec.meta_key: 17}
    with pytest.raises(StateLayoutError, match="bookkeeping key"):
        apply_join_batch(spec, backing, 1, {})


# --------------------------------------------------------------------------------- soak


def _soak_plan(
    rng: random.Random, ids: int, batches: int, timeout: int
) -> tuple[dict[int, list[dict[str, list[tuple[Any, ...]]]]], dict[int, tuple[str, int]], set[int]]:
    plan: dict[int, dict[str, list[tuple[Any, ...]]]] = {
        t: {"gender": [], "age": []} for t in range(1, batches + 1)
    }
    first: dict[int, tuple[str, int]] = {}
    lonely = set(rng.sample(range(ids), ids // 100))
    for i in range(ids):
        sides = ["gender", "age"]
        rng.shuffle(sides)
        t1 = rng.randint(1, batches)
        t2 = rng.randint(t1, min(t1 + timeout, batches))
        first[i] = (sides[0], t1)
        rows = {"gender": (i, "male" if i % 3 else "female"), "age": (i, i % 90)}
        plan[t1][sides[0]].append(rows[sides[0]])
        if i not in lonely:
            plan[t2][sides[1]].append(rows[sides[1]])
    for rows_by_side in plan.values():
        for rows in rows_by_side.values():
            rng.shuffle(rows)
    return {t: [plan[t]] for t in plan}, first, lonely


def _iter_results(
    h: Harness, rng: random.Random, txids: Iterator[int], plan: dict[int, Any]
) -> Iterator[tuple[int, JoinBatchResult]]:
    for txid in txids:
        rows = plan.get(txid, [{}])[0]
        if rng.random() < 0.2:  # a failed attempt, rolled back
            with pytest.raises(Boom):
                h.run(txid, rows, fail=True)
        res = h.run(txid, rows)
        assert res.applied
        assert not h.run(txid, rows).applied  # a replay of the committed txid
        assert res.result is not None
        yield txid, res.result


def test_soak_twenty_thousand_ids_each_joined_or_expired_exactly_once() -> None:
    rng = random.Random(20240611)
    ids, batches, timeout = 20_000, 20, 5
    h = Harness(seed_spec(timeout_batches=timeout))
    expiry = h.spec.batch_expiry
    assert expiry is not None
    plan, first, lonely = _soak_plan(rng, ids, batches, timeout)
    last = max(expiry.expires_at(t) for t in range(1, batches + 1))  # 26

    joined: Counter[int] = Counter()
    expired: Counter[int] = Counter()
    for txid, result in _iter_results(h, rng, iter(range(1, last + 1)), plan):
        for row in result.joined:
            joined[row[0]] += 1
            assert row == (row[0], "male" if row[0] % 3 else "female", row[0] % 90)
        for half in result.expired:
            (i,) = half.key
            expired[i] += 1
            assert half.sides_present == (first[i][0],)
            assert half.arrived_txid == first[i][1]
            assert txid == expiry.expires_at(first[i][1])  # exactly at the boundary
            assert half.reason == "timeout_batches"
        assert result.pending_after == len(h.visible())

    assert len(lonely) == 200
    assert set(expired) == lonely
    assert set(expired.values()) == {1}
    assert set(joined) == set(range(ids)) - lonely
    assert set(joined.values()) == {1}
    assert h.visible() == {}
    assert h.store.commits == {SCOPE: last}


def test_the_pure_modules_import_nothing_heavy() -> None:
    code = (
        "import sys, trident_assets.core.join, trident_assets.core.retry, "
        "trident_assets.core.rotating\n"
        "heavy = {'dagster', 'pyspark', 'duckdb', 'pyarrow'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

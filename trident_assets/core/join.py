"""An exactly-once keyed join across batches: Storm's SingleJoinBolt with its pending map as state.

Storm's ``SingleJoinBolt`` (``ST/bolt/SingleJoinBolt.java``) keeps the halves that are waiting
for their partners in a ``TimeCacheMap`` in memory: a crash loses them and a replay joins twice.
Here the pending halves live in a keyed state that is written once per batch under the batch's
txid, through a txid-aware map (:class:`~trident_assets.core.maps.OpaqueMap` or
:class:`~trident_assets.core.maps.TransactionalMap`) inside
:func:`~trident_assets.core.commit.commit_batch`. A replay of a txid then recomputes from the
state as it was before that txid, so it neither duplicates nor loses a join.

**Layout of the pending state.** Join key (a tuple of the join-field values) -> a JSON-able dict::

    {"<side>": [values of that side's fields, in order], ...,
     "arrived_txid": <txid of the batch that created the entry>,
     "arrived_ts": <that batch's event time, or None>}

plus one bookkeeping key, :attr:`SingleJoin.meta_key` (one element longer than a join key, so it
cannot collide with one), holding ``{"pending": <number of pending entries>, "last_txid": <txid>}``.
A removed entry is written as ``None``.

**Semantics of one batch** (:func:`apply_join_batch`):

1. Every stored entry that was read is checked for expiry first (:func:`expiry_reason`); an
   expired entry is reported once as an :class:`ExpiredHalf` and removed.
2. Then the rows are applied in order: side by side in the order of :attr:`SingleJoin.inputs`,
   each side's rows in list order. A row's values are added to its key's entry (created, with
   ``arrived_txid = txid``, if there is none). When every side is present the joined row is
   emitted and the entry removed, so rows of one key in one batch can complete each other.
3. A second row of a side that is already pending raises :class:`DuplicateJoinSideError`
   (``on_duplicate="error"``) or replaces it (``"keep_latest"``; the entry's age is kept: as in
   Storm, the timeout runs from the arrival of the entry's first half).

**Finding expired entries without a scan.** A key-value state cannot list its keys by age, and
a secondary index would need a second read (the index, then the entries it names). So the
caller passes ``expiry_candidates``: keys that may have expired. A store selects them with one
query, using :func:`expiry_cutoff` (``arrived_txid <= max_arrived_txid OR arrived_ts <
min_live_ts``). Candidates only widen the read: every entry read is checked against its stored
age, so a candidate that is not expired is left alone, an over-wide selection (even every key)
is safe, and an entry that is never named expires when it is next named or touched. Expiry is
therefore reported exactly once, but only as promptly as the candidates allow.

**Replays.** Under ``commit_batch`` on a store whose transaction covers the pending state and the
commit marker, a failed attempt leaves nothing behind and a committed txid is skipped, so a
re-run sees exactly the state before the txid. Without that atomicity the OpaqueMap still makes
a re-run of the last txid recompute from ``prev`` for every key the re-run touches; a key that
only the failed attempt touched keeps that attempt's value (a property of Trident's OpaqueMap,
not of the join), and the meta record's count can then drift.

I/O per batch: exactly one ``pending.multi_get`` (the meta key, the keys the batch touches and
the candidates) and one ``pending.multi_put`` (the meta key and every entry that changed).

The declaration is :class:`~trident_assets.core.join_spec.SingleJoin` and the expiry rules are in
:mod:`trident_assets.core.join_expiry`; this module re-exports their names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trident_assets.core.join_expiry import (
    EXPIRED_FIELDS,
    ExpiredHalf,
    ExpiryCutoff,
    check_batch_ts,
    check_event_time,
    check_txid,
    expired_fields,
    expiry_cutoff,
    expiry_reason,
)
from trident_assets.core.join_spec import (
    ARRIVED_TS,
    ARRIVED_TXID,
    RESERVED_FIELDS,
    JoinInputError,
    SingleJoin,
    name_list,
)
from trident_assets.core.protocols import Key
from trident_assets.errors import StaleTxidError, StateLayoutError, TridentError

__all__ = [
    "check_entry",
    "ARRIVED_TS",
    "ARRIVED_TXID",
    "EXPIRED_FIELDS",
    "DuplicateJoinSideError",
    "ExpiredHalf",
    "ExpiryCutoff",
    "JoinBatchResult",
    "JoinInputError",
    "PendingState",
    "SingleJoin",
    "apply_join_batch",
    "check_event_time",
    "expired_fields",
    "expiry_cutoff",
    "expiry_reason",
]


class DuplicateJoinSideError(TridentError):
    """A side arrived twice for a join key that is still pending (``on_duplicate="error"``)."""

    def __init__(self, key: Key, side: str, arrived_txid: int, txid: int) -> None:
        """Name the key and the side in the message."""
        self.key = key
        self.side = side
        msg = (
            f"join key {key!r} received side {side!r} twice: it is still pending since txid "
            f"{arrived_txid} and batch {txid} brings it again (Storm: 'Received same side of "
            "single join twice'). Nothing was written. Deduplicate the input, or declare the "
            "join with on_duplicate='keep_latest'."
        )
        super().__init__(msg)


class PendingState(Protocol):
    """The bulk read/write interface the join needs (OpaqueMap, TransactionalMap, a backing map)."""

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Return the stored value of each key (None where absent), in key order."""

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Store ``values[i]`` under ``keys[i]``; None removes."""


@dataclass(frozen=True, slots=True)
class JoinBatchResult:
    """What one batch of :func:`apply_join_batch` produced.

    Attributes:
        joined: The joined rows (``out_fields`` in order), in the order they completed.
        expired: The entries that expired in this batch, by ``arrived_txid`` then read order.
        pending_after: The number of pending entries in the whole state after the batch.
    """

    joined: list[tuple[Any, ...]]
    expired: list[ExpiredHalf]
    pending_after: int


def check_entry(spec: SingleJoin, key: Key, entry: Any) -> dict[str, Any]:
    """``entry`` if it is a pending entry of this join (a dict of its sides and arrival).

    Raises:
        StateLayoutError: it is not (the name shared with another join or state).
    """
    sides = spec.sides
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get(ARRIVED_TXID), int)
        or any(k not in RESERVED_FIELDS and k not in sides for k in entry)
    ):
        msg = (
            f"the pending join entry for key {key!r} is {entry!r}; expected a dict of the sides "
            f"{name_list(sides)} plus {ARRIVED_TXID!r} and {ARRIVED_TS!r}. Is this state "
            "shared with another join?"
        )
        raise StateLayoutError(msg)
    return entry


def _collect_rows(
    spec: SingleJoin, rows_by_side: Mapping[str, Sequence[Sequence[Any]]]
) -> list[tuple[str, tuple[Any, ...], Key]]:
    unknown = [side for side in rows_by_side if side not in spec.sides]
    if unknown:
        msg = (
            f"rows_by_side names {name_list(map(str, unknown))}, which are not sides of this "
            f"join; the sides are {name_list(spec.sides)}"
        )
        raise JoinInputError(msg)
    ops: list[tuple[str, tuple[Any, ...], Key]] = []
    for side, fields in spec.inputs:
        key_idx = spec.key_indexes[side]
        for row in rows_by_side.get(side, ()):
            values = tuple(row)
            if len(values) != len(fields):
                msg = (
                    f"a row of side {side!r} has {len(values)} values, {values!r}, but the side "
                    f"declares {len(fields)} fields {name_list(fields)}"
                )
                raise JoinInputError(msg)
            ops.append((side, values, tuple(values[i] for i in key_idx)))
    return ops


def apply_join_batch(
    spec: SingleJoin,
    pending: PendingState,
    txid: int,
    rows_by_side: Mapping[str, Sequence[Sequence[Any]]],
    *,
    batch_ts: float | None = None,
    expiry_candidates: Iterable[Key] = (),
) -> JoinBatchResult:
    """Apply batch ``txid`` of the join to the pending state; return what it joined and expired.

    See the module docstring for the semantics. Does exactly one ``pending.multi_get`` and one
    ``pending.multi_put``; an error is raised before the write, so a failing batch writes
    nothing. Stored entries are never mutated (an OpaqueMap keeps them as ``prev``).

    For exactly-once results call it inside ``commit_batch`` with ``pending`` an ``OpaqueMap``
    (or ``TransactionalMap``) that had ``begin_commit(txid)``: a replay of a committed txid is
    then skipped, and a re-run of a txid whose attempt failed recomputes from the state before
    it. Batches must come in increasing txid order; gaps are allowed.

    Args:
        spec: The join declaration.
        pending: The pending-halves state.
        txid: The batch's txid (>= 1). New entries record it as ``arrived_txid``.
        rows_by_side: Side name -> that side's rows of this batch (tuples of its fields).
            Sides without rows may be left out.
        batch_ts: The batch's event time; required if the join has ``timeout_s``.
        expiry_candidates: Keys that may have expired (see :func:`expiry_cutoff`); keys that
            are absent, or not expired, are ignored.

    Raises:
        JoinInputError: an unknown side, a row of the wrong width, a bad txid or ``batch_ts``,
            or a candidate that is not a join key.
        DuplicateJoinSideError: a side arrived twice for a pending key (``on_duplicate="error"``).
        StaleTxidError: the state has already recorded this txid or a later one.
        StateLayoutError: the state holds something that is not a pending entry of this join.
    """
    check_txid(txid)
    ts = check_batch_ts(spec, batch_ts)
    ops = _collect_rows(spec, rows_by_side)

    meta_key = spec.meta_key
    key_width = len(spec.join_fields or ())
    read_keys: dict[Key, None] = {}
    for _, _, key in ops:
        read_keys.setdefault(key)
    for candidate in expiry_candidates:
        key = tuple(candidate)
        if key == meta_key:
            continue
        if len(key) != key_width:
            msg = (
                f"expiry candidate {candidate!r} is not a join key: it must hold the "
                f"{key_width} values of {name_list(spec.join_fields or ())}"
            )
            raise JoinInputError(msg)
        read_keys.setdefault(key)
    keys = list(read_keys)

    stored = pending.multi_get([meta_key, *keys])
    meta = stored[0]
    if meta is not None and not (isinstance(meta, dict) and isinstance(meta.get("pending"), int)):
        msg = f"the join bookkeeping key {meta_key!r} holds {meta!r}, not a join's meta record"
        raise StateLayoutError(msg)
    last_txid = None if meta is None else meta.get("last_txid")
    if last_txid is not None and txid <= last_txid:
        msg = (
            f"join batch {txid} is not after the last batch the pending state recorded "
            f"({last_txid}): it was applied already. Replay through commit_batch with an "
            "OpaqueMap (which reads the state as it was before the txid), or move on to the "
            "next txid."
        )
        raise StaleTxidError(msg)
    pending_count: int = 0 if meta is None else meta["pending"]

    before: dict[Key, dict[str, Any] | None] = {}
    current: dict[Key, dict[str, Any] | None] = {}
    expired: list[ExpiredHalf] = []
    for key, entry in zip(keys, stored[1:], strict=True):
        if entry is None:
            before[key] = current[key] = None
            continue
        before[key] = current[key] = check_entry(spec, key, entry)
        reason = expiry_reason(spec, entry, txid, ts)
        if reason is not None:
            present = tuple(side for side in spec.sides if side in entry)
            expired.append(
                ExpiredHalf(
                    key,
                    present,
                    entry[ARRIVED_TXID],
                    reason,
                    {side: tuple(entry[side]) for side in present},
                    entry.get(ARRIVED_TS),
                )
            )
            current[key] = None
    expired.sort(key=lambda half: half.arrived_txid)

    joined: list[tuple[Any, ...]] = []
    num_sides = len(spec.inputs)
    for side, values, key in ops:
        entry = current[key]
        if entry is None:
            entry = {ARRIVED_TXID: txid, ARRIVED_TS: ts}
        elif side in entry and spec.on_duplicate == "error":
            raise DuplicateJoinSideError(key, side, entry[ARRIVED_TXID], txid)
        entry = {**entry, side: list(values)}
        if sum(s in entry for s in spec.sides) == num_sides:
            joined.append(tuple(entry[s][i] for s, i in spec.locations.values()))
            current[key] = None
        else:
            current[key] = entry

    write_keys: list[Key] = [meta_key]
    write_values: list[Any] = [None]
    for key in keys:
        old, new = before[key], current[key]
        if new is old:
            continue
        pending_count += (new is not None) - (old is not None)
        write_keys.append(key)
        write_values.append(new)
    write_values[0] = {"pending": pending_count, "last_txid": txid}
    pending.multi_put(write_keys, write_values)
    return JoinBatchResult(joined, expired, pending_count)

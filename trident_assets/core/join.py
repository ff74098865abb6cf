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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from trident_assets.core.protocols import Key
from trident_assets.core.rotating import DEFAULT_NUM_BUCKETS, BatchExpiry, EventTimeExpiry
from trident_assets.errors import ConfigError, StaleTxidError, StateLayoutError, TridentError

__all__ = [
    "ARRIVED_TS",
    "ARRIVED_TXID",
    "EXPIRED_FIELDS",
    "META_KEY_TAG",
    "REASON_TIMEOUT_BATCHES",
    "REASON_TIMEOUT_S",
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

ARRIVED_TXID = "arrived_txid"
"""Entry field: the txid of the batch that created the pending entry."""

ARRIVED_TS = "arrived_ts"
"""Entry field: the event time (``batch_ts``) of the batch that created the entry, or None."""

META_KEY_TAG = "$TRIDENT-JOIN-META$"
"""First element of the bookkeeping key; the rest are the join field names."""

REASON_TIMEOUT_BATCHES = "timeout_batches"
"""ExpiredHalf reason: the entry outlived ``timeout_batches`` (checked first)."""

REASON_TIMEOUT_S = "timeout_s"
"""ExpiredHalf reason: the entry outlived ``timeout_s`` of event time."""

EXPIRED_FIELDS = ("side", "arrived_txid", "arrived_ts", "reason", "values_json")
"""Fields of an expired-halves output after the join fields: one row per side that had arrived
(``values_json``: that side's tuple as a JSON object), Storm's ``fail`` of that tuple."""

_RESERVED = frozenset({ARRIVED_TXID, ARRIVED_TS})
_ON_DUPLICATE = ("error", "keep_latest")


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


class JoinInputError(TridentError, ValueError):
    """A batch handed to :func:`apply_join_batch` does not match the join's declaration."""


class PendingState(Protocol):
    """The bulk read/write interface the join needs (OpaqueMap, TransactionalMap, a backing map)."""

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Return the stored value of each key (None where absent), in key order."""

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Store ``values[i]`` under ``keys[i]``; None removes."""


def _name_list(names: Iterable[str]) -> str:
    return "[" + ", ".join(names) + "]"


def _check_names(what: str, names: object) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        msg = f"{what} must be a list of field names, got {names!r}"
        raise ConfigError(msg)
    out = tuple(names)
    for name in out:
        if not isinstance(name, str) or not name:
            msg = f"{what} must hold non-empty strings, got {name!r} in {list(out)!r}"
            raise ConfigError(msg)
    dupes = sorted({n for n in out if out.count(n) > 1})
    if dupes:
        msg = f"{what} names {_name_list(dupes)} more than once: {_name_list(out)}"
        raise ConfigError(msg)
    return out


@dataclass(frozen=True)
class SingleJoin:
    """The declaration of a keyed join of two or more input streams (Storm's SingleJoinBolt).

    Everything is validated here, before anything is read or written.

    Attributes:
        inputs: ``(side name, that side's fields)`` for each input, in order.
        out_fields: The fields of a joined row. Each is taken from the first input that has it
            (see :attr:`locations`).
        join_fields: The key fields, present in every input. Default: the fields common to
            all inputs, in the order of the first input.
        timeout_batches: Pending halves expire per :class:`BatchExpiry` with this timeout.
        timeout_s: Pending halves expire per :class:`EventTimeExpiry` on ``batch_ts``.
        num_buckets: The rotation bucket count for both timeouts (Storm's default 3).
        on_duplicate: ``"error"`` or ``"keep_latest"`` for a side that arrives twice.

    Raises:
        ConfigError: fewer than two inputs; a side name that repeats or is reserved
            (``arrived_txid``, ``arrived_ts``); a field list that repeats a name; no common
            field (or a join field missing from an input); an out field no input has; a bad
            timeout, bucket count or ``on_duplicate``.
    """

    inputs: Sequence[tuple[str, Sequence[str]]]
    out_fields: Sequence[str]
    join_fields: Sequence[str] | None = None
    timeout_batches: int | None = None
    timeout_s: float | None = None
    num_buckets: int = DEFAULT_NUM_BUCKETS
    on_duplicate: Literal["error", "keep_latest"] = "error"

    locations: Mapping[str, tuple[str, int]] = field(init=False, repr=False, compare=False)
    """Out field -> (side, index of the field in that side's rows)."""
    batch_expiry: BatchExpiry | None = field(init=False, repr=False, compare=False)
    """The batch-clock expiry rule, if ``timeout_batches`` is set."""
    time_expiry: EventTimeExpiry | None = field(init=False, repr=False, compare=False)
    """The event-time expiry rule, if ``timeout_s`` is set."""
    key_indexes: Mapping[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    """Side -> the indexes of the join fields in that side's rows."""

    def __post_init__(self) -> None:
        """Normalise the lists to tuples, resolve the join fields and locations, validate."""
        inputs = self._check_inputs(self.inputs)
        out_fields = _check_names("out_fields", self.out_fields)
        if not out_fields:
            msg = "out_fields must name at least one field"
            raise ConfigError(msg)
        join_fields = self._resolve_join_fields(inputs, self.join_fields)
        locations: dict[str, tuple[str, int]] = {}
        for name in out_fields:
            for side, fields in inputs:
                if name in fields:
                    locations[name] = (side, fields.index(name))
                    break
            else:
                existing = "; ".join(f"{side}: {_name_list(fields)}" for side, fields in inputs)
                msg = (
                    f"out field {name!r} is not a field of any input (Storm: 'Cannot find all "
                    f"outfields among sources'). The inputs have: {existing}"
                )
                raise ConfigError(msg)
        if self.on_duplicate not in _ON_DUPLICATE:
            msg = f"on_duplicate must be one of {list(_ON_DUPLICATE)}, got {self.on_duplicate!r}"
            raise ConfigError(msg)
        batch_expiry = (
            None
            if self.timeout_batches is None
            else BatchExpiry(self.timeout_batches, self.num_buckets)
        )
        time_expiry = (
            None if self.timeout_s is None else EventTimeExpiry(self.timeout_s, self.num_buckets)
        )
        if batch_expiry is None and time_expiry is None:
            BatchExpiry(1, self.num_buckets)  # validates num_buckets
        setattr_ = object.__setattr__
        setattr_(self, "inputs", inputs)
        setattr_(self, "out_fields", out_fields)
        setattr_(self, "join_fields", join_fields)
        setattr_(self, "locations", locations)
        setattr_(self, "batch_expiry", batch_expiry)
        setattr_(self, "time_expiry", time_expiry)
        setattr_(
            self,
            "key_indexes",
            {side: tuple(fields.index(f) for f in join_fields) for side, fields in inputs},
        )

    @staticmethod
    def _check_inputs(
        inputs: Sequence[tuple[str, Sequence[str]]],
    ) -> tuple[tuple[str, tuple[str, ...]], ...]:
        if isinstance(inputs, str) or not isinstance(inputs, Sequence) or len(inputs) < 2:
            msg = f"a join needs at least two inputs as (side, fields) pairs, got {inputs!r}"
            raise ConfigError(msg)
        out: list[tuple[str, tuple[str, ...]]] = []
        for item in inputs:
            if not isinstance(item, Sequence) or isinstance(item, str) or len(item) != 2:
                msg = f"each input must be a (side, fields) pair, got {item!r}"
                raise ConfigError(msg)
            side, fields = item
            if not isinstance(side, str) or not side:
                msg = f"a side name must be a non-empty string, got {side!r}"
                raise ConfigError(msg)
            if side in _RESERVED:
                msg = f"side name {side!r} is reserved for the pending entry's bookkeeping"
                raise ConfigError(msg)
            if any(side == seen for seen, _ in out):
                msg = f"side {side!r} appears twice in the join inputs"
                raise ConfigError(msg)
            out.append((side, _check_names(f"fields of side {side!r}", fields)))
        return tuple(out)

    @staticmethod
    def _resolve_join_fields(
        inputs: tuple[tuple[str, tuple[str, ...]], ...], join_fields: Sequence[str] | None
    ) -> tuple[str, ...]:
        if join_fields is None:
            common = [f for f in inputs[0][1] if all(f in fields for _, fields in inputs[1:])]
            if not common:
                listed = "; ".join(f"{side}: {_name_list(fields)}" for side, fields in inputs)
                msg = f"the join inputs have no field in common, so there is no join key: {listed}"
                raise ConfigError(msg)
            return tuple(common)
        resolved = _check_names("join_fields", join_fields)
        if not resolved:
            msg = "join_fields must name at least one field (or be None for the common fields)"
            raise ConfigError(msg)
        for side, fields in inputs:
            missing = [f for f in resolved if f not in fields]
            if missing:
                msg = (
                    f"join field(s) {_name_list(missing)} are not fields of side {side!r}, "
                    f"which has {_name_list(fields)}"
                )
                raise ConfigError(msg)
        return resolved

    @property
    def sides(self) -> tuple[str, ...]:
        """The side names, in input order."""
        return tuple(side for side, _ in self.inputs)

    @property
    def meta_key(self) -> Key:
        """The bookkeeping key: ``(META_KEY_TAG, *join_fields)``, one longer than a join key."""
        return (META_KEY_TAG, *(self.join_fields or ()))

    def fields_of(self, side: str) -> tuple[str, ...]:
        """Return the fields of ``side``.

        Raises:
            JoinInputError: ``side`` is not an input of this join.
        """
        for name, fields in self.inputs:
            if name == side:
                return tuple(fields)
        msg = f"{side!r} is not a side of this join; the sides are {_name_list(self.sides)}"
        raise JoinInputError(msg)


@dataclass(frozen=True, slots=True)
class ExpiredHalf:
    """A pending entry that timed out before all its sides arrived; reported exactly once.

    Equality compares ``key``, ``sides_present``, ``arrived_txid`` and ``reason`` only.

    Attributes:
        key: The join key.
        sides_present: The sides that had arrived, in input order.
        arrived_txid: The txid of the batch that created the entry.
        reason: ``"timeout_batches"`` or ``"timeout_s"``.
        rows: The values of each present side, for dead-lettering (Storm fails these tuples).
        arrived_ts: The event time of the batch that created the entry, or None.
    """

    key: Key
    sides_present: tuple[str, ...]
    arrived_txid: int
    reason: str
    rows: Mapping[str, tuple[Any, ...]] = field(default_factory=dict, compare=False)
    arrived_ts: float | None = field(default=None, compare=False)


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


@dataclass(frozen=True, slots=True)
class ExpiryCutoff:
    """Which stored entries may have expired at a batch; a store's candidate query.

    An entry is a candidate iff ``arrived_txid <= max_arrived_txid`` or
    ``arrived_ts < min_live_ts`` (a None bound matches nothing). This is exact: every entry it
    matches is expired at that batch and every expired entry matches.
    """

    max_arrived_txid: int | None
    min_live_ts: float | None

    def matches(self, entry: Mapping[str, Any]) -> bool:
        """Return whether a stored pending entry is selected."""
        if self.max_arrived_txid is not None and entry[ARRIVED_TXID] <= self.max_arrived_txid:
            return True
        ts = entry.get(ARRIVED_TS)
        return self.min_live_ts is not None and ts is not None and ts < self.min_live_ts


def expired_fields(spec: SingleJoin) -> tuple[str, ...]:
    """Return the fields of the join's expired output: its join fields, then EXPIRED_FIELDS.

    Raises:
        ConfigError: a join field is named like one of :data:`EXPIRED_FIELDS`.
    """
    fields = (*(spec.join_fields or ()), *EXPIRED_FIELDS)
    clash = sorted({f for f in spec.join_fields or () if f in EXPIRED_FIELDS})
    if clash:
        msg = (
            f"join field(s) {_name_list(clash)} clash with the expired output's fields "
            f"{_name_list(EXPIRED_FIELDS)}; rename the field(s) before the join"
        )
        raise ConfigError(msg)
    return fields


def _check_txid(txid: int) -> None:
    if isinstance(txid, bool) or not isinstance(txid, int) or txid < 1:
        msg = f"a join batch needs an integer txid >= 1, got {txid!r}"
        raise JoinInputError(msg)


def _check_batch_ts(spec: SingleJoin, batch_ts: float | None) -> float | None:
    if batch_ts is None:
        if spec.time_expiry is not None:
            msg = (
                f"the join declares timeout_s={spec.timeout_s}, so every batch needs its event "
                "time: pass batch_ts"
            )
            raise JoinInputError(msg)
        return None
    return check_event_time(batch_ts)


def check_event_time(batch_ts: float | None) -> float | None:
    """Return ``batch_ts`` as a float (None stays None).

    Raises:
        JoinInputError: not a finite number of seconds.
    """
    if batch_ts is None:
        return None
    if (
        isinstance(batch_ts, bool)
        or not isinstance(batch_ts, int | float)
        or not math.isfinite(batch_ts)
    ):
        msg = f"batch_ts must be a finite number of seconds, got {batch_ts!r}"
        raise JoinInputError(msg)
    return float(batch_ts)


def expiry_cutoff(spec: SingleJoin, txid: int, batch_ts: float | None = None) -> ExpiryCutoff:
    """Return the candidate selection for batch ``txid`` (see :class:`ExpiryCutoff`).

    Raises:
        JoinInputError: ``txid`` is not an integer >= 1, or ``batch_ts`` is missing although
            the join has ``timeout_s``.
    """
    _check_txid(txid)
    ts = _check_batch_ts(spec, batch_ts)
    max_txid = None if spec.batch_expiry is None else spec.batch_expiry.last_expired_arrival(txid)
    min_ts = None
    if spec.time_expiry is not None and ts is not None:
        min_ts = spec.time_expiry.expired_before(ts)
    return ExpiryCutoff(max_txid, min_ts)


def expiry_reason(
    spec: SingleJoin, entry: Mapping[str, Any], txid: int, batch_ts: float | None = None
) -> str | None:
    """Return why a stored entry is expired at batch ``txid`` (``batch_ts``), or None if not.

    ``timeout_batches`` is checked first, then ``timeout_s`` (only for entries with an
    ``arrived_ts``).
    """
    if spec.batch_expiry is not None and spec.batch_expiry.is_expired(entry[ARRIVED_TXID], txid):
        return REASON_TIMEOUT_BATCHES
    arrived_ts = entry.get(ARRIVED_TS)
    if (
        spec.time_expiry is not None
        and batch_ts is not None
        and arrived_ts is not None
        and spec.time_expiry.is_expired(arrived_ts, batch_ts)
    ):
        return REASON_TIMEOUT_S
    return None


def _check_entry(spec: SingleJoin, key: Key, entry: Any) -> dict[str, Any]:
    sides = spec.sides
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get(ARRIVED_TXID), int)
        or any(k not in _RESERVED and k not in sides for k in entry)
    ):
        msg = (
            f"the pending join entry for key {key!r} is {entry!r}; expected a dict of the sides "
            f"{_name_list(sides)} plus {ARRIVED_TXID!r} and {ARRIVED_TS!r}. Is this state "
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
            f"rows_by_side names {_name_list(map(str, unknown))}, which are not sides of this "
            f"join; the sides are {_name_list(spec.sides)}"
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
                    f"declares {len(fields)} fields {_name_list(fields)}"
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
    _check_txid(txid)
    ts = _check_batch_ts(spec, batch_ts)
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
                f"{key_width} values of {_name_list(spec.join_fields or ())}"
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
        before[key] = current[key] = _check_entry(spec, key, entry)
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

"""The declaration of a single join (Storm's SingleJoinBolt): its inputs, key, out fields, timeouts.

:class:`SingleJoin` validates a join before anything is read or written and resolves what the
batch path needs from it (the join fields, where each out field comes from, the expiry rules).
Also here: the bookkeeping field names of a pending entry and :class:`JoinInputError`, raised
for input that does not match the declaration. Applying a batch:
:func:`~trident_assets.core.join.apply_join_batch`; expiry: :mod:`trident_assets.core.join_expiry`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from trident_assets.core.protocols import Key
from trident_assets.core.rotating import DEFAULT_NUM_BUCKETS, BatchExpiry, EventTimeExpiry
from trident_assets.errors import ConfigError, TridentError

__all__ = [
    "ARRIVED_TS",
    "ARRIVED_TXID",
    "RESERVED_FIELDS",
    "JoinInputError",
    "SingleJoin",
    "name_list",
]

ARRIVED_TXID = "arrived_txid"
"""Entry field: the txid of the batch that created the pending entry."""

ARRIVED_TS = "arrived_ts"
"""Entry field: the event time (``batch_ts``) of the batch that created the entry, or None."""

META_KEY_TAG = "$TRIDENT-JOIN-META$"
"""First element of the bookkeeping key; the rest are the join field names."""

RESERVED_FIELDS = frozenset({ARRIVED_TXID, ARRIVED_TS})
"""Entry fields that are not sides: no side may take these names."""

_ON_DUPLICATE = ("error", "keep_latest")


class JoinInputError(TridentError, ValueError):
    """A batch handed to :func:`apply_join_batch` does not match the join's declaration."""


def name_list(names: Iterable[str]) -> str:
    """Return ``names`` as ``[a, b]`` for an error message."""
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
        msg = f"{what} names {name_list(dupes)} more than once: {name_list(out)}"
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
                existing = "; ".join(f"{side}: {name_list(fields)}" for side, fields in inputs)
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
            if side in RESERVED_FIELDS:
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
                listed = "; ".join(f"{side}: {name_list(fields)}" for side, fields in inputs)
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
                    f"join field(s) {name_list(missing)} are not fields of side {side!r}, "
                    f"which has {name_list(fields)}"
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

"""When a single join's pending entries expire: the timeouts checked per entry and per store query.

:func:`expiry_reason` says why one stored entry is expired at a batch; :func:`expiry_cutoff`
gives the same rule as a store's candidate selection (:class:`ExpiryCutoff`), so a store can
find the expired entries with one query. An expired entry is reported once as an
:class:`ExpiredHalf`; :func:`expired_fields` names the fields of the expired output. Also
here: the checks of a batch's txid and event time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trident_assets.core.join_spec import (
    ARRIVED_TS,
    ARRIVED_TXID,
    JoinInputError,
    SingleJoin,
    name_list,
)
from trident_assets.core.protocols import Key
from trident_assets.errors import ConfigError

__all__ = [
    "EXPIRED_FIELDS",
    "ExpiredHalf",
    "ExpiryCutoff",
    "check_batch_ts",
    "check_event_time",
    "check_txid",
    "expired_fields",
    "expiry_cutoff",
    "expiry_reason",
]

REASON_TIMEOUT_BATCHES = "timeout_batches"
"""ExpiredHalf reason: the entry outlived ``timeout_batches`` (checked first)."""

REASON_TIMEOUT_S = "timeout_s"
"""ExpiredHalf reason: the entry outlived ``timeout_s`` of event time."""

EXPIRED_FIELDS = ("side", "arrived_txid", "arrived_ts", "reason", "values_json")
"""Fields of an expired-halves output after the join fields: one row per side that had arrived
(``values_json``: that side's tuple as a JSON object), Storm's ``fail`` of that tuple."""


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
            f"join field(s) {name_list(clash)} clash with the expired output's fields "
            f"{name_list(EXPIRED_FIELDS)}; rename the field(s) before the join"
        )
        raise ConfigError(msg)
    return fields


def check_txid(txid: int) -> None:
    """Check a join batch's txid.

    Raises:
        JoinInputError: ``txid`` is not an integer >= 1.
    """
    if isinstance(txid, bool) or not isinstance(txid, int) or txid < 1:
        msg = f"a join batch needs an integer txid >= 1, got {txid!r}"
        raise JoinInputError(msg)


def check_batch_ts(spec: SingleJoin, batch_ts: float | None) -> float | None:
    """Return the batch's event time as a float (None where the join has no ``timeout_s``).

    Raises:
        JoinInputError: ``batch_ts`` is missing although the join has ``timeout_s``, or is
            not a finite number of seconds.
    """
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
    check_txid(txid)
    ts = check_batch_ts(spec, batch_ts)
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

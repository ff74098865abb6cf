"""The single join's rules applied to one partition's join keys, for a state on many servers.

:func:`~trident_assets.core.join.apply_join_batch` applies a whole batch through one map and
keeps a bookkeeping key (the pending count, the last txid). A join whose pending halves live
in a key-value store is applied by many partitions at once, each owning its own join keys, so
:func:`fold_keys` applies the same rules to the keys one partition read, without the
bookkeeping key (the driver keeps the count and the txid in the topology's store):

1. every entry read is checked for expiry first (:func:`~trident_assets.core.join.expiry_reason`);
   an expired entry is reported once and removed;
2. the rows are applied side by side in the order of the join's inputs, each side's rows in
   batch order; a completed entry emits its joined row and is removed;
3. a side arriving twice for a pending key is the first :class:`Duplicate` found (in that
   order; the caller raises it) under ``on_duplicate="error"``, or replaces the pending half
   under ``"keep_latest"`` (the entry keeps its age).

Rows carry their position in the batch (``ord``), so the partitions' results merge into the
order a single fold of the whole batch gives: joined rows by (completing side, position),
the first duplicate by (side, position).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trident_assets.core.join import (
    ARRIVED_TS,
    ARRIVED_TXID,
    ExpiredHalf,
    SingleJoin,
    check_entry,
    expiry_reason,
)
from trident_assets.core.protocols import Key

__all__ = ["Duplicate", "FoldedKeys", "JoinRow", "fold_keys"]


@dataclass(frozen=True, slots=True)
class JoinRow:
    """One input row of the batch: its side's index, its position and its values."""

    side: int
    ord: int
    values: tuple[Any, ...]
    key: Key


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The first side that arrived twice for a pending key (``on_duplicate="error"``)."""

    side: int
    ord: int
    key: Key
    arrived_txid: int


@dataclass(frozen=True, slots=True)
class FoldedKeys:
    """What one partition's rows did to its keys.

    Attributes:
        after: Every key read -> its entry after the batch (None: no pending entry).
        joined: ``(completing side, position, the completed entry)`` per joined row.
        expired: The entries that expired, in read order.
        duplicate: The first duplicate side (nothing else is meaningful then), or None.
    """

    after: dict[Key, dict[str, Any] | None]
    joined: list[tuple[int, int, dict[str, Any]]]
    expired: list[ExpiredHalf]
    duplicate: Duplicate | None


def fold_keys(
    spec: SingleJoin,
    txid: int,
    batch_ts: float | None,
    stored: Mapping[Key, dict[str, Any] | None],
    rows: Sequence[JoinRow],
) -> FoldedKeys:
    """Apply ``rows`` (sorted by side, then position) to the ``stored`` entries of their keys.

    ``stored`` holds every key of ``rows`` and any other key read (expiry candidates), each
    with its entry as the batch must build on it (an opaque record's ``prev`` on a re-run).
    Stored entries are never mutated.
    """
    current: dict[Key, dict[str, Any] | None] = {}
    expired: list[ExpiredHalf] = []
    for key, entry in stored.items():
        current[key] = entry
        if entry is None:
            continue
        check_entry(spec, key, entry)
        reason = expiry_reason(spec, entry, txid, batch_ts)
        if reason is not None:
            present = tuple(s for s in spec.sides if s in entry)
            rows_of = {s: tuple(entry[s]) for s in present}
            expired.append(
                ExpiredHalf(
                    key, present, entry[ARRIVED_TXID], reason, rows_of, entry.get(ARRIVED_TS)
                )
            )
            current[key] = None
    joined: list[tuple[int, int, dict[str, Any]]] = []
    sides = spec.sides
    for row in rows:
        side = sides[row.side]
        entry = current[row.key]
        if entry is None:
            entry = {ARRIVED_TXID: txid, ARRIVED_TS: batch_ts}
        elif side in entry and spec.on_duplicate == "error":
            found = Duplicate(row.side, row.ord, row.key, entry[ARRIVED_TXID])
            return FoldedKeys(current, joined, expired, found)
        entry = {**entry, side: list(row.values)}
        if all(s in entry for s in sides):
            joined.append((row.side, row.ord, entry))
            current[row.key] = None
        else:
            current[row.key] = entry
    return FoldedKeys(current, joined, expired, None)

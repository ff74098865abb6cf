"""A single join's pending halves in a Redis Cluster or memcached: records, index, one partition.

**Records.** One per join key, ``trident:<topology>:<join>:<key>`` (the key as in
:mod:`~trident_assets.backends.kv_target`), holding the key's pending entry (the layout of
:mod:`trident_assets.core.join`: each present side's values, ``arrived_txid``,
``arrived_ts``) opaque-style, ``[txid, curr, prev]``: a txid run again after some partitions
wrote builds on ``prev``. ``curr`` None is a removed entry (joined or expired), kept until the
next txid deletes it (a re-run of its txid needs ``prev``).

**Index.** Join keys are hashed into :data:`SHARDS` shards; each Spark partition of the
join's job owns whole shards. Per (shard, txid) one plain record,
``trident:<topology>:<join>~ix:<[shard, txid]>``: ``{"arrived": keys whose entry was created
at txid, "removed": keys removed at txid, "touched": other keys written}``. It is written
before the records it lists, so a re-run of the txid reads (and recomputes from ``prev``)
every key an earlier attempt wrote, even one its own batch lacks. The entries expiring at a
batch are those arriving at the txids the topology's store says are due
(:mod:`~trident_assets.backends.kv_join_clock`): the partition reads their ``arrived`` keys as
candidates (an entry is expired only if its stored age says so), ``removed`` of the previous
txid to delete what stayed removed, and deletes the index of txids expired before. Nothing is
ever listed or scanned, so memcached serves as well as a Redis Cluster.

:class:`JoinPartition` is the executor's side of one txid (picklable, shipped with the job).

The driver reads the job's rows back with :func:`read_job_rows`, as the join kept in DuckDB
gives them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from trident_assets.backends.join_batch_columns import ORD_COLUMN, SIDE_COLUMN, quoted, value_column
from trident_assets.backends.kv_backing import open_backing
from trident_assets.backends.kv_target import KeyValueTarget, target_of
from trident_assets.backends.redis_cluster_map import RedisClusterBackingMap
from trident_assets.core.join import (
    ARRIVED_TXID,
    DuplicateJoinSideError,
    SingleJoin,
    expired_fields,
)
from trident_assets.core.join_partition import JoinRow, fold_keys
from trident_assets.core.protocols import Key
from trident_assets.core.values import OpaqueValue, StateType
from trident_assets.errors import StateLayoutError

__all__ = [
    "OUTPUT_COLUMNS",
    "SHARDS",
    "SHARD_COLUMN",
    "JoinJobResult",
    "JoinPartition",
    "JoinTargets",
    "join_targets",
    "read_job_rows",
]

SHARDS = 64
"""Shards of a join's keys (fixed for the join's life: its index records are per shard)."""
SHARD_COLUMN = "__shard"
"""The job's input: the row's shard (marker rows, one per shard, have no side)."""
OUTPUT_COLUMNS = (
    ("__kind", pa.string()),
    ("__s", pa.int32()),
    ("__o", pa.int64()),
    ("__arrived", pa.int64()),
    ("__arrived_ts", pa.float64()),
    ("__reason", pa.string()),
    ("__keys_in", pa.int64()),
    ("__delta", pa.int64()),
)
"""The job's output columns besides the sides' structs (``__v<i>``, after ``__o``). Each row
is a joined tuple (``__kind`` ``j``: every side's struct, the completing side and position),
an expired half (``x``: its side's struct, arrival and reason), a partition's counts (``n``:
distinct keys in, change of the pending count) or its first duplicate side (``d``)."""


@dataclass(frozen=True)
class JoinTargets:
    """Where a join's records and its index live (both picklable targets)."""

    records: KeyValueTarget
    index: KeyValueTarget


def join_targets(state: Any) -> JoinTargets:
    """The targets of join ``state`` (declared with a ``KeyValueStateSpec``)."""
    records = target_of(state)
    records = dataclasses.replace(
        records,
        state_type=StateType.OPAQUE,
        label=f"{records.store} single join {state.spec.name!r} of topology "
        f"{state.topology.name!r}",
    )
    index = dataclasses.replace(
        records,
        prefix=records.prefix[:-1] + "~ix:",
        state_type=StateType.NON_TRANSACTIONAL,
    )
    return JoinTargets(records, index)


def _union(*lists: Sequence[Any]) -> list[list[Any]]:
    """The keys of ``lists`` (JSON lists or tuples) once each, in first-seen order."""
    seen: dict[tuple[Any, ...], None] = {}
    for keys in lists:
        for key in keys:
            seen.setdefault(tuple(key), None)
    return [list(k) for k in seen]


@dataclass(frozen=True)
class JoinPartition:
    """One txid of the join on one partition of its job (``mapInArrow``'s function)."""

    targets: JoinTargets
    spec: SingleJoin
    txid: int
    ts: float | None
    previous: int | None
    """The last txid the join applied (its removed keys are deleted now)."""
    expiring: tuple[int, ...]
    dropped: tuple[int, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Read the partition's rows, apply them to its keys, yield what it joined/expired."""
        shards: set[int] = set()
        rows: list[JoinRow] = []
        shard_of: dict[Key, int] = {}
        types: list[pa.DataType] | None = None
        spec = self.spec
        for batch in batches:
            if types is None:
                types = [batch.schema.field(value_column(i)).type for i in range(len(spec.sides))]
            cols = batch.to_pydict()
            for j, shard in enumerate(cols[SHARD_COLUMN]):
                shards.add(shard)
                side = cols[SIDE_COLUMN][j]
                if side is None:
                    continue
                struct = cols[value_column(side)][j]
                values = tuple(struct.values())
                key = tuple(values[i] for i in spec.key_indexes[spec.sides[side]])
                rows.append(JoinRow(side, cols[ORD_COLUMN][j], values, key))
                shard_of.setdefault(key, shard)
        if types is None:
            return
        rows.sort(key=lambda r: (r.side, r.ord))
        records = open_backing(self.targets.records)
        try:
            if isinstance(records, RedisClusterBackingMap):  # one cluster client for both
                index = RedisClusterBackingMap(self.targets.index, client=records.client)
            else:
                index = open_backing(self.targets.index)
            try:
                yield self._apply(records, index, sorted(shards), rows, shard_of, types)
            finally:
                if index.client is not records.client:
                    index.close()
        finally:
            records.close()

    def _apply(
        self,
        records: Any,
        index: Any,
        shards: list[int],
        rows: list[JoinRow],
        shard_of: dict[Key, int],
        types: list[pa.DataType],
    ) -> pa.RecordBatch:
        txid = self.txid
        wanted = sorted({*self.expiring, *([self.previous] if self.previous else []), txid})
        index_keys = [(s, t) for s in shards for t in wanted]
        found = dict(zip(index_keys, index.multi_get(index_keys), strict=True))
        extra: dict[Key, int] = {}
        for (shard, t), record in found.items():
            if record is None:
                continue
            named = []
            if t in self.expiring:  # expiry candidates
                named.append(record["arrived"])
            if t == self.previous:  # removed then: deleted now if still removed
                named.append(record["removed"])
            if t == txid:  # an earlier attempt of this txid wrote these keys
                named += [record["arrived"], record["removed"], record["touched"]]
            for key in _union(*named):
                extra.setdefault(tuple(key), shard)
        shard_of = {**extra, **shard_of}
        keys = list(shard_of)
        stored = dict(zip(keys, records.multi_get(keys), strict=True))
        base = {k: self._base(k, v) for k, v in stored.items()}
        folded = fold_keys(self.spec, txid, self.ts, base, rows)
        out = _Output(self.spec, types)
        if folded.duplicate is not None:
            dup = folded.duplicate
            values = next(r.values for r in rows if (r.side, r.ord) == (dup.side, dup.ord))
            out.add("d", dup.side, dup.ord, {dup.side: list(values)}, arrived=dup.arrived_txid)
            return out.batch()
        puts: list[tuple[Key, OpaqueValue[Any]]] = []
        deletes: list[Key] = []
        listed: dict[int, dict[str, list[Key]]] = {}
        for key in keys:
            new, old, record = folded.after[key], base[key], stored[key]
            if new is None and old is None:
                if record is None:
                    continue
                deletes.append(key)
                kind = "touched"
            elif record is not None and record.curr_txid != txid and new == old:
                continue  # unchanged
            else:
                if record != OpaqueValue(txid, new, old):
                    puts.append((key, OpaqueValue(txid, new, old)))
                arrived = new is not None and new[ARRIVED_TXID] == txid
                kind = "removed" if new is None else "arrived" if arrived else "touched"
            per = listed.setdefault(shard_of[key], {"arrived": [], "removed": [], "touched": []})
            per[kind].append(key)
        self._check_json([v for _, v in puts])
        self._write_index(index, found, listed)
        if puts:
            records.multi_put([k for k, _ in puts], [v for _, v in puts])
        if deletes:
            records.multi_delete(deletes)
        if self.dropped:
            index.multi_delete([(s, t) for s in shards for t in self.dropped])
        for side, ord_, entry in folded.joined:
            out.add("j", side, ord_, {i: entry[s] for i, s in enumerate(self.spec.sides)})
        for half in folded.expired:
            for side in half.sides_present:
                i = self.spec.sides.index(side)
                out.add(
                    "x",
                    i,
                    None,
                    {i: list(half.rows[side])},
                    arrived=half.arrived_txid,
                    arrived_ts=half.arrived_ts,
                    reason=half.reason,
                )
        delta = sum((folded.after[k] is not None) - (base[k] is not None) for k in keys)
        out.add("n", None, None, {}, keys_in=len({r.key for r in rows}), delta=delta)
        return out.batch()

    def _check_json(self, values: list[OpaqueValue[Any]]) -> None:
        """Refuse, before any write, a pending half holding a value JSON cannot store.

        Raises:
            StateLayoutError: naming the value and the way out.
        """
        for value in values:
            try:
                self.targets.records.encode_value(value)
            except StateLayoutError as exc:
                msg = (
                    f"{self.targets.records.label}: a pending half {value.curr or value.prev!r} "
                    f"holds a value JSON cannot store ({exc.__cause__}); cast the sides' "
                    "fields to numbers, strings or booleans before the join, or keep its "
                    "halves in the topology's store (leave out state=)"
                )
                raise StateLayoutError(msg) from exc

    def _base(self, key: Key, record: Any) -> Any:
        """The entry the batch builds on: ``curr``, or ``prev`` on a re-run of the txid."""
        if record is None:
            return None
        if not isinstance(record, OpaqueValue):
            msg = f"{self.targets.records.label}: key {key!r} holds {record!r}, not a join record"
            raise StateLayoutError(msg)
        return record.get(self.txid)

    def _write_index(
        self, index: Any, found: dict[tuple[int, int], Any], lists: dict[int, dict[str, list[Key]]]
    ) -> None:
        """Write this txid's index records (merged with an earlier attempt's) before the keys."""
        keys, values = [], []
        for shard, per in lists.items():
            earlier = found.get((shard, self.txid)) or {}
            merged = {k: _union(earlier.get(k, ()), v) for k, v in per.items()}
            if merged != earlier:
                keys.append((shard, self.txid))
                values.append(merged)
        if keys:
            index.multi_put(keys, values)


class _Output:
    """The partition's output rows, built column by column."""

    def __init__(self, spec: SingleJoin, types: list[pa.DataType]) -> None:
        self.spec = spec
        self.types = types
        self.columns: dict[str, list[Any]] = {name: [] for name, _ in OUTPUT_COLUMNS}
        self.values: list[list[Any]] = [[] for _ in spec.sides]

    def add(
        self,
        kind: str,
        side: int | None,
        ord_: int | None,
        values: dict[int, list[Any]],
        **more: Any,
    ) -> None:
        """One row: ``values`` maps a side's index to its values (the other sides are null)."""
        row = {"__kind": kind, "__s": side, "__o": ord_} | {f"__{k}": v for k, v in more.items()}
        for name, column in self.columns.items():
            column.append(row.get(name))
        for i, (_, fields) in enumerate(self.spec.inputs):
            got = values.get(i)
            self.values[i].append(None if got is None else dict(zip(fields, got, strict=True)))

    def batch(self) -> pa.RecordBatch:
        arrays = {name: pa.array(self.columns[name], kind) for name, kind in OUTPUT_COLUMNS}
        for i, kind in enumerate(self.types):
            arrays[value_column(i)] = pa.array(self.values[i], kind)
        names = [n for n, _ in OUTPUT_COLUMNS[:3]]
        names += [value_column(i) for i in range(len(self.types))]
        names += [n for n, _ in OUTPUT_COLUMNS[3:]]
        return pa.record_batch([arrays[n] for n in names], names=names)


@dataclass(frozen=True, slots=True)
class JoinJobResult:
    """The batch's joined tuples, expired halves, distinct keys and pending-count change."""

    joined: pa.Table
    expired: pa.Table
    keys_in: int
    delta: int


def _joined_sql(spec: SingleJoin) -> str:
    cols = []
    for field, (side, _) in spec.locations.items():
        cols.append(f"{value_column(spec.sides.index(side))}.{quoted(field)} AS {quoted(field)}")
    return f"SELECT {', '.join(cols)} FROM r WHERE __kind = 'j' ORDER BY __s, __o"


def _expired_sql(spec: SingleJoin) -> str:
    parts = []
    for i, side in enumerate(spec.sides):
        v = value_column(i)
        keys = ", ".join(f"{v}.{quoted(f)} AS {quoted(f)}" for f in spec.join_fields or ())
        parts.append(
            f"SELECT {keys}, '{side}' AS side, __arrived AS arrived_txid, __arrived_ts AS "
            f"arrived_ts, __reason AS reason, CAST(to_json({v}) AS VARCHAR) AS values_json, "
            f"{i} AS __i FROM r WHERE __kind = 'x' AND __s = {i}"
        )
    order = ", ".join(quoted(f) for f in spec.join_fields or ())
    cols = ", ".join(quoted(f) for f in expired_fields(spec))
    return f"SELECT {cols} FROM ({' UNION ALL '.join(parts)}) ORDER BY arrived_txid, {order}, __i"


def read_job_rows(spec: SingleJoin, rows: pa.Table, txid: int) -> JoinJobResult:
    """The job's ``rows`` as the batch's result, read with DuckDB as the join kept in DuckDB does.

    The joined tuples come ordered by completing side and batch position, the expired halves
    by arrival txid, key and side (``values_json`` from DuckDB's ``to_json``, key columns typed
    as the sides' common type).

    Raises:
        DuplicateJoinSideError: a partition found a side arriving twice for a pending key
            (the first in side and batch order over all partitions).
    """
    con = duckdb.connect()
    try:
        con.register("r", rows)
        dup = con.execute(
            "SELECT __s, __o, __arrived FROM r WHERE __kind = 'd' ORDER BY __s, __o LIMIT 1"
        ).fetchall()
        if dup:
            side, ord_, arrived = dup[0]
            v = value_column(side)
            fields = ", ".join(f"{v}.{quoted(f)}" for f in spec.join_fields or ())
            key = con.execute(
                f"SELECT {fields} FROM r WHERE __kind = 'd' AND __s = ? AND __o = ?", [side, ord_]
            ).fetchall()[0]
            raise DuplicateJoinSideError(tuple(key), spec.sides[side], arrived, txid)
        joined = con.sql(_joined_sql(spec)).to_arrow_table()
        expired = con.sql(_expired_sql(spec)).to_arrow_table()
        keys_in, delta = con.execute(
            "SELECT COALESCE(sum(__keys_in), 0), COALESCE(sum(__delta), 0) FROM r "
            "WHERE __kind = 'n'"
        ).fetchall()[0]
    finally:
        con.close()
    return JoinJobResult(joined, expired, int(keys_in), int(delta))

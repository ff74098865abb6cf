"""The engine of a state kept in a Redis Cluster or memcached: updated where the data is.

The batch input (:func:`kv_input`) is the batch's per-key partials as a Spark DataFrame,
never collected, with the null values a Sum/Min/Max skipped. The apply
(:func:`apply_kv_state`, inside the txid's commit transaction of the topology's store) runs
one Spark job in which each partition reads its own keys
(``multi_get``), applies the txid rules of :mod:`trident_assets.core.maps` (an opaque key
stored at this txid is recomputed from ``prev``; a transactional one is skipped) and writes
them back (``multi_put``; Redis waits for a replica), returning only its counts and a
preview of at most :data:`~trident_assets.runtime.outcomes.PREVIEW_ROWS` of its keys. The commit
marker moves after the job succeeded in every partition, in the same
:func:`~trident_assets.runtime.commit.commit` as any other state: a txid that failed
after some partitions wrote runs again and recomputes exactly (Trident's coordinator commits
after the state updates the same way). The outcome's ``size`` is the number of keys the state
holds after the batch, read from a Redis Cluster's key counters; memcached cannot count them
(``None``: unknown, see :func:`~trident_assets.backends.kv_backing.state_size`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.kv_backing import open_backing, read_latest, refuse_as_of, state_size
from trident_assets.backends.kv_target import MEMCACHED, KeyValueTarget, target_of
from trident_assets.backends.memcached_map import MemcachedBackingMap, check_sentinels
from trident_assets.backends.redis_cluster_map import RedisClusterBackingMap
from trident_assets.core.aggregators import apply_combiner
from trident_assets.core.caching import GLOBAL_KEY
from trident_assets.core.maps import map_state_of
from trident_assets.core.user_code import guard
from trident_assets.runtime.outcomes import (
    PREVIEW_ROWS,
    Applied,
    StateInput,
    StateOutcome,
    top_rows,
)
from trident_assets.spark.aggregation import (
    NULLS_COLUMN,
    VALUES_COLUMN,
    combine_partials,
    skips_nulls,
    state_partials,
)
from trident_assets.spark.user_errors import worker_errors

if TYPE_CHECKING:
    from trident_assets.core.protocols import Key
    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.streams import TridentState

__all__ = [
    "apply_kv_state",
    "close_kv_map",
    "kv_input",
    "kv_map",
    "read_kv_state",
]

COUNTS_SCHEMA = "written long, skipped long, preview string"
"""What each partition returns: keys written, keys skipped (a transactional replay), and its
preview: a JSON list of at most PREVIEW_ROWS ``[key values, new value]`` pairs."""


def kv_map(state: TridentState) -> Any:
    """The state's MapState (opaque, transactional or not) over its servers, for reads.

    Read outside any batch, a value is its ``curr``; :func:`close_kv_map` closes its
    connections.
    """
    return map_state_of(state.spec.state_type, open_backing(target_of(state)))


def close_kv_map(mstate: Any) -> None:
    """Close the servers' connections of a map :func:`kv_map` opened (other maps: nothing)."""
    backing = getattr(mstate, "backing", None)
    backing = getattr(backing, "delegate", backing)
    if isinstance(backing, RedisClusterBackingMap | MemcachedBackingMap):
        backing.close()


def read_kv_state(state: TridentState, as_of: int | None = None) -> pa.Table:
    """Every key of ``state`` with its latest value (the group fields + the value field).

    Raises:
        KeyValueStoreError: ``as_of`` is given (the servers keep no history), or the store
            cannot list its keys (memcached).
    """
    target = target_of(state)
    if as_of is not None:
        raise refuse_as_of(target, as_of)
    return read_latest(target, list(state.group), str(state.value_field))


def kv_input(run: BatchContext, state: TridentState) -> StateInput:
    """The batch's per-key partials, a Spark DataFrame left on the executors, and its nulls.

    As for a state in the topology's store: a grouped Sum/Min/Max group whose values were
    all null has no partial (its key is not touched), and the null values a Sum/Min/Max
    skipped are the input's null values, counted by a Spark job over the batch's input
    column that returns one number (none for an empty input, or for Count and Python
    combiners: they skip none). A global state's one row is keyed by the global key.
    """
    from pyspark.sql import functions as F

    a = state.node.args
    agg = guard(a["agg"], state.node.label)
    group, out, column = a["group"], a["output"], a["inputs"][0]
    node = state.node.parents[0]
    parent = run.frame(node)
    if not skips_nulls(agg):
        return StateInput(combine_partials(parent, group, column, agg, out))
    partials = state_partials(parent, group, column, agg, out)
    if group:
        partials = partials.where(F.col(VALUES_COLUMN) > 0)
    partials = partials.drop(NULLS_COLUMN, VALUES_COLUMN)
    if run.is_empty(node):
        return StateInput(partials, nulls=0)
    counted = parent.agg(F.count(F.when(F.col(column).isNull(), F.lit(1))))
    with worker_errors():
        nulls = int(counted.collect()[0][0])
    return StateInput(partials, nulls=nulls)


class _Counted:
    """Delegates to a backing map and counts the keys written."""

    def __init__(self, delegate: Any) -> None:
        self.delegate = delegate
        self.written = 0

    def multi_get(self, keys: list[Key]) -> list[Any]:
        return self.delegate.multi_get(keys)

    def multi_put(self, keys: list[Key], values: list[Any]) -> None:
        self.delegate.multi_put(keys, values)
        self.written += len(keys)


def apply_partition(
    target: KeyValueTarget,
    agg: Any,
    group: tuple[str, ...],
    output: str,
    txid: int,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Apply one partition's partials to its keys on the servers; yield its counts and preview.

    Each Arrow batch is one ``multi_get`` and at most one ``multi_put`` through the state's
    map (:mod:`trident_assets.core.maps`). A partition's keys are distinct (the partials
    are grouped), so no key is written twice. The preview is the partition's
    :data:`PREVIEW_ROWS` keys with the highest values after the batch (:func:`top_rows`).
    """
    backing = _Counted(open_backing(target, txid))
    state = map_state_of(target.state_type, backing)
    seen = 0
    top: pa.Table | None = None
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if group:
                columns = [batch.column(c).to_pylist() for c in group]
                keys: list[Key] = list(zip(*columns, strict=True))
            else:
                keys = [GLOBAL_KEY] * batch.num_rows
            state.begin_commit(txid)
            new = apply_combiner(state, agg, keys, batch.column(output).to_pylist())
            state.commit(txid)
            seen += batch.num_rows
            top = _top(top, group, keys, new)
    finally:
        backing.delegate.close()
    preview = [] if top is None else _pairs(top, group)
    yield pa.record_batch(
        [
            pa.array([backing.written], pa.int64()),
            pa.array([seen - backing.written], pa.int64()),
            pa.array([json.dumps(preview)], pa.string()),
        ],
        names=["written", "skipped", "preview"],
    )


_VALUE = "__value"
"""The value column of a partition's preview table (never a field name: fields are identifiers)."""


def _top(
    top: pa.Table | None, group: tuple[str, ...], keys: list[Key], values: list[Any]
) -> pa.Table:
    """The :data:`PREVIEW_ROWS` highest of ``top`` and one Arrow batch's new values."""
    columns: dict[str, Any] = {f: [k[i] for k in keys] for i, f in enumerate(group)}
    columns[_VALUE] = values
    table = pa.table(columns)
    if top is not None:
        table = pa.concat_tables([top, table], promote_options="permissive")
    return top_rows(table, _VALUE, group)


def _pairs(top: pa.Table, group: tuple[str, ...]) -> list[list[Any]]:
    """A preview table's rows as ``[key values, value]`` pairs (JSON-ready)."""
    keys = [top.column(f).to_pylist() for f in group]
    values = top.column(_VALUE).to_pylist()
    return [[[k[i] for k in keys], v] for i, v in enumerate(values)]


def kv_preview(state: TridentState, previews: list[str]) -> pa.Table:
    """The batch's preview: the partitions' previews merged, :data:`PREVIEW_ROWS` rows at most.

    Columns: the state's group fields and its value field (a global state: the value alone),
    the keys with the highest new values first, ties by key ascending.
    """
    group = tuple(state.group)
    value = str(state.value_field)
    pairs = [pair for text in previews for pair in json.loads(text)]
    columns: dict[str, Any] = {f: [p[0][i] for p in pairs] for i, f in enumerate(group)}
    columns[value] = [p[1] for p in pairs]
    return top_rows(pa.table(columns), value, group, PREVIEW_ROWS)


def apply_kv_state(run: BatchContext, state: TridentState, partials: Any) -> Applied:
    """Apply the batch's partials on the executors; the driver only sums their counts.

    The driver also receives each partition's preview (at most :data:`PREVIEW_ROWS` keys
    and their new values, so at most that many rows per partition) and keeps the batch's
    preview as ``state:<name>`` of :attr:`Applied.previews`. The outcome's ``size``: the keys
    the state holds once every partition has written (a Redis Cluster's key counters, read
    by one script per master), None for memcached (unknown).

    Runs inside the txid's commit transaction: the marker moves once every partition has
    written (a failed partition fails the txid, and its re-run recomputes exactly).

    Raises:
        KeyValueStoreError: a server is unreachable, lost the state's keys (memcached) or
            did not replicate the writes (Redis); the txid is not committed.
    """
    from pyspark.sql import functions as F

    target = target_of(state)
    if target.store == MEMCACHED:
        first = run.runner.store.last_committed(state.topology.name) is None
        check_sentinels(target, first)
    a = state.node.args
    job = partial(
        apply_partition,
        target,
        guard(a["agg"], state.node.label),
        a["group"],
        a["output"],
        run.txid,
    )
    counts = partials.mapInArrow(job, COUNTS_SCHEMA).agg(
        F.coalesce(F.sum("written"), F.lit(0)).alias("written"),
        F.coalesce(F.sum("skipped"), F.lit(0)).alias("skipped"),
        F.collect_list("preview").alias("previews"),
    )
    with worker_errors():
        written, skipped, previews = counts.collect()[0]
    keys_in = int(written) + int(skipped)
    size = state_size(target, run.txid)
    outcome = StateOutcome(state.spec.name, state.table, keys_in, int(written), int(skipped), size)
    return Applied(outcome, previews={f"state:{state.spec.name}": kv_preview(state, previews)})

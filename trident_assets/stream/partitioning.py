"""Repartitioning declarations: Trident's ``shuffle``, ``partitionBy``, ``global`` and friends.

Each operation declares a ``repartition`` node; the fields are unchanged. Spark runs it as
(:mod:`trident_assets.spark.partitioning`):

=====================  ==========================================================================
``shuffle``            ``repartition(n)``: round robin over ``n`` partitions (the hint, else
                       ``spark.sql.shuffle.partitions``).
``local_or_shuffle``   The tuples stay in their Spark partition (Spark's tasks are local);
                       with a hint, ``repartition(n)``.
``partition_by(f)``    ``repartition([n,] f)``: hash partitioning, each key in exactly one
                       partition (Storm's fields grouping), so a following grouped
                       ``partition_aggregate`` emits one tuple per key.
``global_``            ``repartition(1)``: the whole batch in one partition.
``batch_global``       ``repartition(1)``: a batch runs as its own DataFrame, so "one partition
                       per batch" is one partition (Trident spreads different batches over tasks).
``broadcast``          ``repartition(1)``: every tuple is seen once by a partition holding the
                       whole batch. Trident copies each tuple to every task so that each task
                       sees the whole batch (e.g. to query every partition of a partitioned
                       state); a state here is one table, so one copy sees all of it. With
                       parallelism 1 (Trident's default) the results are the same; no copies
                       are made for a larger hint.
``identity_partition`` The tuples stay in their Spark partition (partition i feeds partition i).
=====================  ==========================================================================

``parallelism_hint(n)`` sets the number of Spark partitions of the operations after the
nearest repartitioning upstream (Trident: the parallelism of that bolt group, the max of its
hints). ``global_``, ``batch_global``, ``broadcast`` and ``identity_partition`` ignore it, as
Trident's global grouping always targets one task. Before any repartitioning, a stream keeps
the Spark partitions its spout read (one per log segment file), so the hint is recorded only.
"""

from __future__ import annotations

from enum import StrEnum

from trident_assets.errors import ConfigError
from trident_assets.stream.fields import Fields, as_fields, require_fields
from trident_assets.stream.graph import Node, StreamT

__all__ = ["REPARTITION", "Partitioning", "parallelism_hint", "repartition"]

REPARTITION = "repartition"
"""The node kind of every repartitioning operation."""

_SAME_GROUP = frozenset(
    {"each", "filter", "project", "map", "flat_map", "peek", "query", "partition_aggregate"}
)
"""Node kinds that stay in the bolt group of the repartitioning before them (Trident)."""


class Partitioning(StrEnum):
    """How a ``repartition`` node moves tuples between partitions."""

    SHUFFLE = "shuffle"
    LOCAL_OR_SHUFFLE = "local_or_shuffle"
    PARTITION_BY = "partition_by"
    GLOBAL = "global"
    BATCH_GLOBAL = "batch_global"
    BROADCAST = "broadcast"
    IDENTITY = "identity_partition"

    @property
    def single(self) -> bool:
        """True when the batch ends up in one partition whatever the parallelism."""
        return self in (Partitioning.GLOBAL, Partitioning.BATCH_GLOBAL, Partitioning.BROADCAST)


def repartition(stream: StreamT, how: Partitioning, fields: Fields = ()) -> StreamT:
    """Declare a ``repartition`` node after ``stream`` (fields unchanged).

    Raises:
        ConfigError: ``partition_by`` without fields, or a malformed name.
        FieldNotFoundError: a ``partition_by`` field the stream does not have.
    """
    keys: tuple[str, ...] = ()
    if how is Partitioning.PARTITION_BY:
        keys = as_fields(fields, "partition_by")
        if not keys:
            msg = "partition_by needs at least one field"
            raise ConfigError(msg)
        require_fields(keys, stream.fields, "partition_by")
    return stream.derive(REPARTITION, stream.fields, how=how, keys=keys, parallelism=None)


def parallelism_hint(stream: StreamT, n: int) -> StreamT:
    """Give the bolt group ``stream`` ends (from its last repartitioning) ``n`` partitions.

    The hint is stored on that repartitioning node (the group's parallelism is the max of
    its hints, as Trident's); without one upstream it is recorded on the stream's node only.

    Raises:
        ConfigError: ``n`` is not a positive integer.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        msg = f"parallelism_hint needs a positive number of partitions, got {n!r}"
        raise ConfigError(msg)
    node: Node = stream.node
    while node.kind in _SAME_GROUP and len(node.parents) == 1:
        node = node.parents[0]
    if node.kind == REPARTITION:
        node.args["parallelism"] = max(node.args["parallelism"] or 0, n)
    else:
        stream.node.args["parallelism_hint"] = max(stream.node.args.get("parallelism_hint", 0), n)
    return stream

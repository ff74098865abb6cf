"""Memoised per-node DataFrames, their Arrow results and the row-wise operations.

:class:`NodeFrames` builds each topology node's DataFrame once per chunk of txids, collects
it as Arrow (its schema found once per runner: :mod:`~.frame_schemas`), and runs the
row-wise operations (``each``, ``filter``, ``project``, ``peek``), which a state's own
observed frames (:mod:`~trident_assets.spark.observed`) run too; the frame builder
(:class:`~trident_assets.spark.batch_run.BatchRun`) builds the other kinds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.core.aggregators import is_sql_combiner
from trident_assets.core.caching import GLOBAL_KEY
from trident_assets.core.user_code import with_step
from trident_assets.runtime.outcomes import GLOBAL_COLUMN
from trident_assets.spark.frame_schemas import to_arrow
from trident_assets.spark.partitioning import peek_frame

if TYPE_CHECKING:
    from collections.abc import Callable

    from trident_assets.spark.batch_context import RunContext
    from trident_assets.stream.graph import Node

__all__ = ["NodeFrames", "global_partials"]


def global_partials(values: pa.Array) -> dict[str, pa.Array]:
    """The key column of a global (ungrouped) state's partials, one per value."""
    return {GLOBAL_COLUMN: pa.array([GLOBAL_KEY[0]] * len(values))}


class NodeFrames(ABC):
    """Memoised DataFrames per topology node, for one batch or a pipelined chunk."""

    frames: dict[int, Any]
    runner: RunContext
    mode: Any
    """How the frames are read (``mode.keep``: the columns that tag a tuple with its batch)."""
    is_empty: Callable[[Node], bool]

    def frame(self, node: Node) -> Any:
        """The node's DataFrame, built once."""
        key = id(node)
        if key not in self.frames:
            self.frames[key] = self._build(node)
        return self.frames[key]

    @abstractmethod
    def _build(self, node: Node) -> Any:
        """Build the node's DataFrame (each subclass knows the node kinds it runs)."""

    def empty_table(self, key: str, df: Any) -> pa.Table:
        """An empty Arrow table with ``df``'s schema, found once per runner.

        ``key`` names the frame (its schema is the same in every txid); a tagged chunk's
        frames are kept apart from a chunk of one's.
        """
        return self.runner.empty_tables.get((key, self.mode.keep), lambda: df)

    def to_arrow(self, key: str, df: Any) -> pa.Table:
        """``df.toArrow()`` (:func:`to_arrow`), its schema found once per runner.

        ``key`` names the frame as for :meth:`empty_table`.
        """
        return to_arrow(df, self.empty_table(key, df).schema)

    def collect(self, node: Node) -> pa.Table:
        """The node's tuples as Arrow (tagged in a chunk of several); an empty node costs no job.

        Neither does a global SQL-combiner aggregate of an empty stream: its one row is
        ``agg.zero()``, as :func:`~.aggregation.combine_partials` computes it.
        """
        frame = self.frame(node)
        if self.is_empty(node):
            return self.empty_table(f"node:{id(node)}", frame)
        a = node.args
        if (
            node.kind == "aggregate"
            and not a["group"]
            and is_sql_combiner(a["agg"])
            and self.is_empty(node.parents[0])
        ):
            (field_,) = self.empty_table(f"node:{id(node)}", frame).schema
            return pa.table({field_.name: pa.array([a["agg"].zero()], field_.type)})
        return self.to_arrow(f"node:{id(node)}", frame)

    @staticmethod
    def row_wise(node: Node, parent: Any, keep: tuple[str, ...] = ()) -> Any:
        """``each``, ``filter``, ``project`` or ``peek`` over ``parent``; None for any other kind.

        ``keep``: further columns that ``project`` keeps (a pipelined chunk's txid tag).
        """
        a = node.args
        if node.kind == "each":
            fn = a["function"]
            return with_step(fn.apply, parent, a["inputs"], a["outputs"], step=node.label)
        if node.kind == "filter":
            return with_step(a["filter"].apply, parent, a["inputs"], step=node.label)
        if node.kind == "project":
            return parent.select(*node.fields, *keep)
        if node.kind == "peek":
            return peek_frame(parent, node.fields, a["function"], node.label)
        return None

"""Memoised per-node DataFrames and the row-wise operations, shared by the frame builders.

:class:`NodeFrames` builds each topology node's DataFrame once per chunk of txids and runs
the row-wise operations (``each``, ``filter``, ``project``, ``peek``), which a state's own
observed frames (:mod:`~trident_assets.spark.observed`) run too; the frame builder
(:class:`~trident_assets.spark.batch_run.BatchRun`) builds the other kinds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.core.caching import GLOBAL_KEY
from trident_assets.core.user_code import with_step
from trident_assets.runtime.outcomes import GLOBAL_COLUMN
from trident_assets.spark.partitioning import peek_frame

if TYPE_CHECKING:
    from trident_assets.stream.graph import Node

__all__ = ["NodeFrames", "empty_arrow", "global_partials"]


def empty_arrow(df: Any) -> pa.Table:
    """An empty Arrow table with the schema ``df.toArrow()`` would have (no Spark job)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(
        df.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC"
    )
    return schema.empty_table()


def global_partials(values: pa.Array) -> dict[str, pa.Array]:
    """The key column of a global (ungrouped) state's partials, one per value."""
    return {GLOBAL_COLUMN: pa.array([GLOBAL_KEY[0]] * len(values))}


class NodeFrames(ABC):
    """Memoised DataFrames per topology node, for one batch or a pipelined chunk."""

    frames: dict[int, Any]

    def frame(self, node: Node) -> Any:
        """The node's DataFrame, built once."""
        key = id(node)
        if key not in self.frames:
            self.frames[key] = self._build(node)
        return self.frames[key]

    @abstractmethod
    def _build(self, node: Node) -> Any:
        """Build the node's DataFrame (each subclass knows the node kinds it runs)."""

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

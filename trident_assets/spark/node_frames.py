"""Memoised per-node DataFrames, their Arrow results and the row-wise operations.

:class:`NodeFrames` builds each topology node's DataFrame once per chunk of txids, collects
it as Arrow (its schema found once per runner), and runs the row-wise operations (``each``,
``filter``, ``project``, ``peek``), which a state's own observed frames
(:mod:`~trident_assets.spark.observed`) run too; the frame builder
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
from trident_assets.spark.partitioning import peek_frame

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

    from trident_assets.runtime.context import RunContext
    from trident_assets.stream.graph import Node

__all__ = ["NodeFrames", "empty_arrow", "empty_table", "global_partials", "to_arrow"]


def empty_arrow(df: Any) -> pa.Table:
    """An empty Arrow table with the schema ``df.toArrow()`` would have (no Spark job)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(
        df.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC"
    )
    return schema.empty_table()


def empty_table(known: dict[Hashable, pa.Table], key: Hashable, df: Any) -> pa.Table:
    """:func:`empty_arrow` of ``df``, found once per ``key`` in ``known`` (a runner's).

    ``key`` names a frame of the topology whose schema is the same in every txid (a spout's
    dead letters, a state's partials, an output; tagged or not): analysing a plan costs a
    round trip to the engine on every call, about 40 ms on Spark Connect.
    """
    found = known.get(key)
    if found is None:
        found = known[key] = empty_arrow(df)
    return found


def to_arrow(df: Any, schema: pa.Schema) -> pa.Table:
    """``df.toArrow()``, typed by ``schema``: the Arrow schema ``df.toArrow()`` gives.

    On Spark Connect, ``toArrow`` first asks the server for the schema (a round trip and a
    plan analysis, about 50 ms); with the schema known (:func:`empty_table`) only the plan
    runs. A schema that does not fit the result raises (Arrow's cast), never converts
    silently. A classic session reads the schema in its own JVM: ``toArrow`` as is.
    """
    to_table = getattr(df, "_to_table", None)
    if to_table is None or not type(df).__module__.startswith("pyspark.sql.connect"):
        return df.toArrow()
    table, _ = to_table()
    return table.cast(schema)


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
        return empty_table(self.runner.empty_tables, (key, self.mode.keep), df)

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

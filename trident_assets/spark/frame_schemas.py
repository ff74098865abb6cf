"""A frame's Arrow schema without a Spark job, found once per runner, and its Arrow result.

Analysing a plan costs a round trip to the engine on every call (about 40 ms on Spark
Connect), and a frame's schema does not change from one txid to the next: a runner keeps the
schemas it found (:class:`EmptyTables`), and :func:`to_arrow` collects a frame typed by it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable

__all__ = ["EmptyTables", "empty_arrow", "to_arrow"]


def empty_arrow(df: Any) -> pa.Table:
    """An empty Arrow table with the schema ``df.toArrow()`` would have (no Spark job)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(
        df.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC"
    )
    return schema.empty_table()


class EmptyTables:
    """Empty Arrow tables of a topology's frames (their schemas), found once per runner.

    Each costs the engine a plan analysis (a round trip on Spark Connect, about 40 ms), and
    a frame's schema does not change from one txid to the next.
    """

    def __init__(self) -> None:
        """None found yet."""
        self._found: dict[Hashable, pa.Table] = {}

    def get(self, key: Hashable, frame: Callable[[], Any]) -> pa.Table:
        """:func:`empty_arrow` of ``frame()``, found once per ``key``.

        ``key`` names a frame of the topology whose schema is the same in every txid (a
        spout's dead letters, a state's partials, an output; tagged or not).
        """
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = empty_arrow(frame())
        return found


def to_arrow(df: Any, schema: pa.Schema) -> pa.Table:
    """``df.toArrow()``, typed by ``schema``: the Arrow schema ``df.toArrow()`` gives.

    On Spark Connect, ``toArrow`` first asks the server for the schema (a round trip and a
    plan analysis, about 50 ms); with the schema known (:class:`EmptyTables`) only the plan
    runs. A schema that does not fit the result raises (Arrow's cast), never converts
    silently. A classic session reads the schema in its own JVM: ``toArrow`` as is.
    """
    to_table = getattr(df, "_to_table", None)
    if to_table is None or not type(df).__module__.startswith("pyspark.sql.connect"):
        return df.toArrow()
    table, _ = to_table()
    return table.cast(schema)

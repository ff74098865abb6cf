"""Assemblies: reusable chains of operations applied to a stream (Trident's ``Assembly``).

``FirstN`` is Trident's built-in assembly: the first ``n`` tuples of each batch (or of each
group of a grouped stream), optionally the ``n`` smallest (or, with ``reverse``, largest) by a
sort field. Spark runs it as a top-k (``orderBy().limit()``) or a ``row_number`` window, never
on the driver.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trident_assets.errors import ConfigError
from trident_assets.stream.fields import as_fields, require_fields

if TYPE_CHECKING:
    from trident_assets.stream.streams import Stream

__all__ = ["Assembly", "FirstN", "first_n_frame"]

_SEQ = "__trident_seq"


class Assembly(ABC):
    """Turns a stream into another; ``group`` is set when applied to a grouped stream."""

    @abstractmethod
    def apply(self, stream: Stream, group: tuple[str, ...] = ()) -> Stream:
        """Return the assembled stream."""


class FirstN(Assembly):
    """The first ``n`` tuples of each batch, or of each group (Trident's ``FirstN``).

    With ``sort_field`` the tuples with the smallest values of that field come first
    (``reverse=True``: the largest), ties in arrival order, nulls last; without it, the first
    ``n`` in arrival order within the batch's Spark partitions (an arbitrary but valid choice,
    as Trident's "first seen"). The fields are unchanged.
    """

    def __init__(self, n: int, sort_field: str | None = None, reverse: bool = False) -> None:
        """Keep ``n`` (>= 1) tuples, sorted by ``sort_field`` when given."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            msg = f"FirstN needs a positive number of tuples, got {n!r}"
            raise ConfigError(msg)
        self.n = n
        self.sort_field = None if sort_field is None else as_fields(sort_field, "FirstN")[0]
        self.reverse = reverse

    def apply(self, stream: Stream, group: tuple[str, ...] = ()) -> Stream:
        """Declare the ``first_n`` node; the sort field must exist."""
        if self.sort_field is not None:
            require_fields((self.sort_field,), stream.fields, "FirstN")
        return stream.derive(
            "first_n",
            stream.fields,
            n=self.n,
            sort_field=self.sort_field,
            reverse=self.reverse,
            group=group,
        )


def first_n_frame(
    df: Any, n: int, sort_field: str | None, reverse: bool, group: Sequence[str]
) -> Any:
    """The ``first_n`` node on Spark: a top-k for a batch, a ``row_number`` window per group."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    columns = list(df.columns)
    if sort_field is None:
        order = []
    else:
        col = F.col(sort_field)
        order = [col.desc_nulls_last() if reverse else col.asc_nulls_last()]
    seq = df.withColumn(_SEQ, F.monotonically_increasing_id())
    order = [*order, F.col(_SEQ)]
    if not group:
        return seq.orderBy(*order).limit(n).select(*columns)
    window = Window.partitionBy(*group).orderBy(*order)
    ranked = seq.withColumn("__trident_rank", F.row_number().over(window))
    return ranked.where(F.col("__trident_rank") <= n).select(*columns)

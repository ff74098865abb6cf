"""``min_by``, ``max_by``, ``min`` and ``max``: Trident's ComparisonAggregator, per partition.

Each Spark partition of the batch emits its smallest (or largest) tuple, whole, with the
stream's fields unchanged. Tuples whose compared field is null are skipped; on ties the later
tuple of the partition wins (Trident's ``compare(v1, v2)`` returns ``v2`` unless ``v1`` is
strictly better). A partition without tuples, or with only null values, emits nothing (as
``partition_aggregate`` here; Trident emits a null). Use ``global_()`` first for one tuple per
batch.

A comparator is a Python ``cmp(a, b) -> int`` (negative: ``a`` sorts first), as
``functools.cmp_to_key`` takes: over the field's values for ``min_by(field, cmp)``, over whole
tuples (value tuples in field order) for ``min(cmp)``. Built-in field comparisons run as Spark
expressions; comparators run in ``mapInArrow`` on the executors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trident_assets.errors import ConfigError
from trident_assets.stream.fields import as_fields, require_fields
from trident_assets.stream.graph import StreamT

__all__ = ["COMPARISON", "Comparator", "declare_comparison"]

COMPARISON = "comparison"
"""The node kind of ``min_by``/``max_by``/``min``/``max``."""

Comparator = Callable[[Any, Any], int]
"""``cmp(a, b)``: negative when ``a`` sorts before ``b``, zero when equal, else positive."""


def declare_comparison(
    stream: StreamT, field: str | None, comparator: Comparator | None, largest: bool
) -> StreamT:
    """Declare the ``comparison`` node (``largest``: max, else min) after ``stream``.

    Raises:
        ConfigError: neither a field nor a comparator, or a comparator that is not callable.
        FieldNotFoundError: ``field`` is not a field of the stream.
    """
    operation = ("max" if largest else "min") + ("_by" if field is not None else "")
    name = None
    if field is not None:
        (name,) = as_fields(field, operation)
        require_fields((name,), stream.fields, operation)
    elif comparator is None:
        msg = f"{operation} needs a comparator"
        raise ConfigError(msg)
    if comparator is not None and not callable(comparator):
        msg = f"{operation}: the comparator must be a callable cmp(a, b) -> int, got {comparator!r}"
        raise ConfigError(msg)
    return stream.derive(
        COMPARISON, stream.fields, field=name, comparator=comparator, largest=largest
    )

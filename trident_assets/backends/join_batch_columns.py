"""The combined batch table of a single join: one row per input row, whatever its side.

Columns: ``__side`` (the index of the row's side in the join's inputs), ``__v<i>`` (side i's
fields as a struct, NULL on other sides' rows; :func:`value_column`), optionally ``__ts`` (the
row's event time) and ``__ord`` (the row's position). :func:`combine_sides` builds it from one
Arrow table per side; the executor builds the same layout as a Spark union.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from trident_assets.core.join_spec import JoinInputError, SingleJoin
from trident_assets.names import validate_identifier

__all__ = [
    "ORD_COLUMN",
    "SIDE_COLUMN",
    "TS_COLUMN",
    "combine_sides",
    "key_expressions",
    "quoted",
    "value_column",
    "with_ord",
]

SIDE_COLUMN = "__side"
"""Combined batch table: the index of the row's side in the join's inputs."""
ORD_COLUMN = "__ord"
"""Combined batch table: the row's position (orders the rows of a side)."""
TS_COLUMN = "__ts"
"""Combined batch table: the row's event time in seconds (NULL if none)."""


def value_column(i: int) -> str:
    """Combined batch table: the column of side ``i``'s rows (a struct of its fields)."""
    return f"__v{i}"


def quoted(name: str) -> str:
    """Return ``name`` as a quoted SQL identifier, after checking it is a valid one."""
    return f'"{validate_identifier(name, "column")}"'


def combine_sides(spec: SingleJoin, rows_by_side: Mapping[str, pa.Table]) -> pa.Table:
    """Build the combined batch table from one Arrow table per side.

    Each table must have (at least) the side's declared fields; every side must be given
    (an empty table for a side without rows), since its column types define the state's.

    Raises:
        JoinInputError: an unknown or missing side, or a table without a declared field.
    """
    unknown = [s for s in rows_by_side if s not in spec.sides]
    missing = [s for s in spec.sides if s not in rows_by_side]
    if unknown or missing:
        msg = (
            f"rows_by_side must hold one Arrow table for each side {list(spec.sides)}; "
            f"unknown: {unknown}, missing: {missing}"
        )
        raise JoinInputError(msg)
    parts = []
    for i, (side, fields) in enumerate(spec.inputs):
        table = rows_by_side[side]
        absent = [f for f in fields if f not in table.column_names]
        if absent:
            msg = f"the table of side {side!r} lacks its field(s) {absent}; it has {table.schema}"
            raise JoinInputError(msg)
        struct = pa.StructArray.from_arrays(
            [table.column(f).combine_chunks() for f in fields], names=list(fields)
        )
        parts.append(
            pa.table(
                {
                    SIDE_COLUMN: pa.array(np.full(table.num_rows, i, dtype=np.int32)),
                    value_column(i): struct,
                    TS_COLUMN: pa.nulls(table.num_rows, pa.float64()),
                }
            )
        )
    return pa.concat_tables(parts, promote_options="default")


def with_ord(batch: pa.Table) -> pa.Table:
    """Return ``batch`` with an ``__ord`` column (the row positions) unless it has one."""
    if ORD_COLUMN in batch.column_names:
        return batch
    return batch.append_column(ORD_COLUMN, pa.array(np.arange(batch.num_rows, dtype=np.int64)))


def key_expressions(spec: SingleJoin) -> list[str]:
    """Per join field, its value in a combined batch row (SQL over the ``__v<i>`` structs).

    Only the row's side is non-NULL.
    """
    out = []
    for field in spec.join_fields or ():
        parts = [f"{value_column(i)}.{quoted(field)}" for i in range(len(spec.inputs))]
        out.append(f"COALESCE({', '.join(parts)})")
    return out

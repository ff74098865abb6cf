"""A batch's per-key partials as Parquet files, merged by DuckDB inside the txid's commit.

With ``trident.partials.spill`` on, Spark's executors write a state's partials (one row per
key) as Parquet files instead of sending them to the driver. The commit transaction then
reads them where they lie: ONE scan of the files for the checks and counts
(:class:`PartialsStats`) and ONE merge statement, the statement of
:func:`~trident_assets.backends.duckdb_merge.apply_partials`, with the same txid rules. The
rows stream from disk through DuckDB: the driver's Python process never holds the batch.

The files are checked before anything is written: their row count must be the count the
writer observed (files an executor wrote where the driver cannot read them are refused, not
read as an empty batch), and key columns hold no nulls.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from trident_assets.backends.duckdb_merge import (
    Combine,
    MergeResult,
    check_schema,
    refuse_null_keys,
    refuse_null_sum,
    resolve_layout,
    run_merge,
    value_sql_type,
)
from trident_assets.backends.map_layout import quote_ident
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError

_WHERE = (
    "Set trident.partials.spillDir to a directory the driver and every executor share, or "
    "set trident.partials.spill to false. Nothing was committed"
)

__all__ = ["ParquetPartials", "PartialsStats", "apply_parquet_partials", "staged_partials"]


@dataclass(frozen=True, slots=True)
class ParquetPartials:
    """One txid's per-key partials of one state, in Parquet files the executors wrote."""

    files: tuple[str, ...]
    """The files (none: the batch had no partials)."""
    schema: pa.Schema
    """The Arrow schema of their rows: key columns, value column, maybe count columns."""
    where: str
    """Where the writer put them (named in errors)."""
    rows: int
    """How many rows the writer wrote (checked against the files)."""
    keep_column: str | None = None
    """A column counting each row's non-null input values: a row where it is 0 is a group
    of only nulls, which is not a partial (the key is not updated)."""
    nulls_column: str | None = None
    """A column counting each row's null input values (skipped)."""
    distinct_keys: bool = True
    """No key appears twice (the rows are a GROUP BY's groups)."""


@dataclass(frozen=True, slots=True)
class PartialsStats:
    """What one scan of the files found."""

    rows: int
    """The partials: rows that are not a group of only nulls."""
    nulls: int
    """Null input values skipped (the ``nulls_column`` summed)."""
    total: Any
    """The sum of the partials' values (None when not numeric or no rows)."""
    null_values: int
    """Partials whose value is null."""


@contextmanager
def staged_partials(
    store: Any, table: str, parts: ParquetPartials, key_columns: Sequence[str], value_column: str
) -> Iterator[tuple[str, PartialsStats]]:
    """For the ``with`` block: a view of the partials (key and value columns) and their stats.

    ``table``: the state's map table (named in errors).

    Raises:
        ConfigError: the files hold another number of rows than the writer wrote (they are
            not where the driver reads them), or lack a column.
        StateLayoutError: a key column holds nulls.
    """
    keys = [quote_ident(c) for c in key_columns]
    value = quote_ident(value_column)
    keep = f"{quote_ident(parts.keep_column)} > 0" if parts.keep_column else "TRUE"
    nulls = f"coalesce(sum({quote_ident(parts.nulls_column)}), 0)" if parts.nulls_column else "0"
    numeric = pa.types.is_integer(parts.schema.field(value_column).type) or pa.types.is_floating(
        parts.schema.field(value_column).type
    )
    total = f"sum({value}) FILTER (WHERE {keep})" if numeric else "NULL"
    null_counts = [f"count(*) FILTER (WHERE {keep} AND {c} IS NULL)" for c in (*keys, value)]
    with _files(store, parts) as raw:
        found = store.fetch_rows(
            f"SELECT count(*), count(*) FILTER (WHERE {keep}), {nulls}, {total}, "
            f"{', '.join(null_counts)} FROM {quote_ident(raw)}"
        )[0]
        if found[0] != parts.rows:
            msg = (
                f"the partials in {parts.where} hold {found[0]} rows, but the Spark job wrote "
                f"{parts.rows}: the executors wrote them where this process cannot read them. "
                f"{_WHERE}"
            )
            raise ConfigError(msg)
        for column, count in zip(key_columns, found[4:], strict=False):
            refuse_null_keys(table, column, int(count))
        stats = PartialsStats(int(found[1]), int(found[2]), found[3], int(found[-1]))
        cols = ", ".join([*keys, value])
        with store.staged_query(f"SELECT {cols} FROM {quote_ident(raw)} WHERE {keep}") as view:
            yield view, stats


@contextmanager
def _files(store: Any, parts: ParquetPartials) -> Iterator[str]:
    """A view over the files (an empty one when there are none)."""
    if parts.files:
        for file in parts.files:
            if not Path(file).is_file():
                msg = (
                    f"partials file {file} is missing: something removed it before the "
                    f"commit, or it is not where this process reads. {_WHERE}"
                )
                raise ConfigError(msg)
        with store.staged_files(parts.files) as name:
            yield name
    else:
        with store.staged(parts.schema.empty_table()) as name:
            yield name


def apply_parquet_partials(
    store: Any,
    table: str,
    view: str,
    stats: PartialsStats,
    parts: ParquetPartials,
    *,
    key_columns: Sequence[str],
    value_column: str,
    combine: Combine,
    state_type: StateType,
    txid: int | None,
) -> MergeResult:
    """Apply the partials of ``view`` (see :func:`staged_partials`) to map ``table``.

    The rules, checks and errors of :func:`~trident_assets.backends.duckdb_merge.
    apply_partials`, in ONE statement inside the store's transaction; no new values are
    returned (read them back with ``store.latest_sql(layout, view)``).
    """
    keys, key_types = check_schema(table, parts.schema, key_columns, value_column)
    value_type = value_sql_type(table, parts.schema, value_column, combine)
    if combine == "sum":
        refuse_null_sum(table, value_column, stats.null_values)
    stored, wanted = resolve_layout(store, table, keys, key_types, value_type, state_type)
    distinct = parts.distinct_keys and "DOUBLE" not in key_types
    with store.transaction():
        layout = stored or store.ensure_map(wanted)
        updated = int(
            run_merge(store, layout, view, value_column, combine, txid, distinct, returning=False)
        )
        keys_in = updated
        if wanted.kind == "transactional":
            keys_in = stats.rows if distinct else _distinct_keys(store, view, keys)
    return MergeResult(keys_in, updated, keys_in - updated, None)


def _distinct_keys(store: Any, view: str, keys: list[str]) -> int:
    cols = ", ".join(quote_ident(k) for k in keys)
    return int(
        store.fetch_rows(f"SELECT count(*) FROM (SELECT DISTINCT {cols} FROM {quote_ident(view)})")[
            0
        ][0]
    )

"""A batch's per-key partials the executors wrote, merged inside the txid's commit.

With ``trident.partials.spill`` on, Spark's executors write a state's partials (one row per
key) where the store reads them, instead of sending them to the driver: Parquet files for
DuckDB, a staging table for PostgreSQL (the executors ``COPY`` into it). The commit
transaction then reads them where they lie: ONE scan for the checks and counts
(:class:`PartialsStats`) and ONE merge statement, the statement of
:func:`~trident_assets.backends.duckdb_merge.apply_partials`, with the same txid rules. The
rows go from the files or the staging table to the state inside the store: the driver's
Python process never holds the batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from trident_assets.backends.duckdb_merge import MergeResult
from trident_assets.backends.map_layout import quote_ident
from trident_assets.backends.merge_checks import (
    Combine,
    check_schema,
    refuse_null_keys,
    refuse_null_sum,
    resolve_layout,
    value_sql_type,
)
from trident_assets.backends.merge_sql import run_merge
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError
from trident_assets.names import validate_identifier

_WHERE = (
    "Set trident.partials.spillDir to a directory the driver and every executor share, or "
    "set trident.partials.spill to false. Nothing was committed"
)
_GONE = (
    "Something removed rows of the staging table before the commit (did another runner of "
    "this topology start?). Nothing was committed: run the txid again"
)

__all__ = ["SpilledPartials", "PartialsStats", "apply_spilled_partials", "staged_partials"]


@dataclass(frozen=True, slots=True)
class SpilledPartials:
    """One txid's per-key partials of one state, where the executors wrote them.

    In Parquet ``files`` (DuckDB), or in staging ``table`` of the store (PostgreSQL).
    """

    files: tuple[str, ...]
    """The files (none: in ``table``, or the batch had no partials)."""
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
    table: str | None = None
    """The staging table holding them (PostgreSQL), if not in files."""


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
    store: Any, table: str, parts: SpilledPartials, key_columns: Sequence[str], value_column: str
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
    with _rows(store, parts) as raw:
        found = store.fetch_rows(
            f"SELECT count(*), count(*) FILTER (WHERE {keep}), {nulls}, {total}, "
            f"{', '.join(null_counts)} FROM {quote_ident(raw)}"
        )[0]
        if found[0] != parts.rows:
            why = (
                _GONE
                if parts.table
                else f"the executors wrote them where this process cannot read them. {_WHERE}"
            )
            msg = (
                f"the partials in {parts.where} hold {found[0]} rows, but the Spark job wrote "
                f"{parts.rows}: {why}"
            )
            raise ConfigError(msg)
        for column, count in zip(key_columns, found[4 : 4 + len(keys)], strict=True):
            refuse_null_keys(table, column, int(count))
        stats = PartialsStats(int(found[1]), int(found[2]), found[3], int(found[-1]))
        cols = ", ".join([*keys, value])
        with store.staged_query(f"SELECT {cols} FROM {quote_ident(raw)} WHERE {keep}") as view:
            yield view, stats


@contextmanager
def _rows(store: Any, parts: SpilledPartials) -> Iterator[str]:
    """A relation of the rows: the staging table, a view over the files, or an empty one."""
    if parts.table:
        yield validate_identifier(parts.table, "staging table")
    elif parts.files:
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


def apply_spilled_partials(
    store: Any,
    table: str,
    view: str,
    stats: PartialsStats,
    parts: SpilledPartials,
    *,
    key_columns: Sequence[str],
    value_column: str,
    combine: Combine,
    state_type: StateType,
    txid: int | None,
    new_values: tuple[str, Sequence[str]] | None = None,
) -> MergeResult:
    """Apply the partials of ``view`` (see :func:`staged_partials`) to map ``table``.

    The rules, checks and errors of :func:`~trident_assets.backends.duckdb_merge.
    apply_partials`, in ONE statement inside the store's transaction; no new values are
    returned (read them back with ``store.latest_sql(layout, view)``). PostgreSQL:
    ``new_values=(table, columns)``: the statement appends each key it writes, with its new
    value, to that per-txid table (prepared by the caller).
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
            run_merge(
                store,
                layout,
                view,
                value_column,
                combine,
                txid,
                distinct,
                returning=False,
                in_key_order=False,  # PostgreSQL appends in key order: the rows are unsorted
                into=new_values if store.dialect.is_postgres else None,
            )
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

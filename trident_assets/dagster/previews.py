"""Batch previews as Dagster metadata: a Markdown table of a few rows and the column schema.

The rows come from :attr:`BatchOutcome.previews <trident_assets.runtime.outcomes.BatchOutcome.
previews>` (at most a few rows per asset, computed from the batch, never from the whole
state); this module only formats them for the asset page.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import pyarrow as pa

from trident_assets.overview import markdown_cell

__all__ = ["column_schema", "markdown_table", "preview_metadata"]

MAX_CELL = 60
"""Characters shown per cell of a Markdown preview (longer values are cut with ``…``)."""


def markdown_table(table: pa.Table) -> str:
    """``table`` as a Markdown table (a header row even when it has no rows).

    Example:
        >>> print(markdown_table(pa.table({"word": ["the"], "count": [3]})))
        | word | count |
        |---|---|
        | the | 3 |
    """
    head = "| " + " | ".join(markdown_cell(c, MAX_CELL) for c in table.column_names) + " |"
    rule = "|" + "|".join("---" for _ in table.column_names) + "|"
    body = [
        "| " + " | ".join(markdown_cell(row[c], MAX_CELL) for c in table.column_names) + " |"
        for row in table.to_pylist()
    ]
    return "\n".join([head, rule, *body])


def column_schema(schema: pa.Schema) -> dg.TableSchema:
    """The Dagster column schema (``dagster/column_schema``) of an Arrow schema."""
    return dg.TableSchema(columns=[dg.TableColumn(f.name, str(f.type)) for f in schema])


def preview_metadata(table: pa.Table, total_rows: int | None = None) -> dict[str, Any]:
    """``preview`` (Markdown of ``table``'s rows) and ``dagster/column_schema`` of a batch table.

    ``total_rows``: the batch's row count, to say how many rows the preview leaves out.
    """
    text = markdown_table(table)
    if total_rows is not None and total_rows > table.num_rows:
        text += f"\n\n{table.num_rows} of {total_rows:,} rows"
    return {
        "preview": dg.MetadataValue.md(text),
        "dagster/column_schema": column_schema(table.schema),
    }

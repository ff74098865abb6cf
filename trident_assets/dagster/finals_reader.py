"""Reading an event-window state's finals for a time range (the IO manager's finals input).

Apart from :mod:`.window_assets` so that the IO manager imports it without the asset graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import dagster as dg
import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident
from trident_assets.errors import ConfigError

__all__ = ["naive_utc", "read_finals_range"]


def naive_utc(value: datetime) -> datetime:
    """An aware instant as the naive UTC datetime the store's TIMESTAMP columns hold."""
    return value.astimezone(UTC).replace(tzinfo=None)


def read_finals_range(location: str, meta: Mapping[str, Any], window: dg.TimeWindow) -> pa.Table:
    """The finals rows of a finals asset (``meta``) with window_start in ``window``.

    Opens the state store read-only (a DuckDB file being written by a running batch is
    locked: load finals between batches).
    """
    from trident_assets.backends.state_store import open_state_store

    table = str(meta["trident/table"])
    keys = "".join(f"{quote_ident(k)}, " for k in meta.get("trident/key_fields", []))
    with open_state_store(location, read_only=True) as store:
        if not store.has_table(table):
            msg = f"finals table {table} does not exist yet: no window is final"
            raise ConfigError(msg)
        return store.fetch_arrow(
            f"SELECT * FROM {quote_ident(table)} WHERE window_start >= ? AND window_start < ? "
            f"ORDER BY {keys}window_start, window_end",
            [naive_utc(window.start), naive_utc(window.end)],
        )

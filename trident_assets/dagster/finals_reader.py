"""Reading an event-window state's finals for a time range from the replica; watermarks.

Apart from :mod:`.window_assets` so that the IO manager imports it without the asset graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident
from trident_assets.backends.postgres_config import is_postgres_dsn
from trident_assets.backends.replica import Replica
from trident_assets.errors import TridentError
from trident_assets.stream.event_windows import WindowedState

__all__ = ["committed_watermarks", "naive_utc", "read_published_finals"]


def naive_utc(value: datetime) -> datetime:
    """An aware instant as the naive UTC datetime the store's TIMESTAMP columns hold."""
    return value.astimezone(UTC).replace(tzinfo=None)


def read_published_finals(
    replica: Replica, meta: Mapping[str, Any], window: dg.TimeWindow
) -> pa.Table:
    """The finals rows of a finals asset (``meta``) with window_start in ``window``.

    From the read replica: every window final in a published txid, without opening the state
    store (no lock, never waiting for a batch).

    Raises:
        StateLayoutError: the finals are not published yet (no batch committed since the
            replica carries them).
    """
    from trident_assets.backends.duckdb_open import quiet_connect

    table = str(meta["trident/table"])
    files = [str(f) for f in replica.appended_files(table, str(meta["trident/scope"]))]
    keys = "".join(f"{quote_ident(k)}, " for k in meta.get("trident/key_fields", []))
    sql = (
        "SELECT * FROM read_parquet(?, union_by_name = true) WHERE window_start >= ? AND "
        f"window_start < ? ORDER BY {keys}window_start, window_end"
    )
    with quiet_connect() as conn:
        params = [files, naive_utc(window.start), naive_utc(window.end)]
        return conn.sql(sql, params=params).to_arrow_table()


def committed_watermarks(location: str, states: Sequence[WindowedState]) -> dict[str, datetime]:
    """The committed watermark of each of ``states`` (``<topology>/<state>``; aware, UTC).

    Read from the state store at ``location`` without waiting: a DuckDB file a batch holds
    (another process, or this one with a writing connection), or no store yet, gives ``{}``,
    as does a store no windowed state has committed to.
    """
    from trident_assets.backends.state_store import open_state_store
    from trident_assets.backends.window_store import last_watermark_us

    if not states:
        return {}
    try:
        if is_postgres_dsn(location):
            opened = open_state_store(location, read_only=True)
        else:
            from trident_assets.backends.duckdb_store import DuckDBStore

            if not Path(location).is_file():
                return {}
            opened = DuckDBStore(location, read_only=True, lock_timeout_s=0)
        with opened as store:
            found = {
                f"{s.topology.name}/{s.spec.name}": last_watermark_us(store, s) for s in states
            }
    except (TridentError, OSError, duckdb.Error):  # locked, or open in this process
        return {}
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return {k: epoch + timedelta(microseconds=v) for k, v in found.items() if v is not None}

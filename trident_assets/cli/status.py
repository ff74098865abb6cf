"""``trident status``: per topology, last committed txid, lag, quarantine and last failure.

Reads the state file read-only and the embedded log's offset files; lag of partitions that
are not in the embedded log (Kafka topics) is shown as unknown (it needs the broker: the
``lag`` metadata of each txid and the ``lag_below_threshold`` check have it).

A state file that lost committed txids (behind its commit marker file: a torn write-ahead
log) is still shown: its topologies' ``last_error`` names the lost txids and the way out, and
the command exits with code 1 after the table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from trident_assets.cli.common import (
    DEFAULT_HOME,
    DatabaseOption,
    Format,
    FormatOption,
    HomeOption,
    WaitOption,
    cli_errors,
    emit,
    open_state,
)
from trident_assets.errors import LostCommitsError
from trident_assets.status import status_rows

__all__ = ["status"]

COLUMNS = ["topology", "last_txid", "lag", "lag_by_partition", "quarantined", "last_error"]


def _lost_rows(home: Path, lost: LostCommitsError, wait: float) -> list[dict[str, Any]]:
    """The rows of a state file that lost committed txids; ``last_error`` says which."""
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.backends.marker_file import lost_txids

    with DuckDBStore(
        lost.state, read_only=True, lock_timeout_s=wait, verify_commits=False
    ) as store:
        rows = {row["topology"]: row for row in status_rows(home, store)}
    for topology, (db, txid) in lost.lost.items():
        row = rows.setdefault(
            topology,
            {"topology": topology, "last_txid": None, "lag": None, "lag_by_partition": ""}
            | {"quarantined": 0, "last_error": None},
        )
        row["last_error"] = (
            f"LOST committed {lost_txids((db, txid))}: the state file is behind its commit "
            f"marker file {lost.marker} (a torn or deleted write-ahead log); restore a backup "
            "(`trident state restore BACKUP --force`) or accept the loss "
            "(`trident state accept-lost-commits`)"
        )
    return [rows[t] for t in sorted(rows)]


def status(
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    fmt: FormatOption = Format.table,
    wait: WaitOption = 0.0,
) -> None:
    """Per topology: last committed txid, records waiting (lag), quarantine, last failure."""
    lost: LostCommitsError | None = None
    with cli_errors():
        try:
            with open_state(home, database, wait) as store:
                rows = status_rows(home, store)
        except LostCommitsError as exc:
            lost = exc
            rows = _lost_rows(home, exc, wait)
    emit(rows, COLUMNS, fmt, title=None if rows else "no topology has committed yet")
    if lost is not None:
        typer.echo(f"error: {lost}", err=True)
        raise typer.Exit(code=1)

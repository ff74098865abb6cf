"""Event-time window states in ``trident state scan|get``: final windows, then open ones."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trident_assets.cli.common import Format, emit, open_state
from trident_assets.errors import ConfigError, StateLayoutError
from trident_assets.names import validate_identifier

__all__ = ["EventWindows", "event_windows_instead", "read_event_windows"]


@dataclass(frozen=True)
class EventWindows:
    """An event-window state's windows as read from the store: final ones, then open ones."""

    topology: str
    state: str
    key_fields: tuple[str, ...]
    value: str
    rows: list[dict[str, Any]]
    """Key fields, window_start, window_end, the value, ``final``, ``final_txid``."""
    finals: int
    txid: int | None
    last: int | None

    @property
    def columns(self) -> list[str]:
        """The columns printed."""
        return [*self.key_fields, "window_start", "window_end", self.value, "final", "final_txid"]

    def _title(self, rows: list[dict[str, Any]], shown: int) -> str:
        finals = sum(1 for r in rows if r["final"])
        if self.txid is not None:
            title = (
                f"{self.topology}.{self.state}: {finals} final windows as of txid {self.txid} "
                "(open windows are shown without --txid only)"
            )
        else:
            title = (
                f"{self.topology}.{self.state}: {finals} final windows, {len(rows) - finals} "
                f"open (not final yet: their values may still change), last committed txid "
                f"{self.last}"
            )
        if shown < len(rows):
            title += f" ({shown} shown)"
        return title

    def emit(self, limit: int | None, fmt: Format) -> None:
        """Print the windows (the first ``limit``; None: all)."""
        shown = self.rows[:limit] if limit is not None else self.rows
        emit(shown, self.columns, fmt, self._title(self.rows, len(shown)))

    def emit_key(self, key: list[str], fmt: Format) -> None:
        """Print the windows of ``key`` (one value per key field).

        Raises:
            ConfigError: the wrong number of values, or the key has no window.
        """
        from trident_assets.cli.replica import check_key

        check_key(self.topology, self.state, self.key_fields, key)
        rows = [
            r
            for r in self.rows
            if all(str(r[f]) == v for f, v in zip(self.key_fields, key, strict=True))
        ]
        if not rows:
            at = f" as of txid {self.txid}" if self.txid is not None else ""
            msg = f"key {' '.join(key)!r} has no window in {self.topology}.{self.state}{at}"
            raise ConfigError(msg)
        emit(rows, self.columns, fmt, self._title(rows, len(rows)))


def event_windows_instead(
    home: Path, database: str | None, wait: float, topology: str, state: str, txid: int | None
) -> EventWindows:
    """``state`` is no map state: read it as an event-window state, else re-raise the error.

    Call in the ``except`` of the failed lookup, or once the lookup found an event window.
    With a replica, the store is opened only if the replica publishes
    ``state``'s finals (so a misspelt name never waits for a running batch).
    """
    import sys

    from trident_assets.cli.replica import home_replica

    failed = sys.exc_info()[1]
    replica = home_replica(home, database)
    if replica is not None:
        try:
            replica.appended_files(f"{topology}__{state}__finals", topology)
        except (ConfigError, StateLayoutError):
            if failed is not None:
                raise failed from None
            raise
    windows = read_event_windows(home, database, wait, topology, state, txid)
    if windows is None:
        if failed is not None:
            raise failed
        msg = f"topology {topology!r} has no state {state!r}"
        raise ConfigError(msg)
    return windows


def read_event_windows(
    home: Path,
    database: str | None,
    wait: float,
    topology: str,
    state: str,
    txid: int | None,
) -> EventWindows | None:
    """``topology``'s event-window ``state`` read from the state store; None if it has none.

    The open windows live in the state store only (the replica publishes the finals), so
    both are read from the store, read-only. With ``txid``: the windows final once it
    committed.

    Raises:
        ConfigError: ``txid`` is not committed.
    """
    from trident_assets.backends.window_store import read_finals, read_open, stored_windows
    from trident_assets.cli.replica import check_as_of

    validate_identifier(topology, "topology")
    validate_identifier(state, "state")
    with open_state(home, database, wait) as store:
        found = next(
            (w for w in stored_windows(store) if (w.topology, w.state) == (topology, state)),
            None,
        )
        if found is None:
            return None
        last = store.last_committed(topology)
        check_as_of(topology, state, txid, last, plain=False, oldest=lambda: None)
        finals = read_finals(store, found)
        opened = read_open(store, found) if txid is None else []
    if txid is not None:
        finals = [r for r in finals if r["final_txid"] <= txid]
    fixed = {*found.key_fields, "window_start", "window_end", "final_txid", "txid", "final"}
    sample = finals[0] if finals else opened[0] if opened else {}
    value = next((c for c in sample if c not in fixed), "value")
    rows = [{**r, "final": True} for r in finals]
    rows += [{**r, "final": False, "final_txid": None} for r in opened]
    order = [*found.key_fields, "window_start"]
    rows.sort(key=lambda r: tuple((r[c] is None, r[c]) for c in order))
    return EventWindows(topology, state, found.key_fields, value, rows, len(finals), txid, last)

"""Event-time window state in the store (DuckDB or PostgreSQL), set-based SQL per batch.

Tables of a windowed state ``<topology>__<state>`` (see :mod:`trident_assets.stream.event_windows`):

* the open windows, ``<topology>__<state>``: the key fields, ``window_start``,
  ``window_end`` (TIMESTAMP, UTC), the output field (the window's value so far) and ``txid``
  (the last txid that changed it); only windows not final yet;
* the final windows, ``<topology>__<state>__finals``: the same fields and ``final_txid``, the
  txid whose commit made the window final (each window once);
* :data:`WATERMARKS` (all windowed states): ``topology, state, txid, max_event_time,
  watermark`` per committed txid.

One batch (:func:`apply_window_batch`), inside the txid's commit transaction: the batch's
partials are merged into the open windows (a grouped UNION of the batch and the windows it
touches; sessions: the key's sessions and the batch's sorted by start, gap islands found
with window functions, each island one session), the new watermark row is written, and the
windows it makes final (``window_end <= watermark``) move from the open table to the finals.
A handful of statements per batch, whatever its size; no row loops.

The statements are shared by both stores; the store's :class:`~trident_assets.backends.
sql_dialect.Dialect` spells the conversions between epoch microseconds and the naive UTC
``TIMESTAMP`` columns (exact to the microsecond on both).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident
from trident_assets.backends.open_windows import held_windows
from trident_assets.errors import ConfigError, TridentError
from trident_assets.names import WATERMARKS_TABLE

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore
    from trident_assets.stream.event_windows import WindowedState

__all__ = [
    "WATERMARKS",
    "WindowBatch",
    "WindowOutcome",
    "apply_window_batch",
    "Committed",
    "last_committed",
    "last_watermark_us",
    "StoredWindow",
    "read_finals",
    "read_open",
    "stored_windows",
]

WATERMARKS = WATERMARKS_TABLE
"""The watermark of each windowed state after each committed txid."""
_EPOCH = datetime(1970, 1, 1)


def _as_time(micros: int | None) -> datetime | None:
    """Epoch microseconds as a naive UTC datetime."""
    return None if micros is None else _EPOCH + timedelta(microseconds=micros)


Committed = tuple[int | None, int | None, int | None]
"""``(max event time, watermark, txid)`` of a windowed state's last committed txid (times in
epoch microseconds; all None before any)."""


def last_committed(store: StateStore, state: WindowedState) -> Committed:
    """``state``'s :data:`Committed` row: its last committed txid's watermark row."""
    if not store.has_table(WATERMARKS):
        return None, None, None
    micros = store.dialect.micros_of
    rows = store.fetch_rows(
        f"SELECT {micros('max_event_time')}, {micros('watermark')}, txid FROM {WATERMARKS} "
        "WHERE topology = ? AND state = ? ORDER BY txid DESC LIMIT 1",
        [state.topology.name, state.spec.name],
    )
    if not rows:
        return None, None, None
    top, wm, txid = rows[0]
    return (None if top is None else int(top)), (None if wm is None else int(wm)), int(txid)


def last_watermark_us(store: StateStore, state: WindowedState) -> int | None:
    """The committed watermark of ``state`` in epoch microseconds (None before any event)."""
    return last_committed(store, state)[1]


@dataclass(frozen=True)
class WindowBatch:
    """One batch of a windowed state, as Spark computed it."""

    partials: pa.Table
    """Key fields, ``__ws``, ``__we`` (epoch microseconds), the output field."""
    max_event_us: int | None
    """The batch's largest event time (None: no readable event time)."""
    decided_watermark_us: int | None
    """The watermark the batch's late records were decided against."""
    committed: Committed | None = None
    """The state's :func:`last_committed` row, when already read inside this commit's
    transaction (None: read it again)."""


@dataclass(frozen=True)
class WindowOutcome:
    """What a batch did to a windowed state (in ``BatchOutcome.windows``)."""

    state: str
    watermark: datetime | None
    """The watermark after the txid (naive UTC)."""
    max_event_time: datetime | None
    windows_final: int
    """Windows this txid made final (emitted once, to the finals table)."""
    open_windows: int
    late_records: int
    """Records whose every window was final: dead letters."""
    unreadable_records: int
    """Records with a null or unparseable event time: dead letters."""
    partly_late_records: int
    """Sliding-window records added to their open windows only (some of theirs were final)."""


@dataclass(frozen=True)
class _Applied:
    finals: pa.Table
    open_windows: int
    max_event_us: int | None
    watermark_us: int | None
    state: str

    def outcome(self, late: int, unreadable: int, partly: int) -> WindowOutcome:
        return WindowOutcome(
            self.state,
            _as_time(self.watermark_us),
            _as_time(self.max_event_us),
            self.finals.num_rows,
            self.open_windows,
            late,
            unreadable,
            partly,
        )


def _names(state: WindowedState) -> tuple[list[str], str, str, str]:
    spec = state.windowed
    keys = [quote_ident(k) for k in spec.group]
    return (
        keys,
        quote_ident(spec.output),
        quote_ident(state.open_table),
        quote_ident(state.finals_table),
    )


def _ensure_tables(store: StateStore, state: WindowedState, staged: str) -> None:
    keys, out, open_t, finals_t = _names(state)
    k = "".join(f"{c}, " for c in keys)
    ts = store.dialect.timestamp_of_micros
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {open_t} AS SELECT {k}{ts('__ws')} AS window_start, "
        f'{ts("__we")} AS window_end, {out}, CAST(NULL AS BIGINT) AS txid FROM "{staged}" '
        "LIMIT 0"
    )
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {finals_t} AS SELECT {k}window_start, window_end, {out}, "
        f"CAST(NULL AS BIGINT) AS final_txid FROM {open_t} LIMIT 0"
    )
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {WATERMARKS} (topology VARCHAR NOT NULL, state VARCHAR "
        "NOT NULL, txid BIGINT NOT NULL, max_event_time TIMESTAMP, watermark TIMESTAMP, "
        "PRIMARY KEY (topology, state, txid))"
    )


def _merge_sql(store: StateStore, state: WindowedState, staged: str) -> tuple[str, str]:
    """``(select merged windows, delete the open windows they replace)`` for one batch."""
    spec = state.windowed
    ts = store.dialect.timestamp_of_micros
    keys, out, open_t, _ = _names(state)
    comb = spec.agg.sql_combine
    k = "".join(f"{c}, " for c in keys)
    same_key = " AND ".join(f"b.{c} IS NOT DISTINCT FROM o.{c}" for c in keys)
    batch = (
        f'SELECT {k}{ts("__ws")} AS window_start, {ts("__we")} AS window_end, {out} FROM "{staged}"'
    )
    if spec.window.kind != "session":
        match = f"{same_key} AND b.window_start = o.window_start AND b.window_end = o.window_end"
        touched = (
            f"SELECT o.* FROM {open_t} AS o WHERE EXISTS (SELECT 1 FROM ({batch}) AS b "
            f"WHERE {match})"
        )
        select = (
            f"SELECT {k}window_start, window_end, {comb}({out}) AS {out} FROM ("
            f"{batch} UNION ALL SELECT {k}window_start, window_end, {out} FROM ({touched}) "
            f"AS t) AS u GROUP BY {k}window_start, window_end"
        )
        delete = f"DELETE FROM {open_t} AS o USING ({batch}) AS b WHERE {match}"
        return select, delete
    part = ", ".join(keys)
    touched = (
        f"SELECT o.* FROM {open_t} AS o WHERE EXISTS (SELECT 1 FROM "
        f'(SELECT DISTINCT {part} FROM "{staged}") AS b WHERE {same_key})'
    )
    select = (
        f"WITH c AS ({batch} UNION ALL SELECT {k}window_start, window_end, {out} FROM "
        f"({touched}) AS t), m AS (SELECT *, CASE WHEN window_start < max(window_end) OVER ("
        f"PARTITION BY {part} ORDER BY window_start, window_end ROWS BETWEEN UNBOUNDED "
        "PRECEDING AND 1 PRECEDING) THEN 0 ELSE 1 END AS fresh FROM c), "
        f"i AS (SELECT *, sum(fresh) OVER (PARTITION BY {part} ORDER BY window_start, "
        "window_end ROWS UNBOUNDED PRECEDING) AS island FROM m) "
        f"SELECT {k}min(window_start) AS window_start, max(window_end) AS window_end, "
        f"{comb}({out}) AS {out} FROM i GROUP BY {k}island"
    )
    delete = (
        f'DELETE FROM {open_t} AS o USING (SELECT DISTINCT {part} FROM "{staged}") AS b '
        f"WHERE {same_key}"
    )
    return select, delete


def _key_order(store: StateStore, key_fields: Sequence[str], rows: pa.Table) -> pa.Table:
    """``rows`` ordered by key, window_start, window_end as DuckDB orders them, on any store.

    DuckDB compares text by code point; a PostgreSQL database orders text by its collation
    (``en_US`` puts ``a`` before ``B``), so its rows are sorted again by Arrow (code point,
    NULLs last), giving both stores the same order.
    """
    if not store.dialect.is_postgres or rows.num_rows < 2:
        return rows
    names = [*key_fields, "window_start", "window_end"]
    return rows.sort_by([(n, "ascending") for n in names])


def apply_window_batch(
    store: StateStore, state: WindowedState, txid: int, batch: WindowBatch
) -> _Applied:
    """Apply ``batch`` as txid ``txid`` of ``state`` (inside the open commit transaction).

    Raises:
        TridentError: the committed watermark is not the one the batch was decided against
            (another process committed meanwhile); the transaction rolls back.
    """
    spec = state.windowed
    keys, out, open_t, finals_t = _names(state)
    k = "".join(f"{c}, " for c in keys)
    committed = batch.committed if batch.committed is not None else last_committed(store, state)
    top, wm_before, last = committed
    if wm_before != batch.decided_watermark_us:
        msg = (
            f"windowed state {state.spec.name!r}: the watermark changed while txid {txid} was "
            "computed (another process committed); nothing was written, run the txid again"
        )
        raise TridentError(msg)
    ts = store.dialect.timestamp_of_micros
    with store.staged(batch.partials) as staged:
        _ensure_tables(store, state, staged)
        held = held_windows(store, state, last)
        if batch.partials.num_rows:
            select, delete = _merge_sql(store, state, staged)
            found = None if held is None else held.merge(batch.partials)
            if found is None:  # the store merges: its open windows read back
                held, merged = None, store.fetch_arrow(select)
                start, end = "window_start", "window_end"
            else:  # merged in memory: only the windows the batch changed are written
                merged, held = found
                start, end = ts("__ws"), ts("__we")
            store.execute(delete)
            with store.staged(merged) as name:
                store.execute(
                    f"INSERT INTO {open_t} ({k}window_start, window_end, {out}, txid) "
                    f'SELECT {k}{start}, {end}, {out}, ? FROM "{name}"',
                    [txid],
                )
    if batch.max_event_us is not None:
        top = batch.max_event_us if top is None else max(top, batch.max_event_us)
    wm_after = spec.window.watermark(top)
    store.execute(
        f"DELETE FROM {WATERMARKS} WHERE topology = ? AND state = ? AND txid = ?",
        [state.topology.name, state.spec.name, txid],
    )
    param = store.dialect.timestamp_param()
    store.execute(
        f"INSERT INTO {WATERMARKS} VALUES (?, ?, ?, {param}, {param})",
        [state.topology.name, state.spec.name, txid, top, wm_after],
    )
    final_where = f"window_end <= {param}"
    if wm_after is None:
        finals = store.fetch_arrow(
            f"SELECT {k}window_start, window_end, {out} FROM {open_t} LIMIT 0"
        )
    else:
        finals = store.fetch_arrow(
            f"SELECT {k}window_start, window_end, {out} FROM {open_t} WHERE {final_where} "
            f"ORDER BY {k}window_start, window_end",
            [wm_after],
        )
        finals = _key_order(store, spec.group, finals)
    if finals.num_rows:
        store.execute(
            f"INSERT INTO {finals_t} SELECT {k}window_start, window_end, {out}, ? FROM {open_t} "
            f"WHERE {final_where}",
            [txid, wm_after],
        )
        store.execute(f"DELETE FROM {open_t} WHERE {final_where}", [wm_after])
    if held is None:
        size = int(store.fetch_rows(f"SELECT count(*) FROM {open_t}")[0][0])
    else:
        held = held.close(wm_after)
        held.keep(txid)
        size = held.rows.num_rows
    return _Applied(finals, size, top, wm_after, state.spec.name)


@dataclass(frozen=True)
class StoredWindow:
    """An event-window state as its contract stores it: what reading it needs, by name."""

    topology: str
    state: str
    table: str
    """The open windows; the finals are ``<table>__finals``."""
    key_fields: tuple[str, ...]
    window: dict[str, str]
    """The window's parameters (``kind``, ``size_us``, ...), as the contract holds them."""

    @property
    def finals_table(self) -> str:
        """The store table of the final windows."""
        return f"{self.table}__finals"


def stored_windows(store: StateStore) -> list[StoredWindow]:
    """Every event-window state of ``store`` (known by its contract), by topology and state."""
    from trident_assets.backends.state_contracts import stored_contracts

    found = []
    for contract in stored_contracts(store):
        params = dict(contract.aggregator_params)
        if "window.kind" not in params:
            continue
        window = {k[7:]: v for k, v in params.items() if k.startswith("window.")}
        found.append(
            StoredWindow(
                contract.topology, contract.state, contract.table, contract.key_fields, window
            )
        )
    return found


def _stored_window(
    store: StateStore, state: WindowedState | StoredWindow | str, topology: str | None
) -> StoredWindow:
    """``state`` as a :class:`StoredWindow`: a declared state, or one found by name.

    Raises:
        ConfigError: no event-window state of that name in the store (the message lists
            those it holds), or the name is in several topologies and ``topology`` is None.
    """
    if isinstance(state, StoredWindow):
        return state
    if not isinstance(state, str):
        windowed = state.windowed
        return StoredWindow(
            state.topology.name, state.spec.name, state.open_table, tuple(windowed.group), {}
        )
    known = stored_windows(store)
    found = [w for w in known if w.state == state and topology in (None, w.topology)]
    if len(found) == 1:
        return found[0]
    names = ", ".join(f"{w.topology}.{w.state}" for w in known) or "none"
    if found:
        msg = (
            f"event-window state {state!r} is in several topologies "
            f"({', '.join(w.topology for w in found)}): pass topology=..."
        )
    else:
        where = f" of topology {topology!r}" if topology is not None else ""
        msg = (
            f"no event-window state {state!r}{where} in {store.path}; event-window states: {names}"
        )
    raise ConfigError(msg)


def _read_windows(
    store: StateStore,
    state: WindowedState | StoredWindow | str,
    topology: str | None,
    *,
    finals: bool,
) -> list[dict[str, Any]]:
    found = _stored_window(store, state, topology)
    table = found.finals_table if finals else found.table
    if not store.has_table(table):
        return []
    order = "".join(f"{quote_ident(k)}, " for k in found.key_fields)
    extra = "" if finals else ", FALSE AS final"
    rows = store.fetch_arrow(
        f"SELECT *{extra} FROM {quote_ident(table)} ORDER BY {order}window_start, window_end"
    )
    return _key_order(store, found.key_fields, rows).to_pylist()


def read_finals(
    store: StateStore, state: WindowedState | StoredWindow | str, *, topology: str | None = None
) -> list[dict[str, Any]]:
    """The final windows of ``state`` as rows, ordered by key and window_start.

    ``state``: the declared state, or its name (``topology`` tells apart states of the same
    name in several topologies).

    Raises:
        ConfigError: no event-window state of that name is stored, or the name is ambiguous.
    """
    return _read_windows(store, state, topology, finals=True)


def read_open(
    store: StateStore, state: WindowedState | StoredWindow | str, *, topology: str | None = None
) -> list[dict[str, Any]]:
    """The open windows of ``state`` (early results, ``final`` False), ordered by key, start.

    ``state``: the declared state, or its name (as :func:`read_finals`).

    Raises:
        ConfigError: no event-window state of that name is stored, or the name is ambiguous.
    """
    return _read_windows(store, state, topology, finals=False)

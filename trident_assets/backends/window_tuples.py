"""A Trident window's store: the tuples (or per-txid partials) its open windows still need.

The set-based twin of the window rules of :mod:`~trident_assets.core.trident_windows`; every
statement runs inside the caller's transaction (the executor's commit transaction of the
txid), so the window's new tuples, the windows it fires, the deletion of what no later
window needs and the window's meta row commit with the txid, or not at all.

**Layout.** Table ``<topology>__<window>`` (named by the caller):

* count windows: ``_trident_seq BIGINT`` (the tuple's number), ``_trident_txid BIGINT``,
  then the input fields; one row per tuple a window still to fire holds;
* duration windows: ``_trident_txid BIGINT``, ``_trident_ts BIGINT`` (the txid's time, ms),
  ``_trident_p`` (the txid's partial); one row per non-empty txid a window still to fire
  holds (all tuples of a txid share its time, so they always share their windows).

:data:`WINDOWS_TABLE` holds, per window table, the last applied txid, the tuples seen, the last
txid's time and the windows fired so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident
from trident_assets.backends.state_store import StateStore
from trident_assets.core.aggregators import CombinerAggregator, Count, Max, Min, is_sql_combiner
from trident_assets.core.trident_windows import (
    TridentWindow,
    combine_partials,
    count_keep_from,
    count_windows_fired,
    duration_candidates,
    duration_keep_after,
    fold_window,
)
from trident_assets.errors import StaleTxidError
from trident_assets.names import SEQ_COLUMN, WINDOWS_TABLE

__all__ = [
    "COUNT_COLUMN",
    "ORDER_COLUMNS",
    "PARTIAL_COLUMN",
    "WindowMeta",
    "WindowResult",
    "apply_count_batch",
    "apply_duration_batch",
    "read_meta",
]

ORDER_COLUMNS = ("_trident_topic", "_trident_part", "_trident_off", "_trident_pos")
"""The columns of a count window's batch that order its tuples (source topic, partition,
offset, position of the tuple among those of its record)."""
PARTIAL_COLUMN = "_trident_p"
COUNT_COLUMN = "_trident_n"
_SEQ, _TXID, _TS = SEQ_COLUMN, "_trident_txid", "_trident_ts"


@dataclass(frozen=True)
class WindowMeta:
    """A window's progress: last applied txid, tuples seen, last txid's time, windows fired."""

    last_txid: int
    seen: int
    time_ms: int | None
    fired: int


@dataclass(frozen=True)
class WindowResult:
    """What one txid did to a window: the fired windows' aggregates and the store's size."""

    fired: pa.Table
    """One row per fired window, in firing order: the window's output field."""
    windows: list[tuple[int, int, int]]
    """``(key, start, end)`` of each fired window (count: numbers; duration: ms)."""
    tuples_in: int
    held: int
    """Rows the window table holds after the txid."""
    time_ms: int | None


def read_meta(store: StateStore, table: str) -> WindowMeta | None:
    """The progress of window table ``table`` (None before its first txid)."""
    if not store.has_table(WINDOWS_TABLE):
        return None
    rows = store.fetch_rows(
        f"SELECT last_txid, seen, time_ms, fired FROM {WINDOWS_TABLE} WHERE table_name = ?", [table]
    )
    if not rows:
        return None
    last, seen, time_ms, fired = rows[0]
    return WindowMeta(int(last), int(seen), None if time_ms is None else int(time_ms), int(fired))


def _begin(store: StateStore, table: str, txid: int) -> WindowMeta | None:
    store.execute(
        f"CREATE TABLE IF NOT EXISTS {WINDOWS_TABLE} (table_name VARCHAR PRIMARY KEY, "
        "last_txid BIGINT NOT NULL, seen BIGINT NOT NULL, time_ms BIGINT, fired BIGINT NOT NULL)"
    )
    meta = read_meta(store, table)
    if meta is not None and txid <= meta.last_txid:
        msg = (
            f"window table {table!r} has applied txid {meta.last_txid}; txid {txid} is not "
            "after it (a committed txid never adds to a window twice)"
        )
        raise StaleTxidError(msg)
    return meta


def _write_meta(store: StateStore, table: str, meta: WindowMeta) -> None:
    store.execute(
        f"INSERT INTO {WINDOWS_TABLE} (table_name, last_txid, seen, time_ms, fired) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (table_name) DO UPDATE SET "
        "last_txid = excluded.last_txid, seen = excluded.seen, time_ms = excluded.time_ms, "
        "fired = excluded.fired",
        [table, meta.last_txid, meta.seen, meta.time_ms, meta.fired],
    )


def _size(store: StateStore, table: str) -> int:
    return int(store.fetch_rows(f"SELECT count(*) FROM {quote_ident(table)}")[0][0])


def _sql_aggregate(agg: Any, column: str | None, over_partials: bool) -> str:
    """The SQL aggregate of a built-in combiner over tuples (``column``) or partials."""
    if isinstance(agg, Count) and not over_partials:
        return "count(*)"
    col = f"t.{quote_ident(str(column))}"
    if isinstance(agg, Min):
        return f"min({col})"
    if isinstance(agg, Max):
        return f"max({col})"
    return f"coalesce(sum({col}), 0)"  # Sum (nulls skipped) and Count's partials


def _fired_table(
    store: StateStore,
    window: TridentWindow,
    table: str,
    windows: list[tuple[int, int, int]],
    join: str,
    out_type: pa.DataType,
    *,
    partials: bool,
) -> tuple[list[tuple[int, int, int]], pa.Table]:
    """One statement: the aggregate of each window in ``windows`` that holds a row.

    ``join`` is the condition on ``w`` (``k, lo, hi``) and ``t`` (the window table).
    Built-in combiners aggregate in SQL; other aggregators fold the fetched rows in order.
    Returns the windows that held a row (those that fire) and their aggregates, in order.
    """
    agg, out = window.aggregator, window.output
    q = quote_ident(table)
    if not windows:
        return [], pa.table({out: pa.array([], out_type)})
    by_key = {w[0]: w for w in windows}
    columns = zip(("k", "lo", "hi"), zip(*windows, strict=True), strict=True)
    with store.staged(pa.table({n: pa.array(c, pa.int64()) for n, c in columns})) as w:
        if is_sql_combiner(agg):
            column = PARTIAL_COLUMN if partials else window.inputs[0]
            expr = _sql_aggregate(agg, column, partials)
            cast = (
                "BIGINT"
                if pa.types.is_integer(out_type)
                else "DOUBLE"
                if pa.types.is_floating(out_type)
                else None
            )
            value = f"CAST({expr} AS {cast})" if cast else expr
            got = store.fetch_arrow(
                f'SELECT w.k, {value} AS v FROM "{w}" w JOIN {q} t ON {join} '
                "GROUP BY w.k ORDER BY w.k"
            )
            held = [by_key[k] for k in got.column("k").to_pylist()]
            return held, pa.table({out: got.column("v").cast(out_type)})
        order = _TXID if partials else _SEQ
        cols = [PARTIAL_COLUMN] if partials else list(window.inputs)
        picked = ", ".join(f"t.{quote_ident(c)}" for c in cols)
        got = store.fetch_arrow(
            f'SELECT w.k, {picked} FROM "{w}" w JOIN {q} t ON {join} ORDER BY w.k, t.{order}'
        )
    groups: dict[int, list[tuple[Any, ...]]] = {}
    for k, *row in zip(*(c.to_pylist() for c in got.columns), strict=True):
        groups.setdefault(k, []).append(tuple(row))
    assert not partials or isinstance(agg, CombinerAggregator)
    values = [
        combine_partials(agg, [r[0] for r in rows]) if partials else fold_window(agg, rows)
        for rows in (groups[k] for k in sorted(groups))
    ]
    return [by_key[k] for k in sorted(groups)], pa.table({out: pa.array(values, out_type)})


def apply_count_batch(
    store: StateStore,
    window: TridentWindow,
    table: str,
    txid: int,
    batch: pa.Table,
    out_type: pa.DataType,
) -> WindowResult:
    """Add txid ``txid``'s tuples to count window ``table``; fire and forget what is due.

    ``batch``: the input fields and :data:`ORDER_COLUMNS` (any row order). Statements: the
    insert (numbering the tuples by the order columns), one query for the fired windows, the
    delete of what no later window holds, the meta row.

    Raises:
        StaleTxidError: ``txid`` is not after the window's last applied txid.
    """
    meta = _begin(store, table, txid)
    cfg = window.config
    seen = 0 if meta is None else meta.seen
    q = quote_ident(table)
    inputs = [quote_ident(c) for c in window.inputs]
    order = ", ".join(quote_ident(c) for c in ORDER_COLUMNS)
    with store.staged(batch) as staged:
        store.execute(
            f"CREATE TABLE IF NOT EXISTS {q} AS SELECT CAST(NULL AS BIGINT) AS {_SEQ}, "
            f'CAST(NULL AS BIGINT) AS {_TXID}, {", ".join(inputs)} FROM "{staged}" LIMIT 0'
        )
        store.execute(
            f"INSERT INTO {q} ({_SEQ}, {_TXID}, {', '.join(inputs)}) "
            f"SELECT ? + row_number() OVER (ORDER BY {order}), ?, {', '.join(inputs)} "
            f'FROM "{staged}"',
            [seen, txid],
        )
    after = seen + batch.num_rows
    due = count_windows_fired(cfg.size, cfg.slide, seen, after)
    due, fired = _fired_table(
        store, window, table, due, f"t.{_SEQ} BETWEEN w.lo AND w.hi", out_type, partials=False
    )
    store.execute(
        f"DELETE FROM {q} WHERE {_SEQ} < ?", [count_keep_from(cfg.size, cfg.slide, after)]
    )
    done = 0 if meta is None else meta.fired
    _write_meta(store, table, WindowMeta(txid, after, None, done + len(due)))
    return WindowResult(fired, due, batch.num_rows, _size(store, table), None)


def apply_duration_batch(
    store: StateStore,
    window: TridentWindow,
    table: str,
    txid: int,
    batch: pa.Table,
    clock_ms: int,
    out_type: pa.DataType,
) -> WindowResult:
    """Stamp txid ``txid`` and add its partial to duration window ``table``; fire what is due.

    ``batch``: one row, :data:`COUNT_COLUMN` (the txid's tuples) and :data:`PARTIAL_COLUMN`
    (their partial). The txid's time is ``clock_ms``, or the previous txid's time if that is
    later (times never go back). Windows ending in ``(previous time, this time]`` that hold a
    partial fire; partials no later window holds are deleted.

    Raises:
        StaleTxidError: ``txid`` is not after the window's last applied txid.
    """
    meta = _begin(store, table, txid)
    cfg = window.config
    prev = None if meta is None else meta.time_ms
    time_ms = clock_ms if prev is None else max(clock_ms, prev)
    q = quote_ident(table)
    n = int(batch.column(COUNT_COLUMN)[0].as_py() or 0) if batch.num_rows else 0
    with store.staged(batch) as staged:
        store.execute(
            f"CREATE TABLE IF NOT EXISTS {q} AS SELECT CAST(NULL AS BIGINT) AS {_TXID}, "
            f'CAST(NULL AS BIGINT) AS {_TS}, {PARTIAL_COLUMN} FROM "{staged}" LIMIT 0'
        )
        candidates = duration_candidates(cfg.size, cfg.slide, prev, time_ms)
        due, fired = _fired_table(
            store,
            window,
            table,
            [(end, start, end) for start, end in candidates],
            f"t.{_TS} >= w.lo AND t.{_TS} < w.hi",
            out_type,
            partials=True,
        )
        store.execute(
            f"INSERT INTO {q} ({_TXID}, {_TS}, {PARTIAL_COLUMN}) SELECT ?, ?, {PARTIAL_COLUMN} "
            f'FROM "{staged}" WHERE {COUNT_COLUMN} > 0',
            [txid, time_ms],
        )
    store.execute(f"DELETE FROM {q} WHERE {_TS} <= ?", [duration_keep_after(cfg.size, time_ms)])
    seen = (0 if meta is None else meta.seen) + n
    done = 0 if meta is None else meta.fired
    _write_meta(store, table, WindowMeta(txid, seen, time_ms, done + len(due)))
    return WindowResult(fired, due, n, _size(store, table), time_ms)

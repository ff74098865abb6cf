"""Event-time windows on Spark + DuckDB or PostgreSQL: exact windows, late records, exactly-once
finals.

Every expected window comes from the plain-Python model
(:func:`~trident_assets_tests.event_window_model.reference_windows`) over the same records, or
by hand.
Records are produced into a one-partition topic just before their txid runs, so txid ``i``
reads exactly batch ``i``. The tests taking ``open_store`` run on both stores with the same
expected values.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import trident_assets as ta
from trident_assets.backends.window_store import (
    WATERMARKS,
    last_watermark_us,
    read_finals,
    read_open,
)
from trident_assets.core.event_windows import EventWindow
from trident_assets.errors import ConfigError, FieldNotFoundError, StateContractError
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets_tests.conftest import OpenStore
from trident_assets_tests.event_window_model import reference_windows

REPO = Path(__file__).resolve().parents[1]
BASE = datetime(2026, 1, 1)
BASE_US = int((BASE - datetime(1970, 1, 1)).total_seconds()) * 1_000_000
S = 1_000_000

Record = tuple[str, Any]
"""(page, seconds after BASE), or (page, None) / (page, "text") for a bad event time."""


def at(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def topology(window: EventWindow, agg: Any = None, inputs: str | None = None) -> Any:
    """Topology ``clicks``: JSON records {page, ts, n}, windowed per page into ``page_views``."""
    topo = ta.TridentTopology("clicks")
    scheme = ta.JsonScheme({"page": "string", "ts": "string", "n": "bigint"}, optional=("ts", "n"))
    spout = ta.LogSpout("clicks", scheme, SpoutConfig(kind=SpoutKind.TRANSACTIONAL))
    stream = topo.new_stream("clicks", spout)
    stream.group_by("page").window_aggregate(
        window, agg or ta.Count(), "views", spec=ta.StateSpec("page_views"), inputs=inputs
    )
    return topo


def state_of(topo: Any) -> Any:
    return topo.states["page_views"]


def produce(log: Any, batch: list[Record]) -> None:
    producer = log.producer("clicks")
    for page, seconds in batch:
        if seconds is None or isinstance(seconds, str):
            ts = seconds
        else:
            ts = at(seconds).isoformat(sep=" ")
        producer.send(json.dumps({"page": page, "ts": ts, "n": 1}).encode())
    producer.flush()


def new_log(tmp_path: Path) -> Any:
    log = ta.PartitionedLog(tmp_path / "log")
    log.create_topic("clicks", 1)
    return log


def run_all(runner: Any, log: Any, batches: list[list[Record]], first: int = 1) -> list[Any]:
    outcomes = []
    for txid, batch in enumerate(batches, start=first):
        produce(log, batch)
        outcomes.append(runner.run_batch(txid))
    return outcomes


def reference(window: EventWindow, batches: list[list[Record]]) -> Any:
    """The model over the readable records (bad event times are not the model's concern)."""
    rows = [
        [(p, BASE_US + int(s * S), None) for p, s in b if isinstance(s, int | float)]
        for b in batches
    ]
    return reference_windows(window, rows)


def finals(state: Any, store: Any) -> list[tuple[Any, ...]]:
    return [
        (r["page"], _us(r["window_start"]), _us(r["window_end"]), r["views"], r["final_txid"])
        for r in read_finals(store, state)
    ]


def opened(state: Any, store: Any) -> list[tuple[Any, ...]]:
    return [
        (r["page"], _us(r["window_start"]), _us(r["window_end"]), r["views"])
        for r in read_open(store, state)
    ]


def _us(value: datetime) -> int:
    return int((value - datetime(1970, 1, 1)) / timedelta(microseconds=1))


def dead_letters(store: Any) -> list[tuple[Any, ...]]:
    """The dead letters, reasons ordered by code point on both stores."""
    pg = store.dialect.is_postgres
    text, reason = (
        ("convert_from(value, 'UTF8')", 'reason COLLATE "C"') if pg else ("decode(value)", "reason")
    )
    return store.fetch_rows(
        f"SELECT txid, spout, reason, {text} FROM _trident_dead_letters ORDER BY txid, {reason}"
    )


def w(seconds: float) -> str:
    return f"{at(seconds).isoformat(sep=' ')}.000000 UTC"


# -- tumbling -----------------------------------------------------------------------------------

TUMBLING = EventWindow.tumbling("10 s", time_field="ts", allowed_lateness="5 s")
TUMBLING_BATCHES: list[list[Record]] = [
    [("a", 1), ("a", 12)],  # max 12 -> watermark 7
    [("a", 3), ("b", 16), ("b", None), ("b", "junk")],  # 3: out of order, in lateness
    [("a", 4), ("a", 25), ("b", 14)],  # [0,10) final at wm 11: 4 is late; 14 in time; wm 20
    [("c", 40)],  # wm 35: [20,30) final
]


def test_tumbling_windows_late_and_unreadable_records(
    spark: Any, tmp_path: Path, pg_dsn: str
) -> None:
    """The same batches on DuckDB, then on PostgreSQL: the same exact rows in both stores."""
    from trident_assets.backends.state_store import open_state_store

    results = []
    for name, location in (("duckdb", str(tmp_path / "state.duckdb")), ("postgres", pg_dsn)):
        with open_state_store(location) as store:
            results.append(_tumbling_exactly(spark, tmp_path / name, store))
    duck, pg = results
    assert (duck[0], pg[0]) == ("DuckDBStore", "PostgresStore")
    assert pg[1:] == duck[1:]
    assert [r["window_start"] for r in pg[2]] == [at(0), at(10), at(20), at(10)]
    assert pg[5][-1] == ("clicks", "page_views", 4, at(40), at(35))


def _tumbling_exactly(spark: Any, tmp_path: Path, store: Any) -> tuple[Any, ...]:
    """Run TUMBLING_BATCHES into ``store`` and check every row exactly; return what it left
    (compared across the stores by the test)."""
    log = new_log(tmp_path)
    topo = topology(TUMBLING)
    runner = ta.TopologyRunner(topo, spark, store, log)
    outcomes = run_all(runner, log, TUMBLING_BATCHES)
    state = state_of(topo)
    left = (
        type(store).__name__,
        [o.windows["page_views"] for o in outcomes],
        read_finals(store, state),
        read_open(store, state),
        dead_letters(store),
        store.fetch_rows(f"SELECT * FROM {WATERMARKS} ORDER BY txid"),
        store.fetch_rows('SELECT * FROM "clicks__page_views__new_values" ORDER BY txid, page'),
    )
    ref = reference(TUMBLING, TUMBLING_BATCHES)
    assert (
        finals(state, store)
        == ref.finals
        == [
            ("a", BASE_US, BASE_US + 10 * S, 2, 2),
            ("a", BASE_US + 10 * S, BASE_US + 20 * S, 1, 3),
            ("a", BASE_US + 20 * S, BASE_US + 30 * S, 1, 4),
            ("b", BASE_US + 10 * S, BASE_US + 20 * S, 2, 3),
        ]
    )
    assert opened(state, store) == ref.open == [("c", BASE_US + 40 * S, BASE_US + 50 * S, 1)]
    assert runner.window_finals("page_views") == read_finals(store, state)
    assert runner.window_open("page_views") == [
        {
            "page": "c",
            "window_start": at(40),
            "window_end": at(50),
            "views": 1,
            "txid": 4,
            "final": False,
        }
    ]
    assert [o.windows["page_views"].watermark for o in outcomes] == [at(7), at(11), at(20), at(35)]
    assert [o.windows["page_views"].windows_final for o in outcomes] == [0, 1, 2, 1]
    assert [o.windows["page_views"].late_records for o in outcomes] == [0, 0, 1, 0]
    assert [o.windows["page_views"].unreadable_records for o in outcomes] == [0, 2, 0, 0]
    assert [o.dead_letters for o in outcomes] == [0, 2, 1, 0]
    late = f"late record: its window [{w(0)}, {w(10)}) is final (window_end <= watermark {w(11)})"
    assert dead_letters(store) == [
        (2, "window:page_views", "event time field 'ts' is null", '{"page":"b","n":1}'),
        (
            2,
            "window:page_views",
            "event time field 'ts' value 'junk' is not a timestamp (ISO-8601, e.g. "
            "2026-01-31 12:00:00)",
            '{"page":"b","ts":"junk","n":1}',
        ),
        (3, "window:page_views", late, '{"page":"a","ts":"2026-01-01 00:00:04","n":1}'),
    ]
    assert store.fetch_rows(
        f"SELECT txid, max_event_time, watermark FROM {WATERMARKS} ORDER BY txid"
    ) == [(1, at(12), at(7)), (2, at(16), at(11)), (3, at(25), at(20)), (4, at(40), at(35))]
    # the finals stream: txid 4's new values are the windows it made final
    assert store.fetch_rows(
        'SELECT txid, page, views FROM "clicks__page_views__new_values" ORDER BY txid, page'
    ) == [(2, "a", 2), (3, "a", 1), (3, "b", 2), (4, "a", 1)]
    # replaying committed txids changes nothing: every final stays emitted once
    before = (finals(state, store), opened(state, store), dead_letters(store))
    assert [runner.run_batch(t).applied for t in (2, 4)] == [False, False]
    assert (finals(state, store), opened(state, store), dead_letters(store)) == before
    return left


@pytest.mark.parametrize("window", [TUMBLING, EventWindow.sliding("10 s", "5 s", time_field="ts")])
def test_identical_dead_letters_are_each_kept(
    spark: Any, tmp_path: Path, window: EventWindow
) -> None:
    # the batch's partials and dead letters come from one aggregation: identical late or
    # unreadable records must still give one dead letter each
    log = new_log(tmp_path)
    store = ta.DuckDBStore(tmp_path / "state.duckdb")
    topo = topology(window)
    runner = ta.TopologyRunner(topo, spark, store, log)
    batches: list[list[Record]] = [
        [("a", 30)],
        [("a", 1), ("b", None), ("a", 1), ("a", 31), ("b", None), ("a", 31), ("a", 1)],
    ]
    outcomes = run_all(runner, log, batches)
    ref = reference(window, batches)
    state = state_of(topo)
    assert (finals(state, store), opened(state, store)) == (ref.finals, ref.open)
    assert [r[3] for r in ref.open if r[0] == "a"][-1] == 3  # a@30 and a@31 twice
    assert [o.windows["page_views"].late_records for o in outcomes] == [0, 3]
    assert [o.windows["page_views"].unreadable_records for o in outcomes] == [0, 2]
    rows = dead_letters(store)
    assert [(t, v) for t, _, _, v in rows] == [
        (2, '{"page":"b","n":1}'),
        (2, '{"page":"b","n":1}'),
        *[(2, '{"page":"a","ts":"2026-01-01 00:00:01","n":1}')] * 3,
    ]
    assert {r[2] for r in rows[2:]} == {
        f"late record: its window [{w(0)}, {w(10)}) is final (window_end <= watermark {w(25)})"
        if window is TUMBLING
        else f"late record: its window [{w(0)}, {w(10)}) is final (window_end <= watermark {w(30)})"
    }
    store.close()


@pytest.mark.parametrize(
    "window", [TUMBLING, EventWindow.session("10 s", time_field="ts")], ids=["tumbling", "session"]
)
def test_spout_dead_letters_recorded_once_in_their_txid(
    spark: Any, tmp_path: Path, window: EventWindow
) -> None:
    # tumbling: the window's one scan counts the scheme's dead letters, fetched only when
    # there are any; session: its job collects them along
    log = new_log(tmp_path)
    store = ta.DuckDBStore(tmp_path / "state.duckdb")
    runner = ta.TopologyRunner(topology(window), spark, store, log)
    good = json.dumps({"page": "a", "ts": at(1).isoformat(sep=" "), "n": 1}).encode()
    batches = [[good], [good, b"[1]", good, b'{"page": "a", "n": "x"}'], [good]]
    counts = []
    for txid, records in enumerate(batches, start=1):
        producer = log.producer("clicks")
        for value in records:
            producer.send(value)
        producer.flush()
        counts.append(runner.run_batch(txid).dead_letters)
    assert counts == [0, 2, 0]
    assert store.fetch_rows(
        'SELECT txid, spout, "offset", reason FROM _trident_dead_letters ORDER BY txid, "offset"'
    ) == [
        (2, "clicks", 2, "value is not a JSON object"),
        (2, "clicks", 4, "member 'n' is a string, declared bigint"),
    ]
    state = state_of(runner.topology)
    assert [r[3] for r in opened(state, store)] == [4]
    store.close()


# -- sliding ------------------------------------------------------------------------------------

SLIDING = EventWindow.sliding("10 s", "5 s", time_field="ts")
SLIDING_BATCHES: list[list[Record]] = [
    [("k", 1), ("k", 11)],  # wm 11: [-5,5) and [0,10) final
    [("k", 7), ("k", 2), ("k", 12)],  # 7: [0,10) final, [5,15) open -> partly late; 2: late
    [("k", 30)],
]


def test_sliding_windows_partly_late_record_goes_to_its_open_windows(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = new_log(tmp_path)
    store = open_store()
    topo = topology(SLIDING)
    runner = ta.TopologyRunner(topo, spark, store, log)
    outcomes = run_all(runner, log, SLIDING_BATCHES)
    state = state_of(topo)
    ref = reference(SLIDING, SLIDING_BATCHES)
    assert finals(state, store) == ref.finals
    assert finals(state, store) == [
        ("k", BASE_US - 5 * S, BASE_US + 5 * S, 1, 1),
        ("k", BASE_US, BASE_US + 10 * S, 1, 1),
        ("k", BASE_US + 5 * S, BASE_US + 15 * S, 3, 3),  # 11, 7, 12
        ("k", BASE_US + 10 * S, BASE_US + 20 * S, 2, 3),  # 11, 12
    ]
    assert opened(state, store) == ref.open
    assert [o.windows["page_views"].partly_late_records for o in outcomes] == [0, 1, 0]
    assert [o.windows["page_views"].late_records for o in outcomes] == [0, 1, 0]
    late = f"late record: its window [{w(0)}, {w(10)}) is final (window_end <= watermark {w(11)})"
    assert [r[2] for r in dead_letters(store)] == [late]
    store.close()


# -- sessions -----------------------------------------------------------------------------------

SESSION = EventWindow.session("10 s", time_field="ts", allowed_lateness="30 s")
SESSION_BATCHES: list[list[Record]] = [
    [("u", 0), ("u", 25), ("v", 3)],  # u: [0,10) [25,35); v: [3,13)
    [("u", 17), ("u", 8)],  # bridges u's sessions: [0,35)
    [("v", 5), ("u", 60)],  # v: [3,15), final at wm 30
    [("u", 29), ("u", 100)],  # wm 70: 29 < wm is late; [0,35) and [60,70) final
]


def test_sessions_merge_across_txids_and_late_records(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = new_log(tmp_path)
    store = open_store()
    topo = topology(SESSION)
    runner = ta.TopologyRunner(topo, spark, store, log)
    outcomes = run_all(runner, log, SESSION_BATCHES)
    state = state_of(topo)
    ref = reference(SESSION, SESSION_BATCHES)
    assert (
        finals(state, store)
        == ref.finals
        == [
            ("u", BASE_US, BASE_US + 35 * S, 4, 4),
            ("u", BASE_US + 60 * S, BASE_US + 70 * S, 1, 4),
            ("v", BASE_US + 3 * S, BASE_US + 15 * S, 2, 3),
        ]
    )
    assert opened(state, store) == ref.open == [("u", BASE_US + 100 * S, BASE_US + 110 * S, 1)]
    assert [o.windows["page_views"].late_records for o in outcomes] == [0, 0, 0, 1]
    assert [r[2] for r in dead_letters(store)] == [
        f"late record: event time {w(29)} is before the watermark {w(30)} (sessions ending "
        "at or before the watermark are final)"
    ]
    store.close()


# -- long runs, epoch times ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("txids", "final_minutes", "still_open"),
    [(14, 2, (8, 4)), pytest.param(30, 6, (3, 2), marks=pytest.mark.slow)],
    ids=["14-txids", "30-txids"],
)
# the long run on PostgreSQL runs in `make soak` (the store's steps are each tested above)
@pytest.mark.parametrize(
    "open_store", ["duckdb", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True
)
def test_window_open_at_txid_1_final_at_txid_5_and_open_table_stays_bounded(
    spark: Any,
    tmp_path: Path,
    open_store: OpenStore,
    txids: int,
    final_minutes: int,
    still_open: tuple[int, int],
) -> None:
    """``make test`` runs 14 txids (two windows per page closed, a third open); ``make soak``
    runs 30 (six closed)."""
    window = EventWindow.tumbling("1 minute", time_field="ts", allowed_lateness="5 s")
    # 13 s of event time per txid, two pages, some records out of order
    batches = [[("a", 13 * i), ("b", 13 * i + 2), ("a", max(0, 13 * i - 7))] for i in range(txids)]
    log = new_log(tmp_path)
    store = open_store()
    topo = topology(window)
    runner = ta.TopologyRunner(topo, spark, store, log)
    state = state_of(topo)
    sizes = []
    for txid, batch in enumerate(batches, start=1):
        produce(log, batch)
        outcome = runner.run_batch(txid)
        sizes.append(outcome.windows["page_views"].open_windows)
        ref = reference(window, batches[:txid])
        assert opened(state, store) == ref.open
    assert finals(state, store) == ref.finals
    # [0, 60) opened by txid 1 (t=0), final when the watermark reaches 60 (b at 67, txid 6):
    # a at 0, 0, 13, 6, 26, 19, 39, 32, 52, 45, 58; b at 2, 15, 28, 41, 54
    first = [f for f in ref.finals if f[1] == BASE_US]
    assert first == [
        ("a", BASE_US, BASE_US + 60 * S, 11, 6),
        ("b", BASE_US, BASE_US + 60 * S, 5, 6),
    ]
    # the last watermark is 13 * (txids - 1) + 2 - 5 (166 for 14 txids, 374 for 30): the
    # first `final_minutes` windows are final for both pages, the next one is open
    assert [(f[0], (f[1] - BASE_US) // S) for f in ref.finals] == [
        (p, 60 * k) for p in "ab" for k in range(final_minutes)
    ]
    start, end = BASE_US + 60 * final_minutes * S, BASE_US + 60 * (final_minutes + 1) * S
    # 14 txids: a at 123, 130, 136, 143, 149, 156, 162, 169; b at 132, 145, 158, 171
    # 30 txids: a at 364, 370, 377; b at 366, 379
    assert opened(state, store) == [
        ("a", start, end, still_open[0]),
        ("b", start, end, still_open[1]),
    ]
    assert max(sizes) <= 4
    store.close()


def test_epoch_millisecond_field_with_sum(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    topo = ta.TridentTopology("clicks")
    scheme = ta.JsonScheme({"page": "string", "ms": "bigint", "n": "bigint"})
    stream = topo.new_stream("clicks", ta.LogSpout("clicks", scheme))
    state = stream.group_by("page").window_aggregate(
        EventWindow.tumbling("1 s", time_field="ms", time_unit="ms"),
        ta.Sum(),
        "total",
        spec=ta.StateSpec("sums"),
        inputs="n",
    )
    log = new_log(tmp_path)
    store = open_store()
    runner = ta.TopologyRunner(topo, spark, store, log)
    producer = log.producer("clicks")
    for ms, n in ((1_000, 2), (1_999, 3), (2_000, 10), (5_000, 1)):
        producer.send(json.dumps({"page": "p", "ms": ms, "n": n}).encode())
    producer.flush()
    runner.run_batch(1)
    epoch = datetime(1970, 1, 1)
    assert [
        (r["window_start"], r["total"], r["final_txid"]) for r in runner.window_finals("sums")
    ] == [
        (epoch + timedelta(seconds=1), 5, 1),
        (epoch + timedelta(seconds=2), 10, 1),
    ]
    assert last_watermark_us(store, state) == 5_000_000  # 5 s after the epoch, in µs
    store.close()


# -- declarations -------------------------------------------------------------------------------


def test_declarations_are_checked_before_anything_runs() -> None:
    topo = ta.TridentTopology("t")
    scheme = ta.JsonScheme({"page": "string", "ts": "string"})
    grouped = topo.new_stream("s", ta.LogSpout("s", scheme)).group_by("page")
    tumbling = EventWindow.tumbling("10 s", time_field="ts")
    with pytest.raises(FieldNotFoundError, match="'when'"):
        grouped.window_aggregate(
            EventWindow.tumbling("10 s", time_field="when"), ta.Count(), "n", spec=ta.StateSpec("x")
        )

    class Longest(ta.ReducerAggregator):
        def init(self) -> int:
            return 0

        def reduce(self, acc: int, values: tuple[Any, ...]) -> int:
            return max(acc, len(values[0]))

    with pytest.raises(ConfigError, match=r"window_aggregate needs a CombinerAggregator"):
        grouped.window_aggregate(tumbling, Longest(), "n", spec=ta.StateSpec("x"))
    with pytest.raises(ConfigError, match=r"with Sum needs inputs='<field>'"):
        grouped.window_aggregate(tumbling, ta.Sum(), "n", spec=ta.StateSpec("x"))
    with pytest.raises(ConfigError, match=r"needs spec=StateSpec"):
        grouped.window_aggregate(tumbling, ta.Count(), "n", spec="x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"key field 'window_start' is reserved"):
        topo.new_stream(
            "s2", ta.LogSpout("s2", ta.JsonScheme({"window_start": "string", "ts": "string"}))
        ).group_by("window_start").window_aggregate(
            tumbling, ta.Count(), "n", spec=ta.StateSpec("y")
        )
    with pytest.raises(ConfigError, match=r"cannot read duration '10 mins'"):
        EventWindow.tumbling("10 mins", time_field="ts")
    state = grouped.window_aggregate(tumbling, ta.Count(), "n", spec=ta.StateSpec("ok"))
    assert state.new_values_stream().fields == ("page", "window_start", "window_end", "n")
    with pytest.raises(ConfigError, match=r"already has a state 'ok'"):
        grouped.window_aggregate(tumbling, ta.Count(), "n", spec=ta.StateSpec("ok"))


def snapshot(store: Any, state: Any) -> tuple[Any, ...]:
    """Every map table's rows, the open and final windows and the watermarks."""
    maps = {t: sorted(store.fetch_rows(f'SELECT * FROM "{t}"'), key=repr) for t in store.tables()}
    marks = store.fetch_rows(f"SELECT * FROM {WATERMARKS} ORDER BY txid")
    return maps, opened(state, store), finals(state, store), marks


def test_a_changed_window_is_refused_before_any_write(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = new_log(tmp_path)
    store = open_store()
    topo = topology(TUMBLING)
    runner = ta.TopologyRunner(topo, spark, store, log)
    run_all(runner, log, TUMBLING_BATCHES[:1])
    tables = snapshot(store, state_of(topo))
    assert tables[1] == [
        ("a", BASE_US, BASE_US + 10 * S, 1),
        ("a", BASE_US + 10 * S, BASE_US + 20 * S, 1),
    ]
    assert tables[3] == [("clicks", "page_views", 1, at(12), at(7))]
    wider = EventWindow.tumbling("20 s", time_field="ts", allowed_lateness="5 s")
    with pytest.raises(StateContractError) as err:
        ta.TopologyRunner(topology(wider), spark, store, log)
    assert "state 'page_views' of topology 'clicks'" in str(err.value)
    assert "Nothing was run or written" in str(err.value)
    assert f"('window.size_us', '{10 * S}')" in str(err.value)  # stored
    assert f"('window.size_us', '{20 * S}')" in str(err.value)  # declared
    session = EventWindow.session("10 s", time_field="ts", allowed_lateness="5 s")
    with pytest.raises(StateContractError, match=r"window\.kind"):
        ta.TopologyRunner(topology(session), spark, store, log)
    after = snapshot(store, state_of(topo))
    assert after == tables
    # the same declaration continues
    again = ta.TopologyRunner(topology(TUMBLING), spark, store, log)
    produce(log, TUMBLING_BATCHES[1])
    assert again.run_batch(2).applied
    store.close()


def test_timestamp_window_over_an_integer_field_is_refused_before_writing(
    spark: Any, tmp_path: Path
) -> None:
    topo = ta.TridentTopology("clicks")
    scheme = ta.JsonScheme({"page": "string", "ms": "bigint"})
    stream = topo.new_stream("clicks", ta.LogSpout("clicks", scheme))
    stream.group_by("page").window_aggregate(
        EventWindow.tumbling("1 s", time_field="ms"), ta.Count(), "n", spec=ta.StateSpec("n")
    )
    log = new_log(tmp_path)
    log.producer("clicks").send(b'{"page": "p", "ms": 1}')
    store = ta.DuckDBStore(tmp_path / "state.duckdb")
    runner = ta.TopologyRunner(topo, spark, store, log)
    with pytest.raises(ConfigError, match=r"event time field 'ms' is bigint: a timestamp window"):
        runner.run_batch(1)
    assert runner.last_committed() is None
    store.close()


# -- a crash between the window write and the commit ---------------------------------------------

CHILD = """
import os, signal, sys
from pathlib import Path

import trident_assets as ta
from trident_assets.backends.state_store import open_state_store
from trident_assets.spark.session import build_spark_session
from trident_assets_tests.test_event_windows import SESSION, topology

root = Path(sys.argv[1])
spark = build_spark_session(
    {{"spark.local.dir": str(root / "spark"), "spark.sql.warehouse.dir": str(root / "wh")}}
)

def fault(point):
    if point == {point!r}:
        os.kill(os.getpid(), signal.SIGKILL)

store = open_state_store(sys.argv[2])
runner = ta.TopologyRunner(topology(SESSION), spark, store, ta.PartitionedLog(root / "log"),
                           fault=fault)
runner.run_batch(3)
"""


# each crash point once and each store once in `make check` (the other two pairs in
# `make soak`): each is a child process with a Spark JVM of its own
@pytest.mark.parametrize(
    ("open_store", "point"),
    [
        ("duckdb", "after_state_write"),
        pytest.param("duckdb", "before_commit", marks=pytest.mark.slow),
        ("postgres", "before_commit"),
        pytest.param("postgres", "after_state_write", marks=pytest.mark.slow),
    ],
    indirect=["open_store"],
)
def test_sigkill_between_window_write_and_commit_emits_each_window_once(
    spark: Any, tmp_path: Path, open_store: OpenStore, point: str
) -> None:
    log = new_log(tmp_path)
    store = open_store()
    topo = topology(SESSION)
    run_all(ta.TopologyRunner(topo, spark, store, log), log, SESSION_BATCHES[:2])
    state = state_of(topo)
    before = (finals(state, store), opened(state, store), dead_letters(store))
    store.close()
    produce(log, SESSION_BATCHES[2])
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD.format(point=point)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), open_store.location],
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL
    store = open_store()
    assert store.last_committed("clicks") == 2
    assert (finals(state, store), opened(state, store), dead_letters(store)) == before
    assert store.fetch_rows(f"SELECT max(txid) FROM {WATERMARKS}") == [(2,)]
    runner = ta.TopologyRunner(topo, spark, store, log)
    assert runner.run_batch(3).applied  # the replay of txid 3
    produce(log, SESSION_BATCHES[3])
    assert runner.run_batch(4).applied
    ref = reference(SESSION, SESSION_BATCHES)
    assert finals(state, store) == ref.finals
    assert opened(state, store) == ref.open
    assert len(dead_letters(store)) == 1
    store.close()


def test_quarantine_and_backfill_of_a_window_state_are_refused() -> None:
    from trident_assets.planner import quarantine_refusal
    from trident_assets.runtime.backfill_plans import replay_refusal

    topo = topology(TUMBLING)
    assert quarantine_refusal(topo) == (
        "state 'page_views' is an event window: its watermark depends on txid order"
    )
    assert "event-window state" in str(replay_refusal(state_of(topo)))


def test_finals_stream_timestamp_field_and_null_keys(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    check_finals_stream(spark, tmp_path, open_store())


def test_a_postgres_session_in_another_time_zone_stores_utc(
    spark: Any, tmp_path: Path, pg_dsn: str
) -> None:
    """A server or client default zone other than UTC changes no stored instant."""
    import adbc_driver_postgresql.dbapi as pgdbapi

    from trident_assets.backends.state_store import open_state_store

    dsn = f"{pg_dsn}?options=-c%20TimeZone%3DAmerica%2FNew_York"
    with pgdbapi.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT current_setting('TimeZone')")
        assert cur.fetchall() == [("America/New_York",)]  # the DSN's zone reaches the server
    with open_state_store(dsn) as store:
        check_finals_stream(spark, tmp_path, store)
        assert store.fetch_rows("SELECT current_setting('TimeZone')") == [("UTC",)]


def check_finals_stream(spark: Any, tmp_path: Path, store: Any) -> None:
    """Null keys, a TIMESTAMP event-time field and the finals as an output stream."""
    topo = ta.TridentTopology("clicks")
    scheme = ta.JsonScheme({"page": "string", "ts": "timestamp"}, optional=("page",))
    stream = topo.new_stream("clicks", ta.LogSpout("clicks", scheme))
    state = stream.group_by("page").window_aggregate(
        EventWindow.tumbling("10 s", time_field="ts"), ta.Count(), "n", spec=ta.StateSpec("n")
    )
    state.new_values_stream().as_output("final_n")
    log = new_log(tmp_path)
    runner = ta.TopologyRunner(topo, spark, store, log)
    batches = [[(None, 1), ("p", 2), (None, 3)], [(None, 12), ("p", 21)]]
    for txid, batch in enumerate(batches, start=1):
        producer = log.producer("clicks")
        for page, seconds in batch:
            record = {"page": page, "ts": at(seconds).isoformat()}
            producer.send(json.dumps(record).encode())
        producer.flush()
        assert runner.run_batch(txid).applied
    # txid 2: watermark 21: [0, 10) of both keys final, and [10, 20) of the null key
    assert [
        (r["page"], r["window_start"], r["n"], r["final_txid"]) for r in read_finals(store, state)
    ] == [
        ("p", at(0), 1, 2),
        (None, at(0), 2, 2),
        (None, at(10), 1, 2),
    ]
    assert store.fetch_rows(
        'SELECT txid, page, window_start, window_end, n FROM "clicks__out_final_n" '
        "ORDER BY page NULLS LAST, window_start"
    ) == [
        (2, "p", at(0), at(10), 1),
        (2, None, at(0), at(10), 2),
        (2, None, at(10), at(20), 1),
    ]
    assert [(r["page"], r["window_start"]) for r in read_open(store, state)] == [("p", at(20))]


def test_window_rows_keep_duckdb_order_in_a_collated_postgres_database(
    tmp_path: Path, postgres_server: Any
) -> None:
    """Keys ordered by code point on both stores, also where PostgreSQL's collation is en-US."""
    import uuid

    import adbc_driver_postgresql.dbapi as pgdbapi
    import pyarrow as pa

    from trident_assets.backends.state_store import open_state_store
    from trident_assets.backends.window_store import (
        WindowBatch,
        apply_window_batch,
        last_watermark_us,
    )

    name = f"icu_{uuid.uuid4().hex[:12]}"
    with pgdbapi.connect(postgres_server.dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(
            f'CREATE DATABASE "{name}" TEMPLATE template0 LOCALE_PROVIDER icu '
            "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        )
    dsn = postgres_server.dsn.rsplit("/", 1)[0] + f"/{name}"
    pages = ["b", "B", None, "a", "Z"]
    batches = [  # (pages, window index, views), the batch's largest event time (seconds)
        ([(p, 0, 1) for p in pages] + [(p, 1, 2) for p in pages[:3]], 12),
        ([(p, 1, 3) for p in pages[2:]] + [("a", 4, 1)], 40),
    ]
    results = []
    for location in (str(tmp_path / "state.duckdb"), dsn):
        topo = topology(TUMBLING)
        state = state_of(topo)
        emitted = []
        with open_state_store(location) as store:
            for txid, (rows, top) in enumerate(batches, start=1):
                partials = pa.table(
                    {
                        "page": pa.array([r[0] for r in rows], pa.string()),
                        "__ws": [BASE_US + r[1] * 10 * S for r in rows],
                        "__we": [BASE_US + (r[1] + 1) * 10 * S for r in rows],
                        "views": pa.array([r[2] for r in rows], pa.int64()),
                    }
                )
                batch = WindowBatch(partials, BASE_US + top * S, last_watermark_us(store, state))
                with store.transaction():
                    applied = apply_window_batch(store, state, txid, batch)
                emitted.append(applied.finals.to_pylist())
            if store.dialect.is_postgres:  # the database's own order differs
                assert store.fetch_rows(
                    f'SELECT DISTINCT page FROM "{state.finals_table}" ORDER BY page'
                ) == [("a",), ("b",), ("B",), ("Z",), (None,)]
            results.append((emitted, finals(state, store), opened(state, store)))
    duck, pg = results
    assert pg == duck
    w0, w1 = (BASE_US, BASE_US + 10 * S), (BASE_US + 10 * S, BASE_US + 20 * S)
    assert pg[1] == [
        ("B", *w0, 1, 2),
        ("B", *w1, 2, 2),
        ("Z", *w0, 1, 2),
        ("Z", *w1, 3, 2),
        ("a", *w0, 1, 2),
        ("a", *w1, 3, 2),
        ("b", *w0, 1, 2),
        ("b", *w1, 2, 2),
        (None, *w0, 1, 2),
        (None, *w1, 5, 2),
    ]
    assert pg[0][0] == []
    assert [(r["page"], r["views"]) for r in pg[0][1]] == [(f[0], f[3]) for f in pg[1]]
    assert pg[2] == [("a", BASE_US + 40 * S, BASE_US + 50 * S, 1)]


EDGE_MICROS = [
    0,
    1,
    -1,
    BASE_US + 123_456,
    -86_400_000_001,
    253_402_300_799_999_999,  # 9999-12-31 23:59:59.999999
    -62_135_596_800_000_000,  # 0001-01-01 00:00:00
]


def test_timestamps_and_epoch_micros_convert_exactly_on_both_stores(
    open_store: OpenStore,
) -> None:
    """The dialect's conversions: a column, a bound parameter and back, to the microsecond."""
    import pyarrow as pa

    store = open_store()
    d = store.dialect
    expected = [datetime(1970, 1, 1) + timedelta(microseconds=m) for m in EDGE_MICROS]
    with store.staged(pa.table({"i": list(range(len(EDGE_MICROS))), "v": EDGE_MICROS})) as name:
        rows = store.fetch_rows(
            f'SELECT {d.timestamp_of_micros("v")} AS t FROM "{name}" ORDER BY i'
        )
        assert [r[0] for r in rows] == expected
        back = store.fetch_rows(
            f"SELECT {d.micros_of('t')} FROM (SELECT i, {d.timestamp_of_micros('v')} AS t "
            f'FROM "{name}") AS s ORDER BY i'
        )
        assert [r[0] for r in back] == EDGE_MICROS
    for micros, when in zip(EDGE_MICROS, expected, strict=True):
        assert store.fetch_rows(f"SELECT {d.timestamp_param()}", [micros]) == [(when,)]
    assert store.fetch_rows(f"SELECT {d.timestamp_param()}", [None]) == [(None,)]

"""Event-time windows over record timestamps: several txids in one Spark job, exactly.

A window whose time field is the record timestamp runs its txids in chunks
(:mod:`trident_assets.spark.event_window_chunks`): late records are decided at each commit,
against the committed watermark, from candidates the log's timestamp statistics flag before
the job. Every result here is compared with the one-batch path (the same runner with
pipelining off, which decides lateness in Spark before each commit) and with the plain-Python
model (:func:`~trident_assets_tests.event_window_model.reference_windows`): finals, open windows,
dead letters in their order, watermarks, new values and each txid's outcome.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import trident_assets as ta
from trident_assets.backends.window_store import WATERMARKS, read_finals, read_open
from trident_assets.core.event_windows import EventWindow
from trident_assets.errors import TridentError
from trident_assets.log.timestamps import max_timestamp_ms
from trident_assets.spark.event_window_chunks import chunk_bounds, late_reason
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.stream.graph import record_time_spout as _record_time_spout
from trident_assets_tests.event_window_model import reference_windows

REPO = Path(__file__).resolve().parents[1]
BASE_MS = int((datetime(2026, 1, 1) - datetime(1970, 1, 1)).total_seconds()) * 1000
BATCH = 40
TXIDS = 12

TUMBLING = EventWindow.tumbling("10 s", time_field="timestamp", allowed_lateness="5 s")
SLIDING = EventWindow.sliding("10 s", "4 s", time_field="timestamp", allowed_lateness="3 s")


def record_time_spout(state: Any) -> Any:
    """The spout whose record timestamps are the window's times, if any."""
    return _record_time_spout(state.node.args["event_window"], state.node.parents[0])


def topology(window: EventWindow, agg: Any = None, inputs: str | None = None) -> Any:
    """``clicks``: JSON {page, n} records, per page, timed by the record timestamp."""
    topo = ta.TridentTopology("clicks")
    fields = {"page": "string", "n": "bigint"}
    scheme = ta.JsonScheme(fields, optional=("page",), with_metadata=True)
    spout = ta.LogSpout(
        "clicks", scheme, SpoutConfig(kind=SpoutKind.TRANSACTIONAL, max_batch_size=BATCH)
    )
    topo.new_stream("clicks", spout).project(["page", "n", "timestamp"]).group_by(
        "page"
    ).window_aggregate(
        window, agg or ta.Count(), "views", spec=ta.StateSpec("page_views"), inputs=inputs
    )
    return topo


def records(seed: int) -> list[tuple[str | None, int, int]]:
    """``TXIDS * BATCH`` records ``(page, timestamp ms, n)``: about 3 s of event time per
    txid, some out of order within the lateness, some far behind (late), some identical."""
    rng = random.Random(seed)
    out: list[tuple[str | None, int, int]] = []
    for i in range(TXIDS * BATCH):
        t = BASE_MS + i * 75
        roll = rng.random()
        if roll < 0.15:
            t -= rng.randrange(0, 4000)  # out of order, in time
        elif roll < 0.25 and i > 2 * BATCH:
            t -= rng.randrange(14_000, 40_000)  # behind the watermark: late
        elif roll < 0.32 and i > BATCH:
            t -= rng.randrange(3_000, 9_000)  # around the watermark: partly late (sliding)
        page = rng.choice(["a", "b", "c", None])
        n = rng.randrange(1, 5)
        out.append((page, t, n))
        if rng.random() < 0.1 or 0.25 <= roll < 0.28:
            out.append((page, t, n))  # an identical record
    return out


def produce(log: Any, rows: list[tuple[str | None, int, int]]) -> None:
    """Into one partition, in segments of 70 records: batches end inside segment files."""
    producer = log.producer("clicks")  # one partition
    for i, (page, t, n) in enumerate(rows, start=1):
        producer.send(json.dumps({"page": page, "n": n}).encode(), timestamp_ms=t)
        if i % 70 == 0:
            producer.flush()
    producer.flush()


def new_log(path: Path, rows: list[tuple[str | None, int, int]]) -> Any:
    log = ta.PartitionedLog(path)
    log.create_topic("clicks", 1)
    produce(log, rows)
    return log


def outcome_rows(store: Any, state: Any) -> dict[str, Any]:
    """Everything a txid leaves: finals, open windows, dead letters (in order), watermarks."""
    return {
        "finals": read_finals(store, state),
        "open": read_open(store, state),
        "dead": store.fetch_rows(
            'SELECT txid, spout, topic, partition, "offset", reason, decode(value) '
            "FROM _trident_dead_letters"
        ),
        "marks": store.fetch_rows(f"SELECT * FROM {WATERMARKS} ORDER BY txid"),
        "new_values": store.fetch_rows(
            'SELECT * FROM "clicks__page_views__new_values" ORDER BY txid, page NULLS FIRST, '
            "window_start"
        ),
    }


def run(
    spark: Any, tmp: Path, window: EventWindow, how: str, agg: Any = None, txids: int = TXIDS
) -> Any:
    """Run txids 1..``txids`` one way; return (every txid's windows outcome, stored rows)."""
    rows = records(7)
    log = new_log(tmp / "log", rows)
    topo = topology(window, agg, "n" if agg is not None else None)
    with ta.DuckDBStore(tmp / "state.duckdb") as store:
        runner = ta.TopologyRunner(topo, spark, store, log, max_spout_pending=4)
        assert runner.pipelinable  # record-timestamp windows share Spark jobs
        if how == "one-batch path":
            runner.pipelinable = False  # Spark decides lateness before each commit
        if how == "chunks":
            outcomes = list(runner.run_batches(list(range(1, txids + 1))))
        else:
            outcomes = [runner.run_batch(txid) for txid in range(1, txids + 1)]
        assert [o.txid for o in outcomes if o.applied] == list(range(1, txids + 1))
        return [o.windows for o in outcomes], outcome_rows(store, topo.states["page_views"]), rows


@pytest.fixture(scope="module")
def one_batch_runs(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``run(..., "one-batch path")`` of a window (and ``"sum"`` or no aggregator), run once
    for the module: the reference the chunked runs of several tests are compared with."""
    done: dict[tuple[str, str | None], Any] = {}

    def reference(window: EventWindow, agg: str | None = None) -> Any:
        key = (repr(window), agg)
        if key not in done:
            tmp = tmp_path_factory.mktemp("one-batch")
            done[key] = run(spark, tmp, window, "one-batch path", ta.Sum() if agg else None)
        return done[key]

    return reference


@pytest.mark.parametrize(
    ("window", "agg"),
    [(TUMBLING, None), (SLIDING, None), (SLIDING, "sum")],
    ids=["tumbling-count", "sliding-count", "sliding-sum"],
)
def test_chunks_give_exactly_the_one_batch_results(
    spark: Any, tmp_path: Path, window: EventWindow, agg: str | None, one_batch_runs: Any
) -> None:
    make = (lambda: ta.Sum()) if agg == "sum" else (lambda: None)
    txids = TXIDS
    ref_outcomes, ref_rows, rows = one_batch_runs(window, agg)
    # the corpus exercises what it should: late, partly late (sliding), duplicates
    late = sum(w["page_views"].late_records for w in ref_outcomes)
    assert late >= 10
    if window is SLIDING:
        assert sum(w["page_views"].partly_late_records for w in ref_outcomes) >= 5
    assert len(set(rows)) < len(rows)
    # run_batch runs a chunk of one txid (the path of a Dagster run per txid)
    for how in ("chunks", "one txid per run_batch") if window is TUMBLING else ("chunks",):
        outcomes, got, _ = run(spark, tmp_path / how.replace(" ", "-"), window, how, make(), txids)
        assert outcomes == ref_outcomes, how
        assert got == ref_rows, how
    # and the model agrees on what is final and open, and on the late records
    batches = [rows[i * BATCH : (i + 1) * BATCH] for i in range(txids)]
    model = reference_windows(
        window,
        [[(NULL if p is None else p, t * 1000, n) for p, t, n in b] for b in batches],
        init=(lambda v: v) if agg == "sum" else (lambda v: 1),
    )
    finals = [(*_row(r), r["final_txid"]) for r in ref_rows["finals"]]
    assert _sorted(finals) == _sorted(model.finals)
    assert _sorted([_row(r) for r in ref_rows["open"]]) == _sorted(model.open)
    assert late == len(model.late)


def test_a_chunk_without_records_runs_no_spark_job_and_changes_nothing(
    spark: Any, tmp_path: Path
) -> None:
    """Txids 3-6 read nothing: their chunks run no Spark job and commit what a txid alone
    would (the same watermark, no window, no dead letter)."""
    got = []
    for how in ("one-batch path", "chunks"):
        log = new_log(tmp_path / how / "log", records(7)[: 2 * BATCH])
        topo = topology(TUMBLING)
        with ta.DuckDBStore(tmp_path / how / "state.duckdb") as store:
            runner = ta.TopologyRunner(topo, spark, store, log, max_spout_pending=2)
            runner.pipelinable = how == "chunks"
            before = _last_job(spark)
            outcomes = list(runner.run_batches([1, 2]))
            jobs = _last_job(spark)
            assert jobs > before  # the records of txids 1-2 ran a job (jobs are seen)
            outcomes += list(runner.run_batches([3, 4, 5, 6]))
            if how == "chunks":
                assert _last_job(spark) == jobs
            assert [o.applied for o in outcomes] == [True] * 6
            assert [o.plans["clicks"].record_count for o in outcomes] == [BATCH] * 2 + [0] * 4
            got.append(
                ([o.windows for o in outcomes], outcome_rows(store, topo.states["page_views"]))
            )
    assert got[1] == got[0]


@pytest.mark.parametrize("pending", [1, TXIDS - 1], ids=["every-txid-alone", "last-alone"])
def test_a_chunk_of_one_started_ahead_gives_exactly_the_one_batch_results(
    spark: Any, tmp_path: Path, pending: int, one_batch_runs: Any
) -> None:
    """A chunk of one txid that the loop starts while the chunk before it commits (every
    txid with ``max_spout_pending=1``; txid 12 after a chunk of 11) decides its late records
    at its commit and passes its bound on, as a chunk of several does: the one-batch path's
    rows exactly. The only Spark jobs are the window's: its decode counted no dead letter."""
    ref_outcomes, ref_rows, _ = one_batch_runs(TUMBLING)
    log = new_log(tmp_path / "log", records(7))
    topo = topology(TUMBLING)
    with ta.DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = ta.TopologyRunner(topo, spark, store, log, max_spout_pending=pending)
        before = _last_job(spark)
        outcomes = list(runner.run_batches(list(range(1, TXIDS + 1))))
        jobs = range(before + 1, _last_job(spark) + 1)
        got = outcome_rows(store, topo.states["page_views"])
    assert [o.txid for o in outcomes if o.applied] == list(range(1, TXIDS + 1))
    assert [o.pipelined for o in outcomes][-1] == 1
    assert [o.windows for o in outcomes] == ref_outcomes
    assert got == ref_rows
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(s) for j in jobs for s in tracker.getJobInfo(j).stageIds]
    names = {Path(s.name.split(" at ")[-1].split(":")[0]).name for s in stages if s is not None}
    assert names == {"event_window_chunks.py"}


def test_a_commit_that_fails_reads_the_open_windows_again_from_the_store(
    spark: Any, tmp_path: Path, one_batch_runs: Any
) -> None:
    """The runner holds the open windows in memory between commits. Txid 6's commit fails
    after its window write (its transaction rolls back, the held copy had moved on): run
    again, txid 6 merges into the store's open windows, and every txid ends as the one-batch
    path's."""
    ref_outcomes, ref_rows, _ = one_batch_runs(TUMBLING)
    log = new_log(tmp_path / "log", records(7))
    topo = topology(TUMBLING)
    commits: list[str] = []

    def fault(point: str) -> None:
        if point == "before_commit":
            commits.append(point)
            if len(commits) == 6:
                raise RuntimeError("injected: txid 6 does not commit")

    with ta.DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = ta.TopologyRunner(topo, spark, store, log, max_spout_pending=4, fault=fault)
        done = []
        with pytest.raises(RuntimeError, match="txid 6 does not commit"):
            done.extend(o.windows for o in runner.run_batches(list(range(1, TXIDS + 1))))
        assert store.last_committed("clicks") == 5
        done.extend(o.windows for o in runner.run_batches(list(range(6, TXIDS + 1))))
        got = outcome_rows(store, topo.states["page_views"])
    assert len(commits) == TXIDS + 1
    assert done == ref_outcomes
    assert got == ref_rows


def test_a_chunks_commit_reads_the_watermark_row_once_per_txid(
    spark: Any, tmp_path: Path, one_batch_runs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk's txid decides its late records and applies its windows against one read of
    the committed watermark row, inside its commit transaction: one read per txid, the
    one-batch path's rows exactly."""
    from trident_assets.backends import window_store
    from trident_assets.spark import state_engines

    ref_outcomes, ref_rows, _ = one_batch_runs(TUMBLING)
    reads: list[int] = []
    real = window_store.last_committed

    def counted(store: Any, state: Any) -> Any:
        reads.append(store.last_committed("clicks") or 0)
        return real(store, state)

    # every reader of the row: the window store's own and the commit's (its imported name)
    monkeypatch.setattr(window_store, "last_committed", counted)
    monkeypatch.setattr(state_engines, "last_committed", counted)
    log = new_log(tmp_path / "log", records(7))
    topo = topology(TUMBLING)
    with ta.DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = ta.TopologyRunner(topo, spark, store, log, max_spout_pending=4)
        outcomes = list(runner.run_batches(list(range(1, TXIDS + 1))))
        got = outcome_rows(store, topo.states["page_views"])
    assert [o.windows for o in outcomes] == ref_outcomes
    assert got == ref_rows
    # one read per txid's commit (made while txid - 1 is the last committed) and one per
    # chunk planned (chunks of 4: txids 1-4 and 5-8 before txid 1 commits, 9-12 after txid 4)
    assert sorted(reads) == sorted([*range(TXIDS), 0, 0, 4])


def _last_job(spark: Any) -> int:
    """The id of the session's latest Spark job (ids only grow; -1 before any)."""
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(), default=-1)


def _us(value: datetime) -> int:
    return int((value - datetime(1970, 1, 1)) / timedelta(microseconds=1))


NULL = "(null page)"
"""The model sorts its keys: a null page is this string there."""


def _row(r: dict[str, Any]) -> tuple[Any, ...]:
    page = NULL if r["page"] is None else r["page"]
    return (page, _us(r["window_start"]), _us(r["window_end"]), r["views"])


def _sorted(rows: Any) -> list[tuple[Any, ...]]:
    return sorted(rows)


def test_a_bound_below_a_records_timestamp_is_refused_before_any_write(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the log's statistics understated a batch's timestamps, a late record would not be
    flagged: the commit that meets it refuses, and nothing of that txid is written."""
    log = new_log(tmp_path / "log", records(7))
    topo = topology(TUMBLING)
    monkeypatch.setattr(ta.LogSpout, "max_timestamp_ms", lambda self, log, plan: BASE_MS)
    with ta.DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = ta.TopologyRunner(topo, spark, store, log, max_spout_pending=TXIDS)
        done = []
        with pytest.raises(TridentError, match="not expected to be late") as err:
            done.extend(o.txid for o in runner.run_batches(list(range(1, TXIDS + 1))))
        assert "nothing was written" in str(err.value)
        assert "trident log verify" in str(err.value)
        last = store.last_committed("clicks")
        assert done == list(range(1, last + 1))
        assert 3 <= last < TXIDS  # records are late from txid 4 on
        state = topo.states["page_views"]
        assert store.fetch_rows(f"SELECT max(txid) FROM {WATERMARKS}") == [(last,)]
        assert {r["txid"] for r in read_open(store, state)} <= set(range(1, last + 1))


def test_the_log_bounds_a_range_by_its_row_groups(tmp_path: Path) -> None:
    log = ta.PartitionedLog(tmp_path / "log")
    log.create_topic("t", 1)
    producer = log.producer("t")
    for i, t in enumerate([5_000, 9_000, 7_000, 1_000, 3_000]):  # offsets 0..4, one segment
        producer.send(b"x", timestamp_ms=t)
        if i == 2:
            producer.flush()  # segment 0..2, then 3..4
    producer.flush()
    assert max_timestamp_ms(log, [("t", 0, 0, 4)]) == 9_000
    assert max_timestamp_ms(log, [("t", 0, 3, 4)]) == 3_000  # exact: the whole second segment
    assert max_timestamp_ms(log, [("t", 0, 0, 0)]) == 9_000  # an upper bound: its row group's
    assert max_timestamp_ms(log, [("t", 0, 3, 2)]) is None  # an empty range


def test_only_record_timestamp_windows_share_spark_jobs() -> None:
    assert record_time_spout(topology(TUMBLING).states["page_views"]) is not None
    assert record_time_spout(topology(SLIDING).states["page_views"]) is not None
    session = EventWindow.session("10 s", time_field="timestamp")
    assert record_time_spout(topology(session).states["page_views"]) is None
    # a time field of the record's value, or one a function could change, has no bound
    topo = ta.TridentTopology("clicks")
    scheme = ta.JsonScheme({"page": "string", "ts": "timestamp"}, with_metadata=True)
    stream = topo.new_stream("clicks", ta.LogSpout("clicks", scheme))
    stream.group_by("page").window_aggregate(
        EventWindow.tumbling("10 s", time_field="ts"), ta.Count(), "n", spec=ta.StateSpec("a")
    )
    shifted = ta.SqlMap("{page}", "{timestamp} + INTERVAL 1 HOUR")
    stream.map(shifted, ["page", "timestamp"]).group_by("page").window_aggregate(
        TUMBLING, ta.Count(), "n", spec=ta.StateSpec("b")
    )
    assert record_time_spout(topo.states["a"]) is None
    assert record_time_spout(topo.states["b"]) is None


def test_chunk_bounds_carry_the_largest_event_time_forward() -> None:
    assert chunk_bounds(None, [None, 10, None, 30, 20], 5) == ([None, None, 5, 5, 25], 30)
    assert chunk_bounds(40, [10, None], 5) == ([35, 35], 40)
    assert late_reason(0, 10_000_000, 12_500_000) == (
        "late record: its window [1970-01-01 00:00:00.000000 UTC, 1970-01-01 00:00:10.000000 "
        "UTC) is final (window_end <= watermark 1970-01-01 00:00:12.500000 UTC)"
    )


CHILD = """
import os, signal, sys
from pathlib import Path
import trident_assets as ta
from trident_assets.spark.session import build_spark_session
from trident_assets_tests.test_event_window_chunks import TUMBLING, topology

root = Path(sys.argv[1])
spark = build_spark_session(
    {"spark.local.dir": str(root / "spark"), "spark.sql.warehouse.dir": str(root / "wh")}
)
seen = []

def fault(point):
    if point == "after_state_write":
        seen.append(point)
        if len(seen) == 6:  # txid 6: the second txid of the second chunk
            os.kill(os.getpid(), signal.SIGKILL)

with ta.DuckDBStore(root / "state.duckdb") as store:
    runner = ta.TopologyRunner(topology(TUMBLING), spark, store, ta.PartitionedLog(root / "log"),
                               max_spout_pending=4, fault=fault)
    list(runner.run_batches(list(range(1, 13))))
"""


def test_sigkill_inside_a_chunk_then_replay_gives_the_same_windows(
    spark: Any, tmp_path: Path, one_batch_runs: Any
) -> None:
    """Killed between txid 6's window write and its commit (txids 5-8 share a job): txids
    1-5 stay committed, 6 left nothing, and the replay of 6-12 ends where a clean run does."""
    ref_outcomes, ref_rows, _ = one_batch_runs(TUMBLING)
    work = tmp_path / "crash"
    new_log(work / "log", records(7))
    script = work / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    proc = subprocess.run(
        [sys.executable, str(script), str(work)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=work,
        timeout=300,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL
    topo = topology(TUMBLING)
    state = topo.states["page_views"]
    with ta.DuckDBStore(work / "state.duckdb") as store:
        assert store.last_committed("clicks") == 5
        assert store.fetch_rows(f"SELECT max(txid) FROM {WATERMARKS}") == [(5,)]
        runner = ta.TopologyRunner(
            topo, spark, store, ta.PartitionedLog(work / "log"), max_spout_pending=4
        )
        outcomes = list(runner.run_batches(list(range(1, TXIDS + 1))))
        assert [o.applied for o in outcomes] == [False] * 5 + [True] * 7
        assert [o.windows for o in outcomes[5:]] == ref_outcomes[5:]
        assert outcome_rows(store, state) == ref_rows

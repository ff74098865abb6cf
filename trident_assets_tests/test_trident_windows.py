"""Trident windows on Spark with DuckDB state: fired once, in the txid they fire, across crashes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import trident_assets as ta
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.backends.window_tuples import read_meta
from trident_assets.core.aggregators import Count, ReducerAggregator, Sum
from trident_assets.errors import ConfigError, FieldNotFoundError, StateContractError
from trident_assets.log.store import PartitionedLog
from trident_assets.names import WINDOWS_TABLE
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.operations import PyMap
from trident_assets.stream.topology import StateSpec, TridentTopology

REPO = Path(__file__).resolve().parents[1]


class Concat(ReducerAggregator[str]):
    """Joins the values with ``,`` in window order."""

    output_type = "string"

    def init(self) -> str:
        return ""

    def reduce(self, acc: str, values: tuple[Any, ...]) -> str:
        return f"{acc},{values[0]}" if acc else str(values[0])


def spout() -> LogSpout:
    config = SpoutConfig(kind=SpoutKind.TRANSACTIONAL)
    return LogSpout("nums", JsonScheme({"n": "bigint"}), config)


def make_log(root: Path, partitions: int = 1) -> PartitionedLog:
    log = PartitionedLog(root / "log")
    log.create_topic("nums", partitions)
    return log


def produce(log: PartitionedLog, values: list[int], partition: int = 0) -> None:
    producer = log.producer("nums")
    for v in values:
        producer.send(json.dumps({"n": v}).encode(), partition=partition)
    producer.flush()


def window_topology(config: Any, agg: Any = None, out: str = "total") -> TridentTopology:
    """``w``: a window (``config``) of ``n`` and, downstream, how many windows fired and
    the sum of their aggregates (opaque states ``fired`` and ``summed``)."""
    topo = TridentTopology("w")
    fired = topo.new_stream("nums", spout()).window(config, "n", agg or Sum(), out, spec="win")
    fired.persistent_aggregate(StateSpec.opaque("fired"), out, Count(), "windows")
    if agg is None:
        fired.persistent_aggregate(StateSpec.opaque("summed"), out, Sum(), "sum")
    return topo


def fired_in(store: DuckDBStore, txid: int, out: str = "total") -> list[Any]:
    """The window stream's tuples of ``txid`` (the window's new values), in order."""
    table = "w__win__new_values"
    if not store.has_table(table):
        return []
    return [r[0] for r in store.fetch_rows(f'SELECT "{out}" FROM "{table}" WHERE txid = ?', [txid])]


def global_value(store: DuckDBStore, state: str) -> Any:
    rows = store.scan(f"w__{state}").to_pylist()
    return rows[0]["value"] if rows else None


def run_sizes(
    spark: Any, root: Path, topo: TridentTopology, sizes: list[int], **runner: Any
) -> tuple[DuckDBStore, TopologyRunner, list[list[Any]]]:
    """Numbers 1, 2, ... in batches of ``sizes`` (one txid each); the fired tuples per txid."""
    log = make_log(root)
    store = DuckDBStore(root / "state.duckdb")
    run = TopologyRunner(topo, spark, store, log, **runner)
    fired, n = [], 0
    for txid, size in enumerate(sizes, start=1):
        produce(log, list(range(n + 1, n + size + 1)))
        n += size
        assert run.run_batch(txid).applied
        fired.append(fired_in(store, txid))
    return store, run, fired


def test_tumbling_count_window_across_batches(spark: Any, tmp_path: Path) -> None:
    """3 tuples per window over batches of 2, 4, 1 and 5 tuples: Storm's TumblingCountWindow."""
    topo = window_topology(ta.TumblingCountWindow(3))
    replica = Replica(tmp_path / "replica")
    store, _run, fired = run_sizes(spark, tmp_path, topo, [2, 4, 1, 5], replica=replica)
    assert fired == [[], [6, 15], [], [24, 33]]
    published = replica.read_rows("w__win__new_values", 2)
    assert published is not None
    assert published.column("total").to_pylist() == [6, 15]
    assert global_value(store, "fired") == 4
    assert global_value(store, "summed") == 78
    assert store.fetch_rows('SELECT count(*) FROM "w__win"') == [(0,)]  # nothing left open
    assert read_meta(store, "w__win").seen == 12
    store.close()


def test_sliding_count_window_holds_tuples_in_order(spark: Any, tmp_path: Path) -> None:
    """Window 4, slide 2: the first window holds 2 tuples (Storm's count trigger)."""
    topo = window_topology(ta.SlidingCountWindow(4, 2), agg=Concat(), out="seq")
    log = make_log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    run = TopologyRunner(topo, spark, store, log)
    fired, n = [], 0
    for txid, size in enumerate([2, 4, 1, 5], start=1):
        produce(log, list(range(n + 1, n + size + 1)))
        n += size
        run.run_batch(txid)
        fired.append(fired_in(store, txid, "seq"))
    assert fired == [["1,2"], ["1,2,3,4", "3,4,5,6"], [], ["5,6,7,8", "7,8,9,10", "9,10,11,12"]]
    assert global_value(store, "fired") == 6
    store.close()


def test_count_window_orders_by_partition_then_offset(spark: Any, tmp_path: Path) -> None:
    """Within a txid tuples are ordered by (partition, offset), whatever Spark's split."""
    topo = TridentTopology("w")
    stream = topo.new_stream("nums", spout()).each(
        "n", ta.PyFunction(lambda n: [(n * 10,)], {"m": "bigint"}), "m"
    )
    stream.tumbling_window("m", Concat(), "seq", count=4, spec="win")
    log = make_log(tmp_path, partitions=2)
    produce(log, [1, 2, 3], partition=1)
    produce(log, [4, 5], partition=0)
    store = DuckDBStore(tmp_path / "state.duckdb")
    run = TopologyRunner(topo, spark, store, log)
    run.run_batch(1)
    assert fired_in(store, 1, "seq") == ["40,50,10,20"]
    produce(log, [6, 7, 8], partition=0)
    run.run_batch(2)
    assert fired_in(store, 2, "seq") == ["30,60,70,80"]
    store.close()


def durations(
    spark: Any, root: Path, config: Any
) -> tuple[DuckDBStore, TopologyRunner, list[list[Any]]]:
    """Txids 1..7 at 1, 4, 12, 13, 35, 36 and 41 s with 1, 2, 1, 1, 1, 0, 1 tuples (n=1)."""
    times = iter([1.0, 4.0, 12.0, 13.0, 35.0, 36.0, 41.0])
    now = [0.0]
    topo = window_topology(config)
    log = make_log(root)
    store = DuckDBStore(root / "state.duckdb")
    run = TopologyRunner(topo, spark, store, log, clock=lambda: now[0])
    fired = []
    for txid, size in enumerate([1, 2, 1, 1, 1, 0, 1], start=1):
        produce(log, [1] * size)
        now[0] = next(times)
        run.run_batch(txid)
        fired.append(fired_in(store, txid))
    return store, run, fired


def test_tumbling_duration_window_over_recorded_times(spark: Any, tmp_path: Path) -> None:
    """10 s windows: [0, 10) fires at txid 3 (12 s), [10, 20) at txid 5; [20, 30) is empty."""
    store, _run, fired = durations(spark, tmp_path, ta.TumblingDurationWindow(10))
    assert fired == [[], [], [3], [], [2], [], [1]]
    assert read_meta(store, "w__win").time_ms == 41_000
    assert global_value(store, "fired") == 3
    store.close()


def test_sliding_duration_window_over_recorded_times(spark: Any, tmp_path: Path) -> None:
    """10 s every 5 s: [-5, 5) and [0, 10) at txid 3; [5, 15) and [10, 20) at txid 5."""
    store, _run, fired = durations(spark, tmp_path, ta.SlidingDurationWindow(10, 5))
    assert fired == [[], [], [3, 3], [], [2, 2], [], [1]]
    # what is kept: the partials of txids 5 (35 s) and 7 (41 s), still due in [35, 45)
    assert store.fetch_rows('SELECT _trident_txid FROM "w__win" ORDER BY 1') == [(5,), (7,)]
    store.close()


def test_a_replayed_txid_fires_nothing_again(spark: Any, tmp_path: Path) -> None:
    topo = window_topology(ta.TumblingCountWindow(3))
    store, run, fired = run_sizes(spark, tmp_path, topo, [2, 4])
    assert fired == [[], [6, 15]]
    before = store.fetch_rows(f"SELECT * FROM {WINDOWS_TABLE}")
    again = run.run_batch(2)
    assert not again.applied
    assert fired_in(store, 2) == [6, 15]
    assert store.fetch_rows(f"SELECT * FROM {WINDOWS_TABLE}") == before
    assert global_value(store, "fired") == 2
    assert run.run_batch(3).applied  # an empty txid: nothing added, nothing fires
    assert fired_in(store, 3) == []
    assert read_meta(store, "w__win").seen == 6
    store.close()


@pytest.mark.parametrize(
    "txids", [12, pytest.param(32, marks=pytest.mark.slow)], ids=lambda n: f"{n}-txids"
)
def test_the_window_store_stays_bounded(spark: Any, tmp_path: Path, txids: int) -> None:
    """``txids`` txids of 3 tuples through a 5-tuple window sliding by 2: at most 5 tuples kept.

    ``make test`` runs 12 txids (the store fills and is trimmed 18 times); ``make soak`` 32.
    """
    topo = window_topology(ta.SlidingCountWindow(5, 2))
    log = make_log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    run = TopologyRunner(topo, spark, store, log, max_spout_pending=1)
    total_fired = 0
    for txid in range(1, txids + 1):
        produce(log, [txid] * 3)
        run.run_batch(txid)
        total_fired += len(fired_in(store, txid))
        assert store.fetch_rows('SELECT count(*) FROM "w__win"')[0][0] <= 5
    assert total_fired == 3 * txids // 2
    assert read_meta(store, "w__win").fired == 3 * txids // 2
    assert global_value(store, "fired") == 3 * txids // 2
    store.close()


CHILD = """
import json, os, signal, sys
from pathlib import Path
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.session import build_spark_session
from trident_assets.core.trident_windows import TumblingCountWindow
from trident_assets_tests.test_trident_windows import window_topology

root = Path(sys.argv[1])
spark = build_spark_session(
    {"spark.local.dir": str(root / "spark"), "spark.sql.warehouse.dir": str(root / "wh")}
)

def fault(point):
    if point == "after_state_write":
        os.kill(os.getpid(), signal.SIGKILL)

store = DuckDBStore(root / "state.duckdb")
runner = TopologyRunner(window_topology(TumblingCountWindow(3)), spark, store,
                        PartitionedLog(root / "log"), fault=fault)
runner.run_batch(2)
"""


def test_sigkill_between_window_write_and_commit(spark: Any, tmp_path: Path) -> None:
    """Killed after the window store write of txid 2: nothing of it stays; the re-run fires
    each window once, and the downstream states count each window once."""
    topo = window_topology(ta.TumblingCountWindow(3))
    log = make_log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    produce(log, [1, 2])
    TopologyRunner(topo, spark, store, log).run_batch(1)
    produce(log, [3, 4, 5, 6, 7])
    store.close()
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], env=env, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL
    store = DuckDBStore(tmp_path / "state.duckdb")
    assert store.last_committed("w") == 1
    assert read_meta(store, "w__win").last_txid == 1
    assert store.fetch_rows('SELECT _trident_seq FROM "w__win" ORDER BY 1') == [(1,), (2,)]
    run = TopologyRunner(window_topology(ta.TumblingCountWindow(3)), spark, store, log)
    assert run.run_batch(2).applied
    assert fired_in(store, 2) == [6, 15]
    assert store.fetch_rows('SELECT _trident_seq FROM "w__win" ORDER BY 1') == [(7,)]
    produce(log, [8, 9])
    run.run_batch(3)
    assert fired_in(store, 3) == [24]
    assert global_value(store, "fired") == 3
    assert global_value(store, "summed") == 45
    store.close()


def test_a_changed_window_config_is_refused(spark: Any, tmp_path: Path) -> None:
    topo = window_topology(ta.TumblingCountWindow(3))
    store, _run, _fired = run_sizes(spark, tmp_path, topo, [2])
    changed = window_topology(ta.SlidingCountWindow(3, 1))
    with pytest.raises(StateContractError, match="win") as info:
        TopologyRunner(changed, spark, store, make_log(tmp_path / "other"))
    assert "SlidingCountWindow(size=3, slide=1)" in str(info.value)
    store.close()


class KeepRows(ta.StateUpdater):
    """Appends each batch's rows to its table (a partition_persist over the window stream)."""

    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> Any:
        with store.staged(batch) as name:
            store.execute(f'CREATE TABLE IF NOT EXISTS "{table}" AS SELECT * FROM "{name}" LIMIT 0')
            store.execute(f'INSERT INTO "{table}" SELECT * FROM "{name}"')
        return None


def test_max_over_a_duration_window_feeds_each_and_partition_persist(
    spark: Any, tmp_path: Path
) -> None:
    """A Max over a duration window: partials per txid, combined when the window fires; the
    window stream goes through ``each`` to an output and to a ``partition_persist``."""
    now = [0.0]
    topo = TridentTopology("w")
    tops = topo.new_stream("nums", spout()).tumbling_window(
        "n", ta.Max(), "top", duration=10, spec="win"
    )
    doubled = tops.each("top", ta.PyFunction(lambda t: [(t * 2,)], {"double": "bigint"}), "double")
    doubled.as_output("doubled")
    doubled.partition_persist(StateSpec.opaque("kept"), ["top", "double"], KeepRows())
    log = make_log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    run = TopologyRunner(topo, spark, store, log, clock=lambda: now[0])
    for txid, (values, at) in enumerate([([3, 9], 1.0), ([4], 2.0), ([1], 11.0)], start=1):
        produce(log, values)
        now[0] = at
        run.run_batch(txid)
    assert fired_in(store, 3, "top") == [9]
    assert store.fetch_rows('SELECT top, double FROM "w__out_doubled" WHERE txid = 3') == [(9, 18)]
    assert store.fetch_rows('SELECT top, double FROM "w__kept"') == [(9, 18)]
    store.close()


# -- declaration ----------------------------------------------------------------------------------


def stream() -> Any:
    return TridentTopology("w").new_stream("nums", spout())


@pytest.mark.parametrize(
    ("declare", "error", "message"),
    [
        (
            lambda s: s.tumbling_window("n", Sum(), "t", count=0, spec="win"),
            ConfigError,
            "TumblingCountWindow count must be an integer >= 1, got 0",
        ),
        (
            lambda s: s.sliding_window("n", Sum(), "t", count=2, slide=3, spec="win"),
            ConfigError,
            r"the slide \(3 tuples\) must not be larger than the window \(2 tuples\)",
        ),
        (
            lambda s: s.tumbling_window("n", Sum(), "t", count=2, duration=1, spec="win"),
            ConfigError,
            "tumbling_window takes count or duration",
        ),
        (
            lambda s: s.tumbling_window("x", Sum(), "t", count=2, spec="win"),
            FieldNotFoundError,
            "trying to select non-existent field 'x'",
        ),
        (
            lambda s: s.tumbling_window("n", Concat(), "t", duration=5, spec="win"),
            ConfigError,
            "duration window 'win' keeps one partial per txid .* needs a CombinerAggregator",
        ),
        (
            lambda s: s.tumbling_window("n", object(), "t", count=2, spec="win"),
            ConfigError,
            "window 'win' needs a CombinerAggregator or ReducerAggregator",
        ),
        (
            lambda s: s.window(3, "n", Sum(), "t", spec="win"),
            ConfigError,
            "window 'win' needs a WindowConfig",
        ),
        (
            lambda s: s.tumbling_window("n", Sum(), "txid", count=2, spec="win"),
            ConfigError,
            "output field 'txid' is reserved",
        ),
        (
            lambda s: s.map(PyMap(lambda n: n)).tumbling_window("n", Sum(), "t", count=2, spec="w"),
            ConfigError,
            r"count window 'w': its input passes through map .* must come from one spout",
        ),
    ],
)
def test_bad_declarations_are_refused(declare: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        declare(stream())


def test_a_duration_window_takes_any_stream() -> None:
    s = stream().map(PyMap(lambda n: n))
    out = s.tumbling_window("n", Sum(), "t", duration=5, spec="win")
    assert out.fields == ("t",)


def test_a_window_added_later_and_quarantine_are_refused(spark: Any, tmp_path: Path) -> None:
    """A window cannot be built from the log of committed txids, nor skip a txid."""
    log = make_log(tmp_path)
    store = DuckDBStore(tmp_path / "state.duckdb")
    plain = TridentTopology("w")
    plain.new_stream("nums", spout()).persistent_aggregate(
        StateSpec.opaque("count"), "n", Count(), "c"
    )
    produce(log, [1, 2])
    TopologyRunner(plain, spark, store, log).run_batch(1)
    later = TridentTopology("w")
    nums = later.new_stream("nums", spout())
    nums.persistent_aggregate(StateSpec.opaque("count"), "n", Count(), "c")
    nums.tumbling_window("n", Sum(), "t", count=2, spec="win")
    with pytest.raises(StateContractError, match="because it is a window"):
        TopologyRunner(later, spark, store, log)
    store.close()
    fresh = DuckDBStore(tmp_path / "fresh.duckdb")
    run = TopologyRunner(window_topology(ta.TumblingCountWindow(3)), spark, fresh, log)
    with pytest.raises(ta.TridentError, match="state 'win' is a window: which tuples it holds"):
        run.quarantine(1, "poison")
    fresh.close()


def test_a_window_topology_becomes_dagster_assets(tmp_path: Path) -> None:
    defs = ta.trident_definitions(
        [window_topology(ta.TumblingCountWindow(3))], ta.TridentResource(home=str(tmp_path))
    )
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"w/win", "w/win_new_values", "w/fired"} <= keys


def test_windows_on_both_stores(spark: Any, tmp_path: Path, open_store: Any) -> None:
    """The same windows on DuckDB and PostgreSQL: a reducer over a sliding count window and a
    Sum over a sliding duration window, each fired once, downstream counted once."""
    now = [0.0]
    topo = TridentTopology("w")
    nums = topo.new_stream("nums", spout())
    seqs = nums.sliding_window("n", Concat(), "seq", count=4, slide=2, spec="win")
    seqs.persistent_aggregate(StateSpec.opaque("fired"), "seq", Count(), "windows")
    nums.sliding_window("n", Sum(), "total", duration=10, slide=5, spec="dur")
    log = make_log(tmp_path)
    store = open_store()
    run = TopologyRunner(topo, spark, store, log, clock=lambda: now[0])
    seq, tot = [], []
    n = 0
    for txid, (size, at) in enumerate([(2, 1.0), (4, 4.0), (1, 12.0), (5, 16.0)], start=1):
        produce(log, list(range(n + 1, n + size + 1)))
        n += size
        now[0] = at
        run.run_batch(txid)
        seq.append(fired_in(store, txid, "seq"))
        rows = store.fetch_rows('SELECT total FROM "w__dur__new_values" WHERE txid = ?', [txid])
        tot.append([r[0] for r in rows])
    assert seq == [["1,2"], ["1,2,3,4", "3,4,5,6"], [], ["5,6,7,8", "7,8,9,10", "9,10,11,12"]]
    assert tot == [[], [], [21, 21], [7]]  # [-5, 5) and [0, 10) at 12 s; [5, 15) at 16 s
    assert global_value(store, "fired") == 6


def test_dropping_a_window_removes_its_store_and_progress(spark: Any, tmp_path: Path) -> None:
    from trident_assets.backends.state_drop import drop_state, stored_states

    topo = window_topology(ta.SlidingCountWindow(4, 2))
    store, _run, _fired = run_sizes(spark, tmp_path, topo, [3])
    assert stored_states(store)["w"]["win"].kind == "window"
    dropped = drop_state(store, "w", "win")
    assert dropped.tables == ("w__win", "w__win__new_values")
    assert WINDOWS_TABLE in dropped.rows
    assert read_meta(store, "w__win") is None
    store.close()


def test_words_of_one_record_keep_their_order(spark: Any, tmp_path: Path) -> None:
    """Split, filter, project: a record's words stay in place, records by (partition, offset)."""
    topo = TridentTopology("w")
    words = (
        topo.new_stream("s", LogSpout("sentences", ta.StringScheme("sentence")))
        .each("sentence", ta.Split(), "word")
        .filter(ta.PyFilter(lambda w: w != "x"), "word")
        .project("word")
    )
    words.sliding_window("word", Concat(), "seq", count=5, slide=5, spec="win")
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("sentences", 2)
    producer = log.producer("sentences")
    for text, partition in [("d e x f", 1), ("a b", 0), ("c", 0), ("g h i j", 1)]:
        producer.send(text.encode(), partition=partition)
    producer.flush()
    store = DuckDBStore(tmp_path / "state.duckdb")
    TopologyRunner(topo, spark, store, log).run_batch(1)
    assert fired_in(store, 1, "seq") == ["a,b,c,d,e", "f,g,h,i,j"]
    store.close()


# -- the store against the in-memory reference (no Spark) ----------------------------------------


@pytest.mark.parametrize(
    "config",
    [ta.TumblingCountWindow(3), ta.SlidingCountWindow(4, 2), ta.SlidingCountWindow(5, 3)],
    ids=str,
)
@pytest.mark.parametrize("agg", [Sum(), Concat()], ids=["sum", "concat"])
def test_count_store_matches_the_reference(tmp_path: Path, config: Any, agg: Any) -> None:
    import random

    import pyarrow as pa

    from trident_assets.backends.window_tuples import apply_count_batch
    from trident_assets.core.trident_windows import TridentWindow
    from trident_assets_tests.window_model import WindowModel

    window = TridentWindow(config, ("n",), agg, "out")
    model = WindowModel(window)
    out_type = pa.int64() if isinstance(agg, Sum) else pa.string()
    rng = random.Random(7)
    store = DuckDBStore(tmp_path / "state.duckdb")
    n = 0
    for txid in range(1, 31):
        size = rng.randint(0, 6)
        values = list(range(n + 1, n + size + 1))
        n += size
        # rows arrive shuffled: the order columns put them back
        rows = list(enumerate(values))
        rng.shuffle(rows)
        batch = pa.table(
            {
                "n": pa.array([v for _, v in rows], pa.int64()),
                "_trident_topic": ["t"] * size,
                "_trident_part": pa.array([0] * size, pa.int32()),
                "_trident_off": pa.array([i for i, _ in rows], pa.int64()),
                "_trident_pos": pa.array([0] * size, pa.int64()),
            }
        )
        with store.transaction():
            got = apply_count_batch(store, window, "w__win", txid, batch, out_type)
        expected = model.add_batch(txid, [(v,) for v in values])
        assert got.fired.column("out").to_pylist() == [w.value for w in expected]
        assert got.held == len(model.held)
    with pytest.raises(ta.StaleTxidError, match="txid 30 is not after it"):
        apply_count_batch(store, window, "w__win", 30, batch, out_type)
    store.close()


@pytest.mark.parametrize(
    "config",
    [
        ta.TumblingDurationWindow(10),
        ta.SlidingDurationWindow(10, 5),
        ta.SlidingDurationWindow(7, 3),
    ],
    ids=str,
)
def test_duration_store_matches_the_reference(tmp_path: Path, config: Any) -> None:
    import random

    import pyarrow as pa

    from trident_assets.backends.window_tuples import apply_duration_batch
    from trident_assets.core.trident_windows import TridentWindow
    from trident_assets_tests.window_model import WindowModel

    window = TridentWindow(config, ("n",), Sum(), "out")
    model = WindowModel(window)
    rng = random.Random(11)
    store = DuckDBStore(tmp_path / "state.duckdb")
    clock = 0
    for txid in range(1, 41):
        clock += rng.choice([-2000, 0, 500, 1500, 4000, 9000, 25000])  # sometimes back
        values = [rng.randint(-5, 9) for _ in range(rng.randint(0, 4))]
        batch = pa.table(
            {
                "_trident_p": pa.array([sum(values)], pa.int64()),
                "_trident_n": pa.array([len(values)], pa.int64()),
            }
        )
        with store.transaction():
            got = apply_duration_batch(store, window, "w__win", txid, batch, clock, pa.int64())
        expected = model.add_batch(txid, [(v,) for v in values], clock)
        assert got.fired.column("out").to_pylist() == [w.value for w in expected]
        assert [w[2] for w in got.windows] == [w.end for w in expected]
        assert got.time_ms == model.prev_time
    store.close()


def test_state_list_shows_a_window(spark: Any, tmp_path: Path) -> None:
    from trident_assets.cli.state import _list_rows

    topo = window_topology(ta.SlidingCountWindow(4, 2))
    store, _run, _fired = run_sizes(spark, tmp_path, topo, [3])
    rows = {r["state"]: r for r in _list_rows(store)}
    assert (rows["win"]["kind"], rows["win"]["keys"], rows["win"]["last_txid"]) == ("window", 3, 1)
    store.close()


def test_run_batches_fires_in_order(spark: Any, tmp_path: Path) -> None:
    """Several txids in one run_batches call (batches of 4 records) fire as one by one."""
    topo = TridentTopology("w")
    config = SpoutConfig(kind=SpoutKind.OPAQUE, max_batch_size=4)
    nums = topo.new_stream("nums", LogSpout("nums", JsonScheme({"n": "bigint"}), config))
    nums.tumbling_window("n", Sum(), "total", count=3, spec="win")
    log = make_log(tmp_path)
    produce(log, list(range(1, 13)))
    store = DuckDBStore(tmp_path / "state.duckdb")
    outcomes = list(TopologyRunner(topo, spark, store, log).run_batches([1, 2, 3]))
    assert [o.states["win"].keys_updated for o in outcomes] == [1, 1, 2]
    assert [fired_in(store, t) for t in (1, 2, 3)] == [[6], [15], [24, 33]]
    store.close()

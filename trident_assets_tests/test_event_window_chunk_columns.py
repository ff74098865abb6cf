"""A chunk's job reuses its window's Columns: built once per state, only the bounds per chunk.

Every chunk of an event-time window runs the same query shape; only the bound of each
batch's watermark changes (:mod:`trident_assets.spark.event_window_chunks`). The Columns of
the job are built by the first chunk and reused by the next ones, which build their bounds'
one expression and their DataFrame's steps: far fewer driver round trips to the JVM. The
results stay exactly the one-batch path's, after a refused commit too.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import trident_assets as ta
from trident_assets.errors import TridentError
from trident_assets.spark import event_window_chunks as chunks
from trident_assets_tests.test_event_window_chunks import (
    BASE_MS,
    TUMBLING,
    TXIDS,
    new_log,
    one_batch_runs,
    outcome_rows,
    records,
    topology,
)

__all__ = ["one_batch_runs"]  # the module's fixture, shared


def _watch(spark: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[int]]:
    """Record each build of a chunk's Columns and the JVM calls each chunk's frame makes
    (on its own thread: py4j's finalizer thread sends its own)."""
    built: list[Any] = []
    calls: list[int] = []
    seen = [0]
    me = [0]
    client = type(spark.sparkContext._gateway._gateway_client)
    send = client.send_command

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == me[0]:
            seen[0] += 1
        return send(self, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", counted)
    columns, frame = chunks._chunk_columns, chunks._chunk_frame

    def build(parent: Any, spec: Any) -> Any:
        built.append(spec)
        return columns(parent, spec)

    def chunk(parent: Any, state: Any, bounds: Any) -> Any:
        me[0], before = threading.get_ident(), seen[0]
        df = frame(parent, state, bounds)
        calls.append(seen[0] - before)
        return df

    monkeypatch.setattr(chunks, "_chunk_columns", build)
    monkeypatch.setattr(chunks, "_chunk_frame", chunk)
    return built, calls


def test_a_windows_chunks_build_its_columns_once(
    spark: Any, tmp_path: Path, one_batch_runs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three chunks of four txids: the Columns are built by the first chunk only, the next
    two chunks' frames make the same JVM calls, a quarter of the first's or fewer, and every
    txid ends as the one-batch path's."""
    ref_outcomes, ref_rows, _ = one_batch_runs(TUMBLING)
    built, calls = _watch(spark, monkeypatch)
    topo = topology(TUMBLING)
    with ta.DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = ta.TopologyRunner(
            topo, spark, store, new_log(tmp_path / "log", records(7)), max_spout_pending=4
        )
        outcomes = list(runner.run_batches(list(range(1, TXIDS + 1))))
        got = outcome_rows(store, topo.states["page_views"])
    assert [o.pipelined for o in outcomes] == [4] * TXIDS
    assert built == [topo.states["page_views"].node.args["event_window"]]
    assert len(calls) == 3
    assert calls[1] == calls[2]  # the same steps, the same calls
    assert calls[1] * 4 <= calls[0], calls  # PySpark 4.3: 97 against 442
    assert [o.windows for o in outcomes] == ref_outcomes
    assert got == ref_rows


def test_after_a_refused_commit_the_reused_columns_take_the_new_bounds(
    spark: Any, tmp_path: Path, one_batch_runs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Understated log statistics make a commit refuse (nothing of its txid written); run
    again with the log's own, the state's chunks reuse the Columns built before, with the new
    bounds: every txid ends exactly as the one-batch path's."""
    ref_outcomes, ref_rows, _ = one_batch_runs(TUMBLING)
    built, _calls = _watch(spark, monkeypatch)
    topo = topology(TUMBLING)
    with ta.DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = ta.TopologyRunner(
            topo, spark, store, new_log(tmp_path / "log", records(7)), max_spout_pending=4
        )
        done = []
        with monkeypatch.context() as low:
            low.setattr(ta.LogSpout, "max_timestamp_ms", lambda self, log, plan: BASE_MS)
            with pytest.raises(TridentError, match="not expected to be late"):
                done.extend(o.windows for o in runner.run_batches(list(range(1, TXIDS + 1))))
        last = store.last_committed("clicks")
        assert last is not None
        assert 3 <= last < TXIDS
        assert done == ref_outcomes[:last]
        again = list(runner.run_batches(list(range(last + 1, TXIDS + 1))))
        got = outcome_rows(store, topo.states["page_views"])
    assert [o.txid for o in again if o.applied] == list(range(last + 1, TXIDS + 1))
    assert done + [o.windows for o in again] == ref_outcomes
    assert got == ref_rows
    assert built == [topo.states["page_views"].node.args["event_window"]]

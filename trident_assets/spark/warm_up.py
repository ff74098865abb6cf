"""A fresh Spark Connect server's first jobs, run before a topology's first txids need them.

A new server's JVM is cold: its first jobs of each shape plan, generate and JIT-compile code
that later jobs of the same shape reuse, so a live run's first txids take several times as
long as its later ones, and a live run that falls behind meets a further cold shape (bigger
batches, read from the segment files).
:func:`warm_up` runs the word count's batch phase through the product's own code
(:class:`~.batch_run.BatchRun` over a :class:`~trident_assets.log.store.PartitionedLog`)
on synthetic batches of each of those sizes (:data:`WARM_UP_BATCHES`). Its topology is built
here and its log is its own, in a directory the caller gives (removed when it ends): it needs
no topology of the user's and reads or writes no home, log or store of theirs. ``trident ui``
runs it on the server it starts, its log in a temporary directory
(:func:`warm_up_server`).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.log.records import LOG_SCHEMA
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spark.frame_schemas import EmptyTables

if TYPE_CHECKING:
    from pathlib import Path

    from trident_assets.log.store import PartitionedLog
    from trident_assets.spouts.coordinator import BatchCoordinator
    from trident_assets.spouts.ranges import BatchPlan
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "SEGMENT_RECORDS",
    "WARM_UP_BATCHES",
    "WARM_UP_BUDGET_S",
    "append_batch",
    "synthetic_batch",
    "warm_up",
    "warm_up_server",
    "warm_up_topology",
]

WARM_UP_BATCHES: tuple[int, ...] = (
    (5_000,) * 4 + (20_000,) + (5_000,) * 4 + (20_000,) + (5_000,) * 4
)
"""Records of each warm-up batch, in order: live-sized batches (read on the driver and sent
inline) and bigger ones (Spark reads the segment files), mixed so that a warm-up cut short
by :data:`WARM_UP_BUDGET_S` has run both. About 25 s on an idle 2-core machine."""

WARM_UP_BUDGET_S = 30.0
"""No batch starts after this many seconds: on a busy machine a longer warm-up would still
run when the first txids do, and take their CPU."""

SEGMENT_RECORDS = 500
"""Records of each segment file of the warm-up's log (a live producer flushes small ones)."""

_TOPIC = "sentences"
_WORDS = ("the", "cow", "jumped", "over", "moon", "man", "went", "to", "store", "and")


def warm_up_topology() -> TridentTopology:
    """The word count's counting stream: log spout (UTF-8 strings) -> Split -> Count by word."""
    from trident_assets.core.aggregators import Count
    from trident_assets.spark.schemes import StringScheme
    from trident_assets.spouts.log_spout import LogSpout
    from trident_assets.stream.operations import Split
    from trident_assets.stream.topology import StateSpec, TridentTopology

    topo = TridentTopology("warm_up")
    (
        topo.new_stream("sentences", LogSpout(_TOPIC, StringScheme("sentence")))
        .each("sentence", Split(), "word")
        .group_by("word")
        .persistent_aggregate(StateSpec.opaque("word_counts"), "word", Count(), "count")
    )
    return topo


def synthetic_batch(records: int, first: int = 0) -> pa.Table:
    """``records`` log records of topic ``sentences`` (:data:`LOG_SCHEMA`), offsets from ``first``.

    Partition ``offset % 2`` (of 2); each value is a UTF-8 sentence of six words, one of them unique
    to the record (``w<offset>``), so every batch groups new keys as a live batch does.
    """
    offsets = range(first, first + records)
    values = [
        f"{_WORDS[o % 10]} {_WORDS[(o + 3) % 10]} w{o} the {_WORDS[(o + 7) % 10]} moon".encode()
        for o in offsets
    ]
    return pa.Table.from_arrays(
        [
            pa.array([_TOPIC] * records, pa.string()),
            pa.array([o % 2 for o in offsets], pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([1_700_000_000_000 + o for o in offsets], pa.int64()).cast(
                LOG_SCHEMA.field("timestamp").type
            ),
            pa.nulls(records, pa.binary()),
            pa.array(values, pa.binary()),
            pa.nulls(records, LOG_SCHEMA.field("headers").type),
        ],
        schema=LOG_SCHEMA,
    )


class _Context:
    """The :class:`~.batch_context.RunContext` of the warm-up: a topology, a session, a log.

    It has no store: the batch phase of its topology reads none, and nothing is committed.
    """

    def __init__(self, spark: Any, topology: TridentTopology, log: PartitionedLog) -> None:
        from trident_assets.planner import pipelinable

        self.spark = spark
        self.topology = topology
        self.log = log
        self.store: Any = None
        self.spill = None
        self.empty_tables = EmptyTables()
        self.pipelinable = pipelinable(topology)

    def fault(self, point: str) -> None:
        """No fault points."""

    def coordinator(self, spout_id: str) -> BatchCoordinator:
        """Never asked: the warm-up's batches are planned here."""
        raise AssertionError(spout_id)


def append_batch(log: PartitionedLog, txid: int, table: pa.Table) -> dict[str, BatchPlan]:
    """Append ``table`` to ``log`` (per its ``partition``, in segments of :data:`SEGMENT_RECORDS`).

    Returns txid ``txid``'s plan of spout ``sentences``: exactly the appended records (the
    log numbers them; the table's own offsets are ignored).
    """
    from trident_assets.spouts.config import SpoutKind
    from trident_assets.spouts.ranges import BatchPlan, PartitionRange

    ranges = []
    for partition in (0, 1):
        rows = table.filter(pc.equal(table["partition"], partition))
        first = next_offset = log.latest_offset(_TOPIC, partition)
        for start in range(0, rows.num_rows, SEGMENT_RECORDS):
            _, last_seg = log.append(_TOPIC, partition, rows.slice(start, SEGMENT_RECORDS))
            next_offset = last_seg + 1
        ranges.append(PartitionRange(f"{_TOPIC}@{partition}", first, next_offset, "warm-up"))
    plan = BatchPlan.of("warm_up", _TOPIC, txid, SpoutKind.OPAQUE, ranges, replay=False)
    return {"sentences": plan}


def warm_up(
    spark: Any,
    directory: Path,
    batches: tuple[int, ...] = WARM_UP_BATCHES,
    budget_s: float = WARM_UP_BUDGET_S,
) -> int:
    """Run :func:`warm_up_topology`'s batch phase on ``spark``, a txid per ``batches``; how many.

    Each txid's records are :func:`synthetic_batch`, appended to a log of its own in
    ``directory`` (an empty directory that ``spark`` can read; the log is removed on return)
    and read by :class:`~.batch_run.BatchRun` as a live run's txid: its partials and dead
    letters are collected to this process, then dropped. No txid starts after ``budget_s``
    seconds: the count returned may be smaller than ``len(batches)``.

    Raises:
        AssertionError: a txid's counts are not its batch's (a broken path).
        Exception: whatever ``spark`` raises (the server stopped, a failed job).
    """
    from trident_assets.log.store import PartitionedLog

    topology = warm_up_topology()
    (name,) = topology.states
    started = time.perf_counter()
    root = directory / "log"
    try:
        log = PartitionedLog(root)
        log.create_topic(_TOPIC, 2)
        context = _Context(spark, topology, log)
        first = 0
        for txid, records in enumerate(batches, start=1):
            if time.perf_counter() - started > budget_s:
                return txid - 1
            plans = append_batch(log, txid, synthetic_batch(records, first))
            first += records
            run = BatchRun.alone(context, txid, plans)  # type: ignore[arg-type]
            partials = run.prepare().partials[name]
            total = pc.sum(partials.column("count")).as_py()
            if total != 6 * records:  # six words a sentence
                msg = f"warm-up txid {txid}: {total} words counted, not {6 * records}"
                raise AssertionError(msg)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return len(batches)


def warm_up_server(
    url: str, directory: Path, echo: Callable[[str], None], stopping: threading.Event
) -> threading.Thread:
    """Warm up the Spark Connect server at ``url`` in a daemon thread (started; returned).

    A client session runs :func:`warm_up` (the word count's
    batch phase on synthetic batches, its log of its own in the empty ``directory``, removed
    when it ends), then stops. ``echo`` gets one line: the seconds it took and the batches it
    ran, or why it failed (a failure is ignored; after ``stopping`` is set, nothing is
    echoed). A stopped server ends it with an error.
    """

    def run() -> None:
        started = time.perf_counter()
        try:
            from trident_assets.spark.session import build_spark_session

            spark = build_spark_session(remote=url)
            try:
                done = warm_up(spark, directory)
            finally:
                with contextlib.suppress(Exception):
                    spark.stop()
        except Exception as exc:  # never fails trident ui: one line, then ignored
            if not stopping.is_set():
                reason = " ".join(str(exc).split())[:200] or type(exc).__name__
                echo(f"Spark Connect warm-up failed, ignored ({type(exc).__name__}: {reason})")
                sys.stdout.flush()
            return
        if not stopping.is_set():
            seconds = time.perf_counter() - started
            echo(f"Spark Connect warmed up in {seconds:.1f} s ({done} batches)")
            sys.stdout.flush()

    thread = threading.Thread(target=run, name="spark-connect-warm-up", daemon=True)
    thread.start()
    return thread

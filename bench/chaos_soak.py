"""Chaos soak for exactly-once: SIGKILL the batch process at random points, replay, compare.

Run: ``python -m bench.chaos_soak [--batches 50] [--kills 15] [--seed 7]
[--kind opaque|transactional|both] [--vocabulary N --zipf S]
[--store duckdb|postgres|redis-cluster [--kill-master]] [--state-dsn DSN] [--tick S]
[--publish delta|iceberg] [--root DIR] [--json PATH]``; ``--live``: the live run of
``trident ui --live`` is killed instead (:mod:`bench.chaos_live`).

``--publish delta`` (or ``iceberg``) publishes each topology's counts to a lakehouse table
(:mod:`bench.chaos_tables`); the driver may also kill after a table commit
(``after_table_commit``), and the end checks the table against the state key by key and that
every committed txid is in it exactly once.

``--store postgres`` keeps the state in PostgreSQL instead of the DuckDB file: a server is
started for the run (``initdb``/``pg_ctl`` on 127.0.0.1, fsync on) and stopped at the end;
``--state-dsn`` uses an existing database instead. ``--store redis-cluster`` keeps the word
counts in a Redis Cluster started for the run (3 masters, a replica each) and the commit marker
and spout metadata in the DuckDB file; ``--kill-master`` also SIGKILLs one Redis master once
mid-soak (:mod:`bench.chaos_kv`).

``--vocabulary N`` replaces the default 32-word corpus with ``N`` words ``w1 .. wN`` drawn from a
Zipf law (``P(rank r) ~ r^-S``, ``--zipf S``, default 1.0); with ``N >= 100000``, a
``--rate`` in the thousands and a ``--batch-size`` in the tens of thousands, every batch touches
tens of thousands of keys and the state's compaction runs during the soak.

Three kinds of process, all started by the driver (this command):

* a **producer** appending sentences (a few of them invalid UTF-8, so StringScheme sends them
  to dead letters) and a few word queries to the embedded log, concurrently with the batches;
* a **batch worker**: one Spark session and one state store reused for many batches. For each
  word-count topology (``wc_opaque`` with an opaque spout, ``wc_transactional`` with a
  transactional spout; both keep an opaque state in the same DuckDB file) it runs
  :meth:`TopologyRunner.run_batch` for ``last_committed + 1`` when the driver asks. At every
  fault point of the runner (``after_emit``, ``after_state_write``, ``before_commit``) and
  after every spout-metadata write (``spout_meta:emit:<spout>`` for a transactional spout's
  ranges recorded at first emission, ``spout_meta:commit:<spout>`` inside the commit
  transaction) it reports the point and waits for the driver's go-ahead;
* the **driver** decides, per batch attempt, whether to kill and where: at a fault point
  (the worker is paused there), after a spout-metadata write, or at a random wall-clock time
  during the Spark stage (a timer armed at ``after_emit``). A kill is ``SIGKILL`` to the
  worker's process group, so its Spark JVM dies too; a new worker is then started (the
  realistic cost) and the batch is replayed.

At the end the producer is stopped, the source is drained (no more kills), and the state is
compared with the ground truth computed from every record in the log, key by key, in DuckDB
over Arrow: zero lost and zero double-counted words for every key, every malformed record in
``_trident_dead_letters`` exactly once, and the committed offset ranges of all txids tiling
each partition from offset 0 to its end (no gap, no overlap). The command prints the figures
and exits non-zero on any mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

TOPIC = "sentences"
QUERY_TOPIC = "word_queries"
PARTITIONS = 3
KINDS = ("opaque", "transactional")
MALFORMED = (b"\xff\xfe broken", b"truncated \xc3", b"\x80 lone continuation", b"ok \xc3\x28 bad")
"""Values that are not valid UTF-8 (StringScheme sends them to dead letters)."""
WORDS = (
    "the", "cow", "jumped", "over", "moon", "man", "went", "to", "store", "and", "bought",
    "some", "candy", "four", "score", "seven", "years", "ago", "how", "many", "apples", "can",
    "you", "eat", "be", "or", "not", "person", "café", "naïve", "日本", "zoë",
)  # fmt: skip
TIMER = "timer"
POINTS = ("after_emit", "after_state_write", "before_commit", "after_commit", "spout_meta", TIMER)
"""Where the driver may kill: the runner's fault points, after a spout-metadata write, or at a
random wall-clock time during the Spark stage."""


def topology_name(kind: str) -> str:
    """The name of the word-count topology with a ``kind`` spout."""
    return f"wc_{kind}"


def _send(stream: IO[str], **event: Any) -> None:
    stream.write(json.dumps(event) + "\n")
    stream.flush()


# -- the producer -----------------------------------------------------------------------------


def vocabulary(size: int | None, zipf: float = 1.0) -> tuple[Sequence[str], list[float] | None]:
    """The words the producer draws from, and their cumulative weights (None: uniform).

    ``size`` None or 0: the 32 :data:`WORDS`; else ``w1 .. w<size>`` with Zipf weights
    ``r^-zipf`` (for :func:`random.Random.choices` ``cum_weights``).
    """
    if not size:
        return WORDS, None
    if size < 1 or zipf <= 0:
        raise ValueError(f"need vocabulary >= 1 and zipf > 0, got {size} and {zipf}")
    words = [f"w{r}" for r in range(1, size + 1)]
    return words, list(itertools.accumulate(r**-zipf for r in range(1, size + 1)))


def run_producer(
    root: Path,
    seed: int,
    rate: float,
    bad_ratio: float,
    *,
    vocab_size: int | None = None,
    zipf: float = 1.0,
    queries_too: bool = True,
    truth: Path | None = None,
    tick: float = 0.05,
) -> None:
    """Append sentences (and malformed records) until SIGTERM; print the counts as JSON.

    ``truth``: also write the word counts of every sentence appended (counted in plain Python
    as it is written, flushed records only) to this JSON file, before printing the counts.
    ``tick``: seconds between two flushes (one log segment per partition each).
    """
    from trident_assets.log.store import PartitionedLog

    words_of, cum = vocabulary(vocab_size, zipf)
    counts: Counter[str] = Counter()
    stop = False

    def on_term(_signum: int, _frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    rng = random.Random(seed)
    log = PartitionedLog(root / "log")
    sentences = log.producer(TOPIC, partitioner="round_robin")
    queries = log.producer(QUERY_TOPIC, partitioner="round_robin")
    good = bad = asked = 0
    while not stop:
        started = time.monotonic()
        for _ in range(max(1, round(rate * tick * rng.uniform(0.5, 1.5)))):
            if rng.random() < bad_ratio:
                sentences.send(rng.choice(MALFORMED))
                bad += 1
            else:
                words = rng.choices(words_of, cum_weights=cum, k=rng.randint(1, 9))
                sentences.send(" ".join(words).encode())
                if truth is not None:
                    counts.update(words)
                good += 1
        if queries_too and rng.random() < 0.1:
            queries.send(" ".join(rng.choices(words_of, cum_weights=cum, k=3)).encode())
            asked += 1
        sentences.flush()
        queries.flush()
        time.sleep(max(0.0, tick - (time.monotonic() - started)))
    if truth is not None:
        truth.write_text(json.dumps(counts))
    _send(sys.stdout, ev="produced", good=good, bad=bad, queries=asked)


def producer_argv(root: Path, args: argparse.Namespace) -> list[str]:
    """The ``bench.chaos_soak producer`` command line for the driver's ``args``."""
    argv = [sys.executable, "-m", "bench.chaos_soak", "producer", str(root),
            "--seed", str(args.seed), "--rate", str(args.rate),
            "--tick", str(args.tick)]  # fmt: skip
    if args.vocabulary:
        argv += ["--vocabulary", str(args.vocabulary), "--zipf", str(args.zipf)]
    return argv


# -- the batch worker -------------------------------------------------------------------------


def run_worker(
    root: Path,
    kinds: list[str],
    batch_size: int,
    location: str,
    kv_servers: list[str] | None = None,
    publish: str | None = None,
) -> None:
    """Serve ``run <topology>`` / ``stop`` commands from stdin, reporting events on stdout.

    The state store is at ``location`` (a DuckDB file or a PostgreSQL DSN). ``kv_servers``:
    the counts live in the Redis Cluster at these nodes (no read replica is published); a
    batch the cluster refuses (:class:`~trident_assets.errors.KeyValueStoreError`, e.g. a
    master without a replica) is reported as ``refused`` and left for the next request.

    At each fault point the worker reports ``point`` and waits for a ``go`` line; any other
    line (or EOF) makes it exit. The driver kills it with SIGKILL while it waits or runs.
    """
    from trident_assets.backends.replica import Replica
    from trident_assets.errors import KeyValueStoreError
    from trident_assets.examples.word_count import build_word_count
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.spark.session import build_spark_session
    from trident_assets.spouts.config import SpoutKind

    out = sys.stdout
    started = time.perf_counter()
    spark = build_spark_session(
        {"spark.local.dir": str(root / "spark"), "spark.sql.warehouse.dir": str(root / "wh")}
    )
    store = _open_store(location)
    log = PartitionedLog(root / "log")
    current: dict[str, Any] = {}

    def fault(point: str) -> None:
        _send(out, ev="point", point=point, **current)
        if sys.stdin.readline().strip() != "go":
            os._exit(3)

    runners: dict[str, TopologyRunner] = {}
    for kind in kinds:
        spec = None
        if kv_servers:
            from bench.chaos_kv import state_spec

            spec = state_spec(kv_servers)
        topo = build_word_count(
            topology_name(kind), kind=SpoutKind(kind), max_batch_size=batch_size, state=spec
        )
        if publish:
            from bench.chaos_tables import publish_counts

            publish_counts(topo, publish, root)
        runner = TopologyRunner(
            topo,
            spark,
            store,
            log,
            fault=fault,
            max_spout_pending=8,
            replica=None if kv_servers else Replica(root / "replica"),
        )
        record = runner.meta.record

        def record_then_fault(
            topology: str, spout: str, txid: int, ranges: Any, committed: bool, _r: Any = record
        ) -> None:
            _r(topology, spout, txid, ranges, committed=committed)
            fault(f"spout_meta:{'commit' if committed else 'emit'}:{spout}")

        runner.meta.record = record_then_fault  # type: ignore[method-assign]
        runners[topo.name] = runner
    committed = {}
    for name, runner in runners.items():
        last = runner.last_committed()
        plans = {} if last is None else _plans(runner.run_batch(last).plans)
        committed[name] = {"last": last, "plans": plans}
    _send(out, ev="ready", start_s=time.perf_counter() - started, committed=committed)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "stop":
            break
        runner = runners[cmd[1]]
        pending = int(cmd[2]) if len(cmd) > 2 else 1
        last = runner.last_committed()
        txid = 1 if last is None else last + 1
        current.clear()
        current.update(topology=cmd[1], txid=txid)
        _send(out, ev="begin", pending=pending, **current)
        try:
            _run_chunk(runner, range(txid, txid + pending), current, cmd[1], out)
        except KeyValueStoreError as exc:
            _send(out, ev="refused", error=str(exc), **current)
        _send(out, ev="end", **current)
    store.close()
    spark.stop()


def _run_chunk(runner: Any, txids: range, current: dict[str, Any], name: str, out: IO[str]) -> None:
    """Run ``txids`` pipelined, reporting each one's ``done`` event."""
    for outcome in runner.run_batches(txids):
        _send(
            out,
            ev="done",
            applied=outcome.applied,
            records=sum(outcome.tuples_in.values()),
            dead=outcome.dead_letters,
            spark_s=outcome.timings_s.get("spark", 0.0),
            pipelined=outcome.pipelined,
            plans=_plans(outcome.plans),
            backlog=runner.backlog(),
            keys=sum(st.keys_updated for st in outcome.states.values()),
            compacted=sum(outcome.compacted.values()),
            topology=name,
            txid=outcome.txid,
        )
        current["txid"] = outcome.txid + 1


def _open_store(location: str) -> Any:
    """The state store at ``location``: a PostgreSQL DSN, or a DuckDB file (waiting for its
    lock up to 60 s: a killed worker's file lock goes with its process)."""
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.backends.state_store import open_state_store

    if location.startswith("postgresql://"):
        return open_state_store(location)
    return DuckDBStore(location, lock_timeout_s=60)


def _plans(plans: dict[str, Any]) -> dict[str, list[list[Any]]]:
    return {
        sid: [[r.partition, r.first_offset, r.next_offset] for r in plan.ranges]
        for sid, plan in plans.items()
    }


# -- the driver -------------------------------------------------------------------------------


@dataclass
class KindFigures:
    """What happened to one topology during the soak."""

    topology: str
    batches: int = 0
    """Committed txids."""
    attempts: int = 0
    empty_batches: int = 0
    replayed_txids: int = 0
    """Txids attempted more than once."""
    kills: Counter[str] = field(default_factory=Counter)
    records_committed: int = 0
    dead_letters_reported: int = 0
    keys_per_batch_max: int = 0
    """The most state keys one committed batch updated."""
    keys_per_batch_total: int = 0
    compactions: int = 0
    """Commits after which the state's log was compacted."""
    compacted_rows: int = 0
    refused: int = 0
    """Batch attempts the key-value store refused (a Redis master without a replica)."""


@dataclass
class Comparison:
    """The end-of-soak check of one topology against the log."""

    topology: str
    keys_truth: int
    keys_state: int
    keys_mismatched: int
    words_truth: int
    words_state: int
    lost: int
    double_counted: int
    malformed_in_log: int
    dead_letters: int
    dead_letters_distinct: int
    dead_letters_not_malformed: int
    ranges_ok: bool
    ranges_problem: str
    last_txid: int | None
    replica_mismatched: int
    """Keys whose value in the read replica differs from the state store's."""
    replica_txid: int | None
    replica_checked: bool = True
    """False for a key-value state (no read replica is published)."""
    table_mismatched: int = 0
    """Keys whose value in the published lakehouse table differs from the state's."""
    table_problem: str = ""
    """Committed txids missing from the table, or in it twice ("" if none)."""

    @property
    def ok(self) -> bool:
        """True when the state, dead letters and ranges all match the log exactly."""
        return (
            self.keys_mismatched == 0
            and self.lost == 0
            and self.double_counted == 0
            and self.keys_truth == self.keys_state
            and self.dead_letters == self.malformed_in_log == self.dead_letters_distinct
            and self.dead_letters_not_malformed == 0
            and self.ranges_ok
            and self.replica_mismatched == 0
            and (self.replica_txid == self.last_txid or not self.replica_checked)
            and self.table_mismatched == 0
            and not self.table_problem
        )


class Killed(Exception):
    """The worker was killed (by the driver) or died."""


class Worker:
    """One batch-worker process, in its own process group, driven over pipes."""

    def __init__(
        self,
        root: Path,
        kinds: list[str],
        batch_size: int,
        index: int,
        argv: Sequence[str] | None = None,
        location: str | None = None,
        kv_servers: Sequence[str] = (),
        publish: str | None = None,
    ) -> None:
        """Start the worker; its stderr goes to ``<root>/worker-<index>.log``.

        ``argv``: another command to run instead of ``bench.chaos_soak worker`` (any process
        speaking JSON lines on stdout, e.g. ``bench.long_run``'s run process). ``location``:
        the state store (default: ``<root>/state.duckdb``). ``kv_servers``: the counts'
        Redis Cluster nodes (none: the counts are in the state store).
        """
        self.stderr = (root / f"worker-{index}.log").open("w")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        if argv is None:
            argv = [sys.executable, "-m", "bench.chaos_soak", "worker", str(root),
                    "--kinds", ",".join(kinds), "--batch-size", str(batch_size),
                    "--state-dsn", location or str(root / "state.duckdb")]  # fmt: skip
            if kv_servers:
                argv += ["--kv-servers", ",".join(kv_servers)]
            if publish:
                argv += ["--publish", publish]
        self.proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            start_new_session=True, env=env, cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        self.selector = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        self.selector.register(self.fd, selectors.EVENT_READ)
        self.buffer = b""
        self.alive = True

    def event(self, deadline: float | None = None) -> dict[str, Any] | None:
        """The next event, or None when ``deadline`` (monotonic) passes first.

        Raises:
            Killed: the worker exited.
        """
        while True:
            line, sep, rest = self.buffer.partition(b"\n")
            if sep:
                self.buffer = rest
                if line.startswith(b"{"):
                    return json.loads(line)
                continue
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.selector.select(timeout):
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                self.proc.wait()
                self.alive = False
                raise Killed(f"worker exited with {self.proc.returncode}")
            self.buffer += chunk

    def send(self, line: str) -> None:
        """Send one command line."""
        assert self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def kill(self) -> None:
        """SIGKILL the worker's whole process group (its Spark JVM included) and reap it."""
        if self.alive:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.alive = False
        self.close()

    def close(self) -> None:
        """Release the pipes."""
        self.selector.close()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        self.stderr.close()


class Driver:
    """Runs the soak: producer, workers, kills, drain, comparison."""

    def __init__(
        self, args: argparse.Namespace, root: Path, location: str, cluster: Any = None
    ) -> None:
        """Prepare the log under ``root``; the state store is at ``location``.

        ``cluster``: the Redis Cluster (:class:`~trident_assets_tests.kv_servers
        .RedisClusterServers`) holding the counts, None for counts in the state store.
        """
        from bench.chaos_kv import MasterKill
        from trident_assets.log.store import PartitionedLog

        self.args = args
        self.root = root
        self.location = location
        self.kinds = list(KINDS) if args.kind == "both" else [args.kind]
        self.rng = random.Random(args.seed)
        self.figures = {topology_name(k): KindFigures(topology_name(k)) for k in self.kinds}
        self.committed: dict[str, dict[int, dict[str, list[list[Any]]]]] = {
            name: {} for name in self.figures
        }
        self.attempted: dict[str, Counter[int]] = {name: Counter() for name in self.figures}
        self.kills = 0
        self.start_points = 0
        self.worker_starts: list[float] = []
        self.spark_s: list[float] = [1.0]
        self.last_kill_txid: tuple[str, int, int] = ("", 0, 0)
        self.problems: list[str] = []
        self.refusals: list[str] = []
        log = PartitionedLog(root / "log")
        log.create_topic(TOPIC, PARTITIONS)
        log.create_topic(QUERY_TOPIC, 1)
        self.worker: Worker | None = None
        self.n_workers = 0
        self.cluster = cluster
        self.kv_servers: list[str] = cluster.servers if cluster is not None else []
        self.master_kill = MasterKill(cluster) if args.kill_master else None

    # -- processes

    def _start_worker(self) -> Worker:
        self.n_workers += 1
        worker = Worker(
            self.root,
            self.kinds,
            self.args.batch_size,
            self.n_workers,
            location=self.location,
            kv_servers=self.kv_servers,
            publish=self.args.publish,
        )
        try:
            while (event := worker.event()) is None or event["ev"] != "ready":
                if event is not None and event["ev"] == "point":
                    # A publisher catching up at start (txids committed before a kill
                    # between the table commit and the marker): let it go on.
                    self.start_points += 1
                    worker.send("go")
        except Killed as exc:  # e.g. a state file that no longer opens
            log = self.root / f"worker-{self.n_workers}.log"
            msg = f"batch worker {self.n_workers} failed to start ({exc}); see {log}"
            raise RuntimeError(msg) from exc
        self.worker_starts.append(event["start_s"])
        for name, info in event["committed"].items():
            if info["last"] is not None:
                self._record_commit(name, info["last"], info["plans"])
        return worker

    def _record_commit(self, name: str, txid: int, plans: dict[str, list[list[Any]]]) -> None:
        known = self.committed[name].get(txid)
        if known is not None and known != plans:
            self.problems.append(
                f"{name} txid {txid}: committed ranges changed from {known} to {plans}"
            )
        self.committed[name][txid] = plans

    # -- one batch attempt

    def _plan_kill(self, name: str, txid: int) -> str | None:
        """Selection sampling: spread the remaining kills over the remaining batches."""
        remaining = self.args.kills - self.kills
        if remaining <= 0:
            return None
        same, _, streak = self.last_kill_txid
        if same == name and self.last_kill_txid[1] == txid and streak >= 3:
            return None  # let a txid through after three kills in a row
        left = sum(max(0, self.args.batches - f.batches) for f in self.figures.values())
        if self.rng.random() >= remaining / max(1, left):
            return None
        return self.rng.choice(POINTS + (("after_table_commit",) if self.args.publish else ()))

    def attempt(self, name: str, chaos: bool) -> dict[str, Any] | None:
        """Ask the worker to run the next txids of ``name`` (``--max-spout-pending`` of them,
        pipelined); kill it if planned. A kill is planned per txid, so it can hit a chunk
        between two of its commits.

        Returns the last ``done`` event, or None if the worker was killed.
        """
        if self.worker is None or not self.worker.alive:
            self.worker = self._start_worker()
        worker = self.worker
        fig = self.figures[name]
        worker.send(f"run {name} {self.args.max_spout_pending}")
        last_done: dict[str, Any] | None = None
        plan: str | None = None
        meta_target = 0
        meta_seen = 0
        deadline: float | None = None
        txid = 0
        try:
            while True:
                event = worker.event(deadline)
                if event is None:  # the timer fired during the batch
                    self._kill(name, txid, TIMER)
                    return None
                if event["ev"] == "begin":
                    txid = event["txid"]
                    fig.attempts += 1
                    self.attempted[name][txid] += 1
                    plan = self._plan_kill(name, txid) if chaos else None
                    meta_target = self.rng.randint(1, 2 if name.endswith("opaque") else 4)
                elif event["ev"] == "point":
                    point = event["point"]
                    if plan == point or (
                        plan == "spout_meta"
                        and point.startswith("spout_meta")
                        and (meta_seen := meta_seen + 1) == meta_target
                    ):
                        self._kill(name, txid, point)
                        return None
                    if plan == TIMER and point == "after_emit":
                        spark = sorted(self.spark_s)[len(self.spark_s) // 2]
                        deadline = time.monotonic() + self.rng.uniform(0.0, spark * 1.2)
                    worker.send("go")
                elif event["ev"] == "done":
                    self._done(fig, event)
                    last_done = event
                    txid = event["txid"] + 1  # the next txid of the chunk is in flight
                    self.attempted[name][txid] += 1
                    plan = self._plan_kill(name, txid) if chaos else None
                    meta_seen = 0
                elif event["ev"] == "refused":  # the store refused txid; it runs again later
                    fig.refused += 1
                    self.refusals.append(event["error"])
                    self.attempted[name][txid] += 1  # balances the decrement at "end"
                    if self.args.verbose:
                        print(f"  {name} txid {txid} refused: {event['error'][:200]}", flush=True)
                elif event["ev"] == "end":
                    self.attempted[name][txid] -= 1  # the chunk ended before it
                    return last_done
        except Killed as exc:
            self.problems.append(f"{name} txid {txid}: the worker died unasked ({exc})")
            worker.close()
            return None

    def _kill(self, name: str, txid: int, where: str) -> None:
        assert self.worker is not None
        self.worker.kill()
        self.kills += 1
        self.figures[name].kills[where.split(":")[0] if where != TIMER else TIMER] += 1
        prev = self.last_kill_txid
        streak = prev[2] + 1 if prev[:2] == (name, txid) else 1
        self.last_kill_txid = (name, txid, streak)
        if self.args.verbose:
            print(f"  kill {self.kills}: {name} txid {txid} at {where}", flush=True)

    def _done(self, fig: KindFigures, event: dict[str, Any]) -> None:
        name = event["topology"]
        if not event["applied"]:
            self.problems.append(f"{name} txid {event['txid']}: ran but was already committed")
            return
        self._record_commit(name, event["txid"], event["plans"])
        fig.batches += 1
        fig.records_committed += event["records"]
        fig.dead_letters_reported += event["dead"]
        fig.empty_batches += event["records"] == 0
        fig.keys_per_batch_max = max(fig.keys_per_batch_max, event.get("keys", 0))
        fig.keys_per_batch_total += event.get("keys", 0)
        fig.compactions += event.get("compacted", 0) > 0
        fig.compacted_rows += event.get("compacted", 0)
        if event["records"]:
            self.spark_s.append(event["spark_s"])
        if self.args.verbose:
            print(
                f"  {name} txid {event['txid']} committed: {event['records']} records, "
                f"{event['dead']} dead letters, Spark {event['spark_s']:.1f}s, "
                f"backlog {event['backlog']}",
                flush=True,
            )

    # -- the soak

    def run(self) -> dict[str, Any]:
        """Run the soak and the comparison; return every figure."""
        args = self.args
        started = time.perf_counter()
        producer = subprocess.Popen(
            producer_argv(self.root, args),
            stdout=subprocess.PIPE, text=True, start_new_session=True,
            cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        try:
            time.sleep(0.5)  # a first backlog
            names = list(self.figures)
            turn = 0
            while any(f.batches < args.batches for f in self.figures.values()) or (
                self.kills < args.kills
            ):
                name = names[turn % len(names)]
                turn += 1
                attempts = sum(f.attempts for f in self.figures.values())
                if attempts > 5 * (args.batches * len(names) + args.kills):
                    self.problems.append("the soak does not progress")
                    break
                self._master_kill_step(before=True)
                refused = len(self.refusals)
                self.attempt(name, chaos=True)
                self._master_kill_step(before=False, refused=self.refusals[refused:])
            chaos_s = time.perf_counter() - started
        except BaseException:  # SIGTERM (SystemExit), Ctrl-C, a bug: leave nothing running
            if self.worker is not None:
                self.worker.kill()
            raise
        finally:
            producer.send_signal(signal.SIGTERM)
            out, _ = producer.communicate(timeout=60)
        produced = json.loads(out.strip().splitlines()[-1])
        drained = 0
        for name in self.figures:  # drain without kills
            while True:
                event = self.attempt(name, chaos=False)
                if event is None:
                    break
                drained += 1
                if event["backlog"] == 0:
                    break
        if self.worker is not None and self.worker.alive:
            self.worker.send("stop")
            self.worker.proc.wait(timeout=120)
            self.worker.close()
        total_s = time.perf_counter() - started
        comparisons = [self.compare(name) for name in self.figures]
        kill = self.master_kill
        if kill is not None and (not kill.done or kill.refused == 0):
            self.problems.append(
                "the Redis master was not killed and restarted with a refused batch between: "
                f"{kill.figures()}"
            )
        for fig in self.figures.values():
            fig.replayed_txids = sum(1 for n in self.attempted[fig.topology].values() if n > 1)
        ok = not self.problems and all(c.ok for c in comparisons)
        return {
            "ok": ok,
            "seed": args.seed,
            "vocabulary": args.vocabulary or len(WORDS),
            "zipf": args.zipf if args.vocabulary else None,
            "kills": self.kills,
            "workers_started": self.n_workers,
            "catch_up_points": self.start_points,
            "worker_start_s_median": sorted(self.worker_starts)[len(self.worker_starts) // 2],
            "chaos_s": round(chaos_s, 1),
            "total_s": round(total_s, 1),
            "drain_batches": drained,
            "produced": produced,
            "figures": [{**asdict(f), "kills": dict(f.kills)} for f in self.figures.values()],
            "comparisons": [{**asdict(c), "ok": c.ok} for c in comparisons],
            "problems": self.problems,
            "redis": None if self.cluster is None else self.cluster.describe(),
            "master_kill": None if kill is None else kill.figures(),
        }

    def _master_kill_step(self, before: bool, refused: Sequence[str] = ()) -> None:
        """``--kill-master``: kill a master once half the batches committed; restart it after
        batches were refused (:class:`bench.chaos_kv.MasterKill`)."""
        kill = self.master_kill
        if kill is None or kill.done:
            return
        if before and kill.victim is None:
            committed = sum(f.batches for f in self.figures.values())
            if committed * 2 >= self.args.batches * len(self.figures):
                kill.kill()
                if self.args.verbose:
                    print(f"  Redis master {kill.victim} killed; replica promoted", flush=True)
        elif not before and kill.down:
            kill.after_attempt(list(refused))
            if kill.done and self.args.verbose:
                print(f"  Redis node {kill.victim} rejoined as a replica", flush=True)

    # -- the comparison

    def compare(self, name: str) -> Comparison:
        """Compare ``name``'s state and dead letters with the whole log, set-based in DuckDB.

        The state and the dead letters are read from the store (DuckDB or PostgreSQL) as
        Arrow, the state from the Redis Cluster when it is kept there; the comparison runs in
        an in-memory DuckDB.
        """
        import duckdb
        import pyarrow as pa

        from trident_assets.backends.replica import Replica
        from trident_assets.log.store import PartitionedLog

        log = PartitionedLog(self.root / "log")
        tables = []
        latest: dict[str, int] = {}
        for p in range(log.partitions(TOPIC)):
            end = log.latest_offset(TOPIC, p)
            latest[f"{TOPIC}@{p}"] = end
            tables.append(log.read(TOPIC, p, 0, end - 1).select(["partition", "offset", "value"]))
        records = pa.concat_tables(tables)
        with _open_store(self.location) as store:
            if self.kv_servers:
                from bench.chaos_kv import read_counts

                state = read_counts(name, self.kv_servers)
            else:
                state = store.scan(f"{name}__word_counts", "n")
            dead_letters = store.fetch_arrow(
                'SELECT partition, "offset" FROM _trident_dead_letters '
                "WHERE topology = ? AND spout = ?",
                [name, TOPIC],
            )
            last = store.last_committed(name)
            table_check = (0, "")
            if self.args.publish:
                from bench.chaos_tables import check_table

                table_check = check_table(self.args.publish, self.root, store, name, state, last)
        with duckdb.connect() as conn:
            conn.register("chaos_dead_letters", dead_letters)
            conn.register("chaos_records", records)
            conn.register("chaos_state", state)
            try:
                truth_sql = (
                    "SELECT word, count(*) AS n FROM (SELECT unnest(string_split("
                    "try(decode(value)), ' ')) AS word FROM chaos_records) "
                    "WHERE word <> '' GROUP BY word"
                )
                [row] = conn.sql(
                    f"WITH truth AS ({truth_sql}) SELECT "
                    "count(t.word), count(s.word), "
                    "count(*) FILTER (WHERE t.n IS DISTINCT FROM s.n), "
                    "coalesce(sum(t.n), 0), coalesce(sum(s.n), 0), "
                    "coalesce(sum(greatest(coalesce(t.n, 0) - coalesce(s.n, 0), 0)), 0), "
                    "coalesce(sum(greatest(coalesce(s.n, 0) - coalesce(t.n, 0), 0)), 0) "
                    "FROM truth AS t FULL OUTER JOIN chaos_state AS s ON t.word = s.word"
                ).fetchall()
                [dead] = conn.sql(
                    'WITH bad AS (SELECT partition, "offset" FROM chaos_records '
                    "WHERE try(decode(value)) IS NULL), "
                    'dl AS (SELECT partition, "offset" FROM chaos_dead_letters) SELECT '
                    "(SELECT count(*) FROM bad), (SELECT count(*) FROM dl), "
                    "(SELECT count(*) FROM (SELECT DISTINCT * FROM dl)), "
                    "(SELECT count(*) FROM (SELECT * FROM dl EXCEPT SELECT * FROM bad))"
                ).fetchall()
                replica = Replica(self.root / "replica")
                replica_mismatched, replica_txid = 0, None
                if not self.kv_servers:  # a key-value state has no read replica
                    conn.register(
                        "chaos_replica",
                        replica.read_map(f"{name}__word_counts", scope=name, value_name="n"),
                    )
                    [(replica_mismatched,)] = conn.sql(
                        "SELECT count(*) FROM chaos_state AS s FULL OUTER JOIN chaos_replica "
                        "AS r ON s.word = r.word WHERE s.n IS DISTINCT FROM r.n"
                    ).fetchall()
                    replica_txid = replica.latest(name)
            finally:
                conn.unregister("chaos_dead_letters")
                conn.unregister("chaos_records")
                conn.unregister("chaos_state")
                conn.unregister("chaos_replica")
        ranges_ok, problem = self._check_ranges(name, last, latest)
        return Comparison(
            name, *row, *dead, ranges_ok, problem, last, replica_mismatched, replica_txid,
            replica_checked=not self.kv_servers, table_mismatched=table_check[0],
            table_problem=table_check[1],
        )  # fmt: skip

    def _check_ranges(
        self, name: str, last: int | None, latest: dict[str, int]
    ) -> tuple[bool, str]:
        """The committed ranges of txids 1..last tile every partition from 0 to its end."""
        committed = self.committed[name]
        if last is None or sorted(committed) != list(range(1, last + 1)):
            missing = sorted(set(range(1, (last or 0) + 1)) - set(committed))
            return False, f"no ranges known for committed txids {missing[:10]}"
        ends = dict.fromkeys(latest, 0)
        for txid in range(1, last + 1):
            for partition, first, nxt in committed[txid].get(TOPIC, []):
                if first != ends[partition]:
                    kind = "overlap" if first < ends[partition] else "gap"
                    end = ends[partition]
                    return False, f"{kind} in {partition} at txid {txid}: {first} after {end}"
                ends[partition] = nxt
        if ends != latest:
            return False, f"ranges end at {ends}, the log at {latest}"
        return True, ""


def _print(result: dict[str, Any]) -> None:
    produced = result["produced"]
    print(
        f"chaos soak (seed {result['seed']}): {result['kills']} kills survived, "
        f"{result['workers_started']} batch workers started (median start "
        f"{result['worker_start_s_median']:.1f}s), chaos phase {result['chaos_s']}s, "
        f"total {result['total_s']}s; state in {result['store']}"
    )
    if result["catch_up_points"]:
        print(f"  {result['catch_up_points']} table commits caught up by a worker at its start")
    print(
        f"  producer: {produced['good']} sentences + {produced['bad']} malformed records "
        f"+ {produced['queries']} queries, appended concurrently, vocabulary "
        f"{result['vocabulary']} words" + (f" (Zipf s={result['zipf']})" if result["zipf"] else "")
    )
    for fig, cmp in zip(result["figures"], result["comparisons"], strict=True):
        kills = ", ".join(f"{k} {v}" for k, v in sorted(fig["kills"].items())) or "none"
        print(
            f"  {fig['topology']}: {fig['batches']} batches committed ({fig['empty_batches']} "
            f"empty), {fig['attempts']} attempts, {fig['replayed_txids']} txids replayed, "
            f"kills: {kills}"
        )
        print(
            f"    keys updated per batch: max {fig['keys_per_batch_max']}, mean "
            f"{fig['keys_per_batch_total'] // max(1, fig['batches'])}; state compacted after "
            f"{fig['compactions']} commits ({fig['compacted_rows']} superseded rows dropped)"
        )
        verdict = "OK" if cmp["ok"] else "MISMATCH"
        print(
            f"    {verdict}: {cmp['keys_truth']} keys in the log, {cmp['keys_state']} in the "
            f"state, {cmp['keys_mismatched']} mismatched; words {cmp['words_truth']} vs "
            f"{cmp['words_state']}: lost {cmp['lost']}, double-counted {cmp['double_counted']}; "
            f"dead letters {cmp['dead_letters']} (distinct {cmp['dead_letters_distinct']}) for "
            f"{cmp['malformed_in_log']} malformed records; ranges up to txid {cmp['last_txid']} "
            f"{'tile the log' if cmp['ranges_ok'] else cmp['ranges_problem']}; "
            + (
                f"read replica at txid {cmp['replica_txid']}, {cmp['replica_mismatched']} keys "
                "differ from the state"
                if cmp["replica_checked"]
                else f"no read replica (key-value state); {fig['refused']} batches refused"
            )
        )
        if result.get("publish"):
            print(
                f"    {result['publish']} table: {cmp['table_mismatched']} keys differ from the "
                f"state; {cmp['table_problem'] or 'every committed txid in it exactly once'}"
            )
    kill = result.get("master_kill")
    if kill:
        print(
            f"  Redis master {kill['victim']} SIGKILLed: replica promoted in "
            f"{kill['replica_promoted_s']}s; {kill['batches_refused']} batch attempts refused "
            f"over {kill['attempts_while_down']} requests while it was down; restarted, it "
            f"rejoined as a replica in {kill['rejoined_as_replica_s']}s"
        )
    for problem in result["problems"]:
        print(f"  PROBLEM: {problem}")
    print("RESULT:", "PASS" if result["ok"] else "FAIL")


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (0 when everything matched)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "role", nargs="?", default="driver", choices=("driver", "worker", "producer")
    )
    parser.add_argument("root_dir", nargs="?", help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, default=50, help="committed batches per spout kind")
    parser.add_argument("--kills", type=int, default=15, help="SIGKILLs of the batch worker")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--kind", choices=("opaque", "transactional", "both"), default="both")
    parser.add_argument("--rate", type=float, default=30.0, help="sentences per second")
    parser.add_argument("--batch-size", type=int, default=500, help="max records per batch")
    parser.add_argument(
        "--vocabulary",
        type=int,
        default=0,
        help="draw words from N words w1..wN with Zipf weights (default: the 32-word corpus)",
    )
    parser.add_argument("--zipf", type=float, default=1.0, help="the Zipf exponent S")
    parser.add_argument(
        "--max-spout-pending",
        type=int,
        default=4,
        help="txids the worker runs per request, pipelined (1: one at a time)",
    )
    parser.add_argument(
        "--store",
        choices=("duckdb", "postgres", "redis-cluster"),
        default="duckdb",
        help="where the state lives: <root>/state.duckdb, a PostgreSQL server started "
        "for the run, or (the counts) a Redis Cluster started for the run",
    )
    parser.add_argument(
        "--kill-master",
        action="store_true",
        help="--store redis-cluster: SIGKILL one Redis master once, mid-soak, and restart it "
        "after batches were refused",
    )
    parser.add_argument("--kv-servers", help=argparse.SUPPRESS)
    parser.add_argument("--state-dsn", help="keep the state in this PostgreSQL database")
    parser.add_argument(
        "--publish",
        choices=("delta", "iceberg"),
        help="also publish the counts to a lakehouse table and check it exactly at the end",
    )
    parser.add_argument("--root", type=Path, help="working directory (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--verbose", action="store_true", help="print every kill")
    parser.add_argument("--kinds", help=argparse.SUPPRESS)
    parser.add_argument("--bad-ratio", type=float, default=0.03, help=argparse.SUPPRESS)
    parser.add_argument("--truth", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--tick",
        type=float,
        default=0.05,
        help="seconds between two flushes of the producer (one log segment per partition "
        "each): a larger tick, fewer and bigger segments per batch",
    )
    parser.add_argument("--no-queries", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--live",
        action="store_true",
        help="kill the live run's process of trident ui --live (and once the Dagster daemon) "
        "instead of a batch worker (bench/chaos_live.py)",
    )
    args = parser.parse_args(argv)
    if args.role == "producer":
        run_producer(
            Path(args.root_dir),
            args.seed,
            args.rate,
            args.bad_ratio,
            vocab_size=args.vocabulary,
            zipf=args.zipf,
            queries_too=not args.no_queries,
            truth=args.truth,
            tick=args.tick,
        )
        return 0
    if args.role == "worker":
        kv = args.kv_servers.split(",") if args.kv_servers else None
        run_worker(
            Path(args.root_dir), args.kinds.split(","), args.batch_size, args.state_dsn, kv,
            args.publish,
        )  # fmt: skip
        return 0
    if args.publish and args.store == "redis-cluster":
        parser.error("--publish needs the counts in the store (--store duckdb or postgres)")
    if args.kill_master and args.store != "redis-cluster":
        parser.error("--kill-master needs --store redis-cluster")
    root = args.root or Path(tempfile.mkdtemp(prefix="chaos-soak-"))
    if root.exists() and any(root.iterdir()):
        parser.error(f"--root {root} must be empty or missing")
    root.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up on SIGTERM
    if args.live:
        from bench.chaos_live import print_live, run_live_soak

        result = run_live_soak(args, root)
        print_live(result)
        return _finish(args, root, result)
    with contextlib.ExitStack() as stack:
        location = args.state_dsn or str(root / "state.duckdb")
        if args.store == "postgres" and not args.state_dsn:
            from trident_assets.backends.postgres_server import local_postgres

            location = stack.enter_context(local_postgres(durable=True)).dsn
        cluster = None
        if args.store == "redis-cluster":
            from bench.chaos_kv import start_cluster

            cluster = stack.enter_context(start_cluster(root / "redis"))
        result = Driver(args, root, location, cluster).run()
    result["store"] = "postgres" if location.startswith("postgresql://") else "duckdb"
    result["publish"] = args.publish
    if cluster is not None:
        result["store"] = "redis-cluster"
    _print(result)
    return _finish(args, root, result)


def _finish(args: argparse.Namespace, root: Path, result: dict) -> int:
    """Write the JSON result if asked, drop the files of a passed soak; the exit status."""
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    if result["ok"] and args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    elif not result["ok"]:
        print(f"  files kept in {root}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Long-run soak: hundreds of txids with a producer appending the whole time; flat memory,
bounded files, exact state.

Run: ``python -m bench.long_run [--txids 200] [--rate 200] [--batch-size 5000]
[--vocabulary 20000] [--zipf 1.0] [--retention 10] [--keep-txids 20] [--root DIR]
[--json PATH]``.

Three processes, started by the driver (this command):

* a **producer** (``bench.chaos_soak producer``) appending sentences drawn from a Zipf
  vocabulary (and a few malformed records) to the embedded log for the whole soak, counting
  every word it wrote in plain Python (its ground truth);
* the **run process** (``bench.long_run runner``): one Spark session, one DuckDB store and one
  :class:`TopologyRunner` over the example word-count topology (opaque spout, read replica),
  running txid after txid as long as records wait, with the runner's state compaction, the
  replica's ``keep_txids`` window and log retention: after txid ``t`` commits, records that
  txids up to ``t - retention`` consumed are deleted (``PartitionedLog.delete_records_before``);
* the **driver** samples, at txid 10, 100, 200 (and every ``--every``), the run process's
  resident memory (``VmRSS`` of the Python process, of its Spark JVM and of the PySpark
  workers, from ``/proc``), the state file's size (``.duckdb`` + ``.wal``), the log's segment
  files and the replica's files. After ``--txids`` txids the producer stops, the run process
  drains the log and exits, and the state is compared key by key with the producer's counts.

PASS needs: the state equal to the ground truth (every key, exact counts), every malformed
record in the dead letters, and at the end, against the early checkpoint (txid 10): log files
and replica files at most ``2 x early + --file-slack``, the state file at most ``2 x early +
--state-slack-mb`` (it is a saw-tooth: the versioned log and the WAL grow until compaction and
DuckDB's checkpoint), Python RSS at most ``early + --rss-slack-mb`` and JVM RSS at most ``early +
--jvm-slack-mb``. No timing is checked.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from bench.chaos_soak import QUERY_TOPIC, TOPIC, Worker, _send

PARTITIONS = 3
TOPOLOGY = "wc_long"
STATE_TABLE = f"{TOPOLOGY}__word_counts"
EARLY = 10
"""The early checkpoint the end is compared with."""


# -- the run process ---------------------------------------------------------------------------


class Retention:
    """Delete the records consumed by txids older than the last ``keep`` committed ones."""

    def __init__(self, log: Any, keep: int) -> None:
        """``keep`` 0: never delete."""
        self.log = log
        self.keep = keep
        self.position: dict[str, int] = {}
        self.history: deque[dict[str, int]] = deque()

    def committed(self, plans: dict[str, Any]) -> None:
        """Record a committed txid's ranges; apply retention to what falls out of the window."""
        if self.keep <= 0:
            return
        for plan in plans.values():
            for r in plan.ranges:
                self.position[r.partition] = r.next_offset
        self.history.append(dict(self.position))
        while len(self.history) > self.keep:
            for partition, offset in self.history.popleft().items():
                topic, _, number = partition.rpartition("@")
                self.log.delete_records_before(topic, int(number), offset)


def run_runner(root: Path, args: argparse.Namespace) -> None:
    """Run txids while records wait until ``--txids`` committed; then wait for ``drain``."""
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.backends.replica import Replica
    from trident_assets.examples.word_count import build_word_count
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.spark.session import build_spark_session

    out = sys.stdout
    spark = build_spark_session(
        {"spark.local.dir": str(root / "spark"), "spark.sql.warehouse.dir": str(root / "wh")}
    )
    store = DuckDBStore(root / "state.duckdb", lock_timeout_s=60)
    log = PartitionedLog(root / "log")
    runner = TopologyRunner(
        build_word_count(TOPOLOGY, max_batch_size=args.batch_size),
        spark,
        store,
        log,
        max_spout_pending=args.max_spout_pending,
        replica=Replica(root / "replica"),
        keep_txids=args.keep_txids,
    )
    retention = Retention(log, args.retention)
    _send(out, ev="ready", pid=os.getpid())
    draining = False
    while True:
        last = runner.last_committed() or 0
        if not draining and last >= args.txids:
            _send(out, ev="reached", txid=last)
            draining = sys.stdin.readline().strip() == "drain"
            if not draining:
                break
            continue
        backlog = runner.backlog()
        if backlog == 0:
            if draining:
                _send(out, ev="drained", txid=last)
                break
            time.sleep(0.05)
            continue
        pending = args.max_spout_pending
        if not draining:
            pending = min(pending, args.txids - last)
        for outcome in runner.run_batches(range(last + 1, last + 1 + pending)):
            retention.committed(outcome.plans)
            _send(
                out,
                ev="done",
                txid=outcome.txid,
                records=sum(outcome.tuples_in.values()),
                keys=sum(st.keys_updated for st in outcome.states.values()),
                compacted=sum(outcome.compacted.values()),
                lag=sum(v for lag in outcome.lag.values() for v in lag.values()),
            )
    store.close()
    spark.stop()


# -- measurements ------------------------------------------------------------------------------


def status_kb(pid: int, field: str = "VmRSS") -> int:
    """A kB figure of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``, ...); 0 once it exited."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def memory_mb(pid: int) -> dict[str, float]:
    """RSS in MB of process ``pid`` (``py``), its Java descendants (``jvm``) and the others
    (``workers``: PySpark daemon and workers)."""
    jvm = workers = 0
    for child in descendants(pid):
        try:
            comm = Path(f"/proc/{child}/comm").read_text().strip()
        except OSError:
            continue
        if comm == "java":
            jvm += status_kb(child)
        else:
            workers += status_kb(child)
    return {"py": status_kb(pid) / 1024, "jvm": jvm / 1024, "workers": workers / 1024}


def _count_files(path: Path, pattern: str) -> int:
    return sum(1 for p in path.rglob(pattern) if p.is_file()) if path.exists() else 0


def sample(root: Path, pid: int, txid: int | str, event: dict[str, Any]) -> dict[str, Any]:
    """One row of the table: memory, state file size, log and replica file counts."""
    state = sum(
        p.stat().st_size for p in (root / "state.duckdb", root / "state.duckdb.wal") if p.exists()
    )
    return {
        "txid": txid,
        **{f"rss_{k}_mb": round(v, 1) for k, v in memory_mb(pid).items()},
        "state_mb": round(state / 2**20, 2),
        "log_files": _count_files(root / "log", "*.parquet"),
        "replica_files": _count_files(root / "replica", "*.parquet"),
        "lag": event.get("lag", 0),
        "compactions": event.get("compactions", 0),
    }


HEADER = (
    f"{'txid':>6} {'py RSS MB':>10} {'JVM RSS MB':>11} {'workers MB':>11} {'state MB':>9} "
    f"{'log files':>10} {'replica files':>14} {'lag':>8} {'compactions':>12}"
)


def _row(r: dict[str, Any]) -> str:
    return (
        f"{r['txid']!s:>6} {r['rss_py_mb']:>10.1f} {r['rss_jvm_mb']:>11.1f} "
        f"{r['rss_workers_mb']:>11.1f} {r['state_mb']:>9.2f} {r['log_files']:>10} "
        f"{r['replica_files']:>14} {r['lag']:>8} {r['compactions']:>12}"
    )


# -- the driver --------------------------------------------------------------------------------


def checkpoints(txids: int, every: int) -> set[int]:
    """The txids sampled: 10, 100, 200, every ``every`` and the last."""
    points = {t for t in (EARLY, 100, 200) if t <= txids} | {txids}
    points |= set(range(every, txids + 1, every)) if every > 0 else set()
    return points


def _producer_argv(root: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "bench.chaos_soak", "producer", str(root),
            "--seed", str(args.seed), "--rate", str(args.rate), "--vocabulary",
            str(args.vocabulary), "--zipf", str(args.zipf), "--bad-ratio", str(args.bad_ratio),
            "--truth", str(root / "truth.json"), "--tick", str(args.tick)]  # fmt: skip


def _runner_argv(root: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "bench.long_run", "runner", str(root),
            "--txids", str(args.txids), "--batch-size", str(args.batch_size),
            "--retention", str(args.retention), "--keep-txids", str(args.keep_txids),
            "--max-spout-pending", str(args.max_spout_pending)]  # fmt: skip


def _stop(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL ``proc``'s process group (whatever is left of it) and reap ``proc``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def soak(args: argparse.Namespace, root: Path, emit: Any = print) -> dict[str, Any]:
    """Run the soak under ``root``; return the figures (``emit`` gets each table line)."""
    from trident_assets.log.store import PartitionedLog

    log = PartitionedLog(root / "log")
    log.create_topic(TOPIC, PARTITIONS)
    log.create_topic(QUERY_TOPIC, 1)
    started = time.perf_counter()
    points = checkpoints(args.txids, args.every)
    rows: list[dict[str, Any]] = []
    producer = subprocess.Popen(
        _producer_argv(root, args), stdout=subprocess.PIPE, text=True, start_new_session=True,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    worker = Worker(root, [], args.batch_size, 1, argv=_runner_argv(root, args))
    produced: dict[str, Any] = {}
    compactions = 0
    records = 0
    keys_max = 0
    try:
        emit(HEADER)
        while True:
            event = worker.event(time.monotonic() + args.timeout)
            if event is None:
                raise TimeoutError(f"no event from the run process in {args.timeout}s")
            if event["ev"] == "done":
                compactions += event["compacted"] > 0
                records += event["records"]
                keys_max = max(keys_max, event["keys"])
                if event["txid"] in points:
                    rows.append(
                        sample(root, worker.proc.pid, event["txid"],
                               {**event, "compactions": compactions})
                    )  # fmt: skip
                    emit(_row(rows[-1]))
            elif event["ev"] == "reached":
                producer.send_signal(signal.SIGTERM)
                out, _ = producer.communicate(timeout=120)
                produced = json.loads(out.strip().splitlines()[-1])
                worker.send("drain")
            elif event["ev"] == "drained":
                rows.append(
                    sample(root, worker.proc.pid, f"end:{event['txid']}",
                           {"lag": 0, "compactions": compactions})
                )  # fmt: skip
                emit(_row(rows[-1]))
                worker.proc.wait(timeout=120)
                break
    finally:
        _stop(producer)
        _stop(worker.proc)
        worker.alive = False
        worker.close()
    return {
        "txids": args.txids,
        "seconds": round(time.perf_counter() - started, 1),
        "produced": produced,
        "records_committed": records,
        "keys_per_batch_max": keys_max,
        "compactions": compactions,
        "rows": rows,
        **verify(root, args, rows, produced),
    }


def verify(
    root: Path, args: argparse.Namespace, rows: list[dict[str, Any]], produced: dict[str, Any]
) -> dict[str, Any]:
    """Compare the state with the producer's counts; check that files and memory stayed bounded."""
    from trident_assets.backends.duckdb_store import DuckDBStore

    truth: dict[str, int] = json.loads((root / "truth.json").read_text())
    with DuckDBStore(root / "state.duckdb", lock_timeout_s=60) as store:
        table = store.scan(STATE_TABLE)
        state = dict(zip(table.column("word").to_pylist(), table.column("value").to_pylist(),
                         strict=True))  # fmt: skip
        [(dead,)] = store.conn.execute(
            "SELECT count(*) FROM _trident_dead_letters WHERE topology = ?", [TOPOLOGY]
        ).fetchall()
    mismatched = sum(1 for w in truth.keys() | state.keys() if truth.get(w) != state.get(w))
    lost = sum(max(0, n - state.get(w, 0)) for w, n in truth.items())
    double = sum(max(0, n - truth.get(w, 0)) for w, n in state.items())
    problems = []
    if mismatched or lost or double:
        problems.append(f"{mismatched} keys mismatched: {lost} words lost, {double} double-counted")
    if dead != produced.get("bad"):
        problems.append(f"{dead} dead letters for {produced.get('bad')} malformed records")
    early = next((r for r in rows if r["txid"] == EARLY), rows[0])
    end = rows[-1]
    bounds = {
        "log_files": 2 * early["log_files"] + args.file_slack,
        "replica_files": 2 * early["replica_files"] + args.file_slack,
        "state_mb": 2 * early["state_mb"] + args.state_slack_mb,
        "rss_py_mb": early["rss_py_mb"] + args.rss_slack_mb,
        "rss_jvm_mb": early["rss_jvm_mb"] + args.jvm_slack_mb,
    }
    for name, bound in bounds.items():
        if end[name] > bound:
            problems.append(f"{name} {end[name]} at the end > {bound} (from txid {early['txid']})")
    return {
        "ok": not problems,
        "keys_truth": len(truth),
        "keys_state": len(state),
        "keys_mismatched": mismatched,
        "words_truth": sum(truth.values()),
        "words_state": sum(state.values()),
        "lost": lost,
        "double_counted": double,
        "dead_letters": dead,
        "bounds": bounds,
        "problems": problems,
    }


def _print_summary(result: dict[str, Any]) -> None:
    p = result["produced"]
    print(
        f"long run: {result['txids']} txids in {result['seconds']}s; producer appended "
        f"{p['good']} sentences + {p['bad']} malformed + {p['queries']} queries meanwhile; "
        f"{result['records_committed']} records committed, max {result['keys_per_batch_max']} "
        f"keys per batch, state compacted after {result['compactions']} commits"
    )
    print(
        f"  state vs producer's counts: {result['keys_truth']} keys vs {result['keys_state']}, "
        f"{result['keys_mismatched']} mismatched; words {result['words_truth']} vs "
        f"{result['words_state']}: lost {result['lost']}, double-counted "
        f"{result['double_counted']}; dead letters {result['dead_letters']} for {p['bad']}"
    )
    print("  end bounds:", ", ".join(f"{k} <= {v:g}" for k, v in result["bounds"].items()))
    for problem in result["problems"]:
        print(f"  PROBLEM: {problem}")
    print("RESULT:", "PASS" if result["ok"] else "FAIL")


def parser() -> argparse.ArgumentParser:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("role", nargs="?", default="driver", choices=("driver", "runner"))
    ap.add_argument("root_dir", nargs="?", help=argparse.SUPPRESS)
    ap.add_argument("--txids", type=int, default=200, help="txids to commit under load")
    ap.add_argument("--rate", type=float, default=200.0, help="sentences per second")
    ap.add_argument("--batch-size", type=int, default=5000, help="max records per txid")
    ap.add_argument("--vocabulary", type=int, default=20_000, help="distinct words (Zipf)")
    ap.add_argument("--zipf", type=float, default=1.0, help="the Zipf exponent")
    ap.add_argument(
        "--retention", type=int, default=10, help="keep the last N txids' records (0: all)"
    )
    ap.add_argument("--keep-txids", type=int, default=20, help="the replica's txid window")
    ap.add_argument("--max-spout-pending", type=int, default=1, help="txids per Spark job")
    ap.add_argument("--bad-ratio", type=float, default=0.01, help="malformed records' share")
    ap.add_argument("--tick", type=float, default=0.5, help="seconds between producer flushes")
    ap.add_argument("--every", type=int, default=50, help="also sample every N txids")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--file-slack", type=int, default=100, help="files allowed over 2 x early")
    ap.add_argument(
        "--state-slack-mb",
        type=float,
        default=32.0,
        help="state file MB allowed over 2 x early (it grows between compactions)",
    )
    ap.add_argument("--rss-slack-mb", type=float, default=256.0, help="Python RSS growth allowed")
    ap.add_argument("--jvm-slack-mb", type=float, default=1024.0, help="JVM RSS growth allowed")
    ap.add_argument("--timeout", type=float, default=600.0, help="max seconds between events")
    ap.add_argument("--root", type=Path, help="working directory (default: a temp dir)")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run the role; the driver returns 0 on PASS."""
    ap = parser()
    args = ap.parse_args(argv)
    if args.role == "runner":
        run_runner(Path(args.root_dir), args)
        return 0
    root = args.root or Path(tempfile.mkdtemp(prefix="long-run-"))
    if root.exists() and any(root.iterdir()):
        ap.error(f"--root {root} must be empty or missing")
    root.mkdir(parents=True, exist_ok=True)
    result = soak(args, root, emit=lambda line: print(line, flush=True))
    _print_summary(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if result["ok"] and args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    elif not result["ok"]:
        print(f"  files kept in {root}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

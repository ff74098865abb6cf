"""The live path: from a record appended to the log to its txid committed and published.

Starts ``trident ui`` over a fresh home with the shipped settings (``dagster dev`` and the
warm Spark Connect server its runs share; ``--local-spark``: each run starts its own Spark),
in live mode (``--live``: one live run commits txid after txid) or, with ``--per-txid``, the
sensor-per-txid mode (a sensor-launched run per txid or range). It appends one sentence at a
time to the word count's log, each carrying a unique word ``rec<N>``, one every ``--gap`` to
``--gap-max`` seconds (uniform; ``--wait-commit``: the next one only after the previous one
committed, then the gap). A watcher polls the read replica every 20 ms: a record is committed
when a published txid's new values hold its word; its latency runs from its append.

With ``--ss`` a Spark Structured Streaming peer (:mod:`bench.live_ss`, its own process and
``local[2]`` JVM, file source, default trigger) gets the same records at the same moments
(one new file per record); its latency runs from the append to the end of the micro-batch's
``foreachBatch`` that wrote the record's word. Both run at once on the same machine; with
``--ss-alone`` the peer runs after ours, alone, on the same records, gaps and load.

In per-txid mode each latency is also split, from the Dagster run that committed it, into:
sensor (append -> run created), queue (created -> launched), start (launched -> the batch's
first event: process, code location and Spark session) and batch (-> committed).

    python -m bench.live_latency --records 5 --ss                    # live mode and the peer
    python -m bench.live_latency --per-txid --wait-commit --gap 3     # the per-txid path
    python -m bench.live_latency --records 20 --rate 10000 --ss      # under a steady load
    python -m bench.live_latency --records 20 --rate 10000 --ss-alone  # one after the other

``--rate N`` appends N records a second meanwhile (every 100 ms, to the peer's input too) as
a steady load; only the marked records are timed.

The first record is not timed (it waits for the code location and Spark to warm up, and in
live mode for the live run's launch). ``trident ui`` is stopped at the end (SIGTERM: it stops
``dagster dev`` and the Spark Connect server by PID), the peer by SIGTERM to its process.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from trident_assets.backends.replica import Replica
from trident_assets.cli.ui import stop_process_group, ui_environment
from trident_assets.local_ports import free_port
from trident_assets.log.store import PartitionedLog

TOPOLOGY = "word_count"
NEW_VALUES = "word_count__word_counts__new_values"
POLL_S = 0.02


def _wait_http(port: int, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    msg = f"dagster dev did not answer on port {port} within {timeout_s:.0f} s"
    raise RuntimeError(msg)


def _published(home: Path) -> int:
    """The last txid of the word count published to the read replica (0: none)."""
    return Replica(home / "replica").latest(TOPOLOGY) or 0


def _run_split(instance: Any, txid: int, appended: float) -> dict[str, float]:
    """The phases of the run that committed ``txid`` (seconds from the append)."""
    import dagster as dg

    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={"trident/topology": TOPOLOGY}), limit=20
    )
    for record in records:
        run = record.dagster_run
        first = int(run.tags.get("trident/txid", "0"))
        last = int(run.tags.get("dagster/asset_partition_range_end", run.tags.get(
            "trident/txid", "0")))  # fmt: skip
        if not first <= txid <= last:
            continue
        created = record.create_timestamp.timestamp()
        launched = record.start_time or created
        events = instance.all_logs(run.run_id)
        step = [e.timestamp for e in events if e.dagster_event and e.dagster_event.is_step_start]
        begun = step[0] if step else launched
        return {
            "sensor": created - appended,
            "queue": launched - created,
            "start": begun - launched,
        }
    return {}


def _live_stages(instance: Any) -> dict[str, float]:
    """Medians over the live run's txids: each stage's seconds and the time between commits.

    Read from the txid materializations of the spout asset (their ``*_s`` timings metadata);
    ``between_commits`` is the median gap between two consecutive txids' materializations.
    """
    for key in instance.get_asset_keys():
        records = instance.fetch_materializations(key, limit=10_000).records
        metas = [r.asset_materialization.metadata for r in records if r.asset_materialization]
        if not metas or "spark_s" not in metas[0] or "offsets" not in metas[0]:
            continue
        stages = sorted({k for m in metas for k in m if k.endswith("_s")})
        medians = {
            k[:-2]: statistics.median(float(m[k].value) for m in metas if k in m) for k in stages
        }
        stamps = sorted(r.timestamp for r in records)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        if gaps:
            medians["between_commits"] = statistics.median(gaps)
        medians["txids"] = len(metas)
        return {k: round(v, 3) for k, v in medians.items()}
    return {}


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_s": round(statistics.median(ordered), 3), "p95_s": round(p95, 3)}


class _Watcher(threading.Thread):
    """Polls the replica (and the peer's stamps): when each record's word became visible."""

    def __init__(self, home: Path | None, stamps: Path | None) -> None:
        super().__init__(name="latency-watcher", daemon=True)
        self.replica = None if home is None else Replica(home / "replica")
        self.stamps = stamps
        self.committed: dict[str, float] = {}
        self.peer: dict[str, float] = {}
        self.txid_of: dict[str, int] = {}
        self.stop = threading.Event()
        self._seen = 0
        self._offset = 0

    def run(self) -> None:
        while not self.stop.is_set():
            self._poll_replica()
            self._poll_stamps()
            time.sleep(POLL_S)

    def _poll_replica(self) -> None:
        if self.replica is None:  # the peer alone
            return
        latest = self.replica.latest(TOPOLOGY) or 0
        now = time.time()
        for txid in range(self._seen + 1, latest + 1):
            rows = self.replica.read_rows(NEW_VALUES, txid)
            words = [] if rows is None else rows.column("word").to_pylist()
            for word in words:
                if word.startswith("rec") and word not in self.committed:
                    self.committed[word] = now
                    self.txid_of[word] = txid
        self._seen = max(self._seen, latest)

    def _poll_stamps(self) -> None:
        if self.stamps is None or not self.stamps.exists():
            return
        with self.stamps.open(encoding="utf-8") as f:
            f.seek(self._offset)
            text = f.read()
        complete = text[: text.rfind("\n") + 1]
        self._offset += len(complete.encode())
        for line in complete.splitlines():
            stamp = json.loads(line)
            self.peer.setdefault(stamp["token"], float(stamp["at"]))


def _wait_for(what: str, ready: Any, timeout_s: float, log: Path) -> None:
    deadline = time.time() + timeout_s
    while not ready():
        if time.time() > deadline:
            msg = f"{what} not within {timeout_s:.0f} s (see {log})"
            raise RuntimeError(msg)
        time.sleep(POLL_S)


def _timed_appends(
    records: int,
    append: Any,
    rng: random.Random,
    gap_s: float,
    gap_max_s: float | None,
    seen: dict[str, float] | None,
    log: Path,
) -> list[str]:
    """Append the timed records 1..``records``, a random gap after each; their tokens.

    ``seen``: where each record shows up once done: the next waits for it (None: no wait).
    """
    for i in range(1, records + 1):
        token = append(i)
        if seen is not None:
            _wait_for(f"record {i}", lambda t=token: t in seen, 300, log)
        high = gap_s if gap_max_s is None else gap_max_s
        time.sleep(rng.uniform(gap_s, high))
    return [f"rec{i}" for i in range(1, records + 1)]


def _start_peer(tmp: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    """The Structured Streaming peer, once its query runs: (process, input dir, stamps)."""
    in_dir, out_dir = tmp / "ss_in", tmp / "ss_out"
    in_dir.mkdir(parents=True)
    out_dir.mkdir(parents=True)
    log = (out_dir / "peer.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.live_ss", str(in_dir), str(out_dir)],
        stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        msg = f"the Structured Streaming peer did not start (see {out_dir / 'peer.log'})"
        raise RuntimeError(msg)
    return proc, in_dir, out_dir / "stamps.jsonl"


def _write_peer_file(in_dir: Path, i: int, text: str) -> None:
    """One new file per record, renamed into place whole (the file source never sees half)."""
    tmp = in_dir.parent / f".{i:06d}.txt"
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.rename(in_dir / f"{i:06d}.txt")


class _Load(threading.Thread):
    """A steady background load: ``rate`` records a second, appended every 100 ms."""

    TICK_S = 0.1

    def __init__(self, log: PartitionedLog | None, rate: float, ss_in: Path | None) -> None:
        super().__init__(name="latency-load", daemon=True)
        self.producer = (
            None if log is None else log.producer("sentences", partitioner="round_robin")
        )
        self.per_tick = max(1, round(rate * self.TICK_S))
        self.ss_in = ss_in
        self.stop = threading.Event()
        self.appended = 0

    def run(self) -> None:
        lines = ["load the cow jumped over the moon"] * self.per_tick
        tick = time.monotonic()
        while not self.stop.is_set():
            if self.producer is not None:
                for line in lines:
                    self.producer.send(line.encode())
                self.producer.flush()
            if self.ss_in is not None:
                _write_peer_file(self.ss_in, 1_000_000 + self.appended, "\n".join(lines))
            self.appended += self.per_tick
            tick += self.TICK_S
            time.sleep(max(0.0, tick - time.monotonic()))


def measure(
    records: int,
    gap_s: float,
    home: Path,
    port: int,
    *,
    live: bool = True,
    local_spark: bool = False,
    peer: bool = False,
    gap_max_s: float | None = None,
    wait_commit: bool = False,
    seed: int = 7,
    rate: float = 0.0,
) -> dict[str, Any]:
    """Time ``records`` records through ``trident ui`` (and the peer); latencies and splits.

    ``rate``: records a second appended meanwhile as a steady load (0: none); only the
    timed records are timed.
    """
    import dagster as dg

    log = PartitionedLog(home / "log")
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    env = ui_environment(home, live=live)
    out_path = home / "dagster_dev.log"
    out = open(out_path, "wb")  # noqa: SIM115 - closed in finally
    trident = Path(sys.executable).parent / "trident"
    command = [str(trident), "ui", "--home", str(home), "--port", str(port)]
    command += ["--local-spark"] if local_spark else []
    command += ["--live"] if live else []
    rng = random.Random(seed)
    ss_proc = None
    ss_in = stamps = None
    if peer:
        ss_proc, ss_in, stamps = _start_peer(home.parent)
    proc = subprocess.Popen(
        command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    watcher = _Watcher(home, stamps)
    appended: dict[str, float] = {}
    load: _Load | None = None
    try:
        _wait_http(port, 180)
        watcher.start()
        producer = log.producer("sentences", partitioner="round_robin")

        def append(i: int) -> str:
            token = f"rec{i}"
            text = f"live {token} the cow jumped"
            producer.send(text.encode())
            producer.flush()
            appended[token] = time.time()
            if ss_in is not None:
                _write_peer_file(ss_in, i, text)
            return token

        # a first record wakes the topology (and the peer): not timed
        first = append(0)
        _wait_for("record 0 committed", lambda: first in watcher.committed, 300, out_path)
        if peer:
            _wait_for("record 0 in the peer", lambda: first in watcher.peer, 300, out_path)
        if rate > 0:
            load = _Load(log, rate, ss_in)
            load.start()
            time.sleep(5.0)  # the load in a steady state before the first timed record
        seen = watcher.committed if wait_commit else None
        tokens = _timed_appends(records, append, rng, gap_s, gap_max_s, seen, out_path)
        _wait_for(
            "every record committed",
            lambda: (
                all(t in watcher.committed for t in tokens)
                and (not peer or all(t in watcher.peer for t in tokens))
            ),
            300,
            out_path,
        )
        splits: list[dict[str, float]] = []
        stages: dict[str, float] = {}
        instance = dg.DagsterInstance.from_config(env["DAGSTER_HOME"])
        if live:
            stages = _live_stages(instance)
        else:
            for t in tokens:
                split = _run_split(instance, watcher.txid_of[t], appended[t])
                split["batch"] = watcher.committed[t] - appended[t] - sum(split.values())
                splits.append(split)
    finally:
        if load is not None:
            load.stop.set()
            load.join(timeout=10)
        watcher.stop.set()
        stop_process_group(proc, timeout_s=120)
        out.close()
        if ss_proc is not None:
            ss_proc.terminate()
            try:
                ss_proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                ss_proc.kill()
                ss_proc.wait(timeout=30)
    latencies = [watcher.committed[t] - appended[t] for t in tokens]
    result: dict[str, Any] = {
        "mode": "live" if live else "per-txid",
        "records": len(latencies),
        **_percentiles(latencies),
        "latencies_s": [round(x, 3) for x in latencies],
        "txids": len({watcher.txid_of[t] for t in tokens}),
    }
    if load is not None:
        result["load_records_per_s"] = rate
        result["load_records"] = load.appended
    if stages:
        result["median_stages_s"] = stages
    if splits:
        phases = {k: statistics.median(s.get(k, 0.0) for s in splits) for k in splits[0]}
        result["median_phases_s"] = {k: round(v, 2) for k, v in phases.items()}
    if peer:
        ss = [watcher.peer[t] - appended[t] for t in tokens]
        result["structured_streaming"] = {
            **_percentiles(ss),
            "latencies_s": [round(x, 3) for x in ss],
        }
        result["ratio_p50"] = round(result["p50_s"] / result["structured_streaming"]["p50_s"], 2)
        result["ratio_p95"] = round(result["p95_s"] / result["structured_streaming"]["p95_s"], 2)
    return result


def measure_peer(
    records: int,
    gap_s: float,
    tmp: Path,
    *,
    gap_max_s: float | None = None,
    wait_commit: bool = False,
    seed: int = 7,
    rate: float = 0.0,
) -> dict[str, Any]:
    """Time the Structured Streaming peer alone: the same records, gaps and load as ours.

    What :func:`measure` does for the peer with ``peer=True``, without ``trident ui``
    running meanwhile: one engine at a time on the machine.
    """
    rng = random.Random(seed)
    proc, ss_in, stamps = _start_peer(tmp)
    watcher = _Watcher(None, stamps)
    appended: dict[str, float] = {}
    load: _Load | None = None
    log = tmp / "ss_out" / "peer.log"
    try:
        watcher.start()

        def append(i: int) -> str:
            token = f"rec{i}"
            _write_peer_file(ss_in, i, f"live {token} the cow jumped")
            appended[token] = time.time()
            return token

        first = append(0)  # wakes the query: not timed
        _wait_for("record 0 in the peer", lambda: first in watcher.peer, 300, log)
        if rate > 0:
            load = _Load(None, rate, ss_in)
            load.start()
            time.sleep(5.0)
        seen = watcher.peer if wait_commit else None
        tokens = _timed_appends(records, append, rng, gap_s, gap_max_s, seen, log)
        _wait_for(
            "every record in the peer", lambda: all(t in watcher.peer for t in tokens), 300, log
        )
    finally:
        if load is not None:
            load.stop.set()
            load.join(timeout=10)
        watcher.stop.set()
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    ss = [watcher.peer[t] - appended[t] for t in tokens]
    return {
        **_percentiles(ss),
        "latencies_s": [round(x, 3) for x in ss],
        "run": "alone, after ours",
    }


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20, help="timed records (>= 1)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--live", action="store_true", default=True, help="live mode (default)")
    mode.add_argument("--per-txid", action="store_true", help="a sensor-launched run per txid")
    parser.add_argument("--gap", type=float, default=0.5, help="least seconds between records")
    parser.add_argument(
        "--gap-max", type=float, default=3.0, help="most seconds between records (uniform)"
    )
    parser.add_argument(
        "--wait-commit", action="store_true", help="append the next record once one committed"
    )
    parser.add_argument(
        "--ss", action="store_true", help="also time a Spark Structured Streaming peer"
    )
    parser.add_argument(
        "--ss-alone",
        action="store_true",
        help="time the Spark SS peer alone after ours (same records and load), not at once",
    )
    parser.add_argument(
        "--rate", type=float, default=0.0, help="a steady load meanwhile, records/s (e.g. 10000)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--local-spark", action="store_true", help="no warm Spark: each run starts its own"
    )
    args = parser.parse_args(argv)
    if args.ss and args.ss_alone:
        parser.error("--ss (at once) and --ss-alone (one after the other): choose one")
    if args.records < 1 or args.gap < 0 or args.gap_max < args.gap or args.rate < 0:
        parser.error("--records must be >= 1, 0 <= --gap <= --gap-max and --rate >= 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop dagster dev on the way out
    with tempfile.TemporaryDirectory(prefix="trident-live-") as tmp:
        home = Path(tmp) / "home"
        result = measure(
            args.records,
            args.gap,
            home,
            free_port(),
            live=not args.per_txid,
            local_spark=args.local_spark,
            peer=args.ss,
            gap_max_s=args.gap_max,
            wait_commit=args.wait_commit,
            rate=args.rate,
        )
        if args.ss_alone:
            ss = measure_peer(
                args.records,
                args.gap,
                Path(tmp) / "peer",
                gap_max_s=args.gap_max,
                wait_commit=args.wait_commit,
                rate=args.rate,
            )
            result["structured_streaming"] = ss
            result["ratio_p50"] = round(result["p50_s"] / ss["p50_s"], 2)
            result["ratio_p95"] = round(result["p95_s"] / ss["p95_s"], 2)
        result["spark"] = "local in each run" if args.local_spark else "warm (Spark Connect)"
        result["gap_s"] = [args.gap, args.gap_max]
    print(json.dumps(result, indent=2))
    if result["mode"] == "live":
        met = result["p50_s"] <= 2 and result["p95_s"] <= 4
        target = "p50 <= 2 s, p95 <= 4 s"
    else:
        met, target = result["p50_s"] <= 15, "p50 <= 15 s"
    print(
        f"target {target}: {'met' if met else 'not met'} "
        f"(p50 {result['p50_s']} s, p95 {result['p95_s']} s)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

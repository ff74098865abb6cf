"""The sensor-driven live path: from a record appended to the log to its txid committed.

Starts ``trident ui`` over a fresh home with the shipped settings (``dagster dev`` and the
warm Spark Connect server its runs share; ``--local-spark``: each run starts its own Spark),
appends one sentence at a time to the word count's log (the next one a
few seconds after the previous one committed), and times each record until the read replica
shows a txid that read it. Each latency is split, from the Dagster run that committed it,
into: sensor (append -> run created), queue (created -> launched), start (launched -> the
batch's first event: process, code location and Spark session) and batch (-> committed).

    python -m bench.live_latency --records 20          # p50 / p95 and the split, one run

``trident ui`` is stopped at the end (SIGTERM: it stops ``dagster dev`` and the Spark Connect
server by PID).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from trident_assets.backends.replica import Replica
from trident_assets.log.store import PartitionedLog
from trident_assets.ui import stop_process_group, ui_environment

TOPOLOGY = "word_count"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def measure(
    records: int, gap_s: float, home: Path, port: int, local_spark: bool = False
) -> dict[str, Any]:
    """Run the live path ``records`` times; the latencies and their split."""
    import dagster as dg

    log = PartitionedLog(home / "log")
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    env = ui_environment(home)
    out = open(home / "dagster_dev.log", "wb")  # noqa: SIM115 - closed in finally
    trident = Path(sys.executable).parent / "trident"
    command = [str(trident), "ui", "--home", str(home), "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--local-spark"] if local_spark else command,
        env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    latencies: list[float] = []
    splits: list[dict[str, float]] = []
    try:
        _wait_http(port, 180)
        instance = dg.DagsterInstance.from_config(env["DAGSTER_HOME"])
        producer = log.producer("sentences", partitioner="round_robin")
        # a first record wakes the topology (its sensor idles until the log has data)
        for i in range(records + 1):
            before = _published(home)
            producer.send(f"live record {i} the cow jumped".encode())
            producer.flush()
            appended = time.time()
            while _published(home) <= before:
                if time.time() - appended > 300:
                    msg = f"record {i} not committed within 300 s (see {home}/dagster_dev.log)"
                    raise RuntimeError(msg)
                time.sleep(0.1)
            latency = time.time() - appended
            if i > 0:  # the first one also waits for the code location and Spark to warm up
                latencies.append(latency)
                split = _run_split(instance, _published(home), appended)
                split["batch"] = latency - sum(split.values())
                splits.append(split)
                print(f"record {i}: {latency:.1f} s  " + "  ".join(
                    f"{k} {v:.1f}" for k, v in split.items()), flush=True)  # fmt: skip
            time.sleep(gap_s)
    finally:
        stop_process_group(proc, timeout_s=120)
        out.close()
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    phases = {k: statistics.median(s.get(k, 0.0) for s in splits) for k in splits[0]}
    return {
        "records": len(latencies),
        "p50_s": round(statistics.median(latencies), 2),
        "p95_s": round(p95, 2),
        "median_phases_s": {k: round(v, 2) for k, v in phases.items()},
        "latencies_s": [round(x, 2) for x in latencies],
    }


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20, help="timed records (>= 1)")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between records")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--local-spark", action="store_true", help="no warm Spark: each run starts its own"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop dagster dev on the way out
    with tempfile.TemporaryDirectory(prefix="trident-live-") as tmp:
        home = Path(tmp) / "home"
        result = measure(args.records, args.gap, home, _free_port(), args.local_spark)
        result["spark"] = "local in each run" if args.local_spark else "warm (Spark Connect)"
    print(json.dumps(result, indent=2))
    target = "met" if result["p50_s"] <= 15 else "not met"
    print(f"target p50 <= 15 s: {target} (p50 {result['p50_s']} s, p95 {result['p95_s']} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

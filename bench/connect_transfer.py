"""A large driver-side Arrow table sent to a Spark Connect server, as a state-query lookup is.

Run: ``python -m bench.connect_transfer [--rows 5000000] [--max-rows 500000]``.

Starts a Connect server with :func:`~trident_assets.spark.local_servers.start_connect_server`
(its defaults: ``local[2]``, 2 GB driver heap), builds an Arrow table of ``--rows`` (word,
bigint) rows on the client, sends it with :func:`~trident_assets.spark.arrow_transfer.to_spark`
(slices of ``--max-rows``; 0: one piece) and left-joins it, broadcast, to a Spark-side frame of
the same keys (the shape of ``state_query``), then checks the row count and value sum exactly.
While it runs, the server's heap is sampled (``jcmd GC.heap_info``, every second). Prints one
JSON object: times, peak heap used, the server's peak resident size. The server is stopped by
PID at the end.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from trident_assets.spark.arrow_transfer import to_spark
from trident_assets.spark.local_servers import start_connect_server


class _HeapSampler(threading.Thread):
    """Peak heap used (``jcmd``) and peak resident size (``/proc``) of one JVM."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_heap_mb = 0.0
        self.peak_rss_mb = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            info = subprocess.run(
                ["jcmd", str(self.pid), "GC.heap_info"], capture_output=True, text=True
            ).stdout
            used = re.search(r"heap\s+total \d+K, used (\d+)K", info)
            if used:
                self.peak_heap_mb = max(self.peak_heap_mb, int(used.group(1)) / 1024)
            status = Path(f"/proc/{self.pid}/status")
            if status.exists():
                rss = re.search(r"VmRSS:\s+(\d+) kB", status.read_text())
                if rss:
                    self.peak_rss_mb = max(self.peak_rss_mb, int(rss.group(1)) / 1024)


def run(rows: int, max_rows: int, directory: Path) -> dict[str, Any]:
    """Start a server, transfer and join ``rows`` rows, check them, stop the server."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    server = start_connect_server(directory / "connect.log")
    sampler = _HeapSampler(server.process.pid)
    sampler.start()
    try:
        spark = SparkSession.builder.remote(server.url).getOrCreate()
        table = pa.table(
            {
                "word": pa.array([f"w{i}" for i in range(rows)], pa.string()),
                "value": pa.array(range(rows), pa.int64()),
            }
        )
        started = time.perf_counter()
        lookup = to_spark(spark, table, max_rows=max_rows)
        sent = time.perf_counter()
        print(f"sent in {sent - started:.1f} s", file=sys.stderr, flush=True)
        keys = spark.range(0, rows, 1, 4).select(
            F.concat(F.lit("w"), F.col("id").cast("string")).alias("word")
        )
        joined = keys.join(F.broadcast(lookup), on="word", how="left")
        (count, total) = joined.agg(F.count("value"), F.sum("value")).collect()[0]
        done = time.perf_counter()
        spark.stop()
    finally:
        sampler.done.set()
        sampler.join()
        server.stop()
    assert server.process.poll() is not None
    exact = count == rows and total == rows * (rows - 1) // 2
    return {
        "rows": rows,
        "arrow_mb": round(table.nbytes / 1e6, 1),
        "max_rows": max_rows,
        "send_s": round(sent - started, 1),
        "join_s": round(done - sent, 1),
        "exact": exact,
        "server_start_s": round(server.started_s, 1),
        "server_peak_heap_used_mb": round(sampler.peak_heap_mb),
        "server_peak_rss_mb": round(sampler.peak_rss_mb),
        "server_max_heap": "2g (start_connect_server's --driver-memory)",
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--max-rows", type=int, default=500_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args.rows, args.max_rows, Path(tmp))
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()

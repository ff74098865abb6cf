"""One live-sized txid's cost, stage by stage: the word count over small batches.

Starts a Spark Connect server (as ``trident ui`` does; ``--local``: a local session
instead), then for each of ``--txids`` txids appends ``--records`` sentences to an embedded
log, flushing every ``--flush-every`` records (one segment file per partition each time, as
a producer that flushes often leaves them), and commits the txid with a runner (state in
DuckDB, published to a read replica). Prints the median of each stage over the txids after
the first five (``emit``, ``spark``, ``commit``, ``publish``, ``total``) and, on Spark
Connect, the round trips to the server a txid makes (config reads and writes, schema
analyses, plan executions) with their median time::

    python -m bench.live_txid                              # 30 txids of 5,000 records
    python -m bench.live_txid --flush-every 250            # 20 segment files a partition
    python -m bench.live_txid --flush-every 250 --inline-max-records 0   # Spark reads files
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WARM_UP = 5


def _count_round_trips(counts: collections.Counter[str], active: list[bool]) -> None:
    """Count the Spark Connect client's calls to the server while ``active[0]``."""
    from pyspark.sql.connect.client.core import SparkConnectClient

    for name in ("_analyze", "_execute_and_fetch", "config"):
        original = getattr(SparkConnectClient, name)

        def counted(self: Any, *args: Any, _name: str = name, _f: Any = original, **kw: Any) -> Any:
            if active[0]:
                counts[_name] += 1
            return _f(self, *args, **kw)

        setattr(SparkConnectClient, name, counted)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.backends.replica import Replica
    from trident_assets.examples.word_count import build_word_count
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.spark.local_servers import start_connect_server
    from trident_assets.spark.log_reader import INLINE_MAX_RECORDS_CONF
    from trident_assets.spark.session import build_spark_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--txids", type=int, default=30)
    parser.add_argument("--records", type=int, default=5000, help="sentences per txid")
    parser.add_argument("--flush-every", type=int, default=0, help="0: once per txid")
    parser.add_argument("--inline-max-records", type=int, help="trident.log.inlineMaxRecords")
    parser.add_argument("--local", action="store_true", help="a local session, not Connect")
    args = parser.parse_args(argv)
    if args.txids <= WARM_UP or args.records < 1 or args.flush_every < 0:
        parser.error(f"--txids must be > {WARM_UP}, --records >= 1, --flush-every >= 0")
    tmp = Path(tempfile.mkdtemp(prefix="live-txid-"))
    server = None
    counts: collections.Counter[str] = collections.Counter()
    active = [False]
    if args.local:
        spark = build_spark_session()
    else:
        server = start_connect_server(tmp / "connect.log")
        spark = build_spark_session(remote=server.url)
        _count_round_trips(counts, active)
    try:
        if args.inline_max_records is not None:
            spark.conf.set(INLINE_MAX_RECORDS_CONF, str(args.inline_max_records))
        log = PartitionedLog(tmp / "log")
        log.create_topic("sentences", 2)
        log.create_topic("word_queries", 1)
        producer = log.producer("sentences", partitioner="round_robin")
        store = DuckDBStore(tmp / "state.duckdb")
        runner = TopologyRunner(build_word_count(), spark, store, log, replica=Replica(tmp / "r"))
        stages: list[dict[str, float]] = []
        every = args.flush_every or args.records
        for txid in range(1, args.txids + 1):
            for i in range(args.records):
                producer.send(f"the cow w{txid}x{i % 7} jumped over the moon".encode())
                if (i + 1) % every == 0:
                    producer.flush()
            producer.flush()
            active[0] = txid > WARM_UP
            started = time.perf_counter()
            (outcome,) = runner.run_batches([txid])
            wall = time.perf_counter() - started
            active[0] = False
            stages.append({**outcome.timings_s, "wall": wall})
        store.close()
    finally:
        spark.stop()
        if server is not None:
            server.stop()
    timed = stages[WARM_UP:]
    print(f"{len(timed)} txids of {args.records} records, medians (s):")
    for key in sorted(timed[0]):
        print(f"  {key:8s} {statistics.median(s.get(key, 0.0) for s in timed):.4f}")
    if counts:
        print("Spark Connect round trips per txid:")
        for name, n in sorted(counts.items()):
            print(f"  {name:20s} {n / len(timed):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

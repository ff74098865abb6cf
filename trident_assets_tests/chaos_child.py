"""A child process for test_chaos.py: one Spark session serving batch commands over pipes.

Run as ``python -m trident_assets_tests.chaos_child ROOT``. Each stdin line is a JSON command
``{"op": ..., "db": ..., "topology": ..., "txid": ...}``; each reply is one JSON line on
stdout. Operations:

* ``race``: wait until the file ``go`` exists, then open the store (``lock_timeout_s``) and run
  ``txid``; reply ``applied`` or the error's type and message.
* ``full_disk``: open the store, then limit this process's file size (``RLIMIT_FSIZE``, with
  ``SIGXFSZ`` ignored, so writes fail with EFBIG as on a full disk) and run ``txid``; reply
  the error. The Spark JVM started earlier is not limited: only this process's writes fail
  (DuckDB's, and with ``inline_records`` above 0 the small batch the driver hands to Spark).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
from pathlib import Path
from typing import Any

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.examples.word_count import build_word_count
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.log_reader import DEFAULT_INLINE_MAX_RECORDS, INLINE_MAX_RECORDS_CONF
from trident_assets.spark.scoped_conf import scoped_conf
from trident_assets.spark.session import build_spark_session
from trident_assets.spouts.config import SpoutKind


def _run(spark: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    topo = build_word_count(cmd["topology"], kind=SpoutKind(cmd.get("kind", "opaque")))
    log = PartitionedLog(cmd["log"])
    if cmd["op"] == "race":
        go = Path(cmd["go"])
        while not go.exists():
            time.sleep(0.005)
    try:
        store = DuckDBStore(cmd["db"], lock_timeout_s=cmd.get("lock_timeout_s", 30.0))
    except Exception as exc:  # reported to the test, which asserts the type
        return {"error": type(exc).__name__, "message": str(exc)}
    try:
        runner = TopologyRunner(topo, spark, store, log)
        if cmd["op"] == "full_disk":
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
            resource.setrlimit(resource.RLIMIT_FSIZE, (cmd["limit_bytes"], hard))
        records = cmd.get("inline_records", DEFAULT_INLINE_MAX_RECORDS)
        inline = {INLINE_MAX_RECORDS_CONF: str(records)}
        try:
            with scoped_conf(spark, inline):
                outcome = runner.run_batch(cmd["txid"])
        except Exception as exc:  # reported to the test
            return {"error": type(exc).__name__, "message": str(exc)}
        finally:
            if cmd["op"] == "full_disk":
                resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        return {"applied": outcome.applied, "records": sum(outcome.tuples_in.values())}
    finally:
        try:
            store.close()
        except Exception as exc:  # a store invalidated by the failed write
            print(f"close failed: {exc!r}", file=sys.stderr)


def main() -> None:
    """Serve commands until stdin closes."""
    root = Path(sys.argv[1])
    spark = build_spark_session(
        {"spark.local.dir": str(root / "spark"), "spark.sql.warehouse.dir": str(root / "wh")}
    )
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        print(json.dumps(_run(spark, json.loads(line))), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

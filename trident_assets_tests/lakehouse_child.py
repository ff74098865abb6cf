"""A child process for test_lakehouse_crash.py: run txids, SIGKILL itself at a fault point.

``python -m trident_assets_tests.lakehouse_child ROOT STORE POINT NTH SPOUT``: a word count
with its counts published to a Delta table and an Iceberg table, its sentences from the log
(``SPOUT`` ``log``) or from JSON-lines files under ``ROOT/landing`` (``files``), run until its
backlog is empty; the ``NTH`` time the runner reaches fault point ``POINT`` the process kills
itself with SIGKILL (no cleanup, no flush).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import trident_assets as ta
from trident_assets.backends.state_store import open_state_store
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.session import build_spark_session
from trident_assets_tests.lakehouse_util import table_of


def both_formats(root: Path, source: str = "log") -> ta.TridentTopology:
    """The word count with its counts published to Delta and to Iceberg (as tables).

    ``source``: ``log`` (the log's ``sentences``, 4 a txid) or ``files`` (one file a txid).
    """
    topo = ta.TridentTopology("lh_kill")
    config = ta.SpoutConfig(kind=ta.SpoutKind.OPAQUE, max_batch_size=4)
    spout: Any = ta.LogSpout("sentences", ta.StringScheme("sentence"), config)
    if source == "files":
        scheme = ta.JsonScheme({"sentence": "string"})
        spout = ta.FileSpout(str(root / "landing" / "*.jsonl"), scheme, max_files=1)
    counts = (
        topo.new_stream("sentences", spout)
        .each("sentence", ta.Split(), "word")
        .group_by("word")
        .persistent_aggregate(ta.StateSpec.opaque("counts"), "word", ta.Count(), "count")
    )
    counts.publish(table_of("delta", root)).publish(table_of("iceberg", root))
    return topo


def main() -> None:
    """Run until the backlog is empty, or until killed at the ``NTH`` ``POINT``."""
    root, location, point, nth = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    source = sys.argv[5]
    seen = 0

    def fault(where: str) -> None:
        nonlocal seen
        if where == point:
            seen += 1
            if seen == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    spark = build_spark_session({"spark.local.dir": str(root / "spark")})
    store = open_state_store(location)
    topo = both_formats(root, source)
    runner = TopologyRunner(topo, spark, store, PartitionedLog(root / "log"), fault=fault)
    while runner.backlog() > 0:
        runner.run_batch((runner.last_committed() or 0) + 1)
    store.close()
    spark.stop()


if __name__ == "__main__":
    main()

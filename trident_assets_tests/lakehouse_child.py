"""A child process for test_lakehouse_crash.py: run txids, SIGKILL itself at a fault point.

``python -m trident_assets_tests.lakehouse_child ROOT STORE POINT NTH``: the word count of
:func:`~trident_assets_tests.lakehouse_util.published_topology` with its counts published to a
Delta table and an Iceberg table, run until its backlog is empty; the ``NTH`` time the runner
reaches fault point ``POINT`` the process kills itself with SIGKILL (no cleanup, no flush).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import trident_assets as ta
from trident_assets.backends.state_store import open_state_store
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.session import build_spark_session
from trident_assets_tests.lakehouse_util import table_of


def both_formats(root: Path) -> ta.TridentTopology:
    """The word count with its counts published to Delta and to Iceberg (as tables)."""
    topo = ta.TridentTopology("lh_kill")
    config = ta.SpoutConfig(kind=ta.SpoutKind.OPAQUE, max_batch_size=4)
    counts = (
        topo.new_stream("sentences", ta.LogSpout("sentences", ta.StringScheme("sentence"), config))
        .each("sentence", ta.Split(), "word")
        .group_by("word")
        .persistent_aggregate(ta.StateSpec.opaque("counts"), "word", ta.Count(), "count")
    )
    counts.publish(table_of("delta", root)).publish(table_of("iceberg", root))
    return topo


def main() -> None:
    """Run until the backlog is empty, or until killed at the ``NTH`` ``POINT``."""
    root, location, point, nth = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    seen = 0

    def fault(where: str) -> None:
        nonlocal seen
        if where == point:
            seen += 1
            if seen == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    spark = build_spark_session({"spark.local.dir": str(root / "spark")})
    store = open_state_store(location)
    runner = TopologyRunner(
        both_formats(root), spark, store, PartitionedLog(root / "log"), fault=fault
    )
    while runner.backlog() > 0:
        runner.run_batch((runner.last_committed() or 0) + 1)
    store.close()
    spark.stop()


if __name__ == "__main__":
    main()

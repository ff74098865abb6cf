"""An event-time window's dead letters name their record, and `trident dead-letters` shows it.

A user's topology (a map state and a one-minute window over one stream) runs two txids on
the session's Spark; its window's dead letters (an unreadable event time, a late record)
carry the topic, partition and offset of the record they came from, and
`trident dead-letters --records` (a child process, a clean environment) prints the record,
from the read replica and from the state file alike.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets_tests.children import run_trident

ORDERS = """
import trident_assets as ta

topo = ta.TridentTopology("orders")
scheme = ta.JsonScheme({"customer": "string", "amount": "bigint", "ts": "string"})
spout = ta.LogSpout("orders", scheme, ta.SpoutConfig(max_batch_size=3))
orders = topo.new_stream("orders", spout).group_by("customer")
totals = orders.persistent_aggregate(ta.StateSpec("per_customer"), "amount", ta.Sum(), "total")
per_minute = orders.window_aggregate(
    ta.EventWindow.tumbling("1 minute", time_field="ts"),
    ta.Sum(),
    "amount_sum",
    spec=ta.StateSpec("per_minute"),
    inputs="amount",
)
"""

RECORDS = [  # offsets 0..2: txid 1; 3..4: txid 2
    {"customer": "ann", "amount": 5, "ts": "2026-01-01 00:00:10"},
    {"customer": "bob", "amount": 3, "ts": "2026-01-01 00:01:10"},  # [00:00, 00:01) final
    {"customer": "cy", "amount": 1, "ts": "junk"},  # an unreadable event time
    {"customer": "ann", "amount": 2, "ts": "2026-01-01 00:00:30"},  # late: its window is final
    {"customer": "bob", "amount": 4, "ts": "2026-01-01 00:01:20"},
]
LATE = (
    "late record: its window [2026-01-01 00:00:00.000000 UTC, 2026-01-01 00:01:00.000000 UTC) "
    "is final (window_end <= watermark 2026-01-01 00:01:10.000000 UTC)"
)
UNREADABLE = (
    "event time field 'ts' value 'junk' is not a timestamp (ISO-8601, e.g. 2026-01-31 12:00:00)"
)


def test_window_dead_letters_carry_their_record(spark: Any, tmp_path: Path) -> None:
    home = tmp_path / "home"
    log = PartitionedLog(home / "log")
    log.create_topic("orders", 1)
    producer = log.producer("orders")
    for record in RECORDS:
        producer.send(json.dumps(record, separators=(",", ":")).encode())
    producer.flush()
    declared: dict[str, Any] = {}
    exec(ORDERS, declared)
    topo = declared["topo"]
    with DuckDBStore(home / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log, replica=Replica(home / "replica"))
        outcomes = [runner.run_batch(txid) for txid in (1, 2)]
    windows = [o.windows["per_minute"] for o in outcomes]
    assert [(w.late_records, w.unreadable_records) for w in windows] == [(0, 1), (1, 0)]
    expected = [
        {"topology": "orders", "txid": 2, "spout": "window:per_minute", "topic": "orders",
         "partition": 0, "offset": 3, "reason": LATE,
         "record": '{"customer":"ann","amount":2,"ts":"2026-01-01 00:00:30"}'},
        {"topology": "orders", "txid": 1, "spout": "window:per_minute", "topic": "orders",
         "partition": 0, "offset": 2, "reason": UNREADABLE,
         "record": '{"customer":"cy","amount":1,"ts":"junk"}'},
    ]  # fmt: skip
    args = ["dead-letters", "orders", "--records", "--home", str(home), "--format", "json"]
    done = run_trident(tmp_path, *args)
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout) == expected
    done = run_trident(tmp_path, *args[:-2])  # a table: the record is its last column
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "2 dead letters of orders"
    assert "record" in done.stdout.splitlines()[2]
    shutil.rmtree(home / "replica")  # read from the state file
    done = run_trident(tmp_path, *args)
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout) == expected
    done = run_trident(tmp_path, *args[:2], *args[3:])  # without --records: no record
    assert [sorted(r) for r in json.loads(done.stdout)] == [
        sorted(set(expected[0]) - {"record"})
    ] * 2

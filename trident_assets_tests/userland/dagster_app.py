"""The user topology through Dagster, as the code location `dagster dev` loads runs it.

Usage: ``python dagster_app.py HOME`` produces the first batch, materializes txid 1 with an
ephemeral Dagster instance and prints the committed word counts as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dagster as dg
from app import BATCHES, build

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.runs import materialize_batches
from trident_assets.log.store import PartitionedLog

if __name__ == "__main__":
    home = Path(sys.argv[1])
    log = PartitionedLog(home / "log")
    log.create_topic("sentences", 1)
    producer = log.producer("sentences")
    for sentence in BATCHES[0]:
        producer.send(sentence.encode())
    producer.flush()
    topology = build()
    trident = TridentResource(home=str(home))
    with dg.DagsterInstance.ephemeral() as instance:
        (result,) = materialize_batches(topology, trident, instance, [1], catch_up=False)
    if not result.success:
        raise SystemExit("the run failed")
    with DuckDBStore(home / "state.duckdb") as store:
        rows = store.scan("userland__counts").to_pylist()
    print(json.dumps({r["word"]: r["value"] for r in rows}))

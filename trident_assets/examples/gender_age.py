"""Storm's SingleJoinExample: a gender stream and an age stream joined on ``id`` across batches.

genders (id, gender) and ages (id, age), two JSON topics of the embedded log, ->
``single_join("join", out_fields=[id, gender, age])`` -> output ``people``. The halves of
an id may arrive in different batches; a half whose partner does not come within
``timeout_batches`` lands in the ``join_expired`` output (Storm fails it).
:func:`produce_seed` writes the seed's data: ids 0..9 with their genders first, then their
ages (``i + 20``) in reverse order.

Run it locally (seeds the log, then runs batches until both topics are consumed)::

    python -m trident_assets.examples.gender_age .trident
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.topology import TridentTopology

__all__ = ["AGE_TOPIC", "GENDER_TOPIC", "build_gender_age", "produce_seed", "seed_rows"]

GENDER_TOPIC = "genders"
AGE_TOPIC = "ages"


def build_gender_age(
    name: str = "gender_age",
    *,
    gender_topic: str = GENDER_TOPIC,
    age_topic: str = AGE_TOPIC,
    kind: SpoutKind = SpoutKind.TRANSACTIONAL,
    max_batch_size: int | None = 5,
    timeout_batches: int = 30,
    num_buckets: int = 3,
    on_duplicate: str = "error",
) -> TridentTopology:
    """Declare the gender/age join: state ``join``, outputs ``people`` and ``join_expired``."""
    topo = TridentTopology(name)
    config = SpoutConfig(kind=kind, max_batch_size=max_batch_size)
    genders = topo.new_stream(
        "gender", LogSpout(gender_topic, JsonScheme({"id": "bigint", "gender": "string"}), config)
    )
    ages = topo.new_stream(
        "age", LogSpout(age_topic, JsonScheme({"id": "bigint", "age": "int"}), config)
    )
    topo.single_join(
        "join",
        [genders, ages],
        out_fields=["id", "gender", "age"],
        timeout_batches=timeout_batches,
        num_buckets=num_buckets,
        on_duplicate=on_duplicate,
    ).as_output("people")
    return topo


def seed_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The seed's tuples: genders of ids 0..9 (even: male), then ages ``i + 20`` for ids 9..0."""
    genders = [{"id": i, "gender": "male" if i % 2 == 0 else "female"} for i in range(10)]
    ages = [{"id": i, "age": i + 20} for i in range(9, -1, -1)]
    return genders, ages


def produce_seed(log: Any, *, gender_topic: str = GENDER_TOPIC, age_topic: str = AGE_TOPIC) -> None:
    """Create the two topics (one partition each, if missing) and append the seed's tuples."""
    genders, ages = seed_rows()
    for topic, rows in ((gender_topic, genders), (age_topic, ages)):
        if topic not in log.topics():
            log.create_topic(topic, 1)
        producer = log.producer(topic)
        for row in rows:
            producer.send(json.dumps(row).encode())
        producer.flush()


def main(home: str = ".trident") -> None:  # pragma: no cover - a convenience for users
    """Seed ``<home>/log`` and run batches of the topology until the log is consumed."""
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.spark.session import build_spark_session

    log = PartitionedLog(Path(home) / "log")
    produce_seed(log)
    topo = build_gender_age()
    with DuckDBStore(Path(home) / "state.duckdb") as store:
        runner = TopologyRunner(topo, build_spark_session({}), store, log)
        while runner.backlog():
            outcome = runner.run_batch((runner.last_committed() or 0) + 1)
            print(f"txid {outcome.txid}: {outcome.outputs}")


if __name__ == "__main__":  # pragma: no cover
    main(*sys.argv[1:2])

"""Build the user topology over an embedded log and run its batches; print the results as JSON.

Usage: ``python app.py HOME [SPARK_URL [WORKER_PYTHON [SPARK_LOG_ROOT]]]`` runs
``BATCHES`` in a fresh local SparkSession with the project's defaults (no environment variable
is needed), through Spark Connect (``sc://...``) or on a standalone cluster (``spark://...``,
its executors running ``WORKER_PYTHON``; Spark reading the log at ``SPARK_LOG_ROOT``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from word_functions import (  # the user's own module, found next to this script
    Doubled,
    FirstSeen,
    Letters,
    Occurrences,
    WithE,
    longer_than_two,
    positions,
    shout,
    split_words,
    vowels,
    with_length,
)

from trident_assets import Count
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import StringScheme
from trident_assets.spark.session import build_spark_session
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.operations import (
    PandasFlatMap,
    PandasMap,
    PyFilter,
    PyFlatMap,
    PyFunction,
    PyMap,
)
from trident_assets.stream.topology import StateSpec, TridentTopology

BATCHES = (
    ("the cow jumped over the moon", "the man went to the store"),
    ("to be or not to be", "the end"),
)
OUTPUTS = (
    "long_words", "shouted", "positions", "lengths", "vowels",
    "letters_grouped", "letters_global", "occurrences_grouped", "occurrences_global", "doubled",
)  # fmt: skip
STATES = ("counts", "letters", "total_letters", "reduced", "with_e", "first_seen")


def build() -> TridentTopology:
    """The user topology: every kind of user code, end to end."""
    topo = TridentTopology("userland")
    sentences = topo.new_stream("sentences", LogSpout("sentences", StringScheme("sentence")))
    words = sentences.each("sentence", PyFunction(split_words, {"word": "string"}), "word")
    long = words.each("word", PyFilter(longer_than_two))
    long.project(["word"]).as_output("long_words")
    long.map(PyMap(shout, {"word": "string", "n": "bigint"})).as_output("shouted")
    sentences.flat_map(PyFlatMap(positions, {"word": "string", "pos": "bigint"})).as_output(
        "positions"
    )
    only = words.project(["word"])
    only.map(PandasMap(with_length, {"word": "string", "length": "bigint"})).as_output("lengths")
    only.flat_map(PandasFlatMap(vowels, {"word": "string", "vowel": "string"})).as_output("vowels")
    grouped = words.group_by("word")
    counts = grouped.persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "count")
    grouped.persistent_aggregate(StateSpec.opaque("letters"), "word", Letters(), "letters")
    words.persistent_aggregate(StateSpec.opaque("total_letters"), "word", Letters(), "total")
    grouped.persistent_aggregate(StateSpec.opaque("reduced"), "word", Occurrences(), "n")
    words.persistent_aggregate(StateSpec.opaque("with_e"), "word", WithE(), "n")
    only.partition_persist(
        StateSpec.opaque("first_seen"), "word", FirstSeen(), ["word", "first_txid"]
    )
    grouped.aggregate("word", Letters(), "letters").as_output("letters_grouped")
    words.aggregate("word", Letters(), "letters").as_output("letters_global")
    grouped.aggregate("word", Occurrences(), "n").as_output("occurrences_grouped")
    words.aggregate("word", Occurrences(), "n").as_output("occurrences_global")
    words.state_query(counts, "word", Doubled(), "doubled").project(["word", "doubled"]).as_output(
        "doubled"
    )
    return topo


def _rows(store: DuckDBStore, table: str, where: str = "", params: Any = ()) -> list[list[Any]]:
    found = store.conn.execute(f'SELECT * FROM "{table}" {where}', list(params)).fetchall()
    return sorted([list(r) for r in found], key=repr)


def session(url: str | None, worker_python: str | None = None) -> Any:
    """Local Spark, Spark Connect (``sc://``) or a cluster master URL (``spark://``)."""
    if url is None or url.startswith("sc://"):
        return build_spark_session(remote=url)
    conf = {"spark.master": url, "spark.executor.memory": "1g"}
    if worker_python:
        conf["spark.pyspark.python"] = worker_python
    return build_spark_session(conf)


def run(
    home: Path, spark: Any = None, remote: str | None = None, spark_root: str | None = None
) -> dict[str, Any]:
    """Produce each batch's sentences, run it, and collect every output and state.

    ``spark_root``: where the executors see the log, when not at the driver's path.
    """
    log = PartitionedLog(home / "log", spark_root=spark_root)
    log.create_topic("sentences", 1)
    topo = build()
    spark = spark or build_spark_session(remote=remote)
    store = DuckDBStore(home / "state.duckdb")
    runner = TopologyRunner(topo, spark, store, log, max_spout_pending=1)
    result: dict[str, Any] = {"outputs": {}, "states": {}}
    try:
        for txid, sentences in enumerate(BATCHES, start=1):
            producer = log.producer("sentences")
            for sentence in sentences:
                producer.send(sentence.encode())
            producer.flush()
            runner.run_batch(txid)
            for name in OUTPUTS:
                rows = _rows(store, f"userland__out_{name}", "WHERE txid = ?", [txid])
                result["outputs"].setdefault(name, {})[txid] = [r[1:] for r in rows]
        for name in STATES[:-1]:
            table = store.scan(f"userland__{name}")
            result["states"][name] = sorted([list(r.values()) for r in table.to_pylist()], key=repr)
        result["states"]["first_seen"] = _rows(store, "userland__first_seen")
    finally:
        store.close()
    return result


if __name__ == "__main__":
    url = sys.argv[2] if len(sys.argv) > 2 else None
    python = sys.argv[3] if len(sys.argv) > 3 else None
    seen_at = sys.argv[4] if len(sys.argv) > 4 else None
    print(json.dumps(run(Path(sys.argv[1]), spark=session(url, python), spark_root=seen_at)))

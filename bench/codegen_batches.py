"""Spark's generated code against interpreted evaluation, per batch size, side by side.

``python -m bench.codegen_batches [--sizes 500,2000,20000,100000] [--batches 6] [--warm 2]``

Two topologies over the embedded log, each run for every size in both modes on the same
records in one Spark session (``trident.codegen.minRecords`` ``0``: always generated;
a billion: never): the word count (``StringScheme`` -> ``Split`` -> ``Count``, Arrow kernel
off so Spark's operators run) and a strict ``JsonScheme`` feeding a sliding event-time
window (the engine's largest expressions). Per size and mode: the median ``run_batch``
wall over ``--batches`` txids after ``--warm`` ones; the ratio interpreted / generated (< 1:
interpreted is faster). The modes alternate per txid, each on its own log and store, so a
drift of the machine hits both alike. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = {"generated": "0", "interpreted": "1000000000"}
WORDS = ("the", "cow", "jumped", "over", "moon", "man", "went", "to", "store", "a", "b", "c")


def _word_count(ta: Any) -> tuple[Any, str]:
    topo = ta.TridentTopology("words")
    topo.new_stream("in", ta.LogSpout("in", ta.StringScheme("sentence"))).each(
        "sentence", ta.Split(), "word"
    ).group_by("word").persistent_aggregate(ta.StateSpec("counts"), "word", ta.Count(), "count")
    return topo, "words"


def _json_window(ta: Any) -> tuple[Any, str]:
    topo = ta.TridentTopology("clicks")
    scheme = ta.JsonScheme({"page": "string", "ts": "string", "n": "bigint"}, optional=("n",))
    window = ta.EventWindow.sliding("10 s", "5 s", time_field="ts", allowed_lateness="5 s")
    topo.new_stream("in", ta.LogSpout("in", scheme)).group_by("page").window_aggregate(
        window, ta.Count(), "views", spec=ta.StateSpec("views")
    )
    return topo, "clicks"


def _records(kind: str, txid: int, size: int, rnd: random.Random) -> list[bytes]:
    if kind == "words":
        return [" ".join(rnd.choice(WORDS) for _ in range(8)).encode() for _ in range(size)]
    records = []
    for i in range(size):  # event time moves 10 s per txid: windows become final as txids pass
        seconds = txid * 10 + i % 10
        ts = f"2026-01-01 {seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        records.append(json.dumps({"page": rnd.choice(WORDS), "ts": ts, "n": i}).encode())
    return records


def measure(sizes: list[int], batches: int, warm: int) -> dict[str, Any]:
    """Both modes for both topologies at every size; medians and ratios."""
    import trident_assets as ta
    from trident_assets.spark.codegen_conf import CODEGEN_MIN_RECORDS_CONF
    from trident_assets.spark.kernel_plan import ARROW_KERNEL_CONF

    spark = ta.build_spark_session()
    spark.conf.set(ARROW_KERNEL_CONF, "false")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for build in (_word_count, _json_window):
            for size in sizes:
                runners: dict[str, tuple[Any, Any, Any]] = {}
                for mode in MODES:
                    home = Path(tmp) / f"{build.__name__}-{size}-{mode}"
                    log = ta.PartitionedLog(home / "log")
                    log.create_topic("in", 2)
                    store = ta.DuckDBStore(home / "state.duckdb")
                    topo, kind = build(ta)
                    runners[mode] = (log, store, ta.TopologyRunner(topo, spark, store, log))
                walls: dict[str, list[float]] = {mode: [] for mode in MODES}
                for txid in range(1, warm + batches + 1):
                    records = _records(kind, txid, size, random.Random(txid))
                    for mode, value in MODES.items():
                        log, _, runner = runners[mode]
                        producer = log.producer("in", partitioner="round_robin")
                        for record in records:
                            producer.send(record)
                        producer.flush()
                        spark.conf.set(CODEGEN_MIN_RECORDS_CONF, value)
                        start = time.perf_counter()
                        runner.run_batch(txid)
                        if txid > warm:
                            walls[mode].append(time.perf_counter() - start)
                states = {mode: _state(r[1], r[2]) for mode, r in runners.items()}
                for _, store, _ in runners.values():
                    store.close()
                med = {mode: statistics.median(w) for mode, w in walls.items()}
                results.append(
                    {
                        "topology": kind,
                        "records_per_batch": size,
                        "median_batch_s": {m: round(v, 4) for m, v in med.items()},
                        "interpreted_vs_generated": round(med["interpreted"] / med["generated"], 3),
                        "same_state": states["generated"] == states["interpreted"],
                    }
                )
    spark.conf.unset(CODEGEN_MIN_RECORDS_CONF)
    return {"batches": batches, "warm": warm, "results": results}


def _state(store: Any, runner: Any) -> list[str]:
    """What the batches left: the word counts, or the windows (final and open)."""
    name, state = next(iter(runner.topology.states.items()))
    if name == "views":
        rows = runner.window_finals(name) + runner.window_open(name)
    else:
        rows = store.scan(state.table).to_pylist()
    return sorted(map(str, rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,2000,20000,100000")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--warm", type=int, default=2)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(json.dumps(measure(sizes, args.batches, args.warm)))


if __name__ == "__main__":
    main()

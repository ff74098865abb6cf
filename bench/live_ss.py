"""The Spark Structured Streaming peer of the live-latency benchmark (``bench.live_latency``).

Run as ``python -m bench.live_ss IN_DIR OUT_DIR`` (its own process and ``local[2]`` JVM). A
stateful word count over a file source (one new file per record in ``IN_DIR``), default
trigger (the next micro-batch starts as soon as the previous one ended and a new file is
there), update mode:

    spark.readStream.schema("value string").text(IN_DIR)
      .select(explode(split(value, " ")) AS word).groupBy("word").count()
      .writeStream.outputMode("update").foreachBatch(write)

``write`` appends the batch's updated counts to Parquet (``OUT_DIR/sink``), then appends one
JSON line per record token (a word ``rec<N>``) in the batch to ``OUT_DIR/stamps.jsonl``:
``{"token": ..., "at": <epoch s when the batch's output was written>}``. It prints ``ready``
once the query runs, and stops on SIGTERM.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

TOKEN_PREFIX = "rec"


def main(in_dir: Path, out_dir: Path) -> None:
    """Run the query until SIGTERM."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    out_dir.mkdir(parents=True, exist_ok=True)
    in_dir.mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.appName("live_ss_wordcount")
    for key, value in {
        "spark.master": "local[2]",
        "spark.driver.memory": "1g",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.local.dir": str(out_dir / "spark-local"),
        "spark.pyspark.python": sys.executable,
    }.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    stamps = (out_dir / "stamps.jsonl").open("a", encoding="utf-8")
    sink = str(out_dir / "sink")

    def write(batch: Any, batch_id: int) -> None:
        batch.write.mode("append").parquet(sink)
        tokens = [
            r["word"]
            for r in batch.filter(F.col("word").startswith(TOKEN_PREFIX)).select("word").collect()
        ]
        now = time.time()
        for token in tokens:
            stamps.write(json.dumps({"token": token, "at": now, "batch": batch_id}) + "\n")
        stamps.flush()

    counts = (
        spark.readStream.schema("value string")
        .text(str(in_dir))
        .select(F.explode(F.split("value", " ")).alias("word"))
        .groupBy("word")
        .count()
    )
    query = (
        counts.writeStream.outputMode("update")
        .option("checkpointLocation", str(out_dir / "checkpoint"))
        .foreachBatch(write)
        .start()
    )
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    print("ready", flush=True)
    while not stopping and query.isActive:
        time.sleep(0.2)
    query.stop()
    spark.stop()
    stamps.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

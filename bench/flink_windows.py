"""The PyFlink peer of :mod:`bench.event_windows`: a tumbling event-time window with a watermark.

Runs in the PyFlink venv (:mod:`bench.peer_env`) as a child process
(:func:`run_in_subprocess`), on the same records as Spark SS (the corpus Parquet files
``(value, ts)``), streaming mode, parallelism 2, checkpointing ``EXACTLY_ONCE`` with the
``hashmap`` or ``rocksdb`` state backend:

    CREATE TABLE lines (line STRING, ts_ms BIGINT, ts AS TO_TIMESTAMP_LTZ(ts_ms, 3),
      WATERMARK FOR ts AS ts - INTERVAL '<lateness>' SECOND) WITH ('connector'='filesystem', ...)
    INSERT INTO windows (filesystem, CSV: committed on checkpoints)
    SELECT word, window_start, window_end, COUNT(*) FROM TABLE(TUMBLE(TABLE words,
      DESCRIPTOR(ts), INTERVAL '1' MINUTE)) GROUP BY word, window_start, window_end

The files are rewritten, outside the clock, as ONE CSV file of the batches in order (the
wheel ships no Parquet format): one split, read in order by one source subtask, and the
watermark advances with every record (``pipeline.auto-watermark-interval`` 0), so which
records are late does not depend on timing: a record is dropped when its window's end is at
or before the largest event time read before it minus the lateness. For this corpus that
drops exactly the truth's late records (its late ones are two batches + the lateness + a
minute behind; the out-of-order ones less than the lateness). At the end of the input the
watermark jumps to the maximum, so Flink also emits the windows still open in the other
systems: its output is compared with all of the truth's windows (final and open).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.flink_wordcount import BACKENDS, checkpoint_stats


def write_csv(files: list[Path], out: Path) -> int:
    """The files' ``(value, ts)`` rows, in file order, as one CSV ``value,ts_ms``; rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        for f in files:
            t = pq.read_table(f, columns=["value", "ts"])
            ts = t.column("ts").cast(pa.int64()).to_pylist()
            writer.writerows(zip(t.column("value").to_pylist(), ts, strict=True))
            n += t.num_rows
    return n


def _epoch_us(text: str) -> int:
    value = datetime.fromisoformat(text).replace(tzinfo=UTC)
    return int(value.timestamp()) * 1_000_000 + value.microsecond


def run_job(args: argparse.Namespace) -> dict[str, Any]:
    """Run the windowed count in this process (the PyFlink venv)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    files = sorted(Path(args.files).glob("*.parquet"))
    t0 = time.perf_counter()
    rows = write_csv(files, work / "input" / "records.csv")
    prepare_s = time.perf_counter() - t0
    os.environ["FLINK_LOG_DIR"] = str(work / "log")

    from pyflink.table import EnvironmentSettings, TableEnvironment

    t0 = time.perf_counter()
    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = {
        "parallelism.default": str(args.parallelism),
        "pipeline.auto-watermark-interval": "0",
        "execution.checkpointing.interval": f"{args.checkpoint_interval_ms}ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": (work / "checkpoints").as_uri(),
        "state.backend.type": args.backend,
        "table.local-time-zone": "UTC",
        "io.tmp.dirs": str(work / "tmp"),
    }
    for key, value in conf.items():
        t_env.get_config().set(key, value)
    startup_s = time.perf_counter() - t0
    t_env.execute_sql(
        "CREATE TABLE lines (line STRING, ts_ms BIGINT, ts AS TO_TIMESTAMP_LTZ(ts_ms, 3), "
        f"WATERMARK FOR ts AS ts - INTERVAL '{int(args.lateness_s)}' SECOND) WITH ("
        f"'connector' = 'filesystem', 'path' = '{(work / 'input').as_uri()}', 'format' = 'csv')"
    )
    sink = work / "windows"
    t_env.execute_sql(
        "CREATE TABLE windows (word STRING, window_start STRING, window_end STRING, cnt BIGINT) "
        f"WITH ('connector' = 'filesystem', 'path' = '{sink.as_uri()}', 'format' = 'csv')"
    )
    t_env.execute_sql(
        "CREATE TEMPORARY VIEW words AS SELECT word, ts FROM lines "
        "CROSS JOIN UNNEST(SPLIT(line, ' ')) AS T(word)"
    )
    t0 = time.perf_counter()
    result = t_env.execute_sql(
        "INSERT INTO windows SELECT word, CAST(window_start AS STRING), "
        "CAST(window_end AS STRING), COUNT(*) FROM TABLE(TUMBLE(TABLE words, DESCRIPTOR(ts), "
        "INTERVAL '1' MINUTE)) GROUP BY word, window_start, window_end"
    )
    job = result.get_job_client().get_job_execution_result().result()
    execute_s = time.perf_counter() - t0
    job_id = str(job.get_job_id())
    out: dict[str, list[Any]] = {c: [] for c in ("word", "window_start_us", "window_end_us")}
    out["count"] = []
    for part in sink.rglob("part-*"):  # committed files only
        with part.open(newline="") as fh:
            for word, start, end, n in csv.reader(fh):
                out["word"].append(word)
                out["window_start_us"].append(_epoch_us(start))
                out["window_end_us"].append(_epoch_us(end))
                out["count"].append(int(n))
    table = pa.table({k: pa.array(v, pa.string() if k == "word" else pa.int64())
                      for k, v in out.items()})  # fmt: skip
    (work / "result-windows").mkdir(exist_ok=True)
    pq.write_table(table, work / "result-windows" / "windows.parquet")
    return {
        "backend": args.backend,
        "parallelism": args.parallelism,
        "checkpoint_interval_ms": args.checkpoint_interval_ms,
        "flink_conf": conf,
        "files": len(files),
        "sentences": rows,
        "prepare_s": round(prepare_s, 3),
        "flink_startup_s": round(startup_s, 3),
        "execute_s": round(execute_s, 4),
        "wall_s": round(job.get_net_runtime() / 1000, 4),
        "job_id": job_id,
        "checkpoints": checkpoint_stats(work / "log", job_id),
        "windows": table.num_rows,
    }


def run_in_subprocess(
    python: Path,
    files: Path,
    work: Path,
    *,
    lateness_s: int,
    backend: str = "hashmap",
    parallelism: int = 2,
    checkpoint_interval_ms: int = 1000,
    timeout_s: float = 3600,
) -> dict[str, Any]:
    """Run the windowed count with the PyFlink venv's ``python``; its JSON result.

    The emitted windows are in ``work/result-windows/windows.parquet``.
    """
    from bench.machine import run_json_child

    work.mkdir(parents=True, exist_ok=True)
    out = work / "result.json"
    cmd = [
        str(python), "-m", "bench.flink_windows",
        "--files", str(files), "--work", str(work), "--backend", backend,
        "--lateness-s", str(lateness_s), "--parallelism", str(parallelism),
        "--checkpoint-interval-ms", str(checkpoint_interval_ms), "--out", str(out),
    ]  # fmt: skip
    return run_json_child(cmd, out, f"bench.flink_windows {backend}", timeout_s)


def main(argv: list[str]) -> None:
    """One run in this process (the PyFlink venv), JSON to ``--out``."""
    p = argparse.ArgumentParser(prog="bench.flink_windows")
    p.add_argument("--files", required=True, help="directory of one Parquet file per batch")
    p.add_argument("--work", required=True)
    p.add_argument("--backend", choices=BACKENDS, default="hashmap")
    p.add_argument("--lateness-s", type=int, required=True)
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--checkpoint-interval-ms", type=int, default=1000)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    result = run_job(args)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])

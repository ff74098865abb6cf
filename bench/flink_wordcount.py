"""The PyFlink peer: Flink's stateful word count on the same corpus files, exactly-once.

Each configuration runs in its own process, in the PyFlink venv (:mod:`bench.peer_env`:
``apache-flink`` pins a ``pyarrow``/``pandas`` this package cannot share), through
:func:`run_in_subprocess`. Flink's runtime ships inside the wheel (its ``MiniCluster``); the
job, in streaming mode at parallelism 2:

    CREATE TABLE lines (line STRING) WITH ('connector'='filesystem', 'format'='raw', ...)
    SELECT word, COUNT(*) FROM lines CROSS JOIN UNNEST(SPLIT(line, ' ')) AS T(word)
      GROUP BY word
    -> toChangelogStream -> FileSink (row format: the committed +I/+U rows)

Split and count run in the JVM (Flink SQL, no Python UDF), as Spark SS's do. Exactly-once:
checkpointing on (``EXACTLY_ONCE``, every ``--checkpoint-interval-ms``) with the ``hashmap`` or
``rocksdb`` state backend and checkpoints on the local file system; the bounded file source
keeps its split offsets in the checkpoints and the ``FileSink`` commits its files only when a
checkpoint completes (a final checkpoint after the input ends). Mini-batch aggregation
(``table.exec.mini-batch.*``, ``--mini-batch-ms``) emits one update per word per mini-batch,
like Spark SS's update mode per micro-batch.

The wheel has no Parquet format jar (and Maven is out of reach), so the child first rewrites
each corpus Parquet file as a text file of the same sentences, outside the clock
(``prepare_s``). The clock: ``JobExecutionResult.getNetRuntime`` (the job's run, cluster
start-up excluded; ``execute_s`` is the whole ``execute()`` call). Per-checkpoint latency:
``checkpointDuration`` of every completed checkpoint, from the JobManager's log. Final
counts: the largest committed count of each word (counts only grow).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

BACKENDS = ("hashmap", "rocksdb")
COMPLETED = re.compile(
    r"Completed checkpoint (\d+) for job ([0-9a-f]+) \((\d+) bytes, "
    r"checkpointDuration=(\d+) ms, finalizationTime=(\d+) ms\)"
)
FAILED = re.compile(r"Failed to trigger or complete checkpoint (\d+) for job ([0-9a-f]+)")


def write_text(files: list[Path], out_dir: Path) -> int:
    """Rewrite each Parquet file's ``value`` column as one text file; the sentences written."""
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in files:
        values = pq.read_table(f, columns=["value"]).column("value").to_pylist()
        (out_dir / f"{f.stem}.txt").write_text("\n".join(values) + "\n")
        n += len(values)
    return n


def flink_conf(args: argparse.Namespace, work: Path) -> dict[str, str]:
    """The Flink configuration of one run."""
    conf = {
        "execution.runtime-mode": "STREAMING",
        "parallelism.default": str(args.parallelism),
        "execution.checkpointing.interval": f"{args.checkpoint_interval_ms}ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": (work / "checkpoints").as_uri(),
        "state.backend.type": args.backend,
        "io.tmp.dirs": str(work / "tmp"),
    }
    if args.mini_batch_ms > 0:
        conf |= {
            "table.exec.mini-batch.enabled": "true",
            "table.exec.mini-batch.allow-latency": f"{args.mini_batch_ms}ms",
            "table.exec.mini-batch.size": str(args.mini_batch_size),
        }
    return conf


def checkpoint_stats(log_dir: Path, job_id: str) -> dict[str, Any]:
    """Completed checkpoints of ``job_id`` (duration, bytes) and failed ones, from the log."""
    done: dict[int, tuple[int, int]] = {}
    failed: set[int] = set()
    for path in sorted(log_dir.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if m := COMPLETED.search(line):
                if m.group(2) == job_id:
                    done[int(m.group(1))] = (int(m.group(4)), int(m.group(3)))
            elif (m := FAILED.search(line)) and m.group(2) == job_id:
                failed.add(int(m.group(1)))
    durations = [done[k][0] / 1000 for k in sorted(done)]
    return {
        "completed": len(done),
        "failed_or_declined": len(failed - set(done)),
        "duration_s": durations,
        "bytes": [done[k][1] for k in sorted(done)],
    }


def read_changelog(sink: Path) -> dict[str, int]:
    """The largest committed count of each word in the sink's ``+I[w, n]``/``+U[w, n]`` rows."""
    counts: dict[str, int] = {}
    for part in sink.rglob("part-*"):  # committed files only (in-progress ones start with '.')
        for line in part.read_text().splitlines():
            if line.startswith(("+I[", "+U[")):
                word, n = line[3:-1].rsplit(", ", 1)
                value = int(n)
                if value > counts.get(word, 0):
                    counts[word] = value
    return counts


def run_job(args: argparse.Namespace) -> dict[str, Any]:
    """Run the word count over ``args.files`` in this process (the PyFlink venv)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    files = sorted(Path(args.files).glob("*.parquet"))
    t0 = time.perf_counter()
    sentences = write_text(files, work / "text")
    prepare_s = time.perf_counter() - t0
    os.environ["FLINK_LOG_DIR"] = str(work / "log")  # read when the gateway JVM starts

    from pyflink.common import Configuration
    from pyflink.common.serialization import Encoder
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.connectors.file_system import FileSink
    from pyflink.table import EnvironmentSettings, StreamTableEnvironment

    t0 = time.perf_counter()
    conf = Configuration()
    for key, value in flink_conf(args, work).items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    t_env = StreamTableEnvironment.create(env, EnvironmentSettings.in_streaming_mode())
    startup_s = time.perf_counter() - t0
    t_env.execute_sql(
        "CREATE TABLE lines (line STRING) WITH ('connector' = 'filesystem', "
        f"'path' = '{(work / 'text').as_uri()}', 'format' = 'raw')"
    )
    counts = t_env.sql_query(
        "SELECT word, COUNT(*) AS cnt FROM lines CROSS JOIN UNNEST(SPLIT(line, ' ')) AS T(word) "
        "GROUP BY word"
    )
    sink = work / "sink"
    t_env.to_changelog_stream(counts).sink_to(
        FileSink.for_row_format(sink.as_uri(), Encoder.simple_string_encoder()).build()
    )
    t0 = time.perf_counter()
    result = env.execute(f"flink_wordcount_{args.backend}")
    execute_s = time.perf_counter() - t0
    job_id = str(result.get_job_id())
    final = read_changelog(sink)
    if args.counts:
        table = pa.table({"word": list(final), "count": pa.array(list(final.values()), pa.int64())})
        pq.write_table(table, args.counts)
    return {
        "backend": args.backend,
        "parallelism": args.parallelism,
        "checkpoint_interval_ms": args.checkpoint_interval_ms,
        "mini_batch_ms": args.mini_batch_ms,
        "flink_conf": flink_conf(args, work),
        "files": len(files),
        "sentences": sentences,
        "prepare_s": round(prepare_s, 3),
        "flink_startup_s": round(startup_s, 3),
        "execute_s": round(execute_s, 4),
        "wall_s": round(result.get_net_runtime() / 1000, 4),
        "job_id": job_id,
        "checkpoints": checkpoint_stats(work / "log", job_id),
        "state_keys": len(final),
        "versions": {p: metadata.version(p) for p in ("apache-flink", "pyarrow")},
    }


def summarize(result: dict[str, Any], words_per_sentence: int) -> dict[str, Any]:
    """Add words/s and the checkpoint-duration median and maximum."""
    out = dict(result)
    words = result["sentences"] * words_per_sentence
    durations = result["checkpoints"]["duration_s"]
    out["words"] = words
    out["words_per_s"] = round(words / result["wall_s"])
    out["checkpoint_median_s"] = round(statistics.median(durations), 4) if durations else None
    out["checkpoint_max_s"] = round(max(durations), 4) if durations else None
    return out


def run_in_subprocess(
    python: Path,
    files: Path,
    work: Path,
    *,
    backend: str,
    counts: Path | None = None,
    parallelism: int = 2,
    checkpoint_interval_ms: int = 1000,
    mini_batch_ms: int = 1000,
    timeout_s: float = 3600,
) -> dict[str, Any]:
    """Run one configuration with the PyFlink venv's ``python``; its JSON result."""
    from bench.machine import run_json_child

    work.mkdir(parents=True, exist_ok=True)
    out = work / "result.json"
    cmd = [
        str(python), "-m", "bench.flink_wordcount", "child",
        "--files", str(files), "--work", str(work), "--backend", backend,
        "--parallelism", str(parallelism),
        "--checkpoint-interval-ms", str(checkpoint_interval_ms),
        "--mini-batch-ms", str(mini_batch_ms), "--out", str(out),
    ]  # fmt: skip
    if counts is not None:
        cmd += ["--counts", str(counts)]
    return run_json_child(cmd, out, f"bench.flink_wordcount {backend}", timeout_s)


def child_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.flink_wordcount child")
    p.add_argument("--files", required=True, help="directory of one Parquet file per batch")
    p.add_argument("--work", required=True)
    p.add_argument("--backend", choices=BACKENDS, default="hashmap")
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--checkpoint-interval-ms", type=int, default=1000)
    p.add_argument("--mini-batch-ms", type=int, default=1000, help="0: mini-batch off")
    p.add_argument("--mini-batch-size", type=int, default=100_000)
    p.add_argument("--counts", default=None, help="write the final counts here (Parquet)")
    p.add_argument("--out", required=True, help="result JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    """Standalone: write a corpus, run every backend, check the counts exactly."""
    import shutil
    import tempfile

    import pyarrow.parquet as pq

    from bench.corpus import CorpusSpec, write_corpus
    from bench.peer_check import check_counts
    from bench.peer_env import peer_python, skip_message

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--sentences", type=int, default=20_000)
    p.add_argument("--vocab", type=int, default=100_000)
    p.add_argument("--backends", default="hashmap,rocksdb")
    p.add_argument("--checkpoint-interval-ms", type=int, default=1000)
    p.add_argument("--mini-batch-ms", type=int, default=1000)
    args = p.parse_args(argv)
    python = peer_python("flink")
    if python is None:
        print(skip_message("flink"))
        return 0
    spec = CorpusSpec(batches=args.batches, sentences=args.sentences, vocab=args.vocab)
    work = Path(tempfile.mkdtemp(prefix="trident-flink-"))
    try:
        corpus = write_corpus(spec, work / "corpus", log_files=False)
        for backend in args.backends.split(","):
            counts = work / f"{backend}-counts.parquet"
            raw = run_in_subprocess(
                python, corpus.files_dir, work / backend, backend=backend, counts=counts,
                checkpoint_interval_ms=args.checkpoint_interval_ms,
                mini_batch_ms=args.mini_batch_ms,
            )  # fmt: skip
            res = summarize(raw, spec.words_per_sentence)
            check = check_counts(corpus.truth, pq.read_table(counts), f"PyFlink {backend}")
            print(
                f"PyFlink {backend}: {res['words_per_s']:,} words/s over {res['words']:,} words "
                f"(net runtime {res['wall_s']} s, execute() {res['execute_s']} s); "
                f"{res['checkpoints']['completed']} checkpoints, median "
                f"{res['checkpoint_median_s']} s, max {res['checkpoint_max_s']} s; "
                f"counts exact ({check['keys']:,} words)",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def child_main(argv: list[str]) -> None:
    """``child ...``: one run in this process (the PyFlink venv), JSON to ``--out``."""
    args = child_parser().parse_args(argv)
    result = run_job(args)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2:])
    else:
        sys.exit(main())

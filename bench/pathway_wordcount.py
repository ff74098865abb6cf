"""The Pathway peer: Pathway's word count on the same corpus files, with persistence on.

Runs in its own process, in the Pathway venv (:mod:`bench.peer_env`: ``pathway`` pins a
``pyarrow`` this package cannot share), through :func:`run_in_subprocess`:

    lines = pw.io.python.read(ParquetLines(files), schema=Line, name="corpus")
    words = lines.select(word=split(pw.this.data)).flatten(pw.this.word)
    counts = words.groupby(pw.this.word).reduce(pw.this.word, count=pw.reducers.count())
    pw.io.csv.write(counts, ...)
    pw.run(persistence_config=pw.persistence.Config(pw.persistence.Backend.filesystem(dir)))

The connector reads the same corpus Parquet files as Spark SS and DuckDB and commits once per
file (one Pathway batch per corpus batch, as Spark SS's one file per trigger); ``--threads``
workers (``PATHWAY_THREADS``, default 2). Persistence: Pathway writes the input it reads (its
snapshot) to a filesystem backend under the work directory, what it replays on a restart; the
benchmark measures the cost of persisting and does not restart. The clock: ``pw.run`` (graph
build and Python start-up excluded). Final counts: the CSV of updates consolidated (the ``(word,
count)`` rows whose ``diff`` adds up to more than 0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any


def consolidate(updates: Any) -> Any:
    """The table at the end of Pathway's update rows ``(word, count, time, diff)``.

    The ``(word, count)`` rows whose additions outnumber their removals.

    Raises:
        RuntimeError: the updates leave two counts for one word.
    """
    import pyarrow.compute as pc

    net = updates.group_by(["word", "count"]).aggregate([("diff", "sum")])
    final = net.filter(pc.greater(net.column("diff_sum"), 0)).select(["word", "count"])
    if final.num_rows != pc.count_distinct(final.column("word")).as_py():
        raise RuntimeError("pathway: the output's updates leave two counts for one word")
    return final


def run_job(args: argparse.Namespace) -> dict[str, Any]:
    """Run the word count over ``args.files`` in this process (the Pathway venv)."""
    os.environ["PATHWAY_THREADS"] = str(args.threads)
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    import pathway as pw

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    files = sorted(Path(args.files).glob("*.parquet"))
    read: dict[str, int] = {"sentences": 0}

    class Line(pw.Schema):
        data: str

    class ParquetLines(pw.io.python.ConnectorSubject):
        """Every sentence of every file, one commit per file."""

        def run(self) -> None:
            for f in files:
                for value in pq.read_table(f, columns=["value"]).column("value").to_pylist():
                    self.next(data=value)
                    read["sentences"] += 1
                self.commit()

    @pw.udf(deterministic=True)
    def split(line: str) -> list[str]:
        return line.split(" ")

    lines = pw.io.python.read(
        ParquetLines(), schema=Line, autocommit_duration_ms=None, name="corpus"
    )
    words = lines.select(word=split(pw.this.data)).flatten(pw.this.word)
    counts = words.groupby(pw.this.word).reduce(pw.this.word, count=pw.reducers.count())
    out_csv = work / "counts.csv"
    pw.io.csv.write(counts, out_csv)
    persistence = pw.persistence.Config(pw.persistence.Backend.filesystem(work / "persistence"))
    startup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pw.run(persistence_config=persistence, monitoring_level=pw.MonitoringLevel.NONE)
    wall_s = time.perf_counter() - t0
    updates = pacsv.read_csv(out_csv, convert_options=pacsv.ConvertOptions(
        column_types={"word": pa.string(), "count": pa.int64(), "time": pa.int64(),
                      "diff": pa.int64()}))  # fmt: skip
    final = consolidate(updates)
    if args.counts:
        pq.write_table(final, args.counts)
    stored = sum(p.stat().st_size for p in (work / "persistence").rglob("*") if p.is_file())
    return {
        "threads": args.threads,
        "files": len(files),
        "sentences": read["sentences"],
        "pathway_startup_s": round(startup_s, 3),
        "wall_s": round(wall_s, 4),
        "update_rows": updates.num_rows,
        "state_keys": final.num_rows,
        "versions": {p: metadata.version(p) for p in ("pathway", "pyarrow")},
        "persistence_bytes": stored,
    }


def summarize(result: dict[str, Any], words_per_sentence: int) -> dict[str, Any]:
    """Add words/s."""
    out = dict(result)
    out["words"] = result["sentences"] * words_per_sentence
    out["words_per_s"] = round(out["words"] / result["wall_s"])
    return out


def run_in_subprocess(
    python: Path,
    files: Path,
    work: Path,
    *,
    counts: Path | None = None,
    threads: int = 2,
    timeout_s: float = 3600,
) -> dict[str, Any]:
    """Run the word count with the Pathway venv's ``python``; its JSON result."""
    from bench.machine import run_json_child

    work.mkdir(parents=True, exist_ok=True)
    out = work / "result.json"
    cmd = [
        str(python), "-m", "bench.pathway_wordcount", "child",
        "--files", str(files), "--work", str(work), "--threads", str(threads),
        "--out", str(out),
    ]  # fmt: skip
    if counts is not None:
        cmd += ["--counts", str(counts)]
    return run_json_child(cmd, out, "bench.pathway_wordcount", timeout_s)


def child_main(argv: list[str]) -> None:
    """``child ...``: one run in this process (the Pathway venv), JSON to ``--out``."""
    p = argparse.ArgumentParser(prog="bench.pathway_wordcount child")
    p.add_argument("--files", required=True, help="directory of one Parquet file per batch")
    p.add_argument("--work", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--counts", default=None, help="write the final counts here (Parquet)")
    p.add_argument("--out", required=True, help="result JSON")
    args = p.parse_args(argv)
    result = run_job(args)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Standalone: write a corpus, run the word count, check the counts exactly."""
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
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    python = peer_python("pathway")
    if python is None:
        print(skip_message("pathway"))
        return 0
    spec = CorpusSpec(batches=args.batches, sentences=args.sentences, vocab=args.vocab)
    work = Path(tempfile.mkdtemp(prefix="trident-pathway-"))
    try:
        corpus = write_corpus(spec, work / "corpus", log_files=False)
        counts = work / "counts.parquet"
        raw = run_in_subprocess(
            python, corpus.files_dir, work / "run", counts=counts, threads=args.threads
        )
        res = summarize(raw, spec.words_per_sentence)
        check = check_counts(corpus.truth, pq.read_table(counts), "Pathway")
        print(
            f"Pathway: {res['words_per_s']:,} words/s over {res['words']:,} words (pw.run "
            f"{res['wall_s']} s); counts exact ({check['keys']:,} words)",
            flush=True,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2:])
    else:
        sys.exit(main())

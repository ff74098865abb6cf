"""Profile our chunk's Spark job against the plain Spark batch job, in ONE Spark session.

Run: ``python -m bench.profile_job --corpus DIR`` (a corpus written by :mod:`bench.corpus`,
e.g. by ``bench.run_all --keep``). For each chunk of ``--chunk`` corpus batches it times,
interleaved and warm (``--rounds`` rounds; medians printed):

* ``plain``: :func:`bench.spark_batch.count_job` (value only, split, count per word);
* ``plain_tagged``: the same grouped by ``(txid, word)`` through our tagged read;
* ``ours``: our word count's Spark work for the chunk (``BatchRun.plan()`` then its
  call: read, decode with dead-letter observation, split, partials per ``(word, txid)``,
  ``toArrow``, split by txid), planning time reported apart;

and prints each one's physical plan (``--explain``). Nothing is committed: a throwaway
DuckDB store plans the chunk.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.spark_batch import batch_files, count_job


def _ours(spark: Any, log: Any, store: Any, sentences: int, first_txid: int, chunk: int) -> Any:
    from trident_assets.examples.word_count import build_word_count
    from trident_assets.spark.batch_run import BatchRun
    from trident_assets.spark.executor import TopologyRunner

    topo = build_word_count(max_batch_size=sentences)
    runner = TopologyRunner(topo, spark, store, log, compaction=None, max_spout_pending=chunk)
    t = time.perf_counter()
    batches, pipelined = runner.txid_loop().emit(first_txid, chunk)
    if not pipelined or len(batches) != chunk:
        raise RuntimeError(f"chunk not pipelined as {chunk} txids: {len(batches)}")
    emit_s = time.perf_counter() - t
    t = time.perf_counter()
    run = BatchRun(runner, batches, spill=True)
    work = run.plan()
    plan_s = time.perf_counter() - t
    return run, work, emit_s, plan_s


def main(argv: list[str] | None = None) -> None:
    from pyspark.sql import functions as F

    from bench.corpus import TOPIC
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.log_reader import read_ranges_tagged
    from trident_assets.spark.session import build_spark_session

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--sentences", type=int, required=True)
    p.add_argument("--partitions", type=int, default=2)
    p.add_argument("--chunk", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--explain", action="store_true")
    p.add_argument("--only", default="plain,plain_tagged,ours")
    args = p.parse_args(argv)
    spark = build_spark_session()
    log = PartitionedLog(args.corpus / "log")
    files = [
        f
        for b in range(args.chunk)
        for f in batch_files(args.corpus / "log", TOPIC, args.sentences, args.partitions, b)
    ]
    words = args.chunk * args.sentences * 8
    times: dict[str, list[float]] = {}

    def plain() -> None:
        count_job(spark, files).toArrow()

    def plain_tagged() -> None:
        sizes = [args.sentences // args.partitions] * args.partitions
        ranges = [
            (b + 1, TOPIC, p_, b * n, (b + 1) * n - 1)
            for b in range(args.chunk)
            for p_, n in enumerate(sizes)
        ]
        raw = read_ranges_tagged(spark, log, ranges, "txid")
        w = raw.select(F.explode(F.split(F.col("value").cast("string"), " ")).alias("word"), "txid")
        w.groupBy("word", "txid").count().toArrow()

    def ours() -> None:
        with tempfile.TemporaryDirectory() as tmp, DuckDBStore(Path(tmp) / "s.duckdb") as store:
            _run, work, emit_s, plan_s = _ours(spark, log, store, args.sentences, 1, args.chunk)
            t = time.perf_counter()
            work()
            times.setdefault("ours: emit", []).append(emit_s)
            times.setdefault("ours: plan", []).append(plan_s)
            times.setdefault("ours: spark work", []).append(time.perf_counter() - t)

    def partials(observe: bool) -> Any:
        from trident_assets.spark.aggregation import combine_partials
        from trident_assets.spark.schemes import Scheme
        from trident_assets.spark.txid_tags import TXID_COLUMN

        original = Scheme.decode

        def decode(self: Any, raw: Any, **kw: Any) -> Any:
            if not observe:
                kw["observation"] = None
            return original(self, raw, **kw)

        Scheme.decode = decode  # type: ignore[method-assign]
        try:
            with tempfile.TemporaryDirectory() as tmp, DuckDBStore(Path(tmp) / "s.duckdb") as st:
                run, _w, _e, _p = _ours(spark, log, st, args.sentences, 1, args.chunk)
                state = run.runner.topology.states["word_counts"]
                a = state.node.args
                df = combine_partials(
                    run.frame(state.node.parents[0]),
                    [*a["group"], TXID_COLUMN],
                    a["inputs"][0],
                    a["agg"],
                    a["output"],
                )
                t = time.perf_counter()
                df.toArrow()
                return time.perf_counter() - t
        finally:
            Scheme.decode = original  # type: ignore[method-assign]

    def tagged_by_word() -> None:
        sizes = [args.sentences // args.partitions] * args.partitions
        ranges = [
            (b + 1, TOPIC, p_, b * n, (b + 1) * n - 1)
            for b in range(args.chunk)
            for p_, n in enumerate(sizes)
        ]
        raw = read_ranges_tagged(spark, log, ranges, "txid")
        w = raw.select(F.explode(F.split(F.col("value").cast("string"), " ")).alias("word"), "txid")
        w.groupBy("word").count().toArrow()

    cases = {
        "plain": plain,
        "plain_tagged": plain_tagged,
        "tagged_by_word": tagged_by_word,
        "ours": ours,
        "partials_observed": lambda: partials(True),
        "partials_unobserved": lambda: partials(False),
    }
    chosen = args.only.split(",")
    if args.explain:
        count_job(spark, files).explain("formatted")
        with tempfile.TemporaryDirectory() as tmp, DuckDBStore(Path(tmp) / "s.duckdb") as store:
            run, _work, _e, _p = _ours(spark, log, store, args.sentences, 1, args.chunk)
            from trident_assets.spark.aggregation import combine_partials
            from trident_assets.spark.txid_tags import TXID_COLUMN

            state = run.runner.topology.states["word_counts"]
            a = state.node.args
            df = combine_partials(
                run.frame(state.node.parents[0]),
                [*a["group"], TXID_COLUMN],
                a["inputs"][0],
                a["agg"],
                a["output"],
            )
            df.explain("formatted")
    time_cases(cases, chosen, args.rounds, words, times)
    spark.stop()


def time_cases(
    cases: dict[str, Any],
    chosen: list[str],
    rounds: int,
    words: int,
    times: dict[str, list[float]],
) -> None:
    """Run each chosen case once to warm up (its time printed apart), then ``rounds`` times;
    print each name's median in ``times`` (the cases' own phases included) as words/s."""
    for name in chosen:
        t = time.perf_counter()
        cases[name]()
        print(f"{name:24s} first run {time.perf_counter() - t:7.3f} s  {dict(times)}")
    times.clear()
    for _ in range(rounds):
        for name in chosen:
            t = time.perf_counter()
            cases[name]()
            times.setdefault(name, []).append(time.perf_counter() - t)
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:24s} median {med:7.3f} s  {words / med / 1e6:6.2f}M words/s  {ts}")


if __name__ == "__main__":
    main()

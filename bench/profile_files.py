"""Profile the file spout's JSON-lines job against Spark's JSON source, in ONE Spark session.

Run: ``python -m bench.profile_files --corpus DIR --files 8`` (``DIR/json`` written by
:func:`bench.file_spout.write_folders`; the corpus is written there when missing). Times,
interleaved and warm (``--rounds``; medians printed), over the first ``--files`` files:

* ``spark_json``: Spark's JSON source with the schema ``text string`` (what Spark SS's file
  source reads), ``explode(split)``, ``groupBy(word).count()``, ``toArrow``;
* ``ours``: our word count's Spark work for the files as one chunk (``max_files`` files a
  txid; ``BatchRun.plan()`` then its call), the lenient ``JsonScheme`` (``--strict``: the
  strict one); nothing is committed.

``--explain`` prints both physical plans.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any


def _ours_run(
    spark: Any, folder: Path, work: Path, max_files: int, txids: int, strict: bool
) -> Any:
    from trident_assets import Count
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.batch_run import BatchRun
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.spark.schemes import JsonScheme
    from trident_assets.spouts.file_spout import FileSpout
    from trident_assets.stream.operations import Split
    from trident_assets.stream.topology import StateSpec, TridentTopology

    spout = FileSpout(
        str(folder), JsonScheme({"text": "string"}, strict=strict), max_files=max_files,
        stable_after=0,
    )  # fmt: skip
    topo = TridentTopology("files_wc")
    (
        topo.new_stream("files", spout)
        .each("text", Split(), "word")
        .group_by("word")
        .persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "count")
    )
    store = DuckDBStore(work / "s.duckdb")
    runner = TopologyRunner(
        topo, spark, store, PartitionedLog(work / "log"), max_spout_pending=txids
    )
    batches, _pipelined = runner.txid_loop().emit(1, txids)
    run = BatchRun(runner, batches, spill=True)
    return run, store


def _partials_frame(run: Any) -> Any:
    from trident_assets.spark.aggregation import combine_partials
    from trident_assets.spark.txid_tags import TXID_COLUMN

    state = run.runner.topology.states["counts"]
    a = state.node.args
    return combine_partials(
        run.frame(state.node.parents[0]),
        [*a["group"], TXID_COLUMN],
        a["inputs"][0],
        a["agg"],
        a["output"],
    )


def main(argv: list[str] | None = None) -> None:
    from pyspark.sql import functions as F

    from bench.corpus import CorpusSpec
    from bench.file_spout import write_folders
    from bench.profile_job import time_cases
    from trident_assets.spark.session import build_spark_session

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, required=True)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--sentences", type=int, default=250_000)
    p.add_argument("--max-files", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--strict", action="store_true")
    p.add_argument("--explain", action="store_true")
    p.add_argument("--only", default="spark_json,ours")
    args = p.parse_args(argv)
    if not (args.corpus / "json").exists():
        write_folders(CorpusSpec(batches=args.files, sentences=args.sentences), args.corpus)
    all_files = sorted((args.corpus / "json").iterdir())[: args.files]
    folder = args.corpus / f"json-{args.files}"
    if not folder.exists():
        folder.mkdir()
        for f in all_files:
            os.link(f, folder / f.name)
    files = [str(f) for f in all_files]
    txids = -(-len(files) // args.max_files)
    spark = build_spark_session({"spark.sql.shuffle.partitions": "2"})
    words = args.files * args.sentences * 8
    times: dict[str, list[float]] = {}

    def spark_json_frame() -> Any:
        lines = spark.read.schema("text string").json(files)
        return lines.select(F.explode(F.split("text", " ")).alias("word")).groupBy("word").count()

    def spark_json() -> None:
        spark_json_frame().toArrow()

    def ours() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            run, store = _ours_run(spark, folder, Path(tmp), args.max_files, txids, args.strict)
            work = run.plan()
            times.setdefault("ours: plan", []).append(time.perf_counter() - t)
            t = time.perf_counter()
            work()
            times.setdefault("ours: spark work", []).append(time.perf_counter() - t)
            store.close()

    cases = {"spark_json": spark_json, "ours": ours}
    chosen = args.only.split(",")
    if args.explain:
        spark_json_frame().explain("formatted")
        with tempfile.TemporaryDirectory() as tmp:
            run, store = _ours_run(spark, folder, Path(tmp), args.max_files, txids, args.strict)
            _partials_frame(run).explain("formatted")
            store.close()
    time_cases(cases, chosen, args.rounds, words, times)  # the first run in this JVM apart
    spark.stop()


if __name__ == "__main__":
    main()

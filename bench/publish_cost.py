"""The cost per txid of publishing a word-count state to a Delta and an Iceberg table.

Run: ``python -m bench.publish_cost [--words 4000000] [--keys 100000] [--txids 4]
[--work DIR] [--out report.json]``.

The log holds ``--txids`` batches of ``--words`` words each (sentences of 20 words drawn
uniformly from ``--keys`` distinct words, so every batch changes nearly every key of a state of
``--keys`` keys). The same topology runs three times over it, each from an empty store: without
a table, with its counts published to a Delta table (``mode="table"``: a MERGE of the txid's
changed keys per txid), and to an Iceberg table (an overwrite-by-filter per txid). For each txid
after the first (the first creates the table from the whole state) the report gives the
runner's own timings: ``publish_tables`` (the table commit) against the txid's time without it
(``total - publish_tables``), and the ratio; the target is at most 20% for each format. The
counts are checked exactly: the table's rows equal the state's, key by key, after the last txid.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "run"]

SENTENCE_WORDS = 20


def _fill_log(root: Path, words: int, keys: int, txids: int, seed: int = 7) -> Any:
    from trident_assets.log.store import PartitionedLog

    log = PartitionedLog(root / "log")
    log.create_topic("sentences", 1)
    producer = log.producer("sentences")
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(keys)]
    for _ in range(txids * words // SENTENCE_WORDS):
        producer.send(" ".join(rng.choices(vocabulary, k=SENTENCE_WORDS)).encode())
    producer.flush()
    return log


def _topology(fmt: str | None, root: Path, batch: int) -> Any:
    import trident_assets as ta

    topo = ta.TridentTopology("publish_cost")
    config = ta.SpoutConfig(kind=ta.SpoutKind.OPAQUE, max_batch_size=batch)
    counts = (
        topo.new_stream("sentences", ta.LogSpout("sentences", ta.StringScheme("sentence"), config))
        .each("sentence", ta.Split(), "word")
        .group_by("word")
        .persistent_aggregate(ta.StateSpec.opaque("counts"), "word", ta.Count(), "count")
    )
    if fmt == "delta":
        counts.publish(ta.DeltaTable(root / "lake" / "counts"))
    elif fmt == "iceberg":
        counts.publish(ta.IcebergTable("lake.counts"))
    return topo


def _run_one(spark: Any, log: Any, fmt: str | None, work: Path, args: Any) -> dict[str, Any]:
    import trident_assets as ta

    root = work / (fmt or "none")
    root.mkdir(parents=True)
    topo = _topology(fmt, root, args.words // SENTENCE_WORDS)
    store = ta.DuckDBStore(root / "state.duckdb")
    try:
        runner = ta.TopologyRunner(topo, spark, store, log)
        txids = []
        for txid in range(1, args.txids + 1):
            start = time.perf_counter()
            outcome = runner.run_batch(txid)
            wall = time.perf_counter() - start
            publish = outcome.timings_s.get("publish_tables", 0.0)
            txids.append({"txid": txid, "wall_s": wall, "publish_s": publish})
        state = {r["word"]: r["value"] for r in store.scan(f"{topo.name}__counts").to_pylist()}
        exact = True
        if fmt is not None:
            rows = runner.tables[0].writer
            versions = rows.versions()
            exact = sorted(versions) == list(range(1, args.txids + 1))
            table = _read(fmt, root, store)
            exact = exact and table == state
    finally:
        store.close()
    later = txids[1:] or txids
    publish = statistics.median(t["publish_s"] for t in later)
    wall = statistics.median(t["wall_s"] - t["publish_s"] for t in later)
    return {
        "format": fmt or "none",
        "txids": txids,
        "keys": len(state),
        "publish_s_median": publish,
        "txid_s_median_without_publish": wall,
        "added_ratio": publish / wall if wall else None,
        "exact": exact,
    }


def _read(fmt: str, root: Path, store: Any) -> dict[str, int]:
    if fmt == "delta":
        from deltalake import DeltaTable

        rows = DeltaTable(str(root / "lake" / "counts")).to_pyarrow_table()
    else:
        from trident_assets.lakehouse.iceberg import catalog_for

        rows = catalog_for(store, None, None).load_table("lake.counts").scan().to_arrow()
    return {r["word"]: r["count"] for r in rows.select(["word", "count"]).to_pylist()}


def run(args: Any) -> dict[str, Any]:
    """Fill the log, run the three variants, return the report."""
    from trident_assets.spark.session import build_spark_session

    work = Path(args.work or tempfile.mkdtemp(prefix="publish-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    log = _fill_log(work, args.words, args.keys, args.txids)
    spark = build_spark_session({"spark.local.dir": str(work / "spark")})
    runs = [_run_one(spark, log, fmt, work, args) for fmt in (None, "delta", "iceberg")]
    report = {
        "words_per_txid": args.words,
        "keys": args.keys,
        "txids": args.txids,
        "runs": runs,
        "target_ratio": 0.20,
        "ok": all(r["exact"] for r in runs),
    }
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one line per format."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=4_000_000, help="words per txid")
    parser.add_argument("--keys", type=int, default=100_000, help="distinct words (state keys)")
    parser.add_argument("--txids", type=int, default=4)
    parser.add_argument("--work", type=Path, help="working directory (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="also write the report (JSON) here")
    args = parser.parse_args(argv)
    report = run(args)
    for r in report["runs"]:
        ratio = "" if r["format"] == "none" else f", added {r['added_ratio']:.1%} (target <= 20%)"
        print(
            f"{r['format']:8s} {r['keys']} keys: txid {r['txid_s_median_without_publish']:.2f}s "
            f"without publishing, publish {r['publish_s_median']:.3f}s{ratio}; "
            f"exact: {r['exact']}"
        )
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

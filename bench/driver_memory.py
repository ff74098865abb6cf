"""Driver memory and commit time against the number of distinct keys in one batch.

Run: ``python -m bench.driver_memory [--keys 1000000,5000000,20000000]``.

For each size N, one txid of N/8 sentences of 8 words, every word distinct (``k0`` ... ``k<N-1>``),
goes through the word count (split -> group_by(word) -> opaque ``Count`` into DuckDB) in a fresh
child process: its own local Spark (``--driver-memory``, default 4g) and a new state file. So the
batch's partial aggregate has exactly N rows and the commit writes N new keys. Measured per size:

* the driver's Python process: its resident memory before the batch (the session started and
  ran a warm-up job) and its peak during the Spark job (which collects the partials there) and
  during the commit (DuckDB runs in this process: its merge's memory counts here too), sampled
  every 20 ms;
* the peak resident memory (``VmHWM``) of the Spark JVM before and after the batch (in local
  mode the JVM is driver and executors at once);
* the batch's stage timings (``spark``: the job, collecting the partials included; ``commit``:
  the state merge and the commit transaction; no read replica is published) and its wall time;
* exactness: the state then holds exactly N keys, each with count 1.

``--store redis-cluster`` keeps the counts in a Redis Cluster instead (3 masters, a replica
each, a new cluster per size, started and stopped by PID; the commit marker stays in the DuckDB
file): the executors read and write the keys, so the driver's memory should stay flat from 1M
to 20M keys. Exactness is then checked: the batch's ``StateOutcome.size`` (the state's key
counters) is N, and on the servers after the measurement ``DBSIZE`` over the masters less the
state's key counters (one per hash slot touched) equals N (the cluster holds only this state)
and a ``SCAN`` of every key finds N keys, each count at 1. The cluster holds N keys twice
(master and replica): about 2 x 150 bytes per key of memory, and as much AOF on disk.

Results go to ``bench/results/driver_memory.{json,md}`` and are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.long_run import descendants, status_kb
from bench.machine import describe, one_line

RESULTS = Path(__file__).resolve().parent / "results"
TOPIC = "sentences"
WORDS_PER_SENTENCE = 8
PARTITIONS = 2
KERNELS = {"on": "Arrow kernel", "off": "Spark's operators", "spill": "spilled by the executors"}
"""``--kernel`` values: how the batch's partial aggregate is computed and where it goes (on,
off: collected to the driver; spill: Spark's operators, written to Parquet by the executors,
merged from the files by DuckDB, ``trident.partials.spill``)."""
SEGMENT_SENTENCES = 250_000
"""Sentences per log segment (one ``append``): a batch reads several segments per partition."""


def sentences(first: int, count: int) -> pa.Array:
    """Sentences ``first .. first + count - 1``: sentence i holds words ``k<8i>`` .. ``k<8i+7>``."""
    ids = np.arange(first * WORDS_PER_SENTENCE, (first + count) * WORDS_PER_SENTENCE)
    ids = ids.reshape(count, WORDS_PER_SENTENCE)
    words = [
        pc.binary_join_element_wise("k", pc.cast(pa.array(ids[:, j]), pa.string()), "")
        for j in range(WORDS_PER_SENTENCE)
    ]
    return pc.binary_join_element_wise(*words, " ")


def write_log(root: Path, keys: int) -> int:
    """The batch's sentences in ``root`` (topic ``sentences``, 2 partitions); their number."""
    from trident_assets.log.store import PartitionedLog

    if keys % (WORDS_PER_SENTENCE * PARTITIONS):
        raise SystemExit(f"--keys: {keys} is not a multiple of {WORDS_PER_SENTENCE * PARTITIONS}")
    total = keys // WORDS_PER_SENTENCE
    log = PartitionedLog(root)
    log.create_topic(TOPIC, PARTITIONS)
    per_partition = total // PARTITIONS
    for p in range(PARTITIONS):
        start = p * per_partition
        for first in range(start, start + per_partition, SEGMENT_SENTENCES):
            count = min(SEGMENT_SENTENCES, start + per_partition - first)
            log.append(TOPIC, p, pa.table({"value": sentences(first, count)}))
    return total


def peaks_mib() -> dict[str, float]:
    """Peak RSS (MiB) so far of this process (``py``) and of its Java descendants (``jvm``)."""
    jvm = 0
    for pid in descendants(os.getpid()):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                jvm += status_kb(pid, "VmHWM")
        except OSError:
            continue
    return {"py": round(status_kb(os.getpid(), "VmHWM") / 1024, 1), "jvm": round(jvm / 1024, 1)}


class RssSampler:
    """This process's resident memory sampled every ``period_s`` in a thread, with times."""

    def __init__(self, period_s: float = 0.02) -> None:
        self.period_s = period_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), status_kb(os.getpid(), "VmRSS")))
            self._stop.wait(self.period_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peak_mib(self, start: float, end: float) -> float:
        """The highest sample taken between ``start`` and ``end`` (perf_counter seconds)."""
        inside = [kb for t, kb in self.samples if start <= t <= end]
        return round(max(inside, default=0) / 1024, 1)


def measure(
    spark: Any,
    root: Path,
    keys: int,
    duckdb_memory: str | None = None,
    dsn: str | None = None,
    kv_servers: list[str] | None = None,
) -> dict[str, Any]:
    """Run the one batch of ``keys`` distinct words (log already written in ``root / "log"``).

    ``duckdb_memory``: the state store's DuckDB ``memory_limit`` (None: DuckDB's default).
    ``dsn``: the state in this PostgreSQL database instead of a DuckDB file.
    ``kv_servers``: the counts in the (otherwise empty) Redis Cluster at these nodes.

    Returns the peaks before and after, the stage timings and the exactness check.
    """
    from bench.pipeline import build_topology
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.backends.postgres_store import PostgresStore
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.executor import TopologyRunner

    total = keys // WORDS_PER_SENTENCE
    spark.range(1000).selectExpr("sum(id)").collect()  # warm-up: the session's first job
    spec = None
    if kv_servers:
        from bench.kv_bench import state_spec

        spec = state_spec("redis-cluster", kv_servers)
    topo = build_topology("count_only", total, spec)
    config = {"memory_limit": duckdb_memory} if duckdb_memory else None
    opened = PostgresStore(dsn) if dsn else DuckDBStore(root / "state.duckdb", config=config)
    with opened as store:
        runner = TopologyRunner(topo, spark, store, PartitionedLog(root / "log"))
        before = peaks_mib()
        with RssSampler() as rss:
            start = time.perf_counter()
            outcome = runner.run_batch(1)
            end = time.perf_counter()
        after = peaks_mib()
        if kv_servers:
            exact = outcome.states["word_counts"].size == keys and _cluster_exact(
                topo.states["word_counts"], keys
            )
        else:
            state = store.scan(f"{topo.name}__word_counts")
            counts = state.column("value")
            exact = (
                state.num_rows == keys
                and pc.min(counts).as_py() == 1
                and pc.max(counts).as_py() == 1
                and pc.count_distinct(state.column("word")).as_py() == keys
            )
    exact = exact and outcome.applied and outcome.tuples_in == {TOPIC: total}
    t = outcome.timings_s
    job_end = start + t.get("emit", 0.0) + t.get("spark", 0.0)
    return {
        "keys": keys,
        "sentences": total,
        "exact": bool(exact),
        "wall_s": round(end - start, 3),
        "py_rss_peak_mib": {
            "job": rss.peak_mib(start, job_end),
            "commit": rss.peak_mib(job_end, end),
        },
        "timings_s": {k: round(v, 3) for k, v in outcome.timings_s.items()},
        "peak_before_mib": before,
        "peak_after_mib": after,
    }


def _cluster_exact(state: Any, keys: int) -> bool:
    """The Redis Cluster holds exactly ``keys`` keys of the state, every one counted 1 (streamed,
    not listed: ``DBSIZE`` per master less the state's key counters, then a ``SCAN`` checking
    each value)."""
    from trident_assets.backends.kv_backing import current_value, open_backing
    from trident_assets.backends.kv_target import target_of
    from trident_assets.backends.redis_cluster_map import SIZE_MARK

    target = target_of(state)
    backing = open_backing(target)
    try:
        client = backing.client
        stored = counters = 0
        for node in client.get_primaries():
            conn = client.get_redis_connection(node)
            stored += int(conn.dbsize())
            counters += sum(1 for _ in conn.scan_iter(match=f"{target.prefix}{SIZE_MARK}*"))
        seen = wrong = 0
        for _, value in backing.scan():
            seen += 1
            wrong += current_value(value) != 1
    finally:
        backing.close()
    return stored - counters == keys and seen == keys and wrong == 0


def _child(args: argparse.Namespace) -> None:
    from trident_assets.spark.kernel_plan import ARROW_KERNEL_CONF
    from trident_assets.spark.session import build_spark_session
    from trident_assets.spark.spilled import SPILL_CONF

    root = Path(args.root)
    spark = build_spark_session(
        {
            ARROW_KERNEL_CONF: "true" if args.kernel == "on" else "false",
            SPILL_CONF: "true" if args.kernel == "spill" else "false",
            "spark.driver.memory": args.driver_memory,
            "spark.driver.maxResultSize": "0",
            "spark.local.dir": str(root / "spark"),
            "spark.sql.warehouse.dir": str(root / "spark"),
        }
    )
    try:
        kv = args.kv_servers.split(",") if args.kv_servers else None
        result = measure(spark, root, args.keys, args.duckdb_memory, args.dsn, kv)
    finally:
        spark.stop()
    Path(args.json).write_text(json.dumps(result))


def run_size(
    work: Path,
    keys: int,
    kernel: str,
    driver_memory: str,
    duckdb_memory: str | None = None,
    dsn: str | None = None,
    kv_servers: list[str] | None = None,
) -> dict[str, Any]:
    """One size in a fresh child process (its own Spark and state file, or ``dsn``, or the
    Redis Cluster at ``kv_servers``)."""
    root = work / f"keys-{keys}-kernel-{kernel}"
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    write_log(root / "log", keys)
    log_s = time.perf_counter() - t0
    out = root / "result.json"
    argv = [sys.executable, "-m", "bench.driver_memory", "--child", "--keys", str(keys),
            "--root", str(root), "--json", str(out), "--driver-memory", driver_memory,
            "--kernel", kernel]  # fmt: skip
    if duckdb_memory:
        argv += ["--duckdb-memory", duckdb_memory]
    if dsn:
        argv += ["--dsn", dsn]
    if kv_servers:
        argv += ["--kv-servers", ",".join(kv_servers)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    result = json.loads(out.read_text()) if out.exists() else None
    shutil.rmtree(root)
    if done.returncode != 0 or result is None:
        error = (done.stdout + done.stderr)[-3000:]
        return {"keys": keys, "kernel": kernel, "error": error, "log_write_s": log_s}
    return {**result, "kernel": kernel, "log_write_s": round(log_s, 2)}


def render(report: dict[str, Any]) -> str:
    """The results as a Markdown table, with ratios to the smallest size."""
    rows = [r for r in report["sizes"] if "error" not in r]
    lines = [
        f"Machine: {report['machine_line'].rstrip('.')}. One txid per size, fresh process, "
        f"local Spark (driver memory {report['driver_memory']}), "
        + (
            "PostgreSQL state (a local server)."
            if report.get("store") == "postgres"
            else "Redis Cluster state (3 masters, a replica each; the marker in DuckDB)."
            if report.get("store") == "redis-cluster"
            else f"DuckDB state (memory_limit {report.get('duckdb_memory') or 'DuckDB default'})."
        ),
        "",
        "| distinct keys | partials by | py peak before | py peak in the job | "
        "py peak in the commit | JVM peak before / after | spark s | commit s | commit us/key "
        "| exact |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in rows:
        b, a, t = r["peak_before_mib"], r["peak_after_mib"], r["timings_s"]
        py = r["py_rss_peak_mib"]
        commit = t.get("commit", 0.0)
        lines.append(
            f"| {r['keys']:,} | {KERNELS[r['kernel']]} | {b['py']:,.0f} MiB | "
            f"{py['job']:,.0f} MiB | {py['commit']:,.0f} MiB | "
            f"{b['jvm']:,.0f} / {a['jvm']:,.0f} MiB | "
            f"{t.get('spark', 0.0):.2f} | {commit:.2f} | {commit / r['keys'] * 1e6:.2f} | "
            f"{'yes' if r['exact'] else 'NO'} |"
        )
    for r in report["sizes"]:
        if "error" in r:
            lines.append(
                f"\n{r['keys']:,} keys ({KERNELS[r['kernel']]}) failed:\n\n```\n{r['error']}\n```"
            )
    lines.append("")
    for kernel, label in KERNELS.items():
        same = [r for r in rows if r["kernel"] == kernel]
        if len(same) >= 2:
            lines.append(_growth(label, same[0], same[-1]))
    return "\n".join(lines) + "\n"


def _growth(label: str, small: dict[str, Any], big: dict[str, Any]) -> str:
    """One sentence: how memory and commit time grew from the smallest to the largest size."""
    base = small["peak_before_mib"]["py"]
    job = (big["py_rss_peak_mib"]["job"] - base) / max(small["py_rss_peak_mib"]["job"] - base, 1.0)
    merge = (big["py_rss_peak_mib"]["commit"] - base) / max(
        small["py_rss_peak_mib"]["commit"] - base, 1.0
    )
    per_key = (big["timings_s"]["commit"] / big["keys"]) / (
        small["timings_s"]["commit"] / small["keys"]
    )
    return (
        f"{label}, from {small['keys']:,} to {big['keys']:,} keys "
        f"({big['keys'] / small['keys']:.0f}x): the Python driver's memory above its peak before "
        f"the batch grew {job:.1f}x during the job and {merge:.1f}x during the commit (1.0 = "
        f"flat); commit time per key {per_key:.2f}x (1.0 = linear)."
    )


@contextlib.contextmanager
def _cluster(store: str, root: Path) -> Iterator[list[str] | None]:
    """``--store redis-cluster``: a new cluster for one size (its startup nodes), else None."""
    if store != "redis-cluster":
        yield None
        return
    from trident_assets_tests.kv_servers import RedisClusterServers

    # Redis's default node timeout: at 20M keys on 2 loaded cores a master can stall for over
    # the tests' 1 s (a replica then takes over and the batch's writes are refused)
    with RedisClusterServers(root, 3, replicas=1, node_timeout_ms=15_000) as cluster:
        yield cluster.servers


@contextlib.contextmanager
def _server(store: str) -> Iterator[Any]:
    """A local PostgreSQL server for the run (``--store postgres``), else None."""
    if store != "postgres":
        yield None
        return
    from trident_assets.backends.postgres_server import local_postgres

    with local_postgres(durable=True) as server:
        yield server


def _database(server: Any, name: str) -> str:
    """A new database ``name`` on ``server``; its DSN."""
    import adbc_driver_postgresql.dbapi as pgdbapi

    with pgdbapi.connect(server.dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    return server.dsn.rsplit("/", 1)[0] + f"/{name}"


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="1000000,5000000,20000000", help="sizes, comma-separated")
    parser.add_argument(
        "--kernel",
        default="on,off,spill",
        help="partials by the Arrow kernel (on), Spark's operators (off), or Spark's operators "
        "written to files the commit merges (spill)",
    )
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument(
        "--duckdb-memory", default=None, help="the state store's DuckDB memory_limit (e.g. 1GB)"
    )
    parser.add_argument(
        "--store",
        choices=("duckdb", "postgres", "redis-cluster"),
        default="duckdb",
        help="the state store: a DuckDB file, a database on a local PostgreSQL server "
        "started for the run, or a Redis Cluster started for each size",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    parser.add_argument("--dsn", help=argparse.SUPPRESS)
    parser.add_argument("--kv-servers", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.keys = int(args.keys)
        _child(args)
        return None
    sizes = [int(k) for k in args.keys.split(",")]
    kernels = args.kernel.split(",")
    if not set(kernels) <= set(KERNELS):
        parser.error(f"--kernel: {args.kernel!r}; give some of on, off, spill (comma-separated)")
    with tempfile.TemporaryDirectory(prefix="driver-memory-") as tmp, _server(args.store) as pg:
        results = []
        for keys in sizes:
            for kernel in kernels:
                dsn = _database(pg, f"keys_{keys}_{kernel}") if pg is not None else None
                where = Path(tmp) / f"redis-{keys}-{kernel}"
                with _cluster(args.store, where) as kv:
                    results.append(
                        run_size(
                            Path(tmp), keys, kernel, args.driver_memory, args.duckdb_memory, dsn, kv
                        )
                    )
                print(json.dumps(results[-1]), flush=True)
    machine = describe()
    report = {
        "machine": machine,
        "machine_line": one_line(machine),
        "driver_memory": args.driver_memory,
        "duckdb_memory": args.duckdb_memory,
        "store": args.store,
        "sizes": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "driver_memory.json").write_text(json.dumps(report, indent=1))
    text = render(report)
    (args.out / "driver_memory.md").write_text(text)
    print(text)
    return report


if __name__ == "__main__":
    main()

"""State-merge time against state size: one batch of partials into a DuckDB opaque state.

Run: ``python -m bench.state_merge [--sizes 100000,1000000,10000000] [--batch 100000]``.

For each state size N a fresh DuckDB file (in a temp dir) is prefilled with N keys by one
``generate_series`` statement; then a batch of ``--batch`` partial keys (half existing keys drawn
at random, half new keys) is applied with :func:`apply_partials` (opaque, sum), once per run with
a new txid. The median of ``--runs`` runs is reported (wall time of the whole call, including its
transaction commit and any automatic checkpoint DuckDB decides to run). A second column repeats
the measurement with ``checkpoint_threshold=1GB`` so that checkpoints are deferred (the cost then
moves to close or to a later checkpoint). The Python-combiner path (:func:`apply_partials_python`)
is timed on one batch size into a 1M-key state. After the timed batches, one explicit
``store.checkpoint()`` and one ``store.compact()`` (+ checkpoint) are timed separately: with the
append-only layout they are the maintenance the runner does between batches.
Results go to ``bench/results/state_merge.{json,md}``.

``--stores duckdb,postgres`` instead compares the two state stores in one run: for each state
size, a DuckDB file and a PostgreSQL database (a server started for the run on 127.0.0.1 with
Debian's binaries, fsync and synchronous_commit on, the settings of :data:`PG_SETTINGS`, or
PostgreSQL's defaults with ``--pg-defaults``) are prefilled alike and checkpointed, then the
same batches are applied to both with :func:`apply_partials` (opaque, sum); the medians and
their ratio go to ``bench/results/state_merge_stores.{json,md}``. ``--explain`` also prints,
per state size, where one more PostgreSQL batch spends its time: staging (bulk ingest +
ANALYZE), the merge statement (``EXPLAIN (ANALYZE, BUFFERS, WAL)``) and the commit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from trident_assets.backends.duckdb_merge import apply_partials, apply_partials_python
from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.map_layout import MapLayout, log_table
from trident_assets.core.aggregators import CombinerAggregator
from trident_assets.core.values import StateType
from trident_assets.names import SEQ_COLUMN

RESULTS = Path(__file__).resolve().parent / "results"

PG_SETTINGS = {
    "shared_buffers": "2GB",
    "max_wal_size": "8GB",
    "checkpoint_timeout": "15min",
    "wal_compression": "lz4",
}
"""The benchmark server's settings (a deployment would set them too; see README, *State in
PostgreSQL*): ``shared_buffers`` holds a 10M-key state's log and index (the default 128MB
made every batch read and evict them); a larger ``max_wal_size`` and ``checkpoint_timeout``
checkpoint by time rather than every few batches (each page's first write after a checkpoint
logs a full-page image), and ``wal_compression`` shrinks those images. fsync and
synchronous_commit stay on."""


class PySum(CombinerAggregator[int]):
    """A plain Python sum (no sql_combine), to time the Python-combiner path."""

    def init(self, values: tuple[Any, ...]) -> int:
        return values[0]

    def combine(self, a: int, b: int) -> int:
        return a + b

    def zero(self) -> int:
        return 0


def machine() -> dict[str, Any]:
    mem_kb = 0
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
        "pyarrow": pa.__version__,
    }


def prefill(store: DuckDBStore, table: str, n: int) -> float:
    start = time.perf_counter()
    layout = store.ensure_map(MapLayout(table, "opaque", ("k0",), ("BIGINT",), "BIGINT"))
    store.conn.execute(
        f"INSERT INTO {log_table(layout.table)} (k0, {SEQ_COLUMN}, txid, curr, prev) "
        "SELECT range, 0, 1, 1, NULL FROM range(?)",
        [n],
    ).fetchall()
    store.checkpoint()
    return time.perf_counter() - start


def make_batch(rng: random.Random, n: int, size: int, run: int) -> pa.Table:
    half = size // 2
    existing = rng.sample(range(n), min(half, n))
    fresh = range(n + run * size, n + run * size + (size - len(existing)))
    keys = [*existing, *fresh]
    rng.shuffle(keys)
    return pa.table({"k0": pa.array(keys, pa.int64()), "n": pa.array([1] * len(keys), pa.int64())})


def timed_batch(store: Any, batch: pa.Table, txid: int) -> float:
    """Apply ``batch`` to the opaque sum state ``state`` under ``txid``; return the seconds."""
    start = time.perf_counter()
    result = apply_partials(
        store,
        "state",
        batch,
        key_columns=["k0"],
        value_column="n",
        combine="sum",
        state_type=StateType.OPAQUE,
        txid=txid,
    )
    elapsed = time.perf_counter() - start
    assert result.keys_updated == batch.num_rows, result
    return elapsed


def time_fast(db: Path, n: int, size: int, runs: int, config: dict[str, str]) -> dict[str, Any]:
    """Time ``runs`` batches; then one explicit checkpoint and one compaction, separately."""
    rng = random.Random(n)
    with DuckDBStore(db, config=config) as store:
        fill_s = prefill(store, "state", n)
        times = []
        for run in range(runs):
            times.append(timed_batch(store, make_batch(rng, n, size, run), 2 + run))
        start = time.perf_counter()
        store.checkpoint()
        checkpoint_s = time.perf_counter() - start
        start = time.perf_counter()
        dropped = store.compact("state")["state"]
        store.checkpoint()
        compact_s = time.perf_counter() - start
        final = store.size("state")
    assert final == n + runs * (size - size // 2)
    assert dropped == runs * (size // 2), dropped
    return {
        "prefill_s": round(fill_s, 2),
        "runs_ms": [round(t * 1000, 1) for t in times],
        "median_ms": round(statistics.median(times) * 1000, 1),
        "checkpoint_ms": round(checkpoint_s * 1000, 1),
        "compact_ms": round(compact_s * 1000, 1),
        "versions_dropped": dropped,
    }


def time_python(db: Path, n: int, size: int, runs: int) -> dict[str, Any]:
    rng = random.Random(7)
    with DuckDBStore(db) as store:
        prefill(store, "state_py", n)
        times = []
        for run in range(runs):
            batch = make_batch(rng, n, size, run)
            start = time.perf_counter()
            apply_partials_python(
                store,
                "state_py",
                batch,
                key_columns=["k0"],
                value_column="n",
                agg=PySum(),
                state_type=StateType.OPAQUE,
                txid=2 + run,
            )
            times.append(time.perf_counter() - start)
    med = statistics.median(times)
    return {
        "state_keys": n,
        "batch_keys": size,
        "runs_ms": [round(t * 1000, 1) for t in times],
        "median_ms": round(med * 1000, 1),
        "keys_per_s": round(size / med),
    }


def prefill_postgres(store: Any, table: str, n: int) -> float:
    """The PostgreSQL twin of :func:`prefill`: one generate_series insert, then ANALYZE."""
    start = time.perf_counter()
    layout = store.ensure_map(MapLayout(table, "opaque", ("k0",), ("BIGINT",), "BIGINT"))
    log = log_table(layout.table)
    store.execute(
        f"INSERT INTO {log} (k0, {SEQ_COLUMN}, txid, curr, prev) "
        "SELECT g, 0, 1, 1, NULL FROM generate_series(0, ? - 1) AS g",
        [n],
    )
    store.execute(f"VACUUM ANALYZE {log}")
    store.execute("CHECKPOINT")
    return time.perf_counter() - start


def time_stores(stores: list[Any], n: int, size: int, runs: int) -> list[dict[str, Any]]:
    """Prefill each store alike, then time ``runs`` batches, alternating between the stores.

    Batch ``r`` is the same for every store (same seed); the stores take turns batch by batch
    so that both see the same machine load (this machine is shared), and each ratio compares
    neighbouring batches.
    """
    fills = []
    for store in stores:
        is_pg = store.dialect.is_postgres
        fills.append(prefill_postgres(store, "state", n) if is_pg else prefill(store, "state", n))
    rng = random.Random(n)
    times: list[list[float]] = [[] for _ in stores]
    for run in range(runs):
        batch = make_batch(rng, n, size, run)
        for i, store in enumerate(stores):
            times[i].append(timed_batch(store, batch, 2 + run))
    for store in stores:
        assert store.size("state") == n + runs * (size - size // 2)
    return [
        {
            "prefill_s": round(fill_s, 2),
            "runs_ms": [round(t * 1000, 1) for t in ts],
            "median_ms": round(statistics.median(ts) * 1000, 1),
        }
        for fill_s, ts in zip(fills, times, strict=True)
    ]


def explain_merge(store: Any, n: int, size: int, txid: int) -> dict[str, Any]:
    """One more PostgreSQL batch, step by step: sorting, staging, the statement, the commit.

    The steps are those of :func:`apply_partials` (the helpers it calls, so the statement is
    the one it runs); the statement runs under ``EXPLAIN (ANALYZE, BUFFERS, WAL, TIMING
    OFF)``, which writes the batch as usual.
    """
    from trident_assets.backends.merge_sql import merge_sql, sorted_by_keys

    batch = make_batch(random.Random(-n), n, size, txid)
    t0 = time.perf_counter()
    ordered, distinct = sorted_by_keys(batch, ["k0"], ["BIGINT"])
    t1 = time.perf_counter()
    layout = store.layout("state")
    with store.transaction():
        with store.staged(ordered, analyze=not distinct) as view:
            t2 = time.perf_counter()
            sql = merge_sql(store, layout, view, "n", "sum", False, distinct_keys=distinct)
            plan = store.fetch_rows(f"EXPLAIN (ANALYZE, BUFFERS, WAL, TIMING OFF) {sql}", [txid])
            t3 = time.perf_counter()
        t4 = time.perf_counter()
    t5 = time.perf_counter()
    return {
        "sort_ms": round((t1 - t0) * 1000, 1),
        "stage_ms": round((t2 - t1) * 1000, 1),
        "statement_ms": round((t3 - t2) * 1000, 1),
        "drop_stage_ms": round((t4 - t3) * 1000, 1),
        "commit_ms": round((t5 - t4) * 1000, 1),
        "plan": [str(r[0]) for r in plan],
    }


def compare_stores(
    sizes: list[int],
    batch: int,
    runs: int,
    out: Path,
    *,
    pg_settings: dict[str, str] | None = None,
    explain: bool = False,
) -> dict[str, Any]:
    """DuckDB and PostgreSQL side by side: the same batches into the same states."""
    import adbc_driver_postgresql.dbapi as pgdbapi

    from trident_assets.backends.postgres_server import local_postgres
    from trident_assets.backends.postgres_store import PostgresStore

    rows = []
    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="trident-bench-") as tmp,
        local_postgres(durable=True, settings=pg_settings) as server,
    ):
        for n in sizes:
            name = f"bench_{n}"
            with pgdbapi.connect(server.dsn, autocommit=True) as conn, conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE {name}")
            with (
                DuckDBStore(Path(tmp) / f"s{n}.duckdb") as duck,
                PostgresStore(server.dsn.rsplit("/", 1)[0] + f"/{name}") as pg,
            ):
                d, p = time_stores([duck, pg], n, batch, runs)
                if explain:
                    p["explain"] = explain_merge(pg, n, batch, 2 + runs)
                    steps = {k: v for k, v in p["explain"].items() if k != "plan"}
                    print(f"state {n:,}: one more PostgreSQL batch: {steps}", flush=True)
                    print("\n".join(p["explain"]["plan"]), flush=True)
            with pgdbapi.connect(server.dsn, autocommit=True) as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE {name}")
            row = {
                "state_keys": n,
                "batch_keys": batch,
                "duckdb_ms": d["median_ms"],
                "postgres_ms": p["median_ms"],
                "ratio": round(p["median_ms"] / d["median_ms"], 2),
                "paired_ratio": round(
                    statistics.median(
                        pt / dt for pt, dt in zip(p["runs_ms"], d["runs_ms"], strict=True)
                    ),
                    2,
                ),
                "duckdb_runs_ms": d["runs_ms"],
                "postgres_runs_ms": p["runs_ms"],
                "duckdb_prefill_s": d["prefill_s"],
                "postgres_prefill_s": p["prefill_s"],
            }
            if explain:
                row["postgres_explain"] = p["explain"]
            rows.append(row)
            print(
                f"state {n:>11,}: DuckDB {d['median_ms']:8.1f} ms/batch, PostgreSQL "
                f"{p['median_ms']:8.1f} ms/batch ({row['ratio']}x; paired {row['paired_ratio']}x)",
                flush=True,
            )
    growth = round(rows[-1]["postgres_ms"] / rows[0]["postgres_ms"], 2) if len(rows) > 1 else None
    report = {
        "benchmark": "state_merge_stores",
        "what": "apply_partials(opaque, sum): one batch, half existing (random) and half new "
        "keys, the same batches into a DuckDB file and a PostgreSQL database",
        "runs": runs,
        "machine": {
            **machine(),
            "postgres": "server started for the run, fsync and synchronous_commit on, "
            + (
                ", ".join(f"{k}={v}" for k, v in pg_settings.items()) if pg_settings else "defaults"
            ),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
        },
        "rows": rows,
        "postgres_ratio_largest_to_smallest_state": growth,
        "target": "PostgreSQL within 5x of DuckDB per batch; its cost follows the batch",
    }
    md = render_stores(report)
    print(md)
    out.mkdir(parents=True, exist_ok=True)
    (out / "state_merge_stores.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "state_merge_stores.md").write_text(md)
    return report


def render_stores(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# State merge: DuckDB and PostgreSQL state stores",
        "",
        f"{report['what']}; median of {report['runs']} runs, each a new txid, the two stores "
        "taking turns batch by batch.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, {m['os']}; "
        f"PostgreSQL: {m['postgres']}. Load average (1, 5, 15 min) before: "
        f"{m['load_average_before']}, after: {m['load_average_after']}.",
        "",
        "| state keys | batch keys | DuckDB ms / batch | PostgreSQL ms / batch | ratio "
        "| median ratio of paired batches |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['state_keys']:,} | {r['batch_keys']:,} | {r['duckdb_ms']:.1f} | "
            f"{r['postgres_ms']:.1f} | {r['ratio']}x | {r['paired_ratio']}x |"
        )
    lines += [
        "",
        f"PostgreSQL, largest/smallest state: {report['postgres_ratio_largest_to_smallest_state']}x"
        f". Target: {report['target']}.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python-state", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--stores",
        default="duckdb",
        help="duckdb (the DuckDB study) or duckdb,postgres (both stores side by side)",
    )
    parser.add_argument(
        "--pg-defaults",
        action="store_true",
        help="run the PostgreSQL server with its default settings, not PG_SETTINGS",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="also profile one more PostgreSQL batch per state size (steps and plan)",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if "postgres" in args.stores.split(","):
        settings = None if args.pg_defaults else PG_SETTINGS
        return compare_stores(
            sizes, args.batch, args.runs, args.out, pg_settings=settings, explain=args.explain
        )
    rows = []
    with tempfile.TemporaryDirectory(prefix="trident-bench-") as tmp:
        for n in sizes:
            default = time_fast(Path(tmp) / f"s{n}.duckdb", n, args.batch, args.runs, {})
            deferred = time_fast(
                Path(tmp) / f"d{n}.duckdb",
                n,
                args.batch,
                args.runs,
                {"checkpoint_threshold": "1GB"},
            )
            rows.append(
                {
                    "state_keys": n,
                    "batch_keys": args.batch,
                    "prefill_s": default["prefill_s"],
                    "median_ms": default["median_ms"],
                    "keys_per_s": round(args.batch / default["median_ms"] * 1000),
                    "runs_ms": default["runs_ms"],
                    "median_ms_deferred_checkpoint": deferred["median_ms"],
                    "runs_ms_deferred_checkpoint": deferred["runs_ms"],
                    "checkpoint_ms": default["checkpoint_ms"],
                    "compact_ms": default["compact_ms"],
                    "versions_dropped": default["versions_dropped"],
                }
            )
            print(
                f"state {n:>11,}: {default['median_ms']:8.1f} ms/batch "
                f"(deferred checkpoint {deferred['median_ms']:.1f} ms; checkpoint "
                f"{default['checkpoint_ms']:.0f} ms, compaction {default['compact_ms']:.0f} ms)",
                flush=True,
            )
        py = time_python(Path(tmp) / "py.duckdb", args.python_state, args.batch, args.runs)
    ratio = ratio_deferred = None
    if len(rows) > 1:
        ratio = round(rows[-1]["median_ms"] / rows[0]["median_ms"], 2)
        ratio_deferred = round(
            rows[-1]["median_ms_deferred_checkpoint"] / rows[0]["median_ms_deferred_checkpoint"], 2
        )
    report = {
        "benchmark": "state_merge",
        "what": "apply_partials(opaque, sum): one batch, half existing (random) and half new keys",
        "design": "append-only versioned log + view; compaction and checkpoint between batches",
        "runs": args.runs,
        "machine": machine(),
        "fast_path": rows,
        "ratio_largest_to_smallest": ratio,
        "ratio_largest_to_smallest_deferred_checkpoint": ratio_deferred,
        "target_ratio": 2.0,
        "python_path": py,
    }
    md = render(report)
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "state_merge.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "state_merge.md").write_text(md)
    return report


def render(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# State merge: batch apply time against state size",
        "",
        f"{report['what']}; median of {report['runs']} runs, each a new txid.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, {m['os']}, "
        f"Python {m['python']}, DuckDB {m['duckdb']}, pyarrow {m['pyarrow']}.",
        "",
        "| state keys | batch keys | ms / batch | keys / s "
        "| ms / batch, checkpoint deferred | checkpoint ms | compaction ms "
        "| prefill s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["fast_path"]:
        lines.append(
            f"| {r['state_keys']:,} | {r['batch_keys']:,} | {r['median_ms']:.1f} | "
            f"{r['keys_per_s']:,} | {r['median_ms_deferred_checkpoint']:.1f} | "
            f"{r['checkpoint_ms']:.0f} | {r['compact_ms']:.0f} | {r['prefill_s']} |"
        )
    lines += [
        "",
        f"Ratio largest/smallest state: {report['ratio_largest_to_smallest']}x "
        f"({report['ratio_largest_to_smallest_deferred_checkpoint']}x with deferred checkpoints); "
        f"target <= {report['target_ratio']}x.",
        "",
        "Layout: append-only versioned log per map (a view named like the map shows the latest "
        "version per key); a batch is ONE INSERT ... SELECT (batch LEFT JOIN the batch keys' "
        "current rows). Checkpoint and compaction (dropping superseded versions, after "
        f"{report['runs']} batches) are timed once each, outside the per-batch figure: "
        "a maintenance step between batches must run them (the runner does not call them yet).",
        "",
    ]
    py = report["python_path"]
    lines += [
        "| Python combiner path | state keys | batch keys | ms / batch | keys / s |",
        "|---|---:|---:|---:|---:|",
        f"| apply_partials_python (opaque, Python sum) | {py['state_keys']:,} | "
        f"{py['batch_keys']:,} | {py['median_ms']:.1f} | {py['keys_per_s']:,} |",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

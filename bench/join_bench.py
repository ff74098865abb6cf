"""Single-join benchmark: joins/s and pending-state size for 1M ids over 50 batches.

Workload (the soak of trident_assets_tests/test_single_join.py): ids 0..N-1; each id's first
half (gender or age, at random) arrives in a random batch t1, its partner in t1..t1+T
(capped at the last batch); 1% of ids never get a partner and expire. The bulk DuckDB join
(:func:`trident_assets.backends.join_state.apply_join_batch` over the sides combined by
:func:`~trident_assets.backends.join_batch_columns.combine_sides`) runs every batch in its own
transaction on a DuckDB file, as the executor's commit would (Spark not included).

    python bench/join_bench.py [--ids 1000000] [--batches 50] [--timeout 5]

Writes bench/results/join_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.join_batch_columns import combine_sides
from trident_assets.backends.join_pending_table import pending_count
from trident_assets.backends.join_state import apply_join_batch
from trident_assets.core.join import SingleJoin


def run(ids: int, batches: int, timeout: int, seed: int = 20240611) -> dict:
    rng = np.random.default_rng(seed)
    spec = SingleJoin(
        [("gender", ["id", "gender"]), ("age", ["id", "age"])],
        ["id", "gender", "age"],
        timeout_batches=timeout,
    )
    assert spec.batch_expiry is not None
    all_ids = np.arange(ids, dtype=np.int64)
    lonely = np.zeros(ids, dtype=bool)
    lonely[rng.choice(ids, ids // 100, replace=False)] = True
    first_side = rng.integers(0, 2, ids)
    t1 = rng.integers(1, batches + 1, ids)
    t2 = np.minimum(t1 + rng.integers(0, timeout + 1, ids), batches)
    last = max(spec.batch_expiry.expires_at(t) for t in range(1, batches + 1))
    per_batch = []
    joined = expired = rows_in = 0
    max_pending = peak_bytes = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "join.duckdb"
        with DuckDBStore(path) as store:
            started = time.perf_counter()
            for txid in range(1, last + 1):
                sides = {}
                for s, (name, _) in enumerate(spec.inputs):
                    mask = ((t1 == txid) & (first_side == s)) | (
                        (t2 == txid) & (first_side != s) & ~lonely
                    )
                    picked = rng.permutation(all_ids[mask])
                    value = np.where(picked % 3 == 0, "f", "m") if s == 0 else picked % 90
                    sides[name] = pa.table({"id": picked, name: value})
                    rows_in += picked.size
                t = time.perf_counter()
                res = apply_join_batch(store, spec, "pending", txid, combine_sides(spec, sides))
                per_batch.append(time.perf_counter() - t)
                joined += res.joined.num_rows
                expired += res.expired.num_rows
                if res.pending_after > max_pending:  # size the file at the peak (untimed)
                    max_pending = res.pending_after
                    store.checkpoint()
                    peak_bytes = path.stat().st_size
            total = time.perf_counter() - started
            store.checkpoint()
            final_pending = pending_count(store, "pending")
        file_bytes = path.stat().st_size
    lat = np.array(per_batch)
    return {
        "workload": {
            "ids": ids,
            "batches": batches,
            "txids_run": last,
            "timeout_batches": timeout,
            "lonely": int(lonely.sum()),
            "rows_in": rows_in,
        },
        "joined": joined,
        "expired": expired,
        "join_time_s": round(float(lat.sum()), 3),
        "wall_s_incl_batch_building_and_checkpoints": round(total, 3),
        "joins_per_s": round(joined / float(lat.sum())),
        "rows_per_s": round(rows_in / float(lat.sum())),
        "batch_latency_s": {
            "p50": round(float(np.percentile(lat, 50)), 4),
            "p95": round(float(np.percentile(lat, 95)), 4),
            "max": round(float(lat.max()), 4),
        },
        "pending_rows_max": max_pending,
        "pending_rows_final": final_pending,
        "duckdb_file_bytes_at_peak_pending": peak_bytes,
        "duckdb_file_bytes_final": file_bytes,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_at_end": os.getloadavg(),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--timeout", type=int, default=5)
    args = parser.parse_args()
    result = run(args.ids, args.batches, args.timeout)
    out = Path(__file__).parent / "results" / "join_bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

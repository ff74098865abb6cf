"""The word-count catch-up with its state in PostgreSQL, a Redis Cluster or memcached.

``python -m bench.run_all --store redis-cluster [--store memcached] [--kv-shards 1,3]`` runs,
besides the DuckDB-state catch-up, the same catch-up (one Dagster run for every txid, the
example topology, the same corpus) with its opaque ``word_counts`` state:

* in PostgreSQL: a server started for the run (``initdb``/``pg_ctl`` on 127.0.0.1, fsync on);
* in a Redis Cluster of each ``--kv-shards`` master count, one replica per master (every
  partition's writes wait for it: ``WAIT 1``, the state's default ``min_replicas``), AOF on,
  a new cluster per run, started and stopped by PID by the benchmark;
* in memcached: each ``--kv-shards`` count of servers (1 GB each), new servers per run.

The commit marker and the spouts' ranges stay in the DuckDB file for the key-value runs. The
final counts are read from the servers by this process (Redis: ``SCAN`` by the state's prefix;
memcached cannot list its keys, so the ground truth's words are read with ``get_many``, which
cannot see a word the truth lacks) and checked exactly against the ground truth.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

__all__ = ["KV_STORES", "kv_servers", "read_counts", "run_stores", "state_spec"]

KV_STORES = ("redis-cluster", "memcached")
READ_CHUNK = 10_000
"""Words per memcached ``get_many`` when reading the final counts."""
MEMCACHED_MB = 1024


def state_spec(store: str, servers: Sequence[str]) -> Any:
    """The example word count's opaque ``word_counts`` state in ``store`` at ``servers``."""
    import trident_assets as ta

    cls = ta.RedisClusterState if store == "redis-cluster" else ta.MemcachedState
    return cls.opaque("word_counts", list(servers))


@contextlib.contextmanager
def kv_servers(store: str, root: Path, shards: int) -> Iterator[Any]:
    """New servers for one run: a Redis Cluster of ``shards`` masters with a replica each, or
    ``shards`` memcached servers; stopped by PID on exit."""
    from trident_assets_tests.kv_servers import MemcachedServers, RedisClusterServers

    if store == "redis-cluster":
        servers: Any = RedisClusterServers(root, shards, replicas=1)
    else:
        servers = MemcachedServers(root, shards, memory_mb=MEMCACHED_MB)
    with servers:
        yield servers


def read_counts(store: str, servers: Sequence[str], words: pa.Array) -> pa.Table:
    """The example word count's final ``(word, count)`` from the servers.

    ``words``: the ground truth's words (memcached reads exactly these; Redis lists its keys).
    """
    from trident_assets.examples.word_count import build_word_count
    from trident_assets.spark.kv_state import close_kv_map, kv_map, read_kv_state

    state = build_word_count(state=state_spec(store, servers)).states["word_counts"]
    if store == "redis-cluster":
        return read_kv_state(state).select(["word", "count"])
    mstate = kv_map(state)
    found_words: list[str] = []
    found: list[int] = []
    try:
        names = words.to_pylist()
        for first in range(0, len(names), READ_CHUNK):
            chunk = names[first : first + READ_CHUNK]
            values = mstate.multi_get([(w,) for w in chunk])
            for word, value in zip(chunk, values, strict=True):
                if value is not None:
                    found_words.append(word)
                    found.append(value)
    finally:
        close_kv_map(mstate)
    return pa.table({"word": found_words, "count": pa.array(found, pa.int64())})


def run_stores(
    args: Any,
    ours: Callable[..., dict[str, Any]],
    work: Path,
    truth: pa.Table,
    verify: Callable[[pa.Table, pa.Table], dict[str, Any]],
    log: Callable[[str], None],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run the catch-up with PostgreSQL state and with each ``args.store`` at each shard count.

    ``ours(name, state_dsn=..., kv_store=..., kv_servers=...)`` runs one catch-up in a child
    process and returns its summary. Returns the results (by run name) and the table rows.
    """
    from trident_assets.backends.postgres_server import local_postgres

    results: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []

    def row(name: str, mode: str, res: dict[str, Any]) -> None:
        results[name] = res
        rows.append(
            {
                "system": "trident_assets",
                "mode": mode,
                "words_per_s": res["words_per_s"],
                "median_batch_s": res["batch_total_s"]["median"],
                "per_batch_s": res["per_batch_s"],
                "exact": res["verify"]["identical"],
            }
        )

    if not args.skip_postgres:
        with local_postgres(durable=True) as pg:
            res = ours("catchup_postgres", state_dsn=pg.dsn)
        row("catchup_postgres", "catch-up: 1 Dagster run; state in PostgreSQL (fsync on)", res)
    for store in args.store:
        for shards in args.kv_shards:
            name = f"catchup_{store.replace('-', '_')}_{shards}"
            with kv_servers(store, work / name / "servers", shards) as servers:
                res = ours(name, kv_store=store, kv_servers=servers.servers)
                counts = read_counts(store, servers.servers, truth.column("word"))
                res["servers"] = (
                    servers.describe() if store == "redis-cluster" else {"servers": shards}
                )
            res["verify"] = verify(truth, counts)
            log(f"{name}: counts exact={res['verify']['identical']}")
            what = (
                f"{shards} master(s), 1 replica each (WAIT 1)"
                if store == "redis-cluster"
                else f"{shards} server(s)"
            )
            row(name, f"catch-up: 1 Dagster run; state in {store}, {what}", res)
        rates = {s: results[f"catchup_{store.replace('-', '_')}_{s}"]["words_per_s"]
                 for s in args.kv_shards}  # fmt: skip
        results[f"{store}_scaling"] = {
            "shards": list(args.kv_shards),
            "words_per_s": [rates[s] for s in args.kv_shards],
            "largest_over_smallest": round(rates[max(rates)] / rates[min(rates)], 3),
        }
    return results, rows

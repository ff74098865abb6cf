"""Key-value states on a standalone Spark cluster (master + worker on 127.0.0.1), exactly once.

The word count's counts and a single join's pending halves, in a Redis Cluster and in
memcached.

The executors are JVMs the worker forks, their Python workers an interpreter that has NOT
installed trident_assets (it travels as a py-file): each partition opens its own Redis
Cluster or memcached client from the picklable target the driver shipped. A clean child
process (a user's script, :mod:`trident_assets_tests.kv_cluster_app`) runs the word count
and the single join into each store, each with a txid that fails between the executors'
writes and the commit marker; the counts must equal the log's, and the joined tuples be
every id's once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trident_assets.spark.local_servers import start_standalone
from trident_assets_tests.children import clean_env, run_child
from trident_assets_tests.kv_servers import (
    MemcachedServers,
    RedisClusterServers,
    servers_installed,
)
from trident_assets_tests.test_code_shipping import _worker_python

APP = Path(__file__).with_name("kv_cluster_app.py")

pytestmark = [
    pytest.mark.skipif(
        not servers_installed(), reason="needs memcached and redis-server (scripts/setup.sh)"
    ),
    pytest.mark.slow,
]


def test_word_count_and_join_in_redis_and_memcached_on_a_standalone_cluster(tmp_path: Path) -> None:
    redis = RedisClusterServers(tmp_path / "redis")
    memcached = MemcachedServers(tmp_path / "memcached")
    cluster = None
    try:
        cluster = start_standalone(tmp_path / "cluster", env=clean_env(tmp_path))
        args = [
            str(tmp_path / "home"),
            cluster.url,
            "--redis",
            ",".join(redis.servers),
            "--memcached",
            ",".join(memcached.servers),
            "--worker-python",
            _worker_python(tmp_path),
        ]
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        done = run_child([sys.executable, str(APP), *args], cwd, timeout=400)
        assert done.returncode == 0, done.stderr[-4000:]
        got = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        if cluster is not None:
            cluster.stop()
        redis.stop()
        memcached.stop()
    assert got["master"] == cluster.url
    for store in ("redis", "memcached"):
        result = got[store]
        assert result["counts"] == result["truth"], store
        assert result["committed_when_crashed"] == 1
        keys_in, updated, skipped = result["rerun"]  # opaque: recomputed from prev
        assert (updated, skipped) == (keys_in, 0)
        assert keys_in > 0
        assert result["replay_applied"] is False
        assert result["last"] == 3  # 5 sentences, 2 per txid
    for store in ("join_redis", "join_memcached"):
        result = got[store]
        assert result["joined"] == result["truth"], store  # every id once: none lost or twice
        assert result["committed_when_crashed"] == 1
        assert result["replay_applied"] is False
        assert result["last"] == 6  # 12 ids a topic, 2 per batch
    # the partitions ran in executors the worker forked (their logs are in its work dir)
    work = tmp_path / "cluster" / "work"
    assert list(work.glob("app-*/*/stderr")), f"no executor ran under {work}"
    assert cluster.master.process.poll() is not None
    assert cluster.worker.process.poll() is not None

"""Shared fixtures: one local SparkSession for the whole session; every file under tmp_path.

``demo_run``: ``trident demo`` run once for the session, as a new user runs it (a child
process, a clean environment); the demo's story test and the UI test over its home share it.

``postgres_server``: one PostgreSQL server for the session (``initdb`` in a tmp dir, on a free
127.0.0.1 port, as ``nobody`` when running as root), stopped at the end; ``pg_dsn`` a fresh
database on it per test; ``open_store`` opens stores of each kind (``duckdb``, ``postgres``)
at one location, for tests parametrized over both stores.

Two tiers. ``make test`` leaves out the tests marked ``extended`` (:data:`EXTENDED`: the
end-to-end runs of `dagster dev`, `dg`, the demo and the documented commands, the Spark
cluster and Connect runs, the chaos soaks and the SIGKILL matrices beyond one crash per
family) and the ``slow`` ones; ``make check`` (what CI runs) runs everything but ``slow``;
``make soak`` the ``slow`` ones.

``make test`` runs the suite in two pytest-xdist workers with ``--dist loadfile``: a file's
tests run in one worker, so a module-scoped fixture (``dagster dev``, a Spark cluster) starts
once; session fixtures (``spark``, ``postgres_server``, ``demo_run``) start once per worker
that needs them. Two refinements (``pytest_xdist_make_scheduler``): files that share an
expensive session fixture form one work unit (one worker starts it once), and work units are
handed out longest first (``FILE_SECONDS``), so no long file starts last and leaves the other
worker idle.

In-process Dagster runs use an in-memory instance (``dg.DagsterInstance.ephemeral()``, what
``dg.materialize`` uses when given none): a run on a SQLite instance on disk cost about five
times as much. SQLite instances on disk, as users run them, are what the `dagster dev`, demo,
`trident ui`, UI-launched runs and CLI tests use.

``SPARK_SUBMIT_OPTS`` (C1-only JIT, serial GC, the class archive of
:mod:`trident_assets.spark.class_cache`, a ``java.io.tmpdir`` removed when the run ends) is
set for every Spark JVM the suite starts, and ``JVM_ENV`` carries it into children started
with a clean environment.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Every Spark JVM the suite starts (the session's own, chaos children, soak workers, servers,
# clean-environment runs through JVM_ENV) compiles with C1 only and collects with the serial
# collector. Its two workers keep both cores busy, so C2's compiler threads take CPU from the
# other worker's tests: measured with two pytest processes side by side on 2 cores, each with
# its own session JVM running Spark-heavy files, 123-137 s and 224-248 busy CPU-s with C1
# only against 146-149 s and 278-283 CPU-s with C2 (three-fold compile thresholds); a fresh
# JVM's start and first batch take about half the time. In one process alone, with the
# second core idle, C2 is faster (199 s against 251 s for four Spark-heavy files): not how the
# suite runs. Changes no result. A value set before the run wins (``SPARK_SUBMIT_OPTS=
# pytest ...``: the JVM's defaults).
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
JVM_ENV = {"SPARK_SUBMIT_OPTS": os.environ["SPARK_SUBMIT_OPTS"]}
"""The same for a child started with a clean environment (a JVM setting, no project variable:
what a command prints and does is the same with or without it)."""


def pytest_configure(config: pytest.Config) -> None:
    """Every JVM of the run starts from the class archive (built here once if missing) and
    keeps its temporary directories in one directory of the run's.

    In the controller (or a run without workers), before any worker or JVM starts: the
    options join ``SPARK_SUBMIT_OPTS`` (and :data:`JVM_ENV`), so children whose ``HOME`` is
    not this one's use them too. ``TRIDENT_CLASS_CACHE=off`` leaves the archive out.

    In every process of the run: SIGTERM back to its default action if the run was started
    with it ignored (as some job runners start a background job). Every child would inherit
    that: servers the tests stop with SIGTERM (`dg dev`, a soak) would not stop, and each
    ``tail`` Dagster starts to capture a run's logs would cost 30 s more when stopped.
    """
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(config, "workerinput"):
        return
    _jvm_temp_dir()
    _class_archive()
    JVM_ENV["SPARK_SUBMIT_OPTS"] = os.environ["SPARK_SUBMIT_OPTS"]


_JVM_TMP: list[Path] = []
"""The run's ``java.io.tmpdir`` (removed by :func:`pytest_unconfigure`)."""


def _jvm_temp_dir() -> None:
    """``-Djava.io.tmpdir`` of the JVMs: a directory removed when the run ends.

    A JVM killed with SIGKILL (crash tests, `dagster dev` stopped by PID) runs no shutdown
    hook, so the empty ``spark-*`` and ``artifacts-*`` directories it made would stay in /tmp.
    """
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "java.io.tmpdir=" in opts:
        return
    path = Path(tempfile.mkdtemp(prefix="trident-tests-jvm-"))
    _JVM_TMP.append(path)
    os.environ["SPARK_SUBMIT_OPTS"] = f"{opts} -Djava.io.tmpdir={path}".strip()


def _class_archive() -> None:
    from trident_assets.errors import ConfigError
    from trident_assets.spark.class_cache import (
        archive_current,
        archive_options,
        archive_path,
        build_archive,
    )

    path = archive_path()
    if path is None:
        return
    if not archive_current(path):
        try:
            build_archive(path)
        except (ConfigError, OSError) as exc:  # only speed depends on it
            print(f"note: no class archive, Spark JVMs start slower: {exc}", file=sys.stderr)
            return
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "SharedArchiveFile=" not in opts:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{opts} {archive_options()}".strip()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the run's JVM temporary directory (every JVM of the run has stopped)."""
    for path in _JVM_TMP:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local[2] SparkSession shared by every test that needs Spark (one per xdist worker)."""
    from trident_assets.spark.session import build_spark_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = build_spark_session(
        {"spark.sql.warehouse.dir": str(warehouse), "spark.local.dir": str(warehouse)}
    )
    yield session
    session.stop()


@dataclass(frozen=True)
class DemoRun:
    cwd: Path
    """The directory the demo ran in (its HOME too), with ``.venv`` linking to the virtualenv."""
    home: Path
    """The demo's trident home, the default ``cwd / ".trident"``."""
    done: subprocess.CompletedProcess[str]


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """``make demo`` once its set-up is done: ``.venv/bin/trident demo`` with the defaults.

    Run once: a child process in a clean environment (HOME, PATH=/usr/local/bin:/usr/bin:/bin,
    80 columns, ``MAKELEVEL`` as make sets it), in a directory whose ``.venv`` is a link to
    this virtualenv, so the documented commands run there as written.
    """
    cwd = tmp_path_factory.mktemp("demo")
    (cwd / ".venv").symlink_to(Path(sys.prefix))
    done = subprocess.run(
        [".venv/bin/trident", "demo"],
        cwd=cwd,
        env={
            "HOME": str(cwd),
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "COLUMNS": "80",
            "MAKELEVEL": "1",
            **JVM_ENV,
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return DemoRun(cwd, cwd / ".trident", done)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A PostgreSQL server for the session; stopped (by ``pg_ctl stop``, then PID) afterwards.

    Its data directory is a temporary directory of its own (removed afterwards): pytest's
    tmp_path is private to root, and the server runs as ``nobody`` when tests run as root.
    """
    from trident_assets.backends.postgres_server import local_postgres

    with local_postgres() as server:
        yield server


@pytest.fixture
def pg_dsn(postgres_server: Any) -> str:
    """The DSN of a new, empty database on the session's server (one per test)."""
    return new_database(postgres_server)


def new_database(postgres_server: Any) -> str:
    """Create a new, empty database on ``postgres_server``; return its DSN."""
    import adbc_driver_postgresql.dbapi as pgdbapi

    name = f"t_{uuid.uuid4().hex[:12]}"
    with pgdbapi.connect(postgres_server.dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    return postgres_server.dsn.rsplit("/", 1)[0] + f"/{name}"


OpenStore = Callable[..., Any]


@pytest.fixture(params=["duckdb", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    """Open stores (any number, each its own connection) at one fresh location of each kind."""
    from trident_assets.backends.state_store import open_state_store

    if request.param == "duckdb":
        location: str = str(tmp_path / "state.duckdb")
    else:
        location = request.getfixturevalue("pg_dsn")
    opened: list[Any] = []

    def _open(**kwargs: Any) -> Any:
        store = open_state_store(location, **kwargs)
        opened.append(store)
        return store

    _open.kind = request.param  # type: ignore[attr-defined]
    _open.location = location  # type: ignore[attr-defined]
    yield _open
    for store in opened:
        store.close()


# The tests `make test` leaves out (marked ``extended``; `make check` and CI run them): a file
# name (all its tests) or ``file::function`` (all its parameters) -> why. Every test that uses
# the ``demo_run`` fixture (`trident demo` as a child process) is extended too.
EXTENDED: dict[str, str] = {
    "test_dagster_dev.py": "one `dagster dev` with its daemon, runs launched by the sensor",
    "test_dg_component.py::test_the_dg_way_as_documented": "create-dagster, dg check/launch/dev",
    "test_code_shipping.py::test_topologies_on_a_standalone_cluster": "a Spark standalone cluster",
    "test_code_shipping.py::test_topologies_through_spark_connect": "a Spark Connect server",
    "test_chaos_live.py": "a live soak SIGKILLed repeatedly",
    "test_chaos.py::test_short_chaos_soak_both_spout_kinds_exactly_once": "a soak with kills",
    "test_chaos.py::test_short_chaos_soak_publishing_a_lakehouse_table_exactly_once": (
        "a soak with kills, publishing a table"
    ),
    "test_class_cache.py::test_trident_class_cache_builds_an_archive_the_next_driver_jvm_loads": (
        "dumps a class archive from a JVM"
    ),
    "test_live_ui_stop.py": "`trident ui` in live mode, stopped by Ctrl-C and restarted",
    "test_ui_warm_spark.py::test_ui_module_runs_the_users_topology_on_its_warm_spark_then_stops_everything": (  # noqa: E501
        "`trident ui` with its warm Spark Connect server"
    ),
    "test_console_ui.py::test_overview_and_finals_pages_show_the_topology_at_a_glance": (
        "`trident ui` pages in a browser"
    ),
    "test_quarantine.py::test_sensor_quarantines_a_poison_txid_and_the_cli_replays_it": (
        "`dagster dev` and its sensor"
    ),
    "test_long_run.py::test_short_long_run_exact_and_bounded": "a long run's short version",
    "test_lakehouse_crash.py": "children SIGKILLed at each fault point of a table commit",
    "test_event_windows.py::test_sigkill_between_window_write_and_commit_emits_each_window_once": (
        "SIGKILLed children (test_trident_windows.py kills one in `make test`)"
    ),
    "test_event_window_chunks.py::test_sigkill_inside_a_chunk_then_replay_gives_the_same_windows": (
        "a SIGKILLed child (test_trident_windows.py kills one in `make test`)"
    ),
    "test_kv_join.py::test_joined_and_expired_per_txid_match_duckdb_across_a_crash_and_a_replay": (
        "a SIGKILLed child over a Redis Cluster"
    ),
    "test_kv_join.py::test_redis_master_killed_mid_batch_and_replica_promoted_then_exact": (
        "a Redis master killed and a replica promoted"
    ),
    "test_kv_state.py::test_redis_master_killed_after_the_writes_fails_the_txid_with_the_store_error": (  # noqa: E501
        "a Redis master killed"
    ),
    "test_kv_state.py::test_redis_master_killed_and_replica_promoted_then_exact": (
        "a Redis master killed and a replica promoted"
    ),
    "test_user_code.py::test_user_topology_through_dagster_in_a_clean_child_process": (
        "a Dagster run in a child (the user functions' child test stays in `make test`)"
    ),
    "test_log.py::test_two_producer_processes_append_concurrently": "two producer processes",
    "test_file_spout_listing.py::test_planning_a_txid_over_100000_files_costs_the_same_after_many_txids": (  # noqa: E501
        "a folder of 100,000 files"
    ),
    "test_file_spout_reads.py::test_files_above_sparks_split_size_are_read_whole_with_exact_line_numbers": (  # noqa: E501
        "files above Spark's split size, each way (the scans' line numbers stay in `make test`)"
    ),
    "test_bench_smoke.py": "the benchmarks at a small size",
    "test_bench_files.py": "the file benchmarks at a small size, in children",
    "test_bench_event_windows.py::test_ours_and_spark_ss_windows_agree": "Spark SS's windows",
}


def _mark_extended(items: list[pytest.Item]) -> None:
    """Mark the :data:`EXTENDED` tests; a key naming a function its collected file lacks fails."""
    modules: dict[str, Any] = {}
    for item in items:
        name = item.nodeid.split("::", 1)[0].rpartition("/")[2]
        modules[name] = getattr(item, "module", None)
        function = f"{name}::{getattr(item, 'originalname', item.name)}"
        demo = "demo_run" in getattr(item, "fixturenames", ())
        if name in EXTENDED or function in EXTENDED or demo:
            item.add_marker(pytest.mark.extended)
    stale = sorted(
        key
        for key in EXTENDED
        if "::" in key
        and (name := key.split("::")[0]) in modules
        and not hasattr(modules[name], key.split("::")[1])
    )
    if stale:
        raise pytest.UsageError(f"EXTENDED names tests that do not exist: {stale}")


# Files that share an expensive session fixture run in one worker: file -> the unit's name.
SHARED_WORKER = {
    "test_documented_commands.py": "test_demo_ui.py",
    "test_cli.py": "test_demo_ui.py",  # its three tests over the demo's home
    "test_demo_home.py": "test_demo_ui.py",  # a copy of the demo's home
}

# Seconds per work unit in one run of the whole suite on 2 cores (2 workers, pytest's junit
# figures per file, setups included); units not listed count one second per test. Only the
# order matters: longest first, so no long unit starts last and leaves the other worker idle.
FILE_SECONDS: dict[str, float] = {
    "test_demo_ui.py": 474,  # with test_documented_commands, test_cli, test_demo_home: one demo
    "test_event_windows.py": 211,
    "test_chaos.py": 134,
    "test_code_shipping.py": 125,
    "test_event_window_chunks.py": 110,
    "test_dagster_dev.py": 106,  # the word count and the page views in one `dagster dev`
    "test_dg_component.py": 100,  # create-dagster, dg check/launch, `dg dev`
    "test_chaos_live.py": 102,
    "test_kv_state.py": 94,  # a Redis Cluster, memcached servers, 17 tests' Spark jobs
    "test_live_ui_stop.py": 90,
    "test_user_code.py": 81,
    "test_lakehouse_crash.py": 80,  # 6 SIGKILLed children (own JVMs) in `make test`
    "test_kv_join.py": 77,  # a Redis Cluster, memcached servers, each join also run on DuckDB
    "test_class_cache.py": 74,
    "test_quarantine.py": 65,
    "test_single_join.py": 65,
    "test_ui_warm_spark.py": 57,
    "test_console_ui.py": 56,
    "test_live_run.py": 55,  # a live run SIGKILLed in a child process (its own JVM)
    "test_executor.py": 49,
    "test_state_backup.py": 48,
    "test_trident_windows.py": 47,
    "test_cli_read_surface.py": 44,
    "test_state_contracts.py": 41,
    "test_dagster_ui_runs.py": 41,
    "test_bench_smoke.py": 38,
    "test_backfill.py": 37,
    "test_spilled_partials.py": 35,
    "test_exactly_once_incremental.py": 33,
    "test_kafka.py": 32,
    "test_dagster.py": 29,
    "test_duckdb_merge.py": 26,
    "test_cli_state_assets.py": 25,
    "test_stream_ops.py": 25,
    "test_long_run.py": 25,
    "test_stream_api.py": 24,
    "test_lakehouse.py": 24,
    "test_readme.py": 23,
    "test_nulls_counted.py": 22,
    "test_cli_state_drop.py": 21,
    "test_rebuild.py": 21,
    "test_pipelined.py": 17,
    "test_demo_interrupt.py": 17,
    "test_batch_corners.py": 15,
    "test_log.py": 15,
    "test_bench_event_windows.py": 15,
    "test_io_manager.py": 14,
}


def _unit(nodeid: str) -> str:
    """The work unit (file name, or the shared unit's) of a test id."""
    name = nodeid.split("::", 1)[0].rpartition("/")[2]
    return SHARED_WORKER.get(name, name)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the extended tests (before ``-m`` deselects); in an xdist worker, order the tests
    longest work unit first (the scheduler keeps it)."""
    _mark_extended(items)
    if not hasattr(config, "workerinput"):
        return
    counts: dict[str, int] = {}
    for item in items:
        counts[_unit(item.nodeid)] = counts.get(_unit(item.nodeid), 0) + 1
    items.sort(key=lambda item: -FILE_SECONDS.get(_unit(item.nodeid), counts[_unit(item.nodeid)]))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with shared-fixture units, in the workers' (longest-first) order."""
    from xdist.scheduler import LoadFileScheduling

    class SharedUnits(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            folder = path.rpartition("/")[0]
            return f"{folder}/{_unit(nodeid)}" if folder else _unit(nodeid)

    if config.getvalue("dist") != "loadfile":
        return None
    config.option.loadscopereorder = False
    return SharedUnits(config, log)


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Redis Cluster (3 masters, a replica each) on 127.0.0.1 for one test module.

    Per module: a module's tests may kill a master; stopped by PID at the module's end.
    """
    from trident_assets_tests.kv_servers import RedisClusterServers

    cluster = RedisClusterServers(tmp_path_factory.mktemp("redis"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def memcached(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Three memcached servers on 127.0.0.1 for one test module, stopped by PID at its end."""
    from trident_assets_tests.kv_servers import MemcachedServers

    servers = MemcachedServers(tmp_path_factory.mktemp("memcached"))
    try:
        yield servers
    finally:
        servers.stop()

"""User topologies on a standalone cluster and through Spark Connect, by configuration alone.

Each server starts once for the module (stopped by PID afterwards). Its workers have NOT
installed trident_assets (their interpreter hides the venv's copy): the package travels as a
py-file (master URL) or an artifact (Connect), the user's modules by value. The standalone
worker runs in a mount namespace of its own where the driver's home is hidden but for the
log; the network is shared, so executors reach the Kafka broker on 127.0.0.1.

One child process per mode (a clean environment, as a user's script) runs
``userland/cluster_app.py``: the word count with user functions, the gender/age single
join, the Kafka-fed word count (under Connect with every driver-side table sent to Spark
in slices of 3 rows) and a word count whose workers copy its partials into PostgreSQL
(``trident.partials.spill``). Its results must equal values computed here in plain Python.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trident_assets.examples.gender_age import seed_rows
from trident_assets.spark.class_cache import archive_options
from trident_assets.spark.code_shipping import package_zip, user_modules
from trident_assets.spark.local_servers import (
    SparkServer,
    start_connect_server,
    start_standalone,
)
from trident_assets_tests.children import clean_env
from trident_assets_tests.kafka_broker import MockKafkaBroker
from trident_assets_tests.test_user_code import (
    USERLAND,
    app_batches,
    copy_app,
    expected,
    run_child,
)

BATCHES = app_batches(USERLAND)

BLOCKER = '''
import importlib.machinery, sys

class _OnlyShipped:
    """trident_assets only from a shipped zip: this worker has not installed it."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "trident_assets":
            return None
        zips = [p for p in sys.path if p.endswith(".zip")]
        spec = importlib.machinery.PathFinder.find_spec(name, zips)
        if spec is None:
            raise ModuleNotFoundError("No module named 'trident_assets'", name=name)
        return spec

sys.meta_path.insert(0, _OnlyShipped)
'''

TRANSFER_ROWS = 3
"""Under Connect, driver-side tables go to Spark in slices of this many rows (several slices
per table); the standalone run keeps a classic session's default (one piece)."""


def own_view(hidden: Path, keep: Path, stage: Path) -> list[str]:
    """A command prefix: run in a mount namespace where ``hidden`` is empty but for ``keep``.

    ``keep`` (inside ``hidden``) stays at its path, as a filesystem shared by driver and
    executors would; everything else of ``hidden`` is out of reach, as on another machine.
    ``stage`` is an empty directory outside ``hidden`` used while remounting (Linux, root:
    ``unshare -m``).
    """
    script = (
        f"mount --make-rprivate / && mount --bind '{keep}' '{stage}' && "
        f"mount -t tmpfs tmpfs '{hidden}' && mkdir -p '{keep}' && "
        f"mount --bind '{stage}' '{keep}' && exec \"$@\""
    )
    return ["unshare", "-m", "sh", "-c", script, "sh"]


@dataclass(frozen=True)
class Cluster:
    """A running cluster (or Connect server) and what its executors are given."""

    url: str
    home: Path
    """The driver's home for the app; under ``own_view`` hidden from executors but its log."""
    hidden: bool
    """Whether the executors cannot see ``home`` (a mount namespace of their own)."""
    worker_python: str | None
    """The interpreter the app asks executors to run (master URLs only)."""
    transfer_rows: int | None
    """Rows per slice of a driver-side table (None: the session's default)."""


def _worker_python(directory: Path) -> str:
    """An interpreter like a cluster node's: pyspark, pyarrow, pandas, but no trident_assets."""
    block = directory / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text(BLOCKER)
    wrapper = directory / "worker-python"
    wrapper.write_text(
        f'#!/bin/sh\nexport PYTHONPATH="{block}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def _can_unshare() -> bool:
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return done.returncode == 0


def _stopped(*servers: SparkServer) -> None:
    """Assert every server process has exited (the test must leave no JVM behind)."""
    for server in servers:
        assert server.process.poll() is not None, f"{server.url} still runs"


@pytest.fixture(scope="module")
def broker() -> Iterator[MockKafkaBroker]:
    """One Kafka-protocol broker (a child process on 127.0.0.1) for the module."""
    b = MockKafkaBroker()
    yield b
    b.stop()
    assert b.proc.poll() is not None


@pytest.fixture(scope="module")
def connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A Spark Connect server whose Python workers lack trident_assets, once per module."""
    directory = tmp_path_factory.mktemp("connect")
    server = start_connect_server(
        directory / "connect.log", worker_python=_worker_python(directory)
    )
    try:
        yield Cluster(server.url, directory / "home", False, None, TRANSFER_ROWS)
    finally:
        server.stop()
    _stopped(server)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master + worker, once per module; executors see only the home's log."""
    directory = tmp_path_factory.mktemp("standalone")
    home, stage = directory / "home", directory / "stage"
    (home / "log").mkdir(parents=True)
    stage.mkdir()
    prefix = own_view(home, home / "log", stage) if _can_unshare() else []
    cluster = start_standalone(
        directory / "cluster", env=clean_env(directory), worker_prefix=prefix
    )
    try:
        yield Cluster(cluster.url, home, bool(prefix), _worker_python(directory), None)
    finally:
        cluster.stop()
    _stopped(cluster.master, cluster.worker)


def _run_app(
    cluster: Cluster, broker: MockKafkaBroker, tmp_path: Path, pg_dsn: str
) -> dict[str, Any]:
    """``cluster_app.py`` against ``cluster`` in a clean child process; its JSON results."""
    cluster.home.mkdir(exist_ok=True)
    (cluster.home / "marker").touch()
    topics = [f"t_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for topic in topics:
        broker.create_topic(topic)
    args = [str(cluster.home), cluster.url, "--kafka", broker.bootstrap_servers]
    args += ["--topics", ",".join(topics), "--pg-dsn", pg_dsn]
    if cluster.transfer_rows:
        args += ["--transfer-rows", str(cluster.transfer_rows)]
    if cluster.worker_python:
        args += ["--worker-python", cluster.worker_python]
    app = copy_app(tmp_path)
    return json.loads(run_child(app / "cluster_app.py", *args, tmp_path=tmp_path))


def _expected_join() -> dict[str, Any]:
    """The gender/age join in plain Python: 5 tuples per side and batch, no expiry."""
    genders, ages = seed_rows()
    pending: dict[int, dict[str, Any]] = {}
    people: dict[str, list[list[Any]]] = {}
    for txid, start in enumerate(range(0, 10, 5), start=1):
        joined = []
        for half in genders[start : start + 5] + ages[start : start + 5]:
            other = pending.pop(half["id"], None)
            if other is None:
                pending[half["id"]] = half
            else:
                both = {**other, **half}
                joined.append([both["id"], both["gender"], both["age"]])
        people[str(txid)] = sorted(joined)
    return {"people": people, "expired": 0, "pending": len(pending)}


def _expected_kafka() -> dict[str, Any]:
    """The Kafka word count: counts of every sentence; the query sees the first batch's."""
    sys.path.insert(0, str(USERLAND))
    try:
        import cluster_app  # type: ignore[import-not-found]

        first, later, query = (
            cluster_app.KAFKA_FIRST,
            cluster_app.KAFKA_LATER,
            cluster_app.KAFKA_QUERY,
        )
    finally:
        sys.path.remove(str(USERLAND))
        for name in ("cluster_app", "app", "word_functions"):
            sys.modules.pop(name, None)
    before = Counter(w for s in first for w in s.split())
    after = Counter(w for s in first + later for w in s.split())
    answer = sum(before[w] for w in query.split())
    return {"counts": dict(after), "answers": [[1, 0], [2, answer]], "batches": 2}


def _check(got: dict[str, Any], cluster: Cluster) -> None:
    assert got["probe"]["found"] is False, "workers must not see trident_assets unless shipped"
    if cluster.hidden:
        assert got["probe"]["sees"] is False, "executors must not see the driver's home"
    want = expected(BATCHES)
    assert got["word_count"]["outputs"] == want["outputs"]
    assert got["word_count"]["states"] == want["states"]
    assert got["join"] == _expected_join()
    assert got["kafka"] == _expected_kafka()
    kernel = got["kernel"]
    assert kernel["counts"] == kernel["log_counts"]
    assert kernel["txids"] >= 3, "at least one chunk of several txids"
    assert kernel["kernel_still_on"] == "true", "the workers ran the kernel (no fallback)"
    spilled = got["spilled"]  # the workers copied the partials into PostgreSQL themselves
    assert spilled["counts"] == spilled["log_counts"]
    assert spilled["txids"] >= 3
    assert spilled["left"] == 0, "every txid's staging table dropped"


def test_topologies_through_spark_connect(
    connect: Cluster, broker: MockKafkaBroker, tmp_path: Path, pg_dsn: str
) -> None:
    _check(_run_app(connect, broker, tmp_path, pg_dsn), connect)


def test_topologies_on_a_standalone_cluster(
    standalone: Cluster, broker: MockKafkaBroker, tmp_path: Path, pg_dsn: str
) -> None:
    """A master URL: executors run an interpreter without trident_assets, in the worker's
    directory, seeing the driver's home only for its log; they read Kafka on 127.0.0.1."""
    _check(_run_app(standalone, broker, tmp_path, pg_dsn), standalone)
    # master, worker and every executor the worker forked started from the class archive
    work = standalone.home.parent / "cluster" / "work"
    executor_logs = [p.read_text(errors="replace") for p in work.glob("app-*/*/stderr")]
    assert executor_logs, f"no executor ran under {work}"
    archive = archive_options()
    if archive:
        for text in executor_logs:
            assert f"Picked up JAVA_TOOL_OPTIONS: {archive}" in text
    if not standalone.hidden:
        pytest.skip("ran with the driver's filesystem view: `unshare -m` is not allowed here")


def test_user_modules_are_the_users_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed and trident_assets modules travel by reference; the user's own by value."""
    import pandas

    from trident_assets import Count

    monkeypatch.syspath_prepend(str(USERLAND))
    import word_functions  # type: ignore[import-not-found]

    try:
        found = user_modules([Count(), pandas.DataFrame, word_functions.split_words, len])
        assert [m.__name__ for m in found] == ["word_functions"]
    finally:
        sys.modules.pop("word_functions", None)


def test_package_zip_holds_the_sources(tmp_path: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(package_zip(tmp_path)).namelist()
    assert "trident_assets/__init__.py" in names
    assert "trident_assets/spark/code_shipping.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]

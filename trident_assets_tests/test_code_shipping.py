"""trident_assets and the user's module reach Spark's workers by themselves.

Locally the workers run the driver's interpreter. Against a Spark Connect server whose
workers have NOT installed trident_assets (their interpreter hides the venv's copy), the
package travels as an artifact and the user's module by value: the user topology gives
exactly the results of local mode. The client runs as a child process with a clean
environment, as a user's script would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trident_assets.spark.code_shipping import package_zip, user_modules
from trident_assets.spark.local_servers import own_view, start_connect_server, start_standalone
from trident_assets_tests.test_user_code import (
    USERLAND,
    _clean_env,
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

PROBE = """
import sys
import pyarrow as pa
from pyspark.sql import SparkSession

def probe(batches):
    import importlib.util, os
    for _ in batches:
        try:
            found = importlib.util.find_spec("trident_assets") is not None
        except ModuleNotFoundError:
            found = False
        sees = os.path.exists(os.path.join(HOME, "marker"))
        yield pa.RecordBatch.from_pydict({"found": [found], "sees": [sees]})

HOME = sys.argv[3] if len(sys.argv) > 3 else "/"

url = sys.argv[1]
if url.startswith("sc://"):
    spark = SparkSession.builder.remote(url).getOrCreate()
else:
    import os
    os.environ["PYSPARK_PYTHON"] = sys.argv[2]
    spark = (SparkSession.builder.master(url).config("spark.executor.memory", "1g")
             .config("spark.pyspark.python", sys.argv[2]).getOrCreate())
row = spark.range(1).mapInArrow(probe, "found boolean, sees boolean").collect()[0]
print(f"{row.found} {row.sees}")
"""


def _worker_python(tmp_path: Path) -> str:
    """An interpreter like a cluster node's: pyspark, pyarrow, pandas, but no trident_assets."""
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text(BLOCKER)
    wrapper = tmp_path / "worker-python"
    wrapper.write_text(
        f'#!/bin/sh\nexport PYTHONPATH="{block}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def test_user_topology_on_spark_connect_with_workers_lacking_the_package(
    tmp_path: Path,
) -> None:
    server = start_connect_server(tmp_path / "connect.log", worker_python=_worker_python(tmp_path))
    try:
        got = _probe_then_run(tmp_path, server.url)
    finally:
        server.stop()
    assert server.process.poll() is not None
    assert got == expected(BATCHES)


def test_user_topology_on_a_standalone_cluster_with_workers_lacking_the_package(
    tmp_path: Path,
) -> None:
    """A master URL: the package travels as a py-file (spark.submit.pyFiles), the user's
    module by value; the executors run in the worker's directory with an interpreter that
    has not installed trident_assets."""
    home, stage = tmp_path / "home", tmp_path / "stage"
    (home / "log").mkdir(parents=True)
    stage.mkdir()
    (home / "marker").touch()
    # the executors see the log at its path (a shared filesystem) and nothing else of the home
    prefix = own_view(home, home / "log", stage) if _can_unshare() else []
    cluster = start_standalone(tmp_path / "cluster", env=_clean_env(tmp_path), worker_prefix=prefix)
    try:
        python = _worker_python(tmp_path)
        if prefix:
            got = _probe_then_run(tmp_path, cluster.url, python, home=home)
        else:
            got = _probe_then_run(tmp_path, cluster.url, python)
    finally:
        cluster.stop()
    assert cluster.master.process.poll() is not None
    assert cluster.worker.process.poll() is not None
    assert got == expected(BATCHES)
    if not prefix:
        pytest.skip("ran with the driver's filesystem view: `unshare -m` is not allowed here")


def _can_unshare() -> bool:
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return done.returncode == 0


def _probe_then_run(
    tmp_path: Path, url: str, *args: str, home: Path | None = None
) -> dict[str, Any]:
    """Check the workers cannot import trident_assets by themselves, then run the user app.

    ``home``: also check the executors cannot see this directory of the driver's.
    """
    app = copy_app(tmp_path)
    (app / "probe.py").write_text(PROBE)
    python = args[:1]
    found, sees = run_child(
        app / "probe.py", url, *python, str(home or "/"), tmp_path=tmp_path
    ).split()
    assert found == "False", "the workers must not see trident_assets unless it is shipped"
    if home is not None:
        assert sees == "False", "the executors must not see the driver's home at its path"
    where = str(home or tmp_path / "home")
    return json.loads(run_child(app / "app.py", where, url, *args, tmp_path=tmp_path))


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

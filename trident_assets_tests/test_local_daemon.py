"""Local Spark's Python workers import PySpark from its installed package, not its zips."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from trident_assets.spark.local_daemon import DAEMON_MODULE, prefer_installed_pyspark
from trident_assets.spark.session import DAEMON_CONF, local_daemon_conf


def test_a_local_sessions_workers_import_the_installed_pyspark(spark: Any) -> None:
    import pyspark

    def where(batches: Any) -> Any:
        import sys

        import pyarrow as pa
        import pyspark

        for _ in batches:
            pass
        zips = [p for p in sys.path if p.endswith(".zip") and "pyspark" in p]
        yield pa.RecordBatch.from_pydict({"file": [pyspark.__file__], "zips": [json.dumps(zips)]})

    assert spark.conf.get(DAEMON_CONF) == DAEMON_MODULE
    rows = spark.range(4).mapInArrow(where, "file string, zips string").collect()
    assert {(row.file, row.zips) for row in rows} == {(pyspark.__file__, "[]")}


def _package(site: Path, *, py4j: bool) -> list[str]:
    """A PySpark-like install in ``site``; its two zips, as Spark puts them on the path."""
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    if py4j:
        (site / "py4j").mkdir()
        (site / "py4j" / "__init__.py").write_text("")
    zips = [lib / "pyspark.zip", lib / "py4j-0.10.9.9-src.zip"]
    for z in zips:
        z.write_bytes(b"")
    return [str(z) for z in zips]


def test_the_zips_are_dropped_only_when_their_own_install_provides_both(tmp_path: Path) -> None:
    site = tmp_path / "site"
    zips = _package(site, py4j=True)
    assert prefer_installed_pyspark([*zips, str(site)]) == [str(site)]

    no_py4j = tmp_path / "no_py4j"
    zips = _package(no_py4j, py4j=False)
    path = [*zips, str(no_py4j)]
    assert prefer_installed_pyspark(path) is path, "py4j only in its zip: kept"

    other = tmp_path / "other"
    zips = _package(other, py4j=True)
    path = [*zips, str(site)]
    assert prefer_installed_pyspark(path) is path, "zips of another install: kept"

    path = [str(site)]
    assert prefer_installed_pyspark(path) is path


def test_the_daemon_is_set_for_local_masters_running_this_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trident_assets

    ours = {"spark.master": "local[2]", "spark.pyspark.python": sys.executable}
    assert local_daemon_conf(ours) == {DAEMON_CONF: DAEMON_MODULE}
    assert local_daemon_conf({**ours, "spark.master": "local"}) == {DAEMON_CONF: DAEMON_MODULE}
    assert local_daemon_conf({**ours, "spark.master": "spark://127.0.0.1:7077"}) == {}
    assert local_daemon_conf({**ours, "spark.pyspark.python": "/usr/bin/python3"}) == {}
    other_venv = tmp_path / "venv" / "bin" / "python"  # the same interpreter, other packages
    other_venv.parent.mkdir(parents=True)
    other_venv.symlink_to(Path(sys.executable).resolve())
    assert local_daemon_conf({**ours, "spark.pyspark.python": str(other_venv)}) == {}
    assert local_daemon_conf({**ours, DAEMON_CONF: "my.daemon"}) == {}, "theirs is kept"

    root = Path(trident_assets.__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    assert local_daemon_conf(ours) == {DAEMON_CONF: DAEMON_MODULE}, "workers start here"
    assert local_daemon_conf(ours, same_cwd=False) == {}, "a server starts elsewhere"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(root), *sys.path])
    assert local_daemon_conf(ours) == {}, "found in the script's folder only"

"""The class archive local Spark JVMs start from, and the driver's quiet start.

The end-to-end test runs as a user would, in clean child processes: ``trident class-cache``
builds an archive at ``TRIDENT_CLASS_CACHE``, and a script's local SparkSession then loads
Spark's classes from it (the JVM's class-load log says so per class) and prints nothing on
stderr but the JVM's own incubator-module notice.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trident_assets.spark.class_cache import CACHE_ENV, archive_options, archive_path
from trident_assets.spark.session import LOCAL_GC_OPTION, LOG4J2_CONFIG, driver_java_options

BIN = Path(sys.executable).parent
C1 = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
LOG4J = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}"


def test_driver_options_add_ours_and_keep_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "spark.jsa"
    monkeypatch.setenv(CACHE_ENV, str(archive))
    assert archive_path() == archive
    assert archive_options() == "", "no archive file: no option"
    assert driver_java_options({}) == LOG4J
    archive.write_bytes(b"x")
    cds = f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
    assert driver_java_options({}) == f"{LOG4J} {cds}"
    own = {"spark.driver.extraJavaOptions": "-Dx=1"}
    assert driver_java_options(own) == f"-Dx=1 {LOG4J} {cds}"
    assert driver_java_options(own, quiet_log=False) == f"-Dx=1 {cds}"
    theirs = "-Dlog4j2.configurationFile=file:///mine.properties -XX:SharedArchiveFile=/a.jsa"
    assert driver_java_options({"spark.driver.extraJavaOptions": theirs}) == theirs
    monkeypatch.setenv(CACHE_ENV, "off")
    assert archive_path() is None
    assert driver_java_options(own) == f"-Dx=1 {LOG4J}"


def test_a_local_driver_gets_the_parallel_collector_unless_the_user_chose_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"x")
    monkeypatch.setenv(CACHE_ENV, str(archive))
    for name in ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"):
        monkeypatch.delenv(name, raising=False)
    cds = f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
    assert LOCAL_GC_OPTION == "-XX:+UseParallelGC"
    local = {"spark.master": "local[2]"}
    assert driver_java_options(local) == f"{LOG4J} -XX:+UseParallelGC {cds}"
    assert driver_java_options({"spark.master": "local"}) == f"{LOG4J} -XX:+UseParallelGC {cds}"
    assert driver_java_options({**local, "spark.driver.extraJavaOptions": "-Dx=1"}) == (
        f"-Dx=1 {LOG4J} -XX:+UseParallelGC {cds}"
    )
    assert driver_java_options({"spark.master": "spark://h:7077"}) == f"{LOG4J} {cds}"
    assert driver_java_options({}) == f"{LOG4J} {cds}", "no master: not known to be local"
    mine = {**local, "spark.driver.extraJavaOptions": "-XX:+UseG1GC -Dx=1"}
    assert driver_java_options(mine) == f"-XX:+UseG1GC -Dx=1 {LOG4J} {cds}"
    default = {**local, "spark.driver.defaultJavaOptions": "-XX:+UseSerialGC"}
    assert driver_java_options(default) == f"{LOG4J} {cds}"
    overhead = {**local, "spark.driver.extraJavaOptions": "-XX:+UseGCOverheadLimit"}
    assert driver_java_options(overhead) == (
        f"-XX:+UseGCOverheadLimit {LOG4J} -XX:+UseParallelGC {cds}"
    ), "not a collector"
    server_env = {"SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    assert driver_java_options(local, environ=server_env) == f"{LOG4J} {cds}"
    assert driver_java_options(local, environ={}) == f"{LOG4J} -XX:+UseParallelGC {cds}"
    for name in ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"):
        monkeypatch.setenv(name, "-Xss4m -XX:+UseZGC")
        assert driver_java_options(local) == f"{LOG4J} {cds}", name
        monkeypatch.delenv(name)
    assert driver_java_options(local) == f"{LOG4J} -XX:+UseParallelGC {cds}"


def test_default_archive_path_is_per_install_under_the_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = archive_path()
    assert path is not None
    assert path.parent == tmp_path / "trident_assets"
    assert path.name.startswith(f"spark-{pyspark.__version__}-")
    assert path.suffix == ".jsa"


def test_class_cache_rebuilds_an_archive_of_another_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive's stamp is its workload's hash: an upgrade that changes it rebuilds."""
    from typer.testing import CliRunner

    from trident_assets.cli import app
    from trident_assets.spark import class_cache

    archive = tmp_path / "spark.jsa"
    monkeypatch.setenv(CACHE_ENV, str(archive))
    dumps: list[str] = []

    def fake_jvm(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        """The child's JVM dumping its archive at exit (``-XX:ArchiveClassesAtExit=``)."""
        out = next(o for o in cmd[3].split() if o.startswith("-XX:ArchiveClassesAtExit="))
        Path(out.split("=", 1)[1]).write_bytes(b"classes of " + cmd[2].encode())
        dumps.append(cmd[2])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(class_cache.subprocess, "run", fake_jvm)

    def class_cache_cli(*args: str) -> str:
        result = CliRunner().invoke(app, ["class-cache", *args])
        assert result.exit_code == 0, result.output
        return result.output

    archive.write_bytes(b"an archive from before stamps")
    assert not class_cache.archive_current(archive), "no stamp: rebuilt"
    assert "built" in class_cache_cli()
    assert class_cache.archive_current(archive)
    assert (tmp_path / "spark.jsa.workload").read_text().strip() == class_cache.workload_stamp()
    assert "exists" in class_cache_cli(), "the same workload: kept"
    assert len(dumps) == 1
    monkeypatch.setattr(class_cache, "_WORKLOAD", class_cache._WORKLOAD + "\nprint('more')\n")
    assert not class_cache.archive_current(archive), "another workload's archive"
    assert "built" in class_cache_cli()
    assert archive.read_bytes().endswith(b"print('more')\n")
    assert class_cache.archive_current(archive)
    assert "built" in class_cache_cli("--rebuild"), "--rebuild still dumps anew"
    assert len(dumps) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark.jsa", "spark.jsa.workload"]


SESSION = """
from trident_assets.spark.session import build_spark_session
import sys
spark = build_spark_session({"spark.driver.extraJavaOptions": sys.argv[1]})
print(spark.range(10).selectExpr("sum(id)").collect()[0][0])
spark.stop()
"""


def test_trident_class_cache_builds_an_archive_the_next_driver_jvm_loads(tmp_path: Path) -> None:
    archive = tmp_path / "cache" / "spark.jsa"
    env = {
        "HOME": str(tmp_path),
        "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "SPARK_SUBMIT_OPTS": C1,
        CACHE_ENV: str(archive),
    }
    built = subprocess.run(
        ["trident", "class-cache"], env=env, capture_output=True, text=True, timeout=600
    )
    assert built.returncode == 0, built.stderr
    assert built.stdout.startswith(f"class archive {archive} built ("), built.stdout
    assert archive.stat().st_size > 10 << 20
    again = subprocess.run(
        ["trident", "class-cache"], env=env, capture_output=True, text=True, timeout=600
    )
    assert again.stdout.startswith(f"class archive {archive} exists ("), again.stdout
    stamp = archive.with_name(f"{archive.name}.workload")
    assert sorted(archive.parent.iterdir()) == [archive, stamp], "no temporary file left"

    loads = tmp_path / "class-load.txt"
    run = subprocess.run(
        [sys.executable, "-c", SESSION, f"-Xlog:class+load=info:file={loads}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "45\n"
    log = loads.read_text()
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in log
    noise = [line for line in run.stderr.splitlines() if line.strip()]
    assert noise == ["WARNING: Using incubator modules: jdk.incubator.vector"]

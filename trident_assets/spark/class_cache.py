"""A class-data-sharing archive of Spark's classes: a cold Spark JVM starts in about half the time.

A JVM starting Spark reads, parses and verifies some ten thousand classes before the first
job runs. An application class-data-sharing (AppCDS) archive holds them ready to map: it is
dumped once by a JVM that ran a representative workload (:func:`build_archive`, ``trident
class-cache``, ``make setup``), and every later driver JVM that
:func:`~trident_assets.spark.session.build_spark_session` starts uses it
(:func:`archive_options`). Measured on 2 cores: a local SparkSession and its first job in
3.5 s instead of 7.4 s.

The JVM validates the archive itself (the same JVM build, the same class path, unchanged
jars): an archive from another Java or Spark install is ignored, silently, and the JVM starts
as without one. It changes how fast classes load, never what runs.

Where it lives: ``TRIDENT_CLASS_CACHE`` (a file path; ``off`` disables the archive), else
``$XDG_CACHE_HOME/trident_assets`` (default ``~/.cache/trident_assets``), one file per Java
and Spark install (about 180 MB).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from trident_assets.errors import ConfigError

__all__ = [
    "CACHE_ENV",
    "archive_current",
    "archive_options",
    "archive_path",
    "build_archive",
    "workload_stamp",
]

CACHE_ENV = "TRIDENT_CLASS_CACHE"
"""Environment variable: the archive's path, or ``off``."""
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""A missing, stale or foreign archive is ignored without a word (it only costs speed)."""


def _java() -> str:
    """The ``java`` Spark's launcher runs (``JAVA_HOME`` first, as ``spark-class`` does)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return str(Path(home) / "bin" / "java")
    return shutil.which("java") or "java"


def archive_path() -> Path | None:
    """The archive's path for this Java and Spark install; None when disabled (``off``)."""
    own = os.environ.get(CACHE_ENV, "").strip()
    if own.lower() == "off":
        return None
    if own:
        return Path(own).expanduser()
    import pyspark

    java = Path(_java())
    java = java.resolve() if java.exists() else java
    jars = Path(pyspark.__file__).parent / "jars"
    stamp = f"{java}|{pyspark.__version__}|{jars.resolve()}|{sys.version_info[:2]}"
    digest = hashlib.sha256(stamp.encode()).hexdigest()[:12]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "trident_assets" / f"spark-{pyspark.__version__}-{digest}.jsa"


def archive_options() -> str:
    """JVM options that use the archive when it exists (empty when there is none or ``off``)."""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


_WORKLOAD = """
import shutil
import sys
from pyspark.sql import Window
from pyspark.sql import functions as F
from trident_assets.spark.session import build_spark_session

spark = build_spark_session({"spark.driver.extraJavaOptions": sys.argv[1]})
out = sys.argv[2]
words = spark.range(2000).select(
    (F.col("id") % 17).cast("string").alias("word"),
    F.to_json(F.struct(F.col("id"), F.current_timestamp().alias("ts"))).alias("value"),
)
words.write.mode("overwrite").parquet(out)
read = spark.read.parquet(out)
parsed = read.select("word", F.from_json("value", "id BIGINT, ts TIMESTAMP").alias("v"))
counts = parsed.groupBy("word").agg(F.count("*").alias("n"), F.max("v.ts").alias("last"))
joined = counts.join(read.select("word").distinct(), "word", "left")
table = joined.orderBy("word").toArrow()
spark.createDataFrame(table.to_pandas()).selectExpr("sum(n)").collect()
ranked = parsed.select(
    "word",
    F.explode(F.sequence(F.lit(0), F.lit(2))).alias("k"),
    F.row_number().over(Window.partitionBy("word").orderBy("v.id")).alias("r"),
)
ranked.mapInArrow(lambda batches: batches, ranked.schema).groupBy("k").count().toArrow()

# trident_assets' own catch-up jobs: an event-time window and a word count over the log, in
# chunks of several txids (its log scan, decode, Arrow transfers, observation, commits)
import tempfile
import trident_assets as ta
from trident_assets.spouts.config import SpoutConfig

home = tempfile.mkdtemp(prefix="trident-class-cache-")
log = ta.PartitionedLog(f"{home}/log")
log.create_topic("words", 2)
topo = ta.TridentTopology("class_cache")
spout = ta.LogSpout(
    "words", ta.StringScheme("line", with_metadata=True), SpoutConfig(max_batch_size=200)
)
split = topo.new_stream("lines", spout).each("line", ta.Split(), "word")
split.project(["word", "timestamp"]).group_by("word").window_aggregate(
    ta.EventWindow.tumbling("1 minute", time_field="timestamp", allowed_lateness="10 s"),
    ta.Count(),
    "n",
    spec=ta.StateSpec("per_minute"),
)
split.group_by("word").persistent_aggregate(ta.StateSpec("counts"), "word", ta.Count(), "count")
for b in range(4):
    producer = log.producer("words", "round_robin")
    for i in range(200):
        producer.send(f"a b{i % 7} c{(i + b) % 5}".encode())
    producer.flush()
spark.conf.set("trident.codegen.minRecords", "0")  # as a large chunk: generated code
spark.conf.set("trident.log.inlineMaxRecords", "0")  # and the log's files read by Spark
store = ta.DuckDBStore(f"{home}/state.duckdb")
runner = ta.TopologyRunner(topo, spark, store, log, max_spout_pending=2)
list(runner.run_batches([1, 2, 3, 4]))
store.close()
shutil.rmtree(home, ignore_errors=True)
gateway = spark.sparkContext._gateway
spark.stop()
proc = getattr(gateway, "proc", None)
if proc is not None and proc.stdin is not None:
    proc.stdin.close()  # the JVM exits on EOF of its stdin, writing the archive first
    proc.wait()
"""


def workload_stamp() -> str:
    """A hash of the workload an archive is dumped from: which classes it holds."""
    return hashlib.sha256(_WORKLOAD.encode()).hexdigest()[:16]


def _stamp_file(path: Path) -> Path:
    """The file beside the archive at ``path`` that holds its :func:`workload_stamp`."""
    return path.with_name(f"{path.name}.workload")


def archive_current(path: Path) -> bool:
    """Whether ``path`` holds an archive dumped by this version's workload.

    An archive without a stamp, or from another workload (an upgrade changed it), is still
    used by the JVM while it fits the install, but ``trident class-cache`` rebuilds it.
    """
    stamp = _stamp_file(path)
    return path.is_file() and stamp.is_file() and stamp.read_text().strip() == workload_stamp()


def build_archive(path: Path | None = None, *, timeout_s: float = 600.0) -> Path:
    """Dump the archive (replacing an existing one) from a child process's Spark workload.

    The child starts local Spark with ``-XX:ArchiveClassesAtExit``, runs a small job (Parquet,
    JSON, a shuffle, a join, a window function, a Python Arrow map, Arrow both ways) and a
    small catch-up of trident_assets' own (an event-time window and a word count over the
    embedded log, two txids per Spark job, committed to DuckDB), so the classes the first
    jobs of a run load come from the archive too, and exits; the archive is written to a temporary
    file that then replaces ``path`` (default :func:`archive_path`) atomically, so a JVM
    starting meanwhile sees either the old archive or the new one; then the archive's
    :func:`workload_stamp` is written beside it (``<archive>.workload``).

    Raises:
        ConfigError: the archive is disabled (``TRIDENT_CLASS_CACHE=off``) or the JVM wrote
            none (its output is in the message).
    """
    target = path or archive_path()
    if target is None:
        msg = f"{CACHE_ENV}=off: the class archive is disabled; unset it to build one"
        raise ConfigError(msg)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    scratch = target.with_name(f"{target.name}.{os.getpid()}.parquet")
    env = {**os.environ, CACHE_ENV: "off"}
    options = f"-XX:ArchiveClassesAtExit={tmp} {_QUIET}"
    try:
        done = subprocess.run(
            [sys.executable, "-c", _WORKLOAD, options, str(scratch)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            tail = (done.stdout + done.stderr)[-2000:]
            msg = (
                f"the JVM wrote no class archive at {tmp} (exit code {done.returncode}); Spark "
                f"still works, only its JVMs start slower. Output:\n{tail}"
            )
            raise ConfigError(msg)
        os.replace(tmp, target)
        stamp = _stamp_file(target)
        stamp_tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}.tmp")
        stamp_tmp.write_text(workload_stamp() + "\n")
        os.replace(stamp_tmp, stamp)
    finally:
        tmp.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return target

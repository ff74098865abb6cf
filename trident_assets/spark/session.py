"""Building the SparkSession: local by default, a master URL or Spark Connect when configured."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "DAEMON_CONF",
    "DEBUGGING_CONF",
    "DEFAULT_SPARK_CONF",
    "JAVA_OPTIONS",
    "LOCAL_GC_OPTION",
    "LOG4J2_CONFIG",
    "build_spark_session",
    "driver_java_options",
    "local_daemon_conf",
    "use_worker_python",
    "worker_python",
]

DEBUGGING_CONF = "spark.python.sql.dataFrameDebugging.enabled"
"""PySpark's DataFrame call-site capture (see :data:`DEFAULT_SPARK_CONF`)."""

DEFAULT_SPARK_CONF: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
    DEBUGGING_CONF: "false",
}
"""Settings tuned for a small local machine; every key can be overridden.

:data:`DEBUGGING_CONF` off: with it on (PySpark's default), every ``pyspark.sql.functions``
call of a classic session also captures the Python call stack and sends it to the JVM (about
ten py4j round trips), for error messages that point at the DataFrame code, which here is
trident_assets' own. Off, a small batch's jobs make a quarter fewer JVM calls."""


LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
"""The driver's log configuration: errors only, to stderr, from the JVM's first line."""
JAVA_OPTIONS = "spark.driver.extraJavaOptions"

LOCAL_GC_OPTION = "-XX:+UseParallelGC"
"""The collector of a local driver JVM (a ``local`` or ``local[N]`` master).

The JVM's own choice on a machine of 2 or more cores and 2 GB or more is G1, whose concurrent
work shares the cores with the tasks of a local session. The parallel collector does all its
work in the pauses: on 2 cores a file catch-up took 10-21% less wall, a windowed one less too
(docs/benchmarks.md). Results are the same with any collector."""

_GC_CHOICE = re.compile(
    r"-XX:[+-]Use(?:Serial|Parallel|ParallelOld|G1|Z|Shenandoah|Epsilon|ConcMarkSweep)GC\b"
)
_JAVA_OPTION_VARIABLES = (
    "SPARK_SUBMIT_OPTS",
    "JAVA_TOOL_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "_JAVA_OPTIONS",
)
"""Environment variables whose options the driver JVM of a local session also reads."""


def _chooses_collector(conf: Mapping[str, str], environ: Mapping[str, str]) -> bool:
    """Whether the user's options (``conf`` or the JVM's ``environ``) select a collector."""
    texts = [conf.get(JAVA_OPTIONS, ""), conf.get("spark.driver.defaultJavaOptions", "")]
    texts += [environ.get(name, "") for name in _JAVA_OPTION_VARIABLES]
    return any(_GC_CHOICE.search(text) for text in texts)


def driver_java_options(
    conf: Mapping[str, str],
    *,
    quiet_log: bool = True,
    environ: Mapping[str, str] | None = None,
) -> str:
    """``spark.driver.extraJavaOptions`` of ``conf`` with ours added.

    Ours: with ``quiet_log`` :data:`LOG4J2_CONFIG`; for a local master (``spark.master`` of
    ``conf`` is ``local`` or ``local[...]``) :data:`LOCAL_GC_OPTION`; the class archive of
    :mod:`~trident_assets.spark.class_cache` when there is one. The user's own options are kept
    first and win: their ``-Dlog4j2.configurationFile`` or ``-XX:SharedArchiveFile`` replaces
    ours, and so does a collector (``-XX:+Use...GC``) chosen in ``conf``'s
    ``spark.driver.extraJavaOptions`` or ``spark.driver.defaultJavaOptions`` or in
    ``SPARK_SUBMIT_OPTS``, ``JAVA_TOOL_OPTIONS``, ``JDK_JAVA_OPTIONS`` or ``_JAVA_OPTIONS`` of
    ``environ``, the JVM's environment (default ``os.environ``): two collectors would stop
    the JVM from starting.
    """
    from trident_assets.spark.class_cache import archive_options

    own = conf.get(JAVA_OPTIONS, "").strip()
    parts = [own]
    if quiet_log and "-Dlog4j2.configurationFile=" not in own:
        parts.append(f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}")
    master = conf.get("spark.master", "")
    if (master == "local" or master.startswith("local[")) and not _chooses_collector(
        conf, os.environ if environ is None else environ
    ):
        parts.append(LOCAL_GC_OPTION)
    if "SharedArchiveFile=" not in own and "ArchiveClassesAtExit=" not in own:
        parts.append(archive_options())
    return " ".join(p for p in parts if p)


def worker_python(conf: Mapping[str, str] | None = None) -> str:
    """The interpreter Spark's Python workers run.

    ``spark.pyspark.python`` in ``conf``, else ``PYSPARK_PYTHON`` from the environment, else
    this process's own interpreter. On a cluster the path must exist on every worker, with
    pyarrow and pandas installed (the project and user modules are shipped: see
    :mod:`trident_assets.spark.code_shipping`).
    """
    return (
        (conf or {}).get("spark.pyspark.python")
        or os.environ.get("PYSPARK_PYTHON")
        or (sys.executable)
    )


def use_worker_python(conf: Mapping[str, str] | None = None) -> str:
    """Set ``PYSPARK_PYTHON`` to :func:`worker_python` before a SparkContext starts; return it.

    PySpark 4 reads the workers' interpreter from ``PYSPARK_PYTHON`` when the context starts
    (else ``python3``, which may lack pyarrow); ``spark.pyspark.python`` alone is not enough.
    """
    python = worker_python(conf)
    os.environ["PYSPARK_PYTHON"] = python
    return python


DAEMON_CONF = "spark.python.daemon.module"
"""Spark conf key: the module Spark runs as its Python worker daemon."""


def local_daemon_conf(conf: Mapping[str, str], *, same_cwd: bool = True) -> dict[str, str]:
    """``spark.python.daemon.module`` for :mod:`~trident_assets.spark.local_daemon`, or nothing.

    Only for a local master (``local``, ``local[N]``) whose workers run this interpreter, when
    ``conf`` names no daemon module of its own, and unless this process imports
    trident_assets from its script's folder only: a local worker starts in this process's
    working directory (``python -m`` puts that on its path) with this interpreter's
    installed packages, but without the script's folder. ``same_cwd=False`` (a server
    started in another directory): unless it imports trident_assets from its script's
    folder or its working directory.
    """
    master = conf.get("spark.master", "")
    if DAEMON_CONF in conf or not (master == "local" or master.startswith("local[")):
        return {}
    python = conf.get("spark.pyspark.python", "")
    if os.path.abspath(python) != os.path.abspath(sys.executable):  # a venv's own path
        return {}
    root = Path(__file__).resolve().parents[2]  # the directory that holds trident_assets/
    script = Path(sys.path[0] or os.getcwd()).resolve() if sys.path else None
    cwd = Path.cwd().resolve()
    if (root == script and root != cwd) or (root == cwd and not same_cwd):
        return {}
    from trident_assets.spark.local_daemon import DAEMON_MODULE

    return {DAEMON_CONF: DAEMON_MODULE}


def build_spark_session(conf: Mapping[str, str] | None = None, remote: str | None = None) -> Any:
    """Return a SparkSession (``getOrCreate``) with the defaults overridden by ``conf``.

    ``remote`` (e.g. ``sc://host:15002``) connects through Spark Connect instead of starting
    a local JVM; the same DataFrame code runs either way. A JVM started here logs errors
    only, from its first line, and starts from the class archive when there is one
    (:func:`driver_java_options`); a local one runs its Python workers from PySpark's
    installed package (:func:`local_daemon_conf`).
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("trident_assets")
    if remote:
        builder = builder.remote(remote)
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    python = use_worker_python(conf)
    merged = {**DEFAULT_SPARK_CONF, "spark.pyspark.python": python, **(conf or {})}
    merged[JAVA_OPTIONS] = driver_java_options(merged)
    merged.update(local_daemon_conf(merged))
    for key, value in merged.items():
        builder = builder.config(key, value)
    with _sigint_handler_kept():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@contextlib.contextmanager
def _sigint_handler_kept() -> Iterator[None]:
    """Keep a SIGINT handler someone installed (Dagster's, during a run) over PySpark's.

    A new SparkContext on the main thread replaces the SIGINT handler with one that calls
    into the JVM from inside the handler, on the thread that may be waiting for an answer
    on the same Py4J connection, and raises KeyboardInterrupt wherever the thread is: that
    bypasses Dagster's interrupt handling of a run. Python's default handler is replaced
    as before (a script's or a notebook's Ctrl-C cancels the Spark jobs).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if previous is not signal.default_int_handler and previous is not None:
            signal.signal(signal.SIGINT, previous)

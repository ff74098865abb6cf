"""Building the SparkSession: local by default, a master URL or Spark Connect when configured."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_SPARK_CONF", "build_spark_session", "use_worker_python", "worker_python"]

DEFAULT_SPARK_CONF: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "2g",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
}
"""Settings tuned for a small local machine; every key can be overridden."""


def worker_python(conf: Mapping[str, str] | None = None) -> str:
    """The interpreter Spark's Python workers run.

    ``spark.pyspark.python`` in ``conf``, else ``PYSPARK_PYTHON`` from the environment, else
    this process's own interpreter. On a cluster the path must exist on every worker, with
    pyarrow and pandas installed (the project and user modules are shipped: see
    :mod:`trident_assets.spark.code_shipping`).
    """
    return (conf or {}).get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON") or (
        sys.executable
    )


def use_worker_python(conf: Mapping[str, str] | None = None) -> str:
    """Set ``PYSPARK_PYTHON`` to :func:`worker_python` before a SparkContext starts; return it.

    PySpark 4 reads the workers' interpreter from ``PYSPARK_PYTHON`` when the context starts
    (else ``python3``, which may lack pyarrow); ``spark.pyspark.python`` alone is not enough.
    """
    python = worker_python(conf)
    os.environ["PYSPARK_PYTHON"] = python
    return python


def build_spark_session(conf: Mapping[str, str] | None = None, remote: str | None = None) -> Any:
    """Return a SparkSession (``getOrCreate``) with the defaults overridden by ``conf``.

    ``remote`` (e.g. ``sc://host:15002``) connects through Spark Connect instead of starting
    a local JVM; the same DataFrame code runs either way.
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
    for key, value in merged.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session

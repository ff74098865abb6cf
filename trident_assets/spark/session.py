"""Building the SparkSession: local by default, a master URL or Spark Connect when configured."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_SPARK_CONF", "build_spark_session"]

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
    merged = {**DEFAULT_SPARK_CONF, "spark.pyspark.python": sys.executable, **(conf or {})}
    for key, value in merged.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session

"""Whether a batch's Spark jobs generate code, by how many records the batch reads.

Spark generates and compiles Java code for every query it runs (whole-stage and expression
code generation). Over many rows the compiled code pays for itself; over a small batch,
generating and compiling it costs more than evaluating the expressions interpreted, and a
batch's code changes with every batch (its offset ranges and watermark are literals in it),
so Spark's cache of compiled code rarely helps. Jobs over fewer than
``trident.codegen.minRecords`` records (Spark conf, default 10,000; ``0`` always generates
code) run with both kinds of code generation off, for their duration only
(:func:`~trident_assets.spark.scoped_conf.scoped_conf`). Either way the results are the same;
only the speed differs.

Measured by ``bench/codegen_batches.py`` on 2 cores (table in ``bench/PROFILE.md``):
interpreted, a batch of 500-1,000 records takes 0.73-0.94x the time of generated code, one
of 50,000 records 1.18-1.33x.
"""

from __future__ import annotations

from typing import Any

from trident_assets.errors import ConfigError
from trident_assets.spark.scoped_conf import read_conf

__all__ = ["CODEGEN_MIN_RECORDS_CONF", "DEFAULT_CODEGEN_MIN_RECORDS", "INTERPRETED", "codegen_conf"]

CODEGEN_MIN_RECORDS_CONF = "trident.codegen.minRecords"
"""Spark conf key: the fewest records a batch (or chunk) needs for Spark to generate code."""

DEFAULT_CODEGEN_MIN_RECORDS = 10_000

INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""Spark settings that evaluate every expression and operator interpreted."""


def codegen_conf(spark: Any, records: int) -> dict[str, str]:
    """The Spark settings for jobs over ``records`` records: :data:`INTERPRETED` or none.

    Interpreted when ``records`` is below the session's ``trident.codegen.minRecords``
    (default :data:`DEFAULT_CODEGEN_MIN_RECORDS`). A session that refuses to read the key (a
    remote one may) uses the default; a value that is not a non-negative integer is refused
    (:class:`~trident_assets.errors.ConfigError`) before any job runs.
    """
    raw = read_conf(spark, CODEGEN_MIN_RECORDS_CONF)
    if raw is None:
        least = DEFAULT_CODEGEN_MIN_RECORDS
    else:
        text = str(raw).strip()
        if not text.isdigit():
            msg = (
                f"Spark conf {CODEGEN_MIN_RECORDS_CONF}={raw!r} must be a non-negative integer "
                f"(records; 0 always generates code; default {DEFAULT_CODEGEN_MIN_RECORDS})"
            )
            raise ConfigError(msg)
        least = int(text)
    return dict(INTERPRETED) if records < least else {}

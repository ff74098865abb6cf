"""Which states a pipelined chunk computes with an Arrow kernel instead of Spark's row pipeline.

Spark conf ``trident.partials.arrowKernel`` (default ``true``) turns the kernels off with
``false``, e.g. to compare both plans; batches (or chunks) of fewer than
``trident.partials.arrowKernel.minRecords`` records (default 50,000) use Spark's operators.
"""

from __future__ import annotations

import contextlib
import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from trident_assets.core.aggregators import Count
from trident_assets.spark.arrow_partials import CountSplit, count_split
from trident_assets.spark.schemes import StringScheme
from trident_assets.spark.scoped_conf import read_conf
from trident_assets.spark.spout_reads import reads_for
from trident_assets.stream.operations import Split

if TYPE_CHECKING:
    from trident_assets.stream.graph import Node
    from trident_assets.stream.streams import TridentState

__all__ = [
    "ARROW_KERNEL_CONF",
    "DEFAULT_MIN_RECORDS",
    "MIN_RECORDS_CONF",
    "arrow_kernel",
    "arrow_kernels_on",
    "kernel_frame",
    "kernel_unavailable",
]

_log = logging.getLogger(__name__)

ARROW_KERNEL_CONF = "trident.partials.arrowKernel"
"""Spark conf key: ``false`` computes every state's partials with Spark's own operators."""

MIN_RECORDS_CONF = "trident.partials.arrowKernel.minRecords"
"""Spark conf key: the fewest records a batch (or chunk) needs for the kernel."""

DEFAULT_MIN_RECORDS = 50_000


def arrow_kernels_on(spark: Any, records: int) -> bool:
    """True unless the kernels are off or the batch is small.

    Off: the session's ``trident.partials.arrowKernel`` is ``false``. Small: fewer than
    ``trident.partials.arrowKernel.minRecords`` records (default
    :data:`DEFAULT_MIN_RECORDS`): starting the executors' Python workers costs more than
    the kernel saves on a few records, and Spark's operators need no Python at all.
    """
    value = read_conf(spark, ARROW_KERNEL_CONF) or "true"
    least = read_conf(spark, MIN_RECORDS_CONF) or str(DEFAULT_MIN_RECORDS)
    return value.lower() != "false" and records >= int(least)


def arrow_kernel(state: TridentState, txid_column: str) -> tuple[CountSplit, Node] | None:
    """The kernel for ``state`` and its spout node, or None when Spark's operators must run.

    Eligible: ``persistent_aggregate(Count)`` grouped by the Split's output field (and maybe
    the text field) of ``each(text, Split) `` directly over a log spout whose scheme is
    exactly :class:`StringScheme` without metadata, emitting ``text``.
    """
    a = state.node.args
    if type(a["agg"]) is not Count or not a["group"]:
        return None
    (each,) = state.node.parents
    if each.kind != "each" or type(each.args["function"]) is not Split:
        return None
    (spout,) = each.parents
    if spout.kind != "spout" or not hasattr(reads_for(spout.args["spout"]), "read_many"):
        return None
    scheme = spout.args["spout"].scheme
    if type(scheme) is not StringScheme or scheme.with_metadata:
        return None
    inputs, outputs = list(each.args["inputs"]), list(each.args["outputs"])
    if inputs != [scheme.field] or len(outputs) != 1 or outputs[0] == scheme.field:
        return None
    group = tuple(a["group"])
    if not set(group) <= {scheme.field, outputs[0]} or len(set(group)) != len(group):
        return None
    spec = CountSplit(
        text=scheme.field,
        piece=outputs[0],
        sep=each.args["function"].sep,
        group=group,
        txid=txid_column,
        output=a["output"],
    )
    return spec, spout


def kernel_frame(raw: Any, spec: CountSplit) -> Any:
    """The kernel's DataFrame over ``raw`` records (their ``value`` and ``spec.txid`` columns).

    One ``mapInArrow`` pass, no shuffle: each task yields its partial counts and its
    dead-letter count (combine them with
    :func:`~trident_assets.spark.arrow_partials.combine_task_partials`).
    """
    from pyspark.sql import functions as F

    columns = raw.select(F.col("value"), F.col(spec.txid))
    return columns.mapInArrow(partial(count_split, spec), spec.schema())


def kernel_unavailable(spark: Any, exc: BaseException) -> bool:
    """True when ``exc`` says the executors' Python cannot import the kernel (e.g. no pyarrow).

    Then the kernels are turned off for the rest of the session (``trident.partials.
    arrowKernel=false``, with a warning), and the caller computes the partials with Spark's
    own operators instead: built-in states keep working on executors without pyarrow.
    """
    text = str(exc)
    if "ModuleNotFoundError" not in text and "ImportError" not in text:
        return False
    _log.warning(
        "The Arrow kernel cannot run on the executors' Python (%s); computing partials with "
        "Spark's operators from now on. Install pyarrow for the executors' interpreter "
        "(spark.pyspark.python) to use it.",
        text.strip().splitlines()[-1] if text.strip() else type(exc).__name__,
    )
    with contextlib.suppress(Exception):
        spark.conf.set(ARROW_KERNEL_CONF, "false")
    return True

"""A node's DataFrame whose first action also counts its spout's dead letters.

Rebuilt from the spout with an ``Observation`` on the scheme's decode: the action that
computes a state over it counts the records that failed too, so the batch phase runs
a dead-letter job only when there are any (usually none), instead of reading the batch
again. The plan must read the observed records once (an observation counted twice would
count them twice). Each tuple may carry its source record along (an event-time window's
dead letter names the record it came from: topic, partition, offset).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trident_assets.spark.node_frames import NodeFrames
from trident_assets.spark.observation import observed_metrics
from trident_assets.stream.trident_windows import ORDERED_KINDS

if TYPE_CHECKING:
    from trident_assets.stream.graph import Node

__all__ = ["RECORD_COLUMNS", "Observed", "count_dead", "observed_frame"]

RECORD_COLUMNS = ("topic", "partition", "offset")
"""The raw record's columns a ``keep`` list copies, in its order."""

Observed = tuple[str, Any]
"""A spout id and the ``Observation`` that counts its dead letters."""


def observed_frame(
    raw: Callable[[Node], Any], node: Node, keep: tuple[str, ...], tag: tuple[str, ...] = ()
) -> tuple[Any, Observed] | None:
    """``node``'s DataFrame rebuilt from its spout, which counts the spout's dead letters.

    ``raw``: a spout node's raw records (carrying the ``tag`` columns, e.g. a chunk's txid
    tag, which are carried along too). ``keep``: names under which the record's
    :data:`RECORD_COLUMNS` are carried along (as many, in order), or none. The spout's decode
    carries an ``Observation``: the first action over the returned DataFrame counts the
    records that failed (see :func:`count_dead`). None when ``node`` is not reached from one
    spout through ``each``, ``filter``, ``project`` and ``peek`` only.
    """
    from pyspark.sql import Observation

    if node.kind not in ORDERED_KINDS:
        return None
    carried = (*tag, *keep)
    if node.kind == "spout":
        frame = raw(node)
        if keep:  # SQL text: one JVM round trip per expression, not one per function call
            frame = frame.selectExpr(
                "*", *[f"`{c}` AS `{k}`" for c, k in zip(RECORD_COLUMNS, keep, strict=True)]
            )
        observation = Observation()
        scheme = node.args["spout"].scheme
        good, _dead = scheme.decode(frame, keep=carried, observation=observation)
        return good, (node.args["spout_id"], observation)
    if len(node.parents) != 1:
        return None
    parent = observed_frame(raw, node.parents[0], keep, tag)
    if parent is None:
        return None
    built = NodeFrames.row_wise(node, parent[0], keep=carried)
    return None if built is None else (built, parent[1])


def count_dead(observed: Observed) -> dict[str, int]:
    """After the first action over an :func:`observed_frame` DataFrame: its spout's dead letters.

    The dead letters job (:mod:`~trident_assets.spark.dead_letter_jobs`) fetches the spout's
    dead letters only when there are any.
    Adaptive execution may drop the observed node (see :func:`observed_metrics`): the count
    is then unknown (``{}``), and the spout's dead letters are fetched by a job of their own.
    Returns ``{spout id: dead letters counted}`` for a
    :class:`~trident_assets.runtime.outcomes.StateInput`.
    """
    sid, observation = observed
    metrics = observed_metrics(observation)
    return {} if metrics is None else {sid: int(metrics["dead"])}

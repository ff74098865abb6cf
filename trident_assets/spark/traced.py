"""A stream's DataFrame rebuilt from its spout, each tuple carrying its source record.

An event-time window's dead letter names the record it came from (topic, partition, offset,
as a spout's own dead letters do): its input is rebuilt from the spout's raw records with
the record's columns carried along under :data:`~trident_assets.spark.window_columns.SOURCE`,
through the row-wise nodes (``each``, ``filter``, ``project``, ``peek``) between them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trident_assets.spark.node_frames import NodeFrames
from trident_assets.spark.observed import RECORD_COLUMNS
from trident_assets.spark.window_columns import SOURCE
from trident_assets.stream.trident_windows import ORDERED_KINDS

if TYPE_CHECKING:
    from trident_assets.stream.graph import Node

__all__ = ["traced_frame"]


def traced_frame(
    raw: Callable[[Node], Any], node: Node, tag: tuple[str, ...] = (), observation: Any = None
) -> Any | None:
    """``node``'s DataFrame with each tuple's :data:`SOURCE` columns; None if untraceable.

    ``raw``: a spout node's raw records (carrying the ``tag`` columns, e.g. a chunk's txid
    tag, which are carried along too). ``observation``: an ``Observation`` on the spout's
    decode (the first action over the frame counts the spout's dead letters), or None.
    None when ``node`` is not reached from one spout through row-wise nodes only (a join, a
    merge, a state query): no single record.
    """
    if node.kind not in ORDERED_KINDS:
        return None
    keep = (*tag, *SOURCE)
    if node.kind == "spout":
        frame = raw(node).selectExpr(  # SQL text: one JVM round trip for the three columns
            "*", *[f"`{c}` AS `{k}`" for c, k in zip(RECORD_COLUMNS, SOURCE, strict=True)]
        )
        good, _dead = node.args["spout"].scheme.decode(frame, keep=keep, observation=observation)
        return good
    if len(node.parents) != 1:
        return None
    parent = traced_frame(raw, node.parents[0], tag, observation)
    return None if parent is None else NodeFrames.row_wise(node, parent, keep=keep)

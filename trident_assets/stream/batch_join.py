"""Declaring a join or merge of streams within one batch (Trident's ``join`` and ``merge``).

Pure field logic: which fields each side contributes and what the output is called. The
Spark side is :func:`trident_assets.spark.stream_ops.join_frames`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from trident_assets.errors import ConfigError
from trident_assets.stream.fields import Fields, as_fields, check_distinct, require_fields

__all__ = ["JoinPlan", "JoinType", "merge_selections", "plan_join"]


class JoinType(Enum):
    """Per side of a join: INNER sides must have the key; OUTER sides may lack it (nulls)."""

    INNER = "inner"
    OUTER = "outer"


How = str | JoinType | Sequence[str | JoinType]


@dataclass(frozen=True, slots=True)
class JoinPlan:
    """A declared join: per side its key fields, kept fields and type, and the output names."""

    keys: tuple[tuple[str, ...], ...]
    kept: tuple[tuple[str, ...], ...]
    types: tuple[JoinType, ...]
    out_fields: tuple[str, ...]


def _types(how: How, sides: int) -> tuple[JoinType, ...]:
    """``inner``/``outer``/``left``, one JoinType for all, or one per side."""
    if isinstance(how, JoinType):
        return (how,) * sides
    if isinstance(how, str):
        shorthand = {
            "inner": (JoinType.INNER,) * sides,
            "outer": (JoinType.OUTER,) * sides,
            "full": (JoinType.OUTER,) * sides,
            "left": (JoinType.INNER, *(JoinType.OUTER,) * (sides - 1)),
        }
        if how.lower() not in shorthand:
            msg = (
                f"join how={how!r}: use 'inner', 'outer', 'left' or one JoinType per stream "
                "(e.g. [JoinType.INNER, JoinType.OUTER])"
            )
            raise ConfigError(msg)
        return shorthand[how.lower()]
    try:
        types = tuple(JoinType(t.lower()) if isinstance(t, str) else t for t in how)
    except ValueError:
        types = ()
    if len(types) != sides or not all(isinstance(t, JoinType) for t in types):
        msg = f"join needs one JoinType per stream ({sides}), got {list(how)}"
        raise ConfigError(msg)
    return types


def plan_join(
    fields: Sequence[tuple[str, ...]],
    join_fields: Fields | Sequence[Sequence[str]],
    out_fields: Fields,
    how: How = "inner",
) -> JoinPlan:
    """Validate a join of streams with ``fields`` and compute its output (Trident's COMPACT).

    ``join_fields`` is one field list for every stream, or one list per stream (same length).
    The output is the join fields, then each stream's other fields in order, named by
    ``out_fields`` (which must name them all).

    Raises:
        FieldNotFoundError: a join field is missing from its stream.
        ConfigError: too few streams, mismatched key counts, or wrong ``out_fields``.
    """
    sides = len(fields)
    if sides < 2:
        msg = f"join needs at least two streams, got {sides}"
        raise ConfigError(msg)
    if isinstance(join_fields, str) or all(isinstance(f, str) for f in join_fields):
        shared = as_fields(join_fields, "join fields")  # type: ignore[arg-type]
        keys = (shared,) * sides
    else:
        keys = tuple(as_fields(f, f"join fields of stream {i}") for i, f in enumerate(join_fields))
        if len(keys) != sides:
            msg = f"join has {sides} streams but {len(keys)} join field lists"
            raise ConfigError(msg)
    for i, (have, key) in enumerate(zip(fields, keys, strict=True)):
        require_fields(key, have, f"join (stream {i})")
        if not key or len(key) != len(keys[0]):
            lists = [list(k) for k in keys]
            msg = f"join field lists must be non-empty and of one length, got {lists}"
            raise ConfigError(msg)
    kept = tuple(
        tuple(f for f in have if f not in key) for have, key in zip(fields, keys, strict=True)
    )
    outs = as_fields(out_fields, "join output fields")
    check_distinct(outs, (), "join")
    width = len(keys[0]) + sum(len(k) for k in kept)
    if len(outs) != width:
        msg = (
            f"join emits {width} fields (join fields {list(keys[0])}, then "
            + ", then ".join(f"stream {i}'s {list(k)}" for i, k in enumerate(kept))
            + f"); out_fields names {len(outs)}: {list(outs)}"
        )
        raise ConfigError(msg)
    return JoinPlan(keys, kept, _types(how, sides), outs)


def merge_selections(
    fields: Sequence[tuple[str, ...]], out_fields: Fields | None
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The output fields of a merge and, per stream, its fields in output order.

    Without ``out_fields`` every stream must have the first stream's fields (in any order)
    and is aligned by name; with ``out_fields`` the streams are aligned by position and
    renamed (Trident's ``merge(Fields, streams)``).

    Raises:
        ConfigError: no streams, or a stream whose fields do not match.
    """
    if not fields:
        msg = "merge needs at least one stream"
        raise ConfigError(msg)
    if out_fields is None:
        first = fields[0]
        for i, have in enumerate(fields[1:], start=1):
            if sorted(have) != sorted(first):
                msg = (
                    f"merge: stream {i} has fields {list(have)} but stream 0 has {list(first)}; "
                    "merged streams need the same fields (or pass fields=[...] to merge by "
                    "position)"
                )
                raise ConfigError(msg)
        return first, tuple(first for _ in fields)
    outs = as_fields(out_fields, "merge fields")
    check_distinct(outs, (), "merge")
    for i, have in enumerate(fields):
        if len(have) != len(outs):
            msg = (
                f"merge: stream {i} has {len(have)} fields {list(have)}, the output has "
                f"{len(outs)}: {list(outs)}"
            )
            raise ConfigError(msg)
    return outs, tuple(fields)

"""Validation of topic names and partition numbers of the embedded log.

Topic names become directory names under the log root and appear in Spark filters, so they
are checked against a strict whitelist before any path or expression is built from them:
Kafka's legal characters (ASCII letters, digits, ``.``, ``_``, ``-``) and length (at most 249),
with the extra rule that a name starts with a letter or digit (so never ``.``, ``..`` or a
hidden file). Partitions are plain integers ``0 .. n-1``.
"""

from __future__ import annotations

import re
from numbers import Integral
from typing import Any

from trident_assets.errors import ConfigError

__all__ = [
    "MAX_PARTITIONS",
    "MAX_TOPIC_LENGTH",
    "TOPIC_PATTERN",
    "validate_partition",
    "validate_partition_count",
    "validate_topic",
]

MAX_TOPIC_LENGTH = 249
"""The longest topic name accepted (Kafka's limit)."""

MAX_PARTITIONS = 100_000
"""Partitions are stored in directories named ``00000`` .. ``99999``."""

TOPIC_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,248}")
"""A legal topic name; always used with ``fullmatch`` (``$`` would accept a trailing newline)."""

_RULE = (
    "topic names are 1-249 characters of ASCII letters, digits, '.', '_' and '-', "
    "starting with a letter or digit (no '/', spaces, quotes or other characters)"
)


def validate_topic(name: Any) -> str:
    """Return ``name`` unchanged if it is a legal topic name.

    Raises:
        ConfigError: If ``name`` is not a string, is empty, longer than 249 characters,
            contains a character outside ``[A-Za-z0-9._-]`` (path separators, quotes, spaces,
            NUL, non-ASCII) or does not start with a letter or digit (``.``, ``..``,
            ``.hidden``, ``-x``). The message quotes the name and states the rule.
    """
    if not isinstance(name, str):
        msg = f"invalid topic name {name!r}: expected a string, got {type(name).__name__}"
        raise ConfigError(msg)
    if not name:
        msg = f"invalid topic name '': the name is empty; {_RULE}"
        raise ConfigError(msg)
    if len(name) > MAX_TOPIC_LENGTH:
        msg = (
            f"invalid topic name {name[:40]!r}... ({len(name)} characters): longer than "
            f"{MAX_TOPIC_LENGTH}; {_RULE}"
        )
        raise ConfigError(msg)
    if TOPIC_PATTERN.fullmatch(name) is None:
        msg = f"invalid topic name {name!r}: {_RULE}"
        raise ConfigError(msg)
    return name


def validate_partition_count(count: Any) -> int:
    """Return ``count`` as an ``int`` if it is a legal number of partitions for a topic.

    Raises:
        ConfigError: If ``count`` is not an integer (``bool`` is rejected) or is outside
            ``1 .. MAX_PARTITIONS``.
    """
    if isinstance(count, bool) or not isinstance(count, Integral):
        msg = f"invalid partition count {count!r}: expected an int, got {type(count).__name__}"
        raise ConfigError(msg)
    count = int(count)
    if not 1 <= count <= MAX_PARTITIONS:
        msg = f"invalid partition count {count}: must be between 1 and {MAX_PARTITIONS}"
        raise ConfigError(msg)
    return count


def validate_partition(partition: Any, count: int, topic: str = "?") -> int:
    """Return ``partition`` as an ``int`` if it is one of the ``count`` partitions of ``topic``.

    ``topic`` is only named in the error message.

    Raises:
        ConfigError: If ``partition`` is not an integer (``bool`` is rejected) or is outside
            ``0 .. count-1``.
    """
    if isinstance(partition, bool) or not isinstance(partition, Integral):
        msg = (
            f"invalid partition {partition!r} for topic {topic!r}: expected an int, "
            f"got {type(partition).__name__}"
        )
        raise ConfigError(msg)
    partition = int(partition)
    if not 0 <= partition < count:
        msg = (
            f"invalid partition {partition} for topic {topic!r}: the topic has {count} "
            f"partition(s), numbered 0..{count - 1}"
        )
        raise ConfigError(msg)
    return partition

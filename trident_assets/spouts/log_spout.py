"""The embedded log as a spout source: ``LogSource`` (offsets) and ``LogSpout`` (declaration)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from trident_assets.errors import ConfigError
from trident_assets.log.names import validate_topic
from trident_assets.spouts.config import SpoutConfig
from trident_assets.spouts.ranges import BatchPlan, split_partition

if TYPE_CHECKING:
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spark.schemes import Scheme

__all__ = ["LogSource", "LogSpout"]


class LogSource:
    """A PartitionedSource over topics of a :class:`~trident_assets.log.store.PartitionedLog`."""

    def __init__(self, log: PartitionedLog, topics: Sequence[str]) -> None:
        """Read ``topics`` of ``log``; partition ids are ``topic@n``."""
        self.log = log
        self.topics = list(topics)

    def partitions(self) -> list[str]:
        """Every partition of the topics.

        Raises:
            UnknownTopicError: a topic does not exist (the message names it and how to
                create it): a batch over a missing topic fails instead of reading nothing.
            CorruptLogMetadataError: a topic's ``topic.json`` is missing or unreadable.
        """
        return [f"{t}@{p}" for t in self.topics for p in range(self.log.partitions(t))]

    def topic_id(self, partition: str) -> str | None:
        """The ID of the partition's topic incarnation (None for a topic without one)."""
        return self.log.topic_id(split_partition(partition)[0])

    def earliest(self, partition: str) -> int:
        """First readable offset."""
        return self.log.earliest_offset(*split_partition(partition))

    def latest(self, partition: str) -> int:
        """Next offset to be written."""
        return self.log.latest_offset(*split_partition(partition))

    def offset_for_timestamp(self, partition: str, timestamp_ms: int) -> int | None:
        """First offset with a timestamp >= ``timestamp_ms``."""
        return self.log.offset_for_timestamp(*split_partition(partition), timestamp_ms)


class LogSpout:
    """A spout reading topics of the embedded log, decoded by a scheme.

    Args:
        topics: one topic or several (their partitions are read together).
        scheme: turns record bytes into fields (see :mod:`trident_assets.spark.schemes`).
        config: spout kind, start position, batch size, deployment.
    """

    def __init__(
        self, topics: str | Sequence[str], scheme: Scheme, config: SpoutConfig | None = None
    ) -> None:
        """Declare the spout; nothing is read until a batch runs."""
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics:
            msg = "LogSpout needs at least one topic"
            raise ConfigError(msg)
        for topic in self.topics:
            validate_topic(topic)
        self.scheme = scheme
        self.config = config or SpoutConfig()

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields the scheme produces."""
        return self.scheme.fields

    def source(self, log: PartitionedLog) -> LogSource:
        """The offsets view of the topics."""
        return LogSource(log, self.topics)

    def max_timestamp_ms(self, log: PartitionedLog, plan: BatchPlan) -> int | object | None:
        """An upper bound of ``plan``'s record timestamps (epoch ms) without reading a record.

        From the segments' Parquet statistics (:mod:`trident_assets.log.timestamps`): None
        when the plan reads nothing, ``UNKNOWN`` when a footer lacks the statistics.
        """
        from trident_assets.log.timestamps import max_timestamp_ms

        ranges = [
            (r.topic, r.partition_number, r.first_offset, r.last_offset) for r in plan.non_empty()
        ]
        return max_timestamp_ms(log, ranges)

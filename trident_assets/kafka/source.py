"""Kafka as a :class:`~trident_assets.spouts.source.PartitionedSource`: partitions and offsets.

Offsets come from the broker (ListOffsets: log start offset and high watermark), never from
Kafka consumer groups; batch metadata lives in our state store. Partition ids are
``topic@n`` (Storm's ``KafkaTridentSpoutTopicPartition``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from trident_assets.core.closing import ClosesOnExit
from trident_assets.errors import BatchUnavailableError
from trident_assets.spouts.ranges import split_partition

__all__ = ["KafkaSource", "TimestampLookup"]

TimestampLookup = Literal["broker", "scan"]
"""How ``offset_for_timestamp`` is answered: the broker's time index (ListOffsets by time)
or a scan of the partition's record timestamps from its earliest offset."""


class KafkaSource(ClosesOnExit):
    """Offsets of ``topics`` on a Kafka cluster, through one metadata consumer.

    Args:
        topics: topics to read; a topic that does not exist (yet) has no partitions, and its
            partitions join when it appears (as partitions added to a topic do).
        config: librdkafka settings (``bootstrap.servers`` and security settings).
        timeout_s: how long one broker request may take.
        timestamp_lookup: see :data:`TimestampLookup`.
    """

    def __init__(
        self,
        topics: Sequence[str],
        config: Mapping[str, Any],
        *,
        timeout_s: float = 10.0,
        timestamp_lookup: TimestampLookup = "broker",
    ) -> None:
        """Connect lazily; nothing is asked of the broker until a method is called."""
        self.topics = list(topics)
        self.config = dict(config)
        self.timeout_s = timeout_s
        self.timestamp_lookup = timestamp_lookup
        self._consumer: Any = None

    def _client(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(
                {
                    **self.config,
                    "group.id": self.config.get("group.id", "trident-assets-metadata"),
                    "enable.auto.commit": False,
                    "allow.auto.create.topics": False,
                }
            )
        return self._consumer

    def close(self) -> None:
        """Close the metadata consumer (a later call reconnects)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def partitions(self) -> list[str]:
        """Every partition of the topics that exist now, re-read from the broker on each call.

        Raises:
            BatchUnavailableError: the cluster did not answer within ``timeout_s``.
        """
        from confluent_kafka import KafkaException

        try:
            metadata = self._client().list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            msg = f"Kafka metadata request failed ({self.config.get('bootstrap.servers')}): {exc}"
            raise BatchUnavailableError(msg) from exc
        out = []
        for topic in self.topics:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None:
                continue
            out.extend(f"{topic}@{p}" for p in sorted(found.partitions))
        return out

    def _watermarks(self, partition: str) -> tuple[int, int]:
        from confluent_kafka import KafkaException, TopicPartition

        topic, number = split_partition(partition)
        try:
            low, high = self._client().get_watermark_offsets(
                TopicPartition(topic, number), timeout=self.timeout_s, cached=False
            )
        except KafkaException as exc:
            msg = f"cannot read the offsets of Kafka partition {partition}: {exc}"
            raise BatchUnavailableError(msg) from exc
        return int(low), int(high)

    def earliest(self, partition: str) -> int:
        """First readable offset (the log start offset after retention)."""
        return self._watermarks(partition)[0]

    def latest(self, partition: str) -> int:
        """The high watermark: the next offset to be written."""
        return self._watermarks(partition)[1]

    def offset_for_timestamp(self, partition: str, timestamp_ms: int) -> int | None:
        """First offset whose record timestamp is >= ``timestamp_ms``, or None if there is none.

        ``broker`` asks the broker's time index (Kafka's ``offsetsForTimes``; it assumes
        timestamps grow with offsets). ``scan`` reads the partition from its earliest offset
        and returns the first record at or after the time, in offset order (exact for any
        timestamps, costs a read of the partition up to that record).
        """
        from confluent_kafka import TopicPartition

        topic, number = split_partition(partition)
        if self.timestamp_lookup == "broker":
            (found,) = self._client().offsets_for_times(
                [TopicPartition(topic, number, int(timestamp_ms))], timeout=self.timeout_s
            )
            if found.error is not None:
                msg = f"offset lookup by time failed for {partition}: {found.error}"
                raise BatchUnavailableError(msg)
            return None if found.offset < 0 else int(found.offset)
        from trident_assets.kafka.reader import iter_partition

        low, high = self._watermarks(partition)
        for offset, ts in iter_partition(self.config, topic, number, low, high, self.timeout_s):
            if ts >= int(timestamp_ms):
                return offset
        return None

"""The embedded, durable, Kafka-like partitioned log that spout batches are read from.

:class:`PartitionedLog` stores topics of partitions of contiguous offsets as append-only
Parquet segments; :class:`Producer` buffers records and partitions them like Kafka's default
partitioner. The command line is :data:`trident_assets.cli.log.log_app` (imported lazily, so
this package does not import typer).
"""

from __future__ import annotations

from trident_assets.log.files import UnknownTopicError
from trident_assets.log.names import validate_partition, validate_topic
from trident_assets.log.partitioner import kafka_partition, murmur2
from trident_assets.log.producer import Producer
from trident_assets.log.records import HEADERS_TYPE, LOG_SCHEMA, PartitionInfo, Record, Segment
from trident_assets.log.store import PartitionedLog
from trident_assets.log.topics import TopicExistsError

__all__ = [
    "HEADERS_TYPE",
    "LOG_SCHEMA",
    "PartitionInfo",
    "PartitionedLog",
    "Producer",
    "Record",
    "Segment",
    "TopicExistsError",
    "UnknownTopicError",
    "kafka_partition",
    "murmur2",
    "validate_partition",
    "validate_topic",
]

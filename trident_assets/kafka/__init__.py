"""Kafka: spouts reading topics in parallel on Spark, and a sink (Storm's KafkaBolt)."""

from trident_assets.kafka.sink import (
    FieldTopicSelector,
    FixedTopicSelector,
    KafkaDeliveryError,
    KafkaUpdater,
    SinkMode,
)
from trident_assets.kafka.source import KafkaSource
from trident_assets.kafka.spout import GapPolicy, KafkaSpout, backoff_for

__all__ = [
    "FieldTopicSelector",
    "FixedTopicSelector",
    "GapPolicy",
    "KafkaDeliveryError",
    "KafkaSource",
    "KafkaSpout",
    "KafkaUpdater",
    "SinkMode",
    "backoff_for",
]

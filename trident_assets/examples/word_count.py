"""Streaming word count (the Trident tutorial), with Storm's DRPC ``words`` query as a stream.

sentences -> Split -> group_by(word) -> persistent_aggregate(opaque state, Count), and
queries -> Split -> group_by(word) -> state_query(MapGet) -> FilterNull -> aggregate(Sum).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import trident_assets as ta
from trident_assets.errors import ConfigError
from trident_assets.spouts.config import SpoutKind
from trident_assets.stream.topology import TridentTopology

__all__ = ["SENTENCES", "build_word_count"]

SENTENCES = (
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
)
"""The sample sentences of Trident's FixedBatchSpout example."""


def build_word_count(
    name: str = "word_count",
    *,
    topic: str = "sentences",
    query_topic: str = "word_queries",
    kind: SpoutKind = SpoutKind.OPAQUE,
    max_batch_size: int | None = 50_000,
    source: Literal["log", "kafka"] = "log",
    bootstrap_servers: str | None = None,
    kafka_options: Mapping[str, Any] | None = None,
    state: ta.StateSpec | None = None,
) -> TridentTopology:
    """Declare the word-count topology over ``topic`` of the embedded log or of Kafka.

    ``source="kafka"`` reads the same topics from the cluster at ``bootstrap_servers``
    (``kafka_options`` are further :class:`~trident_assets.kafka.KafkaSpout` arguments).
    ``state``: the counts' state (default ``StateSpec.opaque("word_counts")``, in the
    topology's store; e.g. a ``RedisClusterState`` named ``word_counts``).
    """
    topo = ta.TridentTopology(name)
    config = ta.SpoutConfig(kind=kind, max_batch_size=max_batch_size)

    def spout(topic_name: str, field: str) -> Any:
        if source == "log":
            return ta.LogSpout(topic_name, ta.StringScheme(field), config)
        if source == "kafka" and bootstrap_servers:
            return ta.KafkaSpout(
                topic_name,
                ta.StringScheme(field),
                config,
                bootstrap_servers=bootstrap_servers,
                **dict(kafka_options or {}),
            )
        msg = f"source must be 'log' or 'kafka' (with bootstrap_servers), got {source!r}"
        raise ConfigError(msg)

    counts = (
        topo.new_stream("sentences", spout(topic, "sentence"))
        .each("sentence", ta.Split(), "word")
        .group_by("word")
        .persistent_aggregate(
            state or ta.StateSpec.opaque("word_counts"), "word", ta.Count(), "count"
        )
    )
    (
        topo.new_stream("queries", spout(query_topic, "args"))
        .each("args", ta.Split(), "word")
        .group_by("word")
        .state_query(counts, "word", ta.MapGet(), "count")
        .each("count", ta.FilterNull())
        .aggregate("count", ta.Sum(), "sum")
        .as_output("words")
    )
    return topo

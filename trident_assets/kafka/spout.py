"""``KafkaSpout``: Storm's Trident Kafka spouts (transactional, opaque, non-transactional).

It has the duck-typed interface of :class:`~trident_assets.spouts.log_spout.LogSpout`, so the
batch coordinator and executor run it unchanged: batch metadata (per partition the offsets
``[first, next)`` and the deployment id) is stored in our state store and committed with the
state, never in Kafka consumer groups. Start positions, deploy-only resets and
``ignore_stored_offsets`` (Storm's ``ignoreZkOffsets``) follow :class:`SpoutConfig`.

Missing offsets in a planned range (compaction, transaction markers, retention racing the
read) are detected by the reader (gap rows). ``on_gap="fail"`` (default) fails the batch with
:class:`~trident_assets.errors.BatchUnavailableError` (Storm's "overshot the end of the batch");
``on_gap="dead_letter"`` keeps the batch and records each gap as a dead letter (reason
``value is null`` at the gap's first offset).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any, Literal

from trident_assets.core.closing import ClosesOnExit
from trident_assets.core.retry import ExponentialBackoff
from trident_assets.errors import BatchUnavailableError, ConfigError
from trident_assets.kafka.reader import GAP_HEADER, read_kafka_ranges
from trident_assets.kafka.source import KafkaSource, TimestampLookup
from trident_assets.spouts.config import SpoutConfig
from trident_assets.spouts.ranges import BatchPlan

if TYPE_CHECKING:
    from trident_assets.spark.schemes import Scheme

__all__ = ["GapPolicy", "KafkaSpout", "backoff_for"]

GapPolicy = Literal["fail", "dead_letter"]

_RESERVED = ("group.id", "enable.auto.commit", "auto.offset.reset", "enable.partition.eof")
_GAPS_SHOWN = 5


def backoff_for(topology: Any) -> ExponentialBackoff | None:
    """The retry policy of the topology's spouts: the first spout's that declares ``retry``.

    The Dagster coordinator sensor replays failed batches with it. Returns None when no spout
    declares one (the caller's default applies).
    """
    for node in topology.spouts.values():
        retry = getattr(node.args["spout"], "retry", None)
        if isinstance(retry, ExponentialBackoff):
            return retry
    return None


class KafkaSpout(ClosesOnExit):
    """A spout reading Kafka topics, decoded by a scheme.

    Args:
        topics: one topic or several (read together; their partitions are ``topic@n``).
        scheme: turns record bytes into fields (:mod:`trident_assets.spark.schemes`).
        config: spout kind, start position, batch size, deployment.
        bootstrap_servers: the cluster (``host:port,...``).
        consumer_config: further librdkafka settings for the readers and the metadata client
            (security, ``isolation.level`` (default ``read_committed``), fetch sizes).
            Consumer-group settings are refused: offsets are ours.
        tasks: Spark tasks (one consumer each) reading a batch; default Spark's parallelism.
        timeout_s: how long a broker request or a stalled read may take.
        timestamp_lookup: ``broker`` (ListOffsets by time) or ``scan`` (read timestamps).
        on_gap: ``fail`` or ``dead_letter`` (see the module docstring).
        retry: backoff for replays of failed batches (Storm's parameters; default Storm's
            ``(0 s, 2 ms, unlimited, 10 s)``); see :func:`trident_assets.kafka.backoff_for`.
    """

    def __init__(
        self,
        topics: str | Sequence[str],
        scheme: Scheme,
        config: SpoutConfig | None = None,
        *,
        bootstrap_servers: str,
        consumer_config: Mapping[str, Any] | None = None,
        tasks: int | None = None,
        timeout_s: float = 30.0,
        timestamp_lookup: TimestampLookup = "broker",
        on_gap: GapPolicy = "fail",
        retry: ExponentialBackoff | None = None,
    ) -> None:
        """Declare the spout; nothing is read until a batch runs.

        Raises:
            ConfigError: no topic or servers, a consumer-group setting, or a bad option.
        """
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics or not all(isinstance(t, str) and t for t in self.topics):
            msg = f"KafkaSpout needs at least one non-empty topic name, got {topics!r}"
            raise ConfigError(msg)
        if not bootstrap_servers or not isinstance(bootstrap_servers, str):
            msg = (
                "KafkaSpout needs bootstrap_servers (host:port,...), e.g. '127.0.0.1:9092', "
                f"got {bootstrap_servers!r}"
            )
            raise ConfigError(msg)
        if consumer_config is not None and not isinstance(consumer_config, Mapping):
            msg = (
                f"KafkaSpout consumer_config must be a mapping of settings, got {consumer_config!r}"
            )
            raise ConfigError(msg)
        extra = dict(consumer_config or {})
        reserved = sorted(k for k in extra if k in _RESERVED)
        if reserved:
            msg = (
                f"consumer_config may not set {reserved}: the spout keeps offsets in the state "
                "store and positions its consumers itself"
            )
            raise ConfigError(msg)
        if on_gap not in ("fail", "dead_letter"):
            msg = f"on_gap must be 'fail' or 'dead_letter', got {on_gap!r}"
            raise ConfigError(msg)
        if timestamp_lookup not in ("broker", "scan"):
            msg = f"timestamp_lookup must be 'broker' or 'scan', got {timestamp_lookup!r}"
            raise ConfigError(msg)
        if tasks is not None and (
            isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1
        ):
            msg = f"KafkaSpout tasks must be an integer >= 1 or None, got {tasks!r}"
            raise ConfigError(msg)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            msg = f"KafkaSpout timeout_s must be a number of seconds > 0, got {timeout_s!r}"
            raise ConfigError(msg)
        if retry is not None and not isinstance(retry, ExponentialBackoff):
            msg = f"KafkaSpout retry must be an ExponentialBackoff or None, got {retry!r}"
            raise ConfigError(msg)
        if config is not None and not isinstance(config, SpoutConfig):
            msg = f"KafkaSpout config must be a SpoutConfig or None, got {config!r}"
            raise ConfigError(msg)
        self.scheme = scheme
        self.config = config or SpoutConfig()
        self.bootstrap_servers = bootstrap_servers
        self.client_config = {**extra, "bootstrap.servers": bootstrap_servers}
        self.tasks = tasks
        self.timeout_s = timeout_s
        self.timestamp_lookup: TimestampLookup = timestamp_lookup
        self.on_gap: GapPolicy = on_gap
        self.retry = retry or ExponentialBackoff()
        self._source: KafkaSource | None = None
        self._cached: list[Any] = []

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields the scheme produces."""
        return self.scheme.fields

    def source(self, log: Any = None) -> KafkaSource:
        """The offsets view of the topics (``log`` is ignored: Kafka is the log)."""
        if self._source is None:
            self._source = KafkaSource(
                self.topics,
                self.client_config,
                timeout_s=self.timeout_s,
                timestamp_lookup=self.timestamp_lookup,
            )
        return self._source

    def close(self) -> None:
        """Release the metadata consumer and the cached batch."""
        if self._source is not None:
            self._source.close()
            self._source = None
        self._release()

    def _release(self) -> None:
        for frame in self._cached:
            frame.unpersist()
        self._cached = []

    def read(self, spark: Any, log: Any, plan: BatchPlan, *, inline: bool = True) -> Any:
        """The raw records of ``plan`` as a DataFrame, read in parallel by Spark tasks.

        ``inline`` is the embedded log's option (:meth:`LogSpout.read`); a Kafka batch is
        always read by Spark's tasks.

        The batch is read once and cached (later actions of the batch reuse it; the previous
        batch's cache is released), then checked for gaps.

        Raises:
            BatchUnavailableError: ``on_gap="fail"`` and offsets of the plan are missing.
        """
        self._release()
        return self._read_checked(spark, plan)

    def read_many(
        self, spark: Any, log: Any, plans: Sequence[tuple[int, BatchPlan]], column: str
    ) -> Any:
        """Several batches as one DataFrame, each batch's tag in the bigint ``column``.

        ``plans`` are ``(tag, plan)``; each is read, cached and gap-checked as by
        :meth:`read` (all stay cached until the next read).

        Raises:
            BatchUnavailableError: ``on_gap="fail"`` and offsets of a plan are missing.
        """
        from pyspark.sql import functions as F

        self._release()
        frames = [
            self._read_checked(spark, plan).withColumn(column, F.lit(tag).cast("bigint"))
            for tag, plan in plans
        ]
        return reduce(lambda a, b: a.unionByName(b), frames)

    def _read_checked(self, spark: Any, plan: BatchPlan) -> Any:
        """Read ``plan`` into a cached DataFrame (kept until the next read) and check gaps."""
        from pyspark.sql import functions as F

        ranges = [
            (r.topic, r.partition_number, r.first_offset, r.next_offset) for r in plan.non_empty()
        ]
        raw = read_kafka_ranges(
            spark, self.client_config, ranges, tasks=self.tasks, timeout_s=self.timeout_s
        ).persist()
        self._cached.append(raw)
        is_gap = (
            F.col("value").isNull()
            & F.col("headers").isNotNull()
            & F.exists("headers", lambda h: h["key"] == F.lit(GAP_HEADER))
        )
        gaps = (
            raw.where(is_gap)
            .select("topic", "partition", F.element_at("headers", 1)["value"].alias("note"))
            .toArrow()
        )
        if gaps.num_rows and self.on_gap == "fail":
            self._release()
            notes = sorted(
                f"{t}@{p} offsets {n.decode()}"
                for t, p, n in zip(*(gaps.column(i).to_pylist() for i in range(3)), strict=True)
            )
            shown = "; ".join(notes[:_GAPS_SHOWN])
            more = f" (and {len(notes) - _GAPS_SHOWN} more)" if len(notes) > _GAPS_SHOWN else ""
            msg = (
                f"txid {plan.txid} of spout {plan.spout!r}: the batch overshot its planned "
                f"ranges; {len(notes)} run(s) of offsets are missing: {shown}{more}. A batch is "
                "never filled with other data. Disable log compaction on the topic, or use "
                "on_gap='dead_letter' for topics written by transactional producers."
            )
            raise BatchUnavailableError(msg)
        return raw

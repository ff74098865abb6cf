"""A Kafka sink: Storm's KafkaBolt / TridentKafkaState as a :class:`StateUpdater`.

Use it through ``stream.partition_persist(StateSpec.non_transactional("to_kafka"),
["key", "message"], KafkaUpdater(...))``. ``update_state`` runs inside the batch's commit
transaction: every record of the batch is produced, the producer is flushed, and any delivery
failure raises :class:`KafkaDeliveryError`, so the batch fails and nothing of it commits.

Guarantees:

* ``AT_LEAST_ONCE`` (default): a replayed batch is produced again, so records can repeat
  (a failure after some records were delivered, or a crash after the Kafka write and before
  the state commit). Producer retries can also repeat a record.
* ``IDEMPOTENT``: ``enable.idempotence=true`` (acks=all); the broker drops duplicates from
  producer retries, so a successful batch is written exactly once; replays still repeat.
* ``TRANSACTIONAL``: each batch is one Kafka transaction (``transactional.id``): readers with
  ``isolation.level=read_committed`` see all of a batch's records or none, and a failed
  batch's records are aborted. A crash between the Kafka commit and the state commit still
  replays the batch, so this is at-least-once per batch, atomic within it.

Every record carries a ``trident.txid`` header so consumers can drop replayed batches.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from typing import Any

from trident_assets.core.closing import ClosesOnExit
from trident_assets.errors import ConfigError, TridentError
from trident_assets.stream.topology import StateUpdater

__all__ = [
    "FieldTopicSelector",
    "FixedTopicSelector",
    "KafkaDeliveryError",
    "KafkaUpdater",
    "Serializer",
    "SinkMode",
    "json_serializer",
    "string_serializer",
]

Serializer = Callable[[Any], bytes | None]
"""Turns a field value into record bytes (None stays None: a null key or a tombstone)."""

TXID_HEADER = "trident.txid"


class KafkaDeliveryError(TridentError):
    """Records of a batch were not delivered to Kafka; the batch fails and does not commit."""


class SinkMode(enum.Enum):
    """Producer guarantee of :class:`KafkaUpdater` (see the module docstring)."""

    AT_LEAST_ONCE = "at_least_once"
    IDEMPOTENT = "idempotent"
    TRANSACTIONAL = "transactional"


def string_serializer(value: Any) -> bytes | None:
    """UTF-8 of ``str(value)``; bytes pass through; None stays None (Storm's StringSerializer)."""
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


def json_serializer(value: Any) -> bytes | None:
    """The value as compact JSON (None stays None)."""
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str).encode()


class FixedTopicSelector:
    """Every tuple goes to one topic (Storm's ``DefaultTopicSelector``)."""

    def __init__(self, topic: str) -> None:
        if not topic:
            msg = "FixedTopicSelector needs a topic name"
            raise ConfigError(msg)
        self.topic = topic

    def fields(self) -> tuple[str, ...]:
        """Fields the selector reads."""
        return ()

    def topics(self, columns: Mapping[str, list[Any]], rows: int) -> list[str]:
        """One topic per row."""
        return [self.topic] * rows


class FieldTopicSelector:
    """The topic is a field of the tuple (Storm's ``FieldNameTopicSelector``).

    Args:
        field: the field holding the topic name.
        default: topic for tuples whose field is null; None makes a null a delivery error.
    """

    def __init__(self, field: str, default: str | None = None) -> None:
        self.field = field
        self.default = default

    def fields(self) -> tuple[str, ...]:
        """Fields the selector reads."""
        return (self.field,)

    def topics(self, columns: Mapping[str, list[Any]], rows: int) -> list[str]:
        """One topic per row.

        Raises:
            KafkaDeliveryError: a row has no topic and there is no default.
        """
        out = []
        for value in columns[self.field]:
            topic = self.default if value is None else str(value)
            if not topic:
                msg = f"a tuple has a null topic field {self.field!r} and no default topic is set"
                raise KafkaDeliveryError(msg)
            out.append(topic)
        return out


class KafkaUpdater(StateUpdater, ClosesOnExit):
    """Produce each batch to Kafka inside the batch's commit (Storm's TridentKafkaUpdater).

    Args:
        bootstrap_servers: the cluster.
        topic: a topic name, or a selector (:class:`FixedTopicSelector`,
            :class:`FieldTopicSelector`).
        key_field: field holding the record key (Storm's default ``key``); a tuple without
            the field (not among the persist's inputs) gets a null key.
        message_field: field holding the record value (default ``message``).
        key_serializer, value_serializer: field value -> bytes (default UTF-8 strings).
        producer_config: librdkafka producer settings passed through (``acks``,
            ``linger.ms``, ``compression.type``, security, ...).
        mode: :class:`SinkMode`.
        transactional_id: for TRANSACTIONAL (default ``trident-<state table>``); keep it
            stable across restarts so a new producer fences the old one.
        flush_timeout_s: how long a batch may take to be acknowledged.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str | FixedTopicSelector | FieldTopicSelector,
        *,
        key_field: str = "key",
        message_field: str = "message",
        key_serializer: Serializer = string_serializer,
        value_serializer: Serializer = string_serializer,
        producer_config: Mapping[str, Any] | None = None,
        mode: SinkMode = SinkMode.AT_LEAST_ONCE,
        transactional_id: str | None = None,
        flush_timeout_s: float = 30.0,
    ) -> None:
        """Declare the sink; the producer connects on the first batch.

        Raises:
            ConfigError: missing servers, a bad mode, or producer settings that contradict it.
        """
        if not bootstrap_servers:
            msg = "KafkaUpdater needs bootstrap_servers"
            raise ConfigError(msg)
        if not isinstance(mode, SinkMode):
            msg = f"mode must be a SinkMode, got {mode!r}"
            raise ConfigError(msg)
        settings = dict(producer_config or {})
        if "transactional.id" in settings:
            msg = "pass transactional_id= and mode=SinkMode.TRANSACTIONAL, not transactional.id"
            raise ConfigError(msg)
        if mode is not SinkMode.AT_LEAST_ONCE:
            if str(settings.get("enable.idempotence", True)).lower() in ("false", "0"):
                msg = f"mode {mode.name} needs enable.idempotence; do not set it to false"
                raise ConfigError(msg)
            settings["enable.idempotence"] = True
        if transactional_id is not None and mode is not SinkMode.TRANSACTIONAL:
            msg = "transactional_id is only used with mode=SinkMode.TRANSACTIONAL"
            raise ConfigError(msg)
        self.selector = FixedTopicSelector(topic) if isinstance(topic, str) else topic
        self.key_field = key_field
        self.message_field = message_field
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer
        self.mode = mode
        self.transactional_id = transactional_id
        self.flush_timeout_s = flush_timeout_s
        self.producer_config = {**settings, "bootstrap.servers": bootstrap_servers}
        self._producer: Any = None

    def _producer_for(self, table: str) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            conf = dict(self.producer_config)
            if self.mode is SinkMode.TRANSACTIONAL:
                conf["transactional.id"] = self.transactional_id or f"trident-{table}"
            producer = Producer(conf)
            if self.mode is SinkMode.TRANSACTIONAL:
                producer.init_transactions(self.flush_timeout_s)
            self._producer = producer
        return self._producer

    def close(self) -> None:
        """Flush and close the producer (its connections end now, not at garbage collection).

        Idempotent; a later batch opens a new producer.
        """
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.flush(self.flush_timeout_s)
            finally:
                _close_producer(producer)

    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> None:
        """Produce every tuple of ``batch``; raise if any is not acknowledged.

        Raises:
            ConfigError: the batch lacks the message field or the selector's field.
            KafkaDeliveryError: a record could not be produced or was not acknowledged.
        """
        from confluent_kafka import KafkaException

        needed = [self.message_field, *self.selector.fields()]
        missing = [f for f in needed if f not in batch.column_names]
        if missing:
            msg = (
                f"the Kafka sink of {table!r} needs fields {missing} among the persist's "
                f"inputs (it has {batch.column_names})"
            )
            raise ConfigError(msg)
        rows = batch.num_rows
        columns = {name: batch.column(name).to_pylist() for name in batch.column_names}
        topics = self.selector.topics(columns, rows)
        keys = columns.get(self.key_field, [None] * rows)
        values = columns[self.message_field]
        headers = [(TXID_HEADER, str(txid).encode())] if txid is not None else None
        producer = self._producer_for(table)
        transactional = self.mode is SinkMode.TRANSACTIONAL
        failures: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(f"{msg.topic()}: {err.str()}")

        try:
            if transactional:
                producer.begin_transaction()
            for topic, key, value in zip(topics, keys, values, strict=True):
                self._produce(producer, topic, key, value, headers, on_delivery)
            left = producer.flush(self.flush_timeout_s)
            if left or failures:
                shown = "; ".join(failures[:3])
                msg = (
                    f"Kafka sink of {table!r}, txid {txid}: {len(failures)} record(s) failed"
                    f" and {left} were not acknowledged within {self.flush_timeout_s}s"
                    f"{': ' + shown if shown else ''}. The batch fails and will be replayed."
                )
                raise KafkaDeliveryError(msg)
            if transactional:
                producer.commit_transaction(self.flush_timeout_s)
        except (KafkaException, KafkaDeliveryError, BufferError) as exc:
            self._abort(transactional)
            if isinstance(exc, KafkaDeliveryError):
                raise
            msg = f"Kafka sink of {table!r}, txid {txid}: {exc}. The batch fails."
            raise KafkaDeliveryError(msg) from exc

    def _produce(
        self, producer: Any, topic: str, key: Any, value: Any, headers: Any, on_delivery: Any
    ) -> None:
        record_key = self.key_serializer(key)
        record_value = self.value_serializer(value)
        while True:
            try:
                producer.produce(
                    topic,
                    value=record_value,
                    key=record_key,
                    headers=headers,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:  # local queue full: serve deliveries, then retry
                producer.poll(0.1)

    def _abort(self, transactional: bool) -> None:
        """Abort the open transaction; otherwise close the producer so nothing lingers.

        A dropped producer is closed here, not left to garbage collection: the failed batch's
        traceback still references it, and an open librdkafka client keeps reconnecting to
        an unreachable broker for as long as it lives.
        """
        producer, self._producer = self._producer, None
        if producer is None:
            return
        if transactional:
            try:
                producer.abort_transaction(self.flush_timeout_s)
                self._producer = producer
            except Exception:  # a fenced or broken producer is rebuilt on the next batch
                _close_producer(producer)
        else:
            _close_producer(producer)


def _close_producer(producer: Any) -> None:
    """Drop what is still queued (``close`` would wait for it without a bound), then close."""
    producer.purge()
    producer.close()

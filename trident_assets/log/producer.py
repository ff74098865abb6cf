"""A buffering producer for one topic of a :class:`~trident_assets.log.store.PartitionedLog`."""

from __future__ import annotations

from typing import Literal, Protocol

import numpy as np
import pyarrow as pa

from trident_assets.errors import ConfigError
from trident_assets.log.names import validate_partition
from trident_assets.log.partitioner import kafka_partitions
from trident_assets.log.records import BYTES, now_ms, records_to_table

__all__ = ["Partitioner", "Producer"]

Partitioner = Literal["hash", "round_robin"]


class Topics(Protocol):
    """What a producer needs of its log (a :class:`~trident_assets.log.store.PartitionedLog`)."""

    def partitions(self, name: str) -> int:
        """The topic's partition count."""

    def append(self, topic: str, partition: int, records: pa.Table) -> tuple[int, int]:
        """Append ``records`` to one partition atomically; their first and last offsets."""


class Producer:
    """A buffering producer for one topic, like Kafka's ``KafkaProducer`` (not thread-safe).

    :meth:`send` only buffers; :meth:`flush` assigns partitions and appends each partition's
    records as one atomic segment. A flush is atomic per partition, not across partitions.
    Use it as a context manager to flush on a clean exit (on an exception the buffer is kept,
    see :attr:`pending`).

    Partitioning of a record, in order: the explicit ``partition`` given to :meth:`send`;
    with ``partitioner="hash"`` and a non-null key, Kafka's murmur2 partition of the key for
    the topic's partition count at flush time; otherwise round robin.
    """

    def __init__(
        self,
        log: Topics,
        topic: str,
        partitioner: Partitioner = "hash",
        max_buffered: int = 100_000,
    ) -> None:
        if partitioner not in ("hash", "round_robin"):
            msg = f"unknown partitioner {partitioner!r}: use 'hash' or 'round_robin'"
            raise ConfigError(msg)
        if isinstance(max_buffered, bool) or not isinstance(max_buffered, int) or max_buffered < 1:
            msg = f"max_buffered must be a positive int, got {max_buffered!r}"
            raise ConfigError(msg)
        self.log = log
        self.topic = topic
        self.partitioner: Partitioner = partitioner
        self.max_buffered = max_buffered
        self._count = log.partitions(topic)
        self._rr = 0
        self._clear()

    def _clear(self) -> None:
        self._values: list[bytes] = []
        self._keys: list[bytes | None] = []
        self._ts: list[int] = []
        self._headers: list[list[tuple[str, bytes | None]] | None] = []
        self._parts: list[int | None] = []

    @property
    def pending(self) -> int:
        """The number of records sent but not yet flushed."""
        return len(self._values)

    def send(
        self,
        value: bytes,
        key: bytes | None = None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
    ) -> None:
        """Buffer one record; flush automatically once ``max_buffered`` records are buffered.

        Args:
            value: The payload bytes.
            key: The key bytes or ``None``.
            timestamp_ms: Epoch milliseconds; ``None`` stamps the record now (at send).
            headers: ``(name, value)`` pairs or ``None``.
            partition: An explicit partition, overriding the partitioner.

        Raises:
            ConfigError: If ``value``/``key`` is not bytes, ``timestamp_ms`` not an int,
                ``headers`` malformed or ``partition`` out of range (nothing is buffered, so
                one bad record never blocks a flush).
        """
        if not isinstance(value, BYTES):
            msg = f"value must be bytes, got {type(value).__name__}"
            raise ConfigError(msg)
        if key is not None and not isinstance(key, BYTES):
            msg = f"key must be bytes or None, got {type(key).__name__}"
            raise ConfigError(msg)
        if timestamp_ms is not None and (
            isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, (int, np.integer))
        ):
            msg = f"timestamp_ms must be an int (epoch ms) or None, got {timestamp_ms!r}"
            raise ConfigError(msg)
        if headers is not None and not (
            isinstance(headers, list)
            and all(
                isinstance(h, tuple)
                and len(h) == 2
                and isinstance(h[0], str)
                and (h[1] is None or isinstance(h[1], BYTES))
                for h in headers
            )
        ):
            msg = f"headers must be a list of (str, bytes | None) tuples or None, got {headers!r}"
            raise ConfigError(msg)
        if partition is not None:
            try:
                partition = validate_partition(partition, self._count, self.topic)
            except ConfigError:
                self._count = self.log.partitions(self.topic)  # partitions may have been added
                partition = validate_partition(partition, self._count, self.topic)
        self._values.append(value)
        self._keys.append(key)
        self._ts.append(now_ms() if timestamp_ms is None else int(timestamp_ms))
        self._headers.append(headers)
        self._parts.append(partition)
        if len(self._values) >= self.max_buffered:
            self.flush()

    def flush(self) -> dict[int, tuple[int, int]]:
        """Append every buffered record: one atomic segment per partition touched.

        Returns:
            ``{partition: (first_offset, last_offset)}`` for the partitions written.

        Raises:
            TridentError: If an append fails; records of partitions already appended are
                removed from the buffer, the others stay buffered so a retry neither loses
                nor duplicates records.
        """
        n = len(self._values)
        if n == 0:
            return {}
        body = records_to_table(self._values, self._keys, self._ts, self._headers)
        count = self.log.partitions(self.topic)
        self._count = count
        parts = np.full(n, -1, dtype=np.int64)
        explicit = [i for i, p in enumerate(self._parts) if p is not None]
        if explicit:
            parts[explicit] = [self._parts[i] for i in explicit]
        if self.partitioner == "hash":
            keyed = [i for i, k in enumerate(self._keys) if k is not None and parts[i] < 0]
            if keyed:
                parts[keyed] = kafka_partitions([bytes(self._keys[i]) for i in keyed], count)  # type: ignore[arg-type]
        rr = np.nonzero(parts < 0)[0]
        if len(rr):
            parts[rr] = (self._rr + np.arange(len(rr))) % count
            self._rr = int((self._rr + len(rr)) % count)
        result: dict[int, tuple[int, int]] = {}
        done = np.zeros(n, dtype=bool)
        try:
            for p in np.unique(parts).tolist():
                idx = np.nonzero(parts == p)[0]
                result[p] = self.log.append(self.topic, p, body.take(pa.array(idx)))
                done[idx] = True
        finally:
            keep = np.nonzero(~done)[0].tolist()
            self._parts = [int(parts[i]) if p is None else p for i, p in enumerate(self._parts)]
            for name in ("_values", "_keys", "_ts", "_headers", "_parts"):
                kept = getattr(self, name)
                setattr(self, name, [kept[i] for i in keep])
        return result

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.flush()

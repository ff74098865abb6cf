"""A Kafka-protocol broker for tests: librdkafka's mock cluster, run in its own process.

``python -m trident_assets_tests.kafka_broker`` starts a one-broker mock cluster on
127.0.0.1 (a free port chosen by librdkafka), prints its bootstrap address on stdout and
serves until stdin closes or it is terminated. :class:`MockKafkaBroker` starts and stops it.

What the mock cluster implements (checked with confluent-kafka 2.16.1): produce and fetch
with correct offsets and high watermarks, record timestamps, idempotent and transactional
producers (commit markers take an offset, as on Apache Kafka). What it lacks: a controller,
so CreateTopics/CreatePartitions/DeleteTopics time out; topics are auto-created with 4
partitions on first use; ListOffsets by timestamp answers -1; DeleteRecords is unsupported.
It keeps a bounded log per partition: past roughly 100k-200k small records it deletes the
oldest segments and the log start offset moves, which acts as size-based retention.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

__all__ = ["AUTO_PARTITIONS", "MockKafkaBroker", "produce"]

AUTO_PARTITIONS = 4
"""Partitions of a topic the mock cluster auto-creates."""


class MockKafkaBroker:
    """A mock Kafka cluster in a child process, listening on 127.0.0.1."""

    def __init__(self) -> None:
        """Start the broker process and wait for its address."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trident_assets_tests.kafka_broker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("127.0.0.1:"):
            self.stop()
            msg = f"mock Kafka broker did not start (said {line!r})"
            raise RuntimeError(msg)
        self.bootstrap_servers = line

    def create_topic(self, topic: str) -> None:
        """Create ``topic`` (auto-created by a metadata request, with 4 partitions)."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap_servers})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            md = producer.list_topics(topic, timeout=5)
            found = md.topics.get(topic)
            if found is not None and found.error is None and found.partitions:
                return
            time.sleep(0.05)
        msg = f"topic {topic!r} was not created"
        raise RuntimeError(msg)

    def stop(self) -> None:
        """Stop the broker (its data is gone)."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def produce(
    bootstrap_servers: str,
    topic: str,
    values: list[bytes],
    *,
    partitions: int = AUTO_PARTITIONS,
    timestamps: list[int] | None = None,
    config: dict[str, Any] | None = None,
) -> None:
    """Send ``values`` to ``topic`` round-robin over its partitions (value i to i % n)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, **(config or {})})
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for i, value in enumerate(values):
        ts = 0 if timestamps is None else timestamps[i]
        producer.produce(
            topic, value=value, partition=i % partitions, timestamp=ts, on_delivery=on_delivery
        )
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(30)
    if left or errors:
        msg = f"produce to {topic!r} failed: {left} undelivered, errors {errors[:3]}"
        raise RuntimeError(msg)


def _serve() -> None:
    from confluent_kafka.admin import AdminClient

    holder = AdminClient({"test.mock.num.brokers": 1})
    brokers = holder.list_topics(timeout=10).brokers
    address = ",".join(f"{b.host}:{b.port}" for b in brokers.values())
    print(address, flush=True)
    sys.stdin.read()  # serve until the parent closes stdin or exits


if __name__ == "__main__":
    _serve()

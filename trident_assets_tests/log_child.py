"""Child-process helper for the log's multi-process tests (run with ``python -m``).

Modes:
  produce ROOT TOPIC TAG COUNT FLUSH_EVERY GO_FILE
      wait for GO_FILE, then send COUNT records keyed ``k<i % 10>`` with values ``TAG-<i>``,
      flushing every FLUSH_EVERY records.
  hang ROOT TOPIC PARTITION COUNT READY_FILE
      append COUNT records to PARTITION with the store's test hook set so the writer, after
      writing and fsyncing the temp segment and before renaming it, creates READY_FILE and
      sleeps (the parent then SIGKILLs this process).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from trident_assets.log import PartitionedLog, Record, store


def _produce(root: str, topic: str, tag: str, count: int, flush_every: int, go: str) -> None:
    deadline = time.monotonic() + 60
    while not Path(go).exists():
        if time.monotonic() > deadline:
            raise SystemExit("go file never appeared")
        time.sleep(0.005)
    log = PartitionedLog(root)
    producer = log.producer(topic)
    for i in range(count):
        producer.send(f"{tag}-{i}".encode(), key=f"k{i % 10}".encode())
        if (i + 1) % flush_every == 0:
            producer.flush()
    producer.flush()


def _hang(root: str, topic: str, partition: int, count: int, ready: str) -> None:
    def hook(tmp: Path) -> None:
        Path(ready).write_text(str(tmp))
        time.sleep(120)

    store._before_publish = hook
    log = PartitionedLog(root)
    log.append(topic, partition, [Record(f"doomed-{i}".encode()) for i in range(count)])


def main(argv: list[str]) -> None:
    mode, *args = argv
    if mode == "produce":
        root, topic, tag, count, flush_every, go = args
        _produce(root, topic, tag, int(count), int(flush_every), go)
    elif mode == "hang":
        root, topic, partition, count, ready = args
        _hang(root, topic, int(partition), int(count), ready)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])

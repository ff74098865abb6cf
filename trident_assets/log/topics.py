"""A log's topics on disk: their ``topic.json``, creating, growing, deleting and listing them.

A topic is a directory under the log's root holding ``topic.json`` (``{"format": 1,
"partitions": n, "topic_id": ..., "checksum": "crc32", ...}``) and one directory per
partition (see :mod:`trident_assets.log.store` for the whole layout). Creating and deleting
a topic rename a whole directory into or out of place, so other processes see either no
topic or a complete one; growing one holds the topic's lock.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from trident_assets.errors import ConfigError, CorruptLogMetadataError
from trident_assets.log.files import UnknownTopicError, flock, fsync_path, write_json_atomic
from trident_assets.log.names import validate_partition_count, validate_topic
from trident_assets.log.records import now_ms

__all__ = [
    "TopicExistsError",
    "add_partitions",
    "create_topic",
    "delete_topic",
    "list_topics",
    "read_topic_meta",
]

FORMAT_VERSION = 1


class TopicExistsError(ConfigError):
    """A topic with that name already exists."""


def topic_dir(root: Path, topic: str) -> Path:
    """The directory of ``topic`` under log directory ``root`` (the name is validated)."""
    return root / validate_topic(topic)


def read_topic_meta(root: Path, topic: str) -> dict[str, Any]:
    """The checked contents of ``topic``'s ``topic.json``.

    Raises:
        UnknownTopicError: the topic does not exist.
        CorruptLogMetadataError: the topic directory exists without its metadata file, or
            the file is unreadable.
    """
    tdir = topic_dir(root, topic)
    path = tdir / "topic.json"
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        if tdir.is_dir():
            msg = (
                f"topic {topic!r}: its metadata file {str(path)!r} is missing although the "
                "topic directory exists; restore the file from a copy of the log (or "
                f"delete the directory and recreate the topic: `trident log create-topic "
                f"{topic} PARTITIONS`)"
            )
            raise CorruptLogMetadataError(msg) from None
        msg = (
            f"topic {topic!r} does not exist in log {str(root)!r}; create it first "
            f"(`trident log create-topic {topic} PARTITIONS` or "
            "PartitionedLog.create_topic)"
        )
        raise UnknownTopicError(msg) from None
    try:
        meta = json.loads(text)
        if not isinstance(meta, dict):
            problem = "not a JSON object"
            raise ValueError(problem)
        count = meta["partitions"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            problem = f"'partitions' is {count!r}"
            raise ValueError(problem)
    except (ValueError, KeyError) as exc:
        msg = (
            f"topic {topic!r}: its metadata file {str(path)!r} is unreadable ({exc}); "
            "restore it from a copy of the log"
        )
        raise CorruptLogMetadataError(msg) from None
    return meta


def create_topic(root: Path, name: str, partitions: int) -> None:
    """Create topic ``name`` in log ``root``: ``PartitionedLog.create_topic``."""
    validate_topic(name)
    partitions = validate_partition_count(partitions)
    final = root / name
    if final.exists():
        msg = f"topic {name!r} already exists in log {str(root)!r}"
        raise TopicExistsError(msg)
    staging = root / f".staging-{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        for p in range(partitions):
            (staging / f"{p:05d}").mkdir()
        meta = {
            "format": FORMAT_VERSION,
            "name": name,
            "partitions": partitions,
            "created_ms": now_ms(),
            "topic_id": uuid.uuid4().hex,
            "checksum": "crc32",
        }
        write_json_atomic(staging / "topic.json", meta)
        try:
            os.rename(staging, final)
        except OSError as exc:  # ENOTEMPTY/EEXIST: created concurrently
            msg = f"topic {name!r} already exists in log {str(root)!r}"
            raise TopicExistsError(msg) from exc
        fsync_path(root, directory=True)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def add_partitions(root: Path, name: str, total: int, lock_timeout_s: float) -> None:
    """Grow topic ``name`` to ``total`` partitions: ``PartitionedLog.add_partitions``."""
    total = validate_partition_count(total)
    tdir = topic_dir(root, name)
    read_topic_meta(root, name)
    with flock(tdir / ".lock", lock_timeout_s):
        meta = read_topic_meta(root, name)
        current = int(meta["partitions"])
        if total <= current:
            msg = (
                f"topic {name!r} has {current} partition(s); add_partitions needs a larger "
                f"total, got {total} (partitions can only be added)"
            )
            raise ConfigError(msg)
        for p in range(current, total):
            (tdir / f"{p:05d}").mkdir(exist_ok=True)
        fsync_path(tdir, directory=True)
        write_json_atomic(tdir / "topic.json", {**meta, "partitions": total})


def delete_topic(root: Path, name: str) -> None:
    """Delete topic ``name`` and its records: ``PartitionedLog.delete_topic``."""
    tdir = topic_dir(root, name)
    read_topic_meta(root, name)
    trash = root / f".trash-{uuid.uuid4().hex}"
    try:
        os.rename(tdir, trash)
    except FileNotFoundError:
        msg = f"topic {name!r} does not exist in log {str(root)!r}"
        raise UnknownTopicError(msg) from None
    fsync_path(root, directory=True)
    shutil.rmtree(trash, ignore_errors=True)


def list_topics(root: Path) -> list[str]:
    """Return the names of all topics, sorted."""
    out = []
    for entry in os.scandir(root):
        if entry.name.startswith("."):
            continue
        if entry.is_dir() and os.path.exists(os.path.join(entry.path, "topic.json")):
            out.append(entry.name)
    return sorted(out)

"""The embedded, durable, Kafka-like partitioned log: topics, partitions, contiguous offsets.

Layout on disk (everything below ``root``)::

    <root>/<topic>/topic.json                       {"format": 1, "partitions": n, ...}
    <root>/<topic>/.lock                            topic-level flock (add_partitions)
    <root>/<topic>/<partition:05d>/.lock            partition-level flock (every writer)
    <root>/<topic>/<partition:05d>/log_start.json   {"log_start": offset} (retention)
    <root>/<topic>/<partition:05d>/<first:020d>-<last:020d>.parquet   one segment per append
    <root>/<topic>/<partition:05d>/<first:020d>-<last:020d>.parquet.crc32   its checksum

``topic.json`` also holds the topic's ``topic_id`` (a uuid given at creation: a topic deleted
and re-created under the same name gets a new one) and ``"checksum": "crc32"``.

Every segment is an immutable Parquet file holding the inclusive offset range in its name,
with the columns of :data:`LOG_SCHEMA`. Offsets in a partition are contiguous from 0: segment
``k+1`` starts at ``last(k) + 1``.

Publishing is atomic and crash-safe. A writer takes an exclusive ``fcntl.flock`` on the
partition's ``.lock``, removes temp files left by writers that died holding the lock, computes
the next offset from the last segment name (and the retention start), writes the segment to a
``.tmp-*`` file in the same directory, fsyncs it, publishes its checksum file (the CRC-32 of
every byte, written to a temp file and renamed), renames the segment to its final name and
fsyncs the directory. Every read verifies the checksum (see
:mod:`trident_assets.log.corruption`); topics created before checksums (no ``"checksum"`` in
``topic.json``) read their segments that have none unverified.

Readers only ever look at names matching the final pattern, so a writer killed at
any point leaves either no trace visible to readers or a whole segment. Two writers in
different processes (or threads, or :class:`PartitionedLog` instances) serialise on the lock,
so they neither lose nor duplicate offsets.

Retention (:meth:`PartitionedLog.delete_records_before`) moves the partition's log start
forward (``log_start.json``, written atomically) and then removes whole segments below it;
reads of offsets below the log start raise :class:`~trident_assets.errors.BatchUnavailableError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa

from trident_assets.errors import ConfigError
from trident_assets.log.files import DEFAULT_LOCK_TIMEOUT_S
from trident_assets.log.names import validate_partition
from trident_assets.log.producer import Partitioner, Producer
from trident_assets.log.records import (
    LOG_SCHEMA,
    PartitionInfo,
    Record,
    check_offset,
    to_body,
)
from trident_assets.log.segments import (
    list_segments,
    next_offset,
    offset_at_or_after,
    range_segments,
    read_log_start,
    read_segments,
)
from trident_assets.log.topics import (
    add_partitions,
    create_topic,
    delete_topic,
    list_topics,
    read_topic_meta,
)
from trident_assets.log.writes import append_segment, delete_before

__all__ = ["PartitionedLog"]

_before_publish: Callable[[Path], None] | None = None
"""Test hook: if set, called with the fsynced temp file's path just before it is renamed.

Only crash tests set it (in a child process) to stop a writer between "temp file written"
and "segment published"; it is ``None`` in normal use.
"""


class PartitionedLog:
    """An embedded, durable, Kafka-like partitioned log stored under one directory.

    Instances are cheap and hold no open files; any number of instances, threads and
    processes may use the same root at once. All state lives on disk, so a new instance on
    the same root sees exactly what others published.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        spark_root: str | None = None,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    ) -> None:
        """The log in directory ``root`` (created if missing).

        ``spark_root``: where Spark (the driver's JVM and the executors) finds this directory
        when not at ``root``: a Hadoop filesystem URL holding the same files (e.g.
        ``hdfs://nn/trident/log``), or another path. Default: ``root`` itself (local mode, or a
        filesystem shared by every node at that path).

        ``lock_timeout_s``: how long a writer (append, retention, add_partitions) waits for
        a partition's lock before raising
        :class:`~trident_assets.errors.LogLockTimeoutError`.

        Raises:
            ConfigError: ``spark_root`` is neither an absolute path nor a URL, or
                ``lock_timeout_s`` is not a positive number.
        """
        if (
            isinstance(lock_timeout_s, bool)
            or not isinstance(lock_timeout_s, (int, float))
            or not lock_timeout_s > 0
        ):
            msg = f"lock_timeout_s must be a positive number of seconds, got {lock_timeout_s!r}"
            raise ConfigError(msg)
        self.lock_timeout_s = float(lock_timeout_s)
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        if spark_root is not None and (
            not isinstance(spark_root, str)
            or not (spark_root.startswith("/") or "://" in spark_root)
        ):
            msg = (
                "spark_root must be an absolute path or a URL (file:///mnt/log, "
                f"hdfs://nn/log), got {spark_root!r}"
            )
            raise ConfigError(msg)
        self.spark_root = spark_root

    def spark_uri(self, path: str | Path) -> str:
        """The URI under which Spark reads ``path``, a file of this log."""
        relative = Path(path).absolute().relative_to(self.root).as_posix()
        root = self.spark_root or str(self.root)
        base = root if "://" in root else "file://" + root
        return f"{base.rstrip('/')}/{relative}"

    def __repr__(self) -> str:
        return f"PartitionedLog({str(self.root)!r})"

    # ------------------------------------------------------------------ topics

    def _partition_dir(self, topic: str, partition: int) -> Path:
        return self.root / topic / f"{partition:05d}"

    def topic_id(self, topic: str) -> str | None:
        """The ID given to ``topic`` at creation (a uuid hex), or None for an older topic."""
        value = read_topic_meta(self.root, topic).get("topic_id")
        return value if isinstance(value, str) else None

    def checksums_required(self, topic: str) -> bool:
        """True when every segment of ``topic`` must have a checksum file.

        Topics created since checksums exist say ``"checksum": "crc32"`` in ``topic.json``;
        for older topics, segments with a checksum file are verified and those without are
        read unverified.
        """
        return read_topic_meta(self.root, topic).get("checksum") == "crc32"

    def create_topic(self, name: str, partitions: int) -> None:
        """Create topic ``name`` with ``partitions`` empty partitions, atomically.

        The topic directory is prepared under a hidden staging name and renamed into place,
        so other processes see either no topic or a complete one.

        Raises:
            ConfigError: If the name (:func:`~trident_assets.log.names.validate_topic`) or
                the count (``1 .. MAX_PARTITIONS``) is invalid.
            TopicExistsError: If the topic already exists.
        """
        create_topic(self.root, name, partitions)

    def add_partitions(self, name: str, total: int) -> None:
        """Grow topic ``name`` to ``total`` partitions (Kafka's ``--alter --partitions``).

        Existing partitions and offsets are untouched. As in Kafka, keys hashed with the new
        count may map to different partitions than before.

        Raises:
            UnknownTopicError: If the topic does not exist.
            ConfigError: If ``total`` is not larger than the current count or is invalid.
        """
        add_partitions(self.root, name, total, self.lock_timeout_s)

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name`` and all its records.

        The directory is first renamed to a hidden trash name (so the topic disappears
        atomically), then removed.

        Raises:
            UnknownTopicError: If the topic does not exist.
            ConfigError: If the name is invalid.
        """
        delete_topic(self.root, name)

    def topics(self) -> list[str]:
        """Return the names of all topics, sorted."""
        return list_topics(self.root)

    def partitions(self, name: str) -> int:
        """Return the number of partitions of topic ``name``.

        Raises:
            UnknownTopicError: If the topic does not exist.
            ConfigError: If the name is invalid.
        """
        return int(read_topic_meta(self.root, name)["partitions"])

    def _pdir(self, topic: str, partition: int) -> Path:
        count = self.partitions(topic)
        return self._partition_dir(topic, validate_partition(partition, count, topic))

    # ------------------------------------------------------------------ writing

    def append(
        self,
        topic: str,
        partition: int,
        records: pa.Table | pa.RecordBatch | Sequence[Record],
    ) -> tuple[int, int]:
        """Append ``records`` to one partition as one atomic segment.

        Either all records become visible, with consecutive offsets following the
        partition's previous last offset, or (if the process dies or an error is raised)
        none do.

        Args:
            topic: An existing topic.
            partition: A partition number of the topic.
            records: A list of :class:`Record`, or an Arrow table/record batch with a
                ``value`` column (binary or string) and optionally ``key`` (binary/string),
                ``timestamp`` or ``timestamp_ms`` (int64 epoch ms or a timestamp type; nulls
                mean now) and ``headers`` (:data:`HEADERS_TYPE`). ``topic``, ``partition`` and
                ``offset`` columns, if present (e.g. a table from :meth:`read`), are ignored.

        Returns:
            ``(first_offset, last_offset)`` of the appended records, inclusive. For an empty
            input nothing is written and ``(latest, latest - 1)`` (an empty range) is returned.

        Raises:
            UnknownTopicError: If the topic does not exist.
            ConfigError: If the partition or the records are invalid (nothing is written).
        """
        pdir = self._pdir(topic, partition)
        partition = int(partition)
        body = to_body(records)
        if body.num_rows == 0:
            latest = self.latest_offset(topic, partition)
            return latest, latest - 1
        return append_segment(pdir, topic, partition, body, self.lock_timeout_s, _before_publish)

    def producer(
        self, topic: str, partitioner: Partitioner = "hash", max_buffered: int = 100_000
    ) -> Producer:
        """Return a buffering :class:`Producer` for ``topic``.

        Args:
            topic: An existing topic.
            partitioner: ``"hash"`` (Kafka's default: murmur2 of the key; null keys round
                robin) or ``"round_robin"`` (every record round robin, keys ignored).
            max_buffered: ``send`` flushes automatically once this many records are buffered.

        Raises:
            UnknownTopicError: If the topic does not exist.
            ConfigError: If the partitioner or ``max_buffered`` is invalid.
        """
        return Producer(self, topic, partitioner, max_buffered)

    def delete_records_before(self, topic: str, partition: int, offset: int) -> int:
        """Apply retention: make every offset below ``offset`` unreadable (Kafka deleteRecords).

        The new log start is stored durably first, then whole segments below it are
        removed. Offsets stay contiguous: the next append continues at the latest offset
        (or at ``offset`` if everything was deleted). Moving the start backwards is a no-op.

        Returns the partition's earliest offset after the call.

        Raises:
            ConfigError: If ``offset`` is negative or beyond the latest offset.
        """
        pdir = self._pdir(topic, partition)
        offset = check_offset(offset, "offset")
        return delete_before(pdir, topic, partition, offset, self.lock_timeout_s)

    # ------------------------------------------------------------------ queries

    def earliest_offset(self, topic: str, partition: int) -> int:
        """Return the partition's log start: the first offset that can still be read.

        It is 0 until retention deletes records; for an empty partition it equals
        :meth:`latest_offset`.
        """
        return read_log_start(self._pdir(topic, partition))

    def latest_offset(self, topic: str, partition: int) -> int:
        """Return the next offset to be written (Kafka's high watermark / log end offset)."""
        pdir = self._pdir(topic, partition)
        return next_offset(list_segments(pdir), read_log_start(pdir))

    def partition_offsets(self, topic: str) -> list[PartitionInfo]:
        """Return ``(partition, earliest, latest)`` for every partition of ``topic``."""
        out = []
        for p in range(self.partitions(topic)):
            pdir = self._partition_dir(topic, p)
            start = read_log_start(pdir)
            out.append(PartitionInfo(p, start, next_offset(list_segments(pdir), start)))
        return out

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """Return the first readable offset whose timestamp is ``>= timestamp_ms``.

        As Kafka's ``offsetsForTimes``: timestamps need not be monotonic, so this is the
        smallest such *offset*, not the smallest timestamp. Segments whose Parquet statistics
        show no timestamp ``>= timestamp_ms`` are skipped without reading their rows.

        Returns:
            The offset, or ``None`` if no readable record has such a timestamp.
        """
        pdir = self._pdir(topic, partition)
        timestamp_ms = check_offset(timestamp_ms, "timestamp_ms")
        start = read_log_start(pdir)
        required = self.checksums_required(topic)
        return offset_at_or_after(pdir, topic, partition, timestamp_ms, start, required)

    def segment_files(self, topic: str, partition: int, first: int, last: int) -> list[str]:
        """Return the absolute paths of the segment files overlapping ``first .. last``.

        The files may also hold offsets outside the range; filter on ``offset`` when reading
        them (as :func:`trident_assets.spark.log_reader.read_ranges` does).

        ``last`` is inclusive; ``first - 1`` means an empty range (no files).

        Raises:
            BatchUnavailableError: If ``first`` is below the earliest offset or ``last`` is at
                or beyond the latest offset.
            ConfigError: If the range is malformed.
        """
        segs = range_segments(self._pdir(topic, partition), topic, partition, first, last)
        return [str(s.path) for s in segs or []]

    def read(self, topic: str, partition: int, first: int, last: int) -> pa.Table:
        """Return the records with offsets ``first .. last`` (inclusive), in offset order.

        Exactly ``last - first + 1`` rows with :data:`LOG_SCHEMA` are returned; the same
        range always returns the same records until retention deletes them.

        ``last = first - 1`` is an empty range (allowed for ``first <= latest``): an empty table.

        Raises:
            BatchUnavailableError: If ``first`` is below the earliest offset (deleted by
                retention) or ``last`` is at or beyond the latest offset (not written yet).
                The message names the topic, partition, range and earliest/latest offsets.
            ConfigError: If the topic/partition/range is malformed.
        """
        segs = range_segments(self._pdir(topic, partition), topic, partition, first, last)
        if segs is None:
            return LOG_SCHEMA.empty_table()
        pdir = self._partition_dir(topic, partition)
        required = self.checksums_required(topic)
        return read_segments(pdir, topic, partition, segs, first, last, required)

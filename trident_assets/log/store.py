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

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trident_assets.errors import (
    ConfigError,
    CorruptLogMetadataError,
    CorruptSegmentError,
    DiskFullError,
    is_disk_full,
)
from trident_assets.log.corruption import (
    checksum_path,
    corrupt_segment_error,
    crc32_text,
    read_failure,
    read_verified,
)
from trident_assets.log.files import (
    DEFAULT_LOCK_TIMEOUT_S,
    TMP_PREFIX,
    UnknownTopicError,
    flock,
    fsync_path,
    write_json_atomic,
)
from trident_assets.log.names import (
    validate_partition,
    validate_partition_count,
    validate_topic,
)
from trident_assets.log.producer import Partitioner, Producer
from trident_assets.log.records import (
    HEADERS_TYPE,
    LOG_SCHEMA,
    SEGMENT_PATTERN,
    PartitionInfo,
    Record,
    Segment,
    check_offset,
    now_ms,
    to_body,
)
from trident_assets.log.segments import (
    covering,
    list_segments,
    next_offset,
    read_log_start,
    read_segment,
    unavailable,
)

__all__ = [
    "HEADERS_TYPE",
    "LOG_SCHEMA",
    "SEGMENT_PATTERN",
    "LogCorruptedError",
    "PartitionInfo",
    "PartitionedLog",
    "Partitioner",
    "Producer",
    "Record",
    "Segment",
    "TopicExistsError",
    "UnknownTopicError",
]

FORMAT_VERSION = 1

_ROW_GROUP_ROWS = 128 * 1024
_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["topic", "partition"],
    "write_statistics": ["topic", "partition", "offset", "timestamp"],
    "row_group_size": _ROW_GROUP_ROWS,
}

_before_publish: Callable[[Path], None] | None = None
"""Test hook: if set, called with the fsynced temp file's path just before it is renamed.

Only crash tests set it (in a child process) to stop a writer between "temp file written"
and "segment published"; it is ``None`` in normal use.
"""


class TopicExistsError(ConfigError):
    """A topic with that name already exists."""


LogCorruptedError = CorruptSegmentError
"""Segment files of a partition are missing, overlapping, unreadable or disagree with their names.

The same class as :class:`~trident_assets.errors.CorruptSegmentError` (kept under this name).
"""


class PartitionedLog:
    """An embedded, durable, Kafka-like partitioned log stored under one directory.

    Instances are cheap and hold no open files; any number of instances, threads and
    processes may use the same root at once. All state lives on disk, so a new instance on
    the same root sees exactly what others published.

    Args:
        root: The log directory (created if missing).
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

    def _topic_dir(self, topic: str) -> Path:
        return self.root / validate_topic(topic)

    def _partition_dir(self, topic: str, partition: int) -> Path:
        return self.root / topic / f"{partition:05d}"

    def _read_meta(self, topic: str) -> dict[str, Any]:
        tdir = self._topic_dir(topic)
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
                f"topic {topic!r} does not exist in log {str(self.root)!r}; create it first "
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

    def topic_id(self, topic: str) -> str | None:
        """The ID given to ``topic`` at creation (a uuid hex), or None for an older topic."""
        value = self._read_meta(topic).get("topic_id")
        return value if isinstance(value, str) else None

    def checksums_required(self, topic: str) -> bool:
        """True when every segment of ``topic`` must have a checksum file.

        Topics created since checksums exist say ``"checksum": "crc32"`` in ``topic.json``;
        for older topics, segments with a checksum file are verified and those without are
        read unverified.
        """
        return self._read_meta(topic).get("checksum") == "crc32"

    def create_topic(self, name: str, partitions: int) -> None:
        """Create topic ``name`` with ``partitions`` empty partitions, atomically.

        The topic directory is prepared under a hidden staging name and renamed into place,
        so other processes see either no topic or a complete one.

        Args:
            name: The topic name (see :func:`~trident_assets.log.names.validate_topic`).
            partitions: The number of partitions, ``1 .. MAX_PARTITIONS``.

        Raises:
            ConfigError: If the name or the count is invalid.
            TopicExistsError: If the topic already exists.
        """
        validate_topic(name)
        partitions = validate_partition_count(partitions)
        final = self.root / name
        if final.exists():
            msg = f"topic {name!r} already exists in log {str(self.root)!r}"
            raise TopicExistsError(msg)
        staging = self.root / f".staging-{uuid.uuid4().hex}"
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
                msg = f"topic {name!r} already exists in log {str(self.root)!r}"
                raise TopicExistsError(msg) from exc
            fsync_path(self.root, directory=True)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    def add_partitions(self, name: str, total: int) -> None:
        """Grow topic ``name`` to ``total`` partitions (Kafka's ``--alter --partitions``).

        Existing partitions and offsets are untouched. As in Kafka, keys hashed with the new
        count may map to different partitions than before.

        Args:
            name: An existing topic.
            total: The new partition count; must be larger than the current one.

        Raises:
            UnknownTopicError: If the topic does not exist.
            ConfigError: If ``total`` is not larger than the current count or is invalid.
        """
        total = validate_partition_count(total)
        tdir = self._topic_dir(name)
        self._read_meta(name)
        with flock(tdir / ".lock", self.lock_timeout_s):
            meta = self._read_meta(name)
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

    def delete_topic(self, name: str) -> None:
        """Delete topic ``name`` and all its records.

        The directory is first renamed to a hidden trash name (so the topic disappears
        atomically), then removed.

        Raises:
            UnknownTopicError: If the topic does not exist.
            ConfigError: If the name is invalid.
        """
        tdir = self._topic_dir(name)
        self._read_meta(name)
        trash = self.root / f".trash-{uuid.uuid4().hex}"
        try:
            os.rename(tdir, trash)
        except FileNotFoundError:
            msg = f"topic {name!r} does not exist in log {str(self.root)!r}"
            raise UnknownTopicError(msg) from None
        fsync_path(self.root, directory=True)
        shutil.rmtree(trash, ignore_errors=True)

    def topics(self) -> list[str]:
        """Return the names of all topics, sorted."""
        out = []
        for entry in os.scandir(self.root):
            if entry.name.startswith("."):
                continue
            if entry.is_dir() and os.path.exists(os.path.join(entry.path, "topic.json")):
                out.append(entry.name)
        return sorted(out)

    def partitions(self, name: str) -> int:
        """Return the number of partitions of topic ``name``.

        Raises:
            UnknownTopicError: If the topic does not exist.
            ConfigError: If the name is invalid.
        """
        return int(self._read_meta(name)["partitions"])

    def _pdir(self, topic: str, partition: int) -> Path:
        count = self.partitions(topic)
        return self._partition_dir(topic, validate_partition(partition, count, topic))

    def _check_range(self, topic: str, partition: int, first: Any, last: Any) -> tuple[int, int]:
        first = check_offset(first, "first")
        last = check_offset(last, "last")
        if first < 0 or last < first - 1:
            msg = (
                f"invalid offset range {first}..{last} for topic {topic!r} partition "
                f"{partition}: need 0 <= first and last >= first - 1 (last = first - 1 is empty)"
            )
            raise ConfigError(msg)
        return first, last

    def _resolve(self, topic: str, partition: int, first: Any, last: Any) -> list[Segment] | None:
        """Validate a range and return its segments, or ``None`` for an empty range."""
        pdir = self._pdir(topic, partition)
        first, last = self._check_range(topic, partition, first, last)
        earliest = read_log_start(pdir)
        latest = next_offset(list_segments(pdir), earliest)
        if last == first - 1:
            if first > latest:
                raise unavailable(topic, partition, first, last, earliest, latest)
            return None
        if first < earliest or last >= latest:
            raise unavailable(topic, partition, first, last, earliest, latest)
        return covering(topic, partition, pdir, first, last)

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
        n = body.num_rows
        if n == 0:
            latest = self.latest_offset(topic, partition)
            return latest, latest - 1
        with flock(pdir / ".lock", self.lock_timeout_s):
            for entry in os.scandir(pdir):
                if entry.name.startswith(TMP_PREFIX):
                    # Left by a writer that died holding the lock: never published.
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
            segs = list_segments(pdir)
            first = next_offset(segs, read_log_start(pdir))
            last = first + n - 1
            table = pa.Table.from_arrays(
                [
                    pa.nulls(n, pa.string()).fill_null(topic),
                    pa.array(np.full(n, partition, dtype=np.int32)),
                    pa.array(np.arange(first, last + 1, dtype=np.int64)),
                    *body.columns[2:3],
                    *body.columns[0:2],
                    body.column(3),
                ],
                schema=LOG_SCHEMA,
            )
            tmp = pdir / f"{TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}.parquet"
            final = pdir / f"{first:020d}-{last:020d}.parquet"
            try:
                pq.write_table(table, tmp, **_WRITE_OPTIONS)
                fsync_path(tmp)
            except OSError as exc:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)  # never published; give its space back now
                if not is_disk_full(exc):
                    raise
                msg = (
                    f"no space left on device appending {n} records to {topic}@{partition} "
                    f"(offsets {first}..{last}) under {pdir}: nothing was appended. Free space on "
                    "that device (e.g. retention: PartitionedLog.delete_records_before), then "
                    "send them again"
                )
                raise DiskFullError(msg) from exc
            # the checksum file is published first: a visible segment always has one
            side_tmp = pdir / f"{TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}.crc32"
            with open(side_tmp, "w", encoding="ascii") as fh:
                fh.write(crc32_text(tmp.read_bytes()))
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(side_tmp, checksum_path(final))
            if _before_publish is not None:
                _before_publish(tmp)
            os.rename(tmp, final)
            fsync_path(pdir, directory=True)
        return first, last

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

        Args:
            topic: An existing topic.
            partition: A partition number of the topic.
            offset: The new earliest offset, ``<= latest_offset``.

        Returns:
            The partition's earliest offset after the call.

        Raises:
            ConfigError: If ``offset`` is negative or beyond the latest offset.
        """
        pdir = self._pdir(topic, partition)
        offset = check_offset(offset, "offset")
        with flock(pdir / ".lock", self.lock_timeout_s):
            start = read_log_start(pdir)
            segs = list_segments(pdir)
            latest = next_offset(segs, start)
            if offset < 0 or offset > latest:
                msg = (
                    f"cannot delete records before offset {offset} in topic {topic!r} partition "
                    f"{partition}: offset must be between 0 and latest offset {latest}"
                )
                raise ConfigError(msg)
            if offset <= start:
                return start
            write_json_atomic(pdir / "log_start.json", {"log_start": offset})
            for s in segs:
                if s.last < offset:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(s.path)
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(checksum_path(s.path))
            fsync_path(pdir, directory=True)
            return offset

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
        for seg in list_segments(pdir):
            if seg.last < start:
                continue
            try:
                data = read_verified(topic, partition, seg, required)
                pf = pq.ParquetFile(pa.BufferReader(data))
            except FileNotFoundError:
                continue  # removed by retention meanwhile: all its offsets are below the start
            except (pa.ArrowException, OSError) as exc:
                raise corrupt_segment_error(topic, partition, seg, read_failure(exc)) from exc
            with pf:
                ts_idx = pf.schema_arrow.get_field_index("timestamp")
                for rg in range(pf.metadata.num_row_groups):
                    stats = pf.metadata.row_group(rg).column(ts_idx).statistics
                    if stats is not None and stats.has_min_max and stats.max_raw < timestamp_ms:
                        continue
                    t = pf.read_row_group(rg, columns=["offset", "timestamp"])
                    ts = t.column("timestamp").cast(pa.int64()).to_numpy()
                    offs = t.column("offset").to_numpy()
                    hits = np.nonzero((ts >= timestamp_ms) & (offs >= start))[0]
                    if len(hits):
                        return int(offs[hits[0]])
        return None

    def segment_files(self, topic: str, partition: int, first: int, last: int) -> list[str]:
        """Return the absolute paths of the segment files overlapping ``first .. last``.

        The files may also hold offsets outside the range; filter on ``offset`` when reading
        them (as :func:`trident_assets.spark.log_reader.read_ranges` does).

        Args:
            topic: An existing topic.
            partition: A partition number of the topic.
            first: First offset, inclusive.
            last: Last offset, inclusive; ``first - 1`` means an empty range (no files).

        Raises:
            BatchUnavailableError: If ``first`` is below the earliest offset or ``last`` is at
                or beyond the latest offset.
            ConfigError: If the range is malformed.
        """
        segs = self._resolve(topic, partition, first, last)
        return [str(s.path) for s in segs or []]

    def read(self, topic: str, partition: int, first: int, last: int) -> pa.Table:
        """Return the records with offsets ``first .. last`` (inclusive), in offset order.

        Exactly ``last - first + 1`` rows with :data:`LOG_SCHEMA` are returned; the same
        range always returns the same records until retention deletes them.

        Args:
            topic: An existing topic.
            partition: A partition number of the topic.
            first: First offset, inclusive.
            last: Last offset, inclusive; ``first - 1`` means an empty range (allowed for
                ``first <= latest``) and returns an empty table.

        Raises:
            BatchUnavailableError: If ``first`` is below the earliest offset (deleted by
                retention) or ``last`` is at or beyond the latest offset (not written yet).
                The message names the topic, partition, range and earliest/latest offsets.
            ConfigError: If the topic/partition/range is malformed.
        """
        segs = self._resolve(topic, partition, first, last)
        if segs is None:
            return LOG_SCHEMA.empty_table()
        pieces = []
        required = self.checksums_required(topic)
        try:
            for seg in segs:
                pieces.append(read_segment(topic, partition, seg, first, last, required))
        except FileNotFoundError:
            pdir = self._partition_dir(topic, partition)
            earliest = read_log_start(pdir)
            if first < earliest:
                raise unavailable(topic, partition, first, last, earliest, None) from None
            raise
        table = pa.concat_tables(pieces)
        offsets = table.column("offset")
        if (
            table.num_rows != last - first + 1
            or offsets[0].as_py() != first
            or offsets[-1].as_py() != last
        ):
            files = ", ".join(repr(str(s.path)) for s in segs)
            msg = (
                f"corrupt log: topic {topic!r} partition {partition}: a read of offsets "
                f"{first}..{last} returned {table.num_rows} rows from file(s) {files}; the "
                f"files disagree with their names; `trident log verify {topic}` names the "
                "damaged segment"
            )
            raise CorruptSegmentError(msg)
        return table

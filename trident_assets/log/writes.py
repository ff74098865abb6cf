"""Writing a partition: one atomic segment per append, and retention.

Why a segment's publication is crash-safe: :mod:`trident_assets.log.store`.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from trident_assets.errors import ConfigError, DiskFullError, is_disk_full
from trident_assets.log.corruption import checksum_path, crc32_text
from trident_assets.log.files import TMP_PREFIX, flock, fsync_path, write_json_atomic
from trident_assets.log.records import LOG_SCHEMA
from trident_assets.log.segments import list_segments, next_offset, read_log_start

__all__ = ["append_segment", "delete_before"]

_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "use_dictionary": ["topic", "partition"],
    "write_statistics": ["topic", "partition", "offset", "timestamp"],
    "row_group_size": 128 * 1024,
}


def append_segment(
    pdir: Path,
    topic: str,
    partition: int,
    body: pa.Table,
    lock_timeout_s: float,
    before_publish: Callable[[Path], None] | None = None,
) -> tuple[int, int]:
    """Append ``body`` to partition directory ``pdir`` as one segment; return its offsets.

    ``body`` holds :func:`~trident_assets.log.records.to_body`'s columns and at least one row;
    the offsets returned are the segment's first and last, inclusive.

    ``before_publish`` (crash tests only) is called with the fsynced temp file's path just
    before it is renamed into place.

    Raises:
        LogLockTimeoutError: the partition's lock stayed held for ``lock_timeout_s``.
        DiskFullError: the device is full; nothing was appended.
    """
    n = body.num_rows
    with flock(pdir / ".lock", lock_timeout_s):
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
        if before_publish is not None:
            before_publish(tmp)
        os.rename(tmp, final)
        fsync_path(pdir, directory=True)
    return first, last


def delete_before(
    pdir: Path, topic: str, partition: int, offset: int, lock_timeout_s: float
) -> int:
    """Move partition ``pdir``'s log start up to ``offset``, then remove the segments below it.

    A start at or past ``offset`` is left alone. Returns the log start after the call.

    Raises:
        ConfigError: ``offset`` is negative or beyond the latest offset.
    """
    with flock(pdir / ".lock", lock_timeout_s):
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

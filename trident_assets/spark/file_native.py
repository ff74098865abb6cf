r"""Native Spark reads of a file spout's local files: Spark's own file sources, no Python task.

Each file is its own scan (the scans are unioned), so a task never reads two files:

* lines (JSON lines, text, CSV): Spark's ``text`` source with ``lineSep`` ``\n`` gives one
  row per line, in order, with its exact bytes (a ``\r`` before the ``\n`` kept, no
  decoding). The line number is the row's position in its task + 1 (the lower 33 bits of
  ``monotonically_increasing_id``), exact only when the task read the whole file: every
  row checks, on the executors, that its task's block starts at 0 and spans the file's
  recorded size (:func:`whole_file_conf` keeps Spark from splitting a file; a file read in
  pieces fails the job, naming it, never numbering a line wrong). A trailing ``\r`` is
  removed; empty lines (and a CSV file's header, line 1) are skipped but counted;
* Parquet: Spark's Parquet reader with the declared schema, the row number from
  ``_metadata.row_index`` (+1), exact however Spark splits the file.

Every row also checks that its file's size and modification time (Spark's ``_metadata``)
are the recorded ones: a file changed after the driver checked its fingerprint fails the
job, naming it. Provenance (``topic``: the file's URL, ``timestamp``: its recorded
modification time) is a literal of its scan.
"""

from __future__ import annotations

import re
from functools import reduce
from typing import TYPE_CHECKING, Any

from trident_assets.log.records import log_spark_schema
from trident_assets.spark.file_schemes import FILE_COLUMN_PREFIX

if TYPE_CHECKING:
    from trident_assets.spouts.file_listing import FileEntry, Location

__all__ = [
    "NATIVE_MAX_FILES",
    "changed_message",
    "native_frame",
    "reads_natively",
    "split_message",
    "whole_file_conf",
]

NATIVE_MAX_FILES = 256
"""A read of more files than this goes to the Python reader: each native file is a scan of
its own, planned on the driver (a few milliseconds each)."""

_ROW_BITS = (1 << 33) - 1
"""``monotonically_increasing_id``'s lower bits: the row's position in its task."""

_WHOLE = str(1 << 40)

_PLAIN_PATH = re.compile(r"[A-Za-z0-9/._+=,@~-]+")
"""Paths Spark reads as they are (no glob characters, nothing a URL would escape)."""

_COMPRESSED = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".xz", ".br")
"""Suffixes Spark's text source would decompress: such files are read as their bytes."""


def whole_file_conf() -> dict[str, str]:
    """Spark settings under which a scan reads each file in one task (never split)."""
    return {
        "spark.sql.files.maxPartitionBytes": _WHOLE,
        "spark.sql.files.openCostInBytes": _WHOLE,
    }


def changed_message(uri: str, entry: FileEntry, now: str) -> str:
    """The refusal of a file changed since it was recorded (``now``: its size now)."""
    return (
        f"file {uri} changed after it was recorded for its txid ({entry.size} bytes, "
        f"fingerprint {entry.fingerprint}; now {now} bytes): a transactional "
        "batch is never read with other data; put the file back as it was"
    )


def split_message(uri: str) -> str:
    """The refusal of a file Spark read in pieces (its lines could not be numbered)."""
    return (
        f"file {uri} was split across Spark tasks, so its line numbers cannot be known: "
        "a file spout reads each file in one task; run its batches with the settings "
        "the runner gives them (spark.sql.files.maxPartitionBytes and openCostInBytes)"
    )


def reads_natively(location: Location, entry: FileEntry, fmt: str) -> bool:
    """Whether Spark's own source reads ``entry``, else the Python reader.

    Native: a local file with a plain path (a lines file also not named as compressed).
    """
    if not location.local or not _PLAIN_PATH.fullmatch(location.full(entry.path)):
        return False
    return fmt == "parquet" or not entry.path.lower().endswith(_COMPRESSED)


def native_frame(
    spark: Any, location: Location, entries: list[FileEntry], fmt: str, ddl: str
) -> Any:
    """The records of ``entries`` (all :func:`reads_natively`), as the Python reader's columns.

    ``ddl`` is the declared Parquet fields (ignored for lines).
    """
    frames = [_one(spark, location, entry, fmt, ddl) for entry in entries]
    return reduce(lambda a, b: a.union(b), frames)


def _one(spark: Any, location: Location, entry: FileEntry, fmt: str, ddl: str) -> Any:
    from pyspark.sql import functions as F

    uri = location.uri(entry.path)
    meta = F.col("_metadata")
    size = meta.getField("file_size")
    changed = (size != F.lit(entry.size)) | (
        F.unix_millis(meta.getField("file_modification_time")) != F.lit(entry.mtime_ns // 1_000_000)
    )
    refused = F.raise_error(
        F.concat(
            F.lit(changed_message(uri, entry, "\0").split("\0")[0]),
            size.cast("string"),
            F.lit(changed_message(uri, entry, "\0").split("\0")[1]),
        )
    )
    provenance = [
        F.lit(uri).alias("topic"),
        F.lit(0).cast("int").alias("partition"),
    ]
    timestamp = F.timestamp_micros(F.lit(entry.mtime_ns // 1000)).alias("timestamp")
    if fmt == "parquet":
        frame = spark.read.schema(ddl).parquet(uri)
        fields = [F.col(f"`{f}`").alias(FILE_COLUMN_PREFIX + f) for f in frame.columns]
        checked = frame.where(F.when(changed, refused).otherwise(F.lit(True)))
        return checked.select(
            *provenance,
            (meta.getField("row_index") + 1).alias("offset"),
            timestamp,
            F.lit(None).cast("binary").alias("value"),
            *fields,
        )
    frame = spark.read.format("text").option("lineSep", "\n").load(uri)
    start, length = meta.getField("file_block_start"), meta.getField("file_block_length")
    split = (start != 0) | (length != F.lit(entry.size))
    numbered = frame.select(
        F.col("value").cast("binary").alias("line"),
        (F.monotonically_increasing_id().bitwiseAND(F.lit(_ROW_BITS)) + 1).alias("offset"),
        F.when(changed, refused)
        .when(split, F.raise_error(F.lit(split_message(uri))))
        .otherwise(F.lit(True))
        .alias("whole"),
    )
    line = F.col("line")
    stripped = (
        F.when(F.substring(line, -1, 1) == F.lit(b"\r"), line.substr(F.lit(1), F.length(line) - 1))
        .otherwise(line)
        .alias("value")
    )
    kept = numbered.select("offset", "whole", stripped)
    keep = F.col("whole") & (F.length("value") > 0)
    if fmt == "csv":
        keep = keep & (F.col("offset") > 1)
    schema = log_spark_schema()
    return kept.where(keep).select(
        *provenance,
        "offset",
        timestamp,
        F.lit(None).cast("binary").alias("key"),
        "value",
        F.lit(None).cast(schema["headers"].dataType).alias("headers"),
    )

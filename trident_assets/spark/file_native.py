r"""Native Spark reads of a file spout's local files: Spark's own file sources, no Python task.

* lines (JSON lines, text, CSV): Spark's ``text`` source with ``wholetext`` gives one row
  per file; ``posexplode(split(value, '\n'))`` gives each line with its number. A file that
  is not valid UTF-8 is split through ISO-8859-1 (one character per byte), so every line
  keeps its exact bytes and an invalid line still reaches the scheme as it is;
* Parquet: ``spark.read.schema(<declared>).parquet``, the row number from
  ``_metadata.row_index``.

Provenance comes from Spark's hidden ``_metadata`` columns: ``file_path`` picks the file's
recorded URL and modification time (a literal map over the batch's files); ``file_size`` and
``file_modification_time`` are compared with the recorded ones on the executors, so a file
changed since its fingerprint was checked on the driver fails the job, naming it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trident_assets.spark.file_schemes import FILE_COLUMN_PREFIX

if TYPE_CHECKING:
    from trident_assets.spouts.file_listing import FileEntry, Location

__all__ = ["NATIVE_TEXT_MAX_BYTES", "changed_message", "native_frame", "reads_natively"]

NATIVE_TEXT_MAX_BYTES = 256 << 20
"""Above this size a lines file is read by the Python reader (a whole-text row must fit a
task's memory); Parquet files are read natively at any size."""

_PLAIN_PATH = re.compile(r"[A-Za-z0-9/._+=,@~-]+")
"""Paths Spark names (``_metadata.file_path``) exactly as ``file:`` + the path."""

_COMPRESSED = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".xz", ".br")
"""Suffixes Spark's text source would decompress: such files are read as their bytes."""


def changed_message(uri: str, entry: FileEntry, now: str) -> str:
    """The refusal of a file changed since it was recorded (``now``: its size now)."""
    return (
        f"file {uri} changed after it was recorded for its txid ({entry.size} bytes, "
        f"fingerprint {entry.fingerprint}; now {now} bytes): a transactional "
        "batch is never read with other data; put the file back as it was"
    )


def reads_natively(location: Location, entry: FileEntry, fmt: str, max_bytes: int) -> bool:
    """Whether Spark's own source reads ``entry``, else the Python reader.

    Native: a local file with a plain path (a lines file also at most ``max_bytes`` and
    not named as compressed).
    """
    if not location.local or not _PLAIN_PATH.fullmatch(location.full(entry.path)):
        return False
    if fmt == "parquet":
        return True
    return entry.size <= max_bytes and not entry.path.lower().endswith(_COMPRESSED)


def native_frame(
    spark: Any, location: Location, entries: Sequence[FileEntry], fmt: str, ddl: str
) -> Any:
    """The records of ``entries`` (all :func:`reads_natively`), as the Python reader's columns.

    ``ddl`` is the declared Parquet fields (ignored for lines).
    """
    from pyspark.sql import functions as F

    paths = [location.full(e.path) for e in entries]
    keys = F.create_map(*[F.lit(x) for i, p in enumerate(paths) for x in (f"file:{p}", i)])
    index = keys[F.col("_metadata.file_path")]

    def per_file(values: list[Any]) -> Any:
        return F.array(*[F.lit(v) for v in values])[index]

    uris = [location.uri(e.path) for e in entries]
    size = F.col("_metadata.file_size")
    bad = (
        index.isNull()
        | (size != per_file([e.size for e in entries]))
        | (
            F.unix_millis(F.col("_metadata.file_modification_time"))
            != per_file([e.mtime_ns // 1_000_000 for e in entries])
        )
    )
    head = per_file(
        [changed_message(u, e, "\0").split("\0")[0] for u, e in zip(uris, entries, strict=True)]
    )
    tail = changed_message("", entries[0], "\0").split("\0")[1]
    message = F.concat(
        F.coalesce(head, F.concat(F.lit("file "), F.col("_metadata.file_path"), F.lit(" ("))),
        size.cast("string"),
        F.lit(tail),
    )
    provenance = {
        "topic": per_file(uris),
        "partition": F.lit(0).cast("int"),
        "timestamp": F.timestamp_micros(per_file([e.mtime_ns // 1000 for e in entries])),
    }
    if fmt == "parquet":
        frame = spark.read.schema(ddl).parquet(*paths)
        number = F.col("_metadata.row_index") + 1
        fields = [F.col(f"`{f}`").alias(FILE_COLUMN_PREFIX + f) for f in frame.columns]
        return frame.select(
            *[c.alias(n) for n, c in provenance.items() if n != "timestamp"],
            F.when(bad, F.raise_error(message)).otherwise(number).alias("offset"),
            provenance["timestamp"].alias("timestamp"),
            F.lit(None).cast("binary").alias("value"),
            *fields,
        )
    return _lines(spark.read.text(paths, wholetext=True), provenance, bad, message, fmt)


def _lines(files: Any, provenance: dict[str, Any], bad: Any, message: Any, fmt: str) -> Any:
    """Each non-empty line (minus a CSV header) of the whole-text rows ``files``."""
    from pyspark.sql import functions as F

    from trident_assets.spark.log_reader import log_spark_schema

    text = F.when(bad, F.raise_error(message)).otherwise(F.col("value"))
    valid = F.is_valid_utf8(text)
    split = F.split(
        F.when(valid, text).otherwise(F.decode(text.cast("binary"), "ISO-8859-1")), "\n"
    )
    exploded = files.select(
        *[c.alias(n) for n, c in provenance.items()],
        valid.alias("valid"),
        F.posexplode(split).alias("number", "line"),
    )
    line = F.col("line")
    stripped = F.when(line.endswith("\r"), line.substr(F.lit(1), F.length(line) - 1)).otherwise(
        line
    )
    kept = exploded.select(
        "topic", "partition", "timestamp", "valid", "number", stripped.alias("line")
    ).where(F.length("line") > 0)
    if fmt == "csv":
        kept = kept.where(F.col("number") > 0)
    schema = log_spark_schema()
    return kept.select(
        "topic",
        "partition",
        (F.col("number") + 1).cast("bigint").alias("offset"),
        "timestamp",
        F.lit(None).cast("binary").alias("key"),
        F.when(F.col("valid"), F.col("line").cast("binary"))
        .otherwise(F.encode("line", "ISO-8859-1"))
        .alias("value"),
        F.lit(None).cast(schema["headers"].dataType).alias("headers"),
    )

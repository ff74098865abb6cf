r"""Native Spark reads of a file spout's local files: Spark's own file sources, no Python task.

* lines (JSON lines, text, CSV): each file is its own scan (the scans are unioned), so a
  task never reads two files. Spark's ``text`` source with ``lineSep`` ``\n`` gives one
  row per line, in order, with its exact bytes (a ``\r`` before the ``\n`` kept, no
  decoding). The line number is the row's position in its task + 1 (the lower 33 bits of
  ``monotonically_increasing_id``), exact only when the task read the whole file: every
  row checks, on the executors, that its task's block starts at 0 and spans the file's
  recorded size (:func:`whole_file_conf` keeps Spark from splitting a file; a file read in
  pieces fails the job, naming it, never numbering a line wrong). A trailing ``\r`` is
  removed; empty lines (and a CSV file's header, line 1) are skipped but counted;
* Parquet: one scan of up to :data:`SCAN_FILES` files, Spark's Parquet reader with the
  declared schema, the row number from ``_metadata.row_index`` (+1), exact however Spark
  splits or packs the files.

Every row looks its file up (``_metadata.file_path``) in one map literal of its scan's
files, and checks that the file's size and modification time (Spark's ``_metadata``) are
the recorded ones: a file changed after the driver checked its fingerprint fails the job,
naming it. Provenance (``topic``: the file's URL, ``timestamp``: its recorded modification
time) comes from the same map. Being one literal, not a literal per value, the map keeps
the generated code the same from file to file and txid to txid (compiled once).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any

from trident_assets.log.records import log_spark_schema
from trident_assets.spark.file_schemes import FILE_COLUMN_PREFIX

if TYPE_CHECKING:
    from trident_assets.spouts.file_listing import FileEntry, Location

__all__ = [
    "SCAN_FILES",
    "changed_message",
    "checked_scan",
    "native_frame",
    "reads_natively",
    "spark_path",
    "split_message",
    "whole_file_conf",
]

SCAN_FILES = 16
LINE_SCAN_FILES = 1
"""Files per scan: each row looks its file up among its scan's files (a map literal)."""

_UNRECORDED = (
    " was read by Spark but is not one of the files recorded for the txid (Spark named "
    "it differently); read such files with native=False"
)

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
    spark: Any,
    location: Location,
    entries: list[FileEntry],
    fmt: str,
    ddl: str,
    tags: Tagging | None = None,
) -> Any:
    """The records of ``entries`` (all :func:`reads_natively`), as the Python reader's columns.

    Parquet: one scan per :data:`SCAN_FILES` files; lines: one scan per file. ``ddl`` is the
    declared Parquet fields (ignored for lines). ``tags``: ``(column, tag of each entry)``,
    the bigint column after the others (files of several batches share a scan).
    """
    per_scan = SCAN_FILES if fmt == "parquet" else LINE_SCAN_FILES
    return _in_scans(
        entries, tags, per_scan, lambda part, t: _scan(spark, location, part, fmt, ddl, t)
    )


Tagging = tuple[str, Sequence[int]]
"""``(column, tag per file)``: the bigint column a scan's rows carry their file's tag in."""


def _in_scans(
    entries: list[FileEntry],
    tags: Tagging | None,
    per_scan: int,
    scan: Callable[[list[FileEntry], Tagging | None], Any],
) -> Any:
    """The union of ``scan`` over ``entries`` cut into parts of ``per_scan`` (their tags)."""
    frames = []
    for i in range(0, len(entries), per_scan):
        part = None if tags is None else (tags[0], tags[1][i : i + per_scan])
        frames.append(scan(entries[i : i + per_scan], part))
    return reduce(lambda a, b: a.union(b), frames)


def spark_path(location: Location, entry: FileEntry) -> str:
    """The path Spark's ``_metadata.file_path`` gives a local file :func:`reads_natively`."""
    return "file:" + location.full(entry.path)


def _facts(location: Location, entries: list[FileEntry], tags: Sequence[int] = ()) -> Any:
    """A map literal: Spark's path of each file -> what its rows are checked and tagged with.

    One literal (not a literal per value), so the generated code is the same for every read;
    built from one SQL expression (one call to the JVM, not a few per file). ``tags``: each
    entry's tag (none: 0).
    """
    from pyspark.sql import functions as F

    pairs = []
    for i, entry in enumerate(entries):
        uri = location.uri(entry.path)
        before, after = changed_message(uri, entry, "\0").split("\0")
        fact = (
            f"named_struct('topic', {_sql(uri)}, 'size', {int(entry.size)}L, "
            f"'mtime_ms', {entry.mtime_ns // 1_000_000}L, 'mtime_us', {entry.mtime_ns // 1000}L, "
            f"'before', {_sql(before)}, 'after', {_sql(after)}, "
            f"'split', {_sql(split_message(uri))}, 'tag', {int(tags[i]) if tags else 0}L)"
        )
        pairs.append(f"{_sql(spark_path(location, entry))}, {fact}")
    return F.expr(f"map({', '.join(pairs)})")


def _sql(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _scan(
    spark: Any,
    location: Location,
    entries: list[FileEntry],
    fmt: str,
    ddl: str,
    tags: Tagging | None,
) -> Any:
    from pyspark.sql import functions as F

    from trident_assets.spark.log_reader import driver_side_listing

    uris = [location.uri(e.path) for e in entries]
    with driver_side_listing(spark, len(uris)):
        if fmt == "parquet":
            frame = spark.read.schema(ddl).parquet(*uris)
        else:
            frame = spark.read.format("text").option("lineSep", "\n").load(uris)
    meta = F.col("_metadata")
    path, size = meta.getField("file_path"), meta.getField("file_size")
    data = (
        [F.col(f"`{f}`").alias(FILE_COLUMN_PREFIX + f) for f in frame.columns]
        if fmt == "parquet"
        else [F.col("value").alias("__text")]
    )
    offset = (
        meta.getField("row_index") + 1
        if fmt == "parquet"
        else F.monotonically_increasing_id().bitwiseAND(F.lit(_ROW_BITS)) + 1
    )
    located = frame.select(
        *data,
        offset.alias("offset"),
        F.try_element_at(_facts(location, entries, tags[1] if tags else ()), path).alias("__fact"),
        path.alias("__path"),
        size.alias("__size"),
        F.unix_millis(meta.getField("file_modification_time")).alias("__mtime_ms"),
        *(
            []
            if fmt == "parquet"
            else [
                (
                    (meta.getField("file_block_start") != 0)
                    | (meta.getField("file_block_length") != size)
                ).alias("__split")
            ]
        ),
    )
    check = _unchanged(F.col("__fact"))
    if fmt != "parquet":
        check = check.when(F.col("__split"), F.raise_error(F.col("__fact")["split"]))
    fact = F.col("__fact")
    provenance = [
        fact["topic"].alias("topic"),
        F.lit(0).cast("int").alias("partition"),
        F.col("offset"),
        F.timestamp_micros(fact["mtime_us"]).alias("timestamp"),
    ]
    tagged = [] if tags is None else [fact["tag"].alias(tags[0])]
    checked = located.where(check.otherwise(F.lit(True)))
    if fmt == "parquet":
        fields = [F.col(f"`{FILE_COLUMN_PREFIX}{f}`") for f in frame.columns]
        value = F.lit(None).cast("binary").alias("value")
        return checked.select(*provenance, value, *fields, *tagged)
    text = F.col("__text")
    line = text.cast("binary")
    crlf = text.endswith("\r")  # bytes compared; the cut on bytes (a string cut counts chars)
    stripped = F.when(crlf, line.substr(F.lit(1), F.length(line) - 1)).otherwise(line)
    keep = ~text.isin("", "\r")
    if fmt == "csv":
        keep = keep & (F.col("offset") > 1)
    schema = log_spark_schema()
    return checked.where(keep).select(
        *provenance,
        F.lit(None).cast("binary").alias("key"),
        stripped.alias("value"),
        F.lit(None).cast(schema["headers"].dataType).alias("headers"),
        *tagged,
    )


def _unchanged(fact: Any) -> Any:
    """A CASE failing the job for a row of a file not recorded, or changed since recorded.

    Reads ``__fact`` (the file's entry of :func:`_facts`), ``__path``, ``__size`` and
    ``__mtime_ms`` (Spark's ``_metadata``); continue it with ``.when`` or ``.otherwise``.
    """
    from pyspark.sql import functions as F

    return F.when(
        fact.isNull(),
        F.raise_error(F.concat(F.lit("file "), F.col("__path"), F.lit(_UNRECORDED))),
    ).when(
        (F.col("__size") != fact["size"]) | (F.col("__mtime_ms") != fact["mtime_ms"]),
        F.raise_error(F.concat(fact["before"], F.col("__size").cast("string"), fact["after"])),
    )


def checked_scan(
    spark: Any,
    location: Location,
    entries: list[FileEntry],
    fmt: str,
    ddl: str,
    options: dict[str, str],
    tags: Tagging | None = None,
) -> Any:
    """``entries`` (all :func:`reads_natively`) read by Spark's ``fmt`` source.

    One scan per :data:`SCAN_FILES` files. Its columns are ``ddl``'s (then ``tags``'
    column: each row's file's tag, as in :func:`native_frame`); every row fails the job if
    its file is not one of its scan's or its size or modification time is not the recorded
    one. Spark may split and pack the files as it likes (the rows carry no position).
    """

    def scan(part: list[FileEntry], t: Tagging | None) -> Any:
        from pyspark.sql import functions as F

        from trident_assets.spark.log_reader import driver_side_listing

        uris = [location.uri(e.path) for e in part]
        with driver_side_listing(spark, len(uris)):
            frame = spark.read.format(fmt).schema(ddl).options(**options).load(uris)
        meta = F.col("_metadata")
        data = [F.col(f"`{c}`") for c in frame.columns]
        facts = _facts(location, part, t[1] if t else ())
        located = frame.select(
            *data,
            F.try_element_at(facts, meta.getField("file_path")).alias("__fact"),
            meta.getField("file_path").alias("__path"),
            meta.getField("file_size").alias("__size"),
            F.unix_millis(meta.getField("file_modification_time")).alias("__mtime_ms"),
        )
        checked = located.where(_unchanged(F.col("__fact")).otherwise(F.lit(True)))
        return checked.select(*data, *([] if t is None else [F.col("__fact")["tag"].alias(t[0])]))

    return _in_scans(entries, tags, SCAN_FILES, scan)

"""Parallel Spark reads of offset ranges of the embedded log.

The log's segments are plain Parquet files, so Spark reads them natively: the files that
overlap the requested ranges are passed to ``spark.read.parquet`` with the log's schema, and
a filter on ``(topic, partition, offset)`` keeps exactly the requested records (no filter
when every file lies wholly inside the ranges, the usual case for one batch: its offsets
would be literals in Spark's generated code, compiled anew for every batch). Spark splits
the files into tasks itself (by ``spark.sql.files.maxPartitionBytes`` /
``openCostInBytes`` and the default parallelism); with pushdown, row groups outside the
ranges are skipped using their ``offset`` statistics. Nothing passes through the driver,
except a small one-batch read (at most ``trident.log.inlineMaxRecords`` records, default
10,000: see :func:`read_ranges`), which the driver reads and sends with the plan.

The ranges are validated against the log before Spark is involved, so a range that can no
longer be read raises :class:`~trident_assets.errors.BatchUnavailableError` immediately, and
each file's Parquet footer is checked once (row count and offsets against its name) so a
damaged segment raises :class:`~trident_assets.errors.CorruptSegmentError` naming it. With
a cluster, every executor must see the log root at the same path (a shared file system).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from trident_assets.errors import ConfigError
from trident_assets.log.names import TOPIC_PATTERN
from trident_assets.log.records import SEGMENT_PATTERN, log_spark_schema
from trident_assets.log.verify import check_segment_files
from trident_assets.spark.scoped_conf import read_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from trident_assets.log.store import PartitionedLog

__all__ = [
    "DEFAULT_INLINE_MAX_RECORDS",
    "INLINE_MAX_BYTES",
    "INLINE_MAX_RECORDS_CONF",
    "driver_side_listing",
    "inline_max_records",
    "per_file_tasks",
    "read_ranges",
    "read_ranges_tagged",
    "split_conf",
]

INLINE_MAX_RECORDS_CONF = "trident.log.inlineMaxRecords"
"""Spark conf key: the most records a one-batch read sends to Spark with its plan."""

DEFAULT_INLINE_MAX_RECORDS = 10_000

INLINE_MAX_BYTES = 16 << 20
"""An inline read's segment files total at most this many bytes, whatever its records."""

PER_FILE_TASK_MIN_BYTES = 1 << 20
"""Mean segment file size from which a multi-batch scan gives every file its own task."""
_OPEN_COST_KEY = "spark.sql.files.openCostInBytes"

_GLOB_CHARS = frozenset("*?[]{}\\")


def _file_uri(log: PartitionedLog, path: str) -> str:
    """The URI executors read ``path`` by (:meth:`PartitionedLog.spark_uri`)."""
    uri = log.spark_uri(path)
    if any(c in _GLOB_CHARS for c in uri):
        msg = (
            f"log path {uri!r} contains a glob character ({''.join(sorted(_GLOB_CHARS))}); "
            "Spark would expand it as a pattern. Put the log under a path without them."
        )
        raise ConfigError(msg)
    return uri


def inline_max_records(spark: Any) -> int:
    """The session's ``trident.log.inlineMaxRecords`` (default 10,000).

    A session that refuses to read the key (a remote one may) uses the default.

    Raises:
        ConfigError: the value is not a non-negative integer (before any job runs).
    """
    raw = read_conf(spark, INLINE_MAX_RECORDS_CONF)
    if raw is None:
        return DEFAULT_INLINE_MAX_RECORDS
    if not raw.isdigit():
        msg = (
            f"Spark conf {INLINE_MAX_RECORDS_CONF}={raw!r} must be a non-negative integer "
            f"(records; 0 always lets Spark read the files; default "
            f"{DEFAULT_INLINE_MAX_RECORDS})"
        )
        raise ConfigError(msg)
    return int(raw)


def read_ranges(
    spark: Any,
    log: PartitionedLog,
    ranges: Sequence[tuple[str, int, int, int]],
    inline_records: int | None = None,
) -> DataFrame:
    """Return a DataFrame of the records in ``ranges``, read by Spark in parallel.

    A small read goes with the plan instead (Spark then cuts it into partitions its own way:
    for topologies that work per partition, the caller passes 0): when ``ranges`` hold at
    most ``inline_records``
    records (None: the session's ``trident.log.inlineMaxRecords``, default 10,000) in at most
    :data:`INLINE_MAX_BYTES` of segment files, the log reads them on the driver (checking
    every file's checksum, as before a Spark read) and they reach Spark as a local relation.
    Spark's file scan costs a fixed planning and listing price per file, which dominates a
    live run's small batches over many small segments; from tens of thousands of records
    Spark's own parallel scan is faster (``bench.live_txid``).

    Args:
        spark: The SparkSession.
        log: The log holding the topics.
        ranges: ``(topic, partition, first, last)`` tuples, offsets inclusive;
            ``last = first - 1`` is an empty range. Ranges should not overlap (overlapping
            ranges are not duplicated: the result is the union of the ranges).
        inline_records: the most records read on the driver (0: never).

    Returns:
        A DataFrame with :func:`log_spark_schema` and exactly the records of the ranges, in
        no particular order (sort by ``topic, partition, offset`` if order matters). An empty
        list or only empty ranges give an empty DataFrame with that schema.

    Raises:
        BatchUnavailableError: If a range can no longer (or not yet) be read completely.
        ConfigError: If a topic, partition or range is malformed, or the log root contains
            a glob character.
    """
    from pyspark.sql import functions as F

    limit = inline_max_records(spark) if inline_records is None else inline_records
    inline = _inline(spark, log, ranges, limit) if limit > 0 else None
    if inline is not None:
        return inline
    df, indices, whole = _scan(spark, log, ranges)
    if df is None:
        return spark.createDataFrame([], log_spark_schema())
    if whole:  # the files hold exactly the ranges' records (names checked against footers)
        return df
    spans = " OR ".join(_range_sql(*ranges[i]) for i in indices)
    return df.where(F.expr(spans))


def read_ranges_tagged(
    spark: Any,
    log: PartitionedLog,
    ranges: Sequence[tuple[int, str, int, int, int]],
    column: str,
) -> DataFrame:
    """Like :func:`read_ranges` for several batches in ONE scan, tagging each record.

    ``ranges`` are ``(tag, topic, partition, first, last)``; every record gets the ``tag``
    of its range in the bigint ``column``. Ranges must not overlap. One file index and one
    scan over the union of the files serve every batch, instead of one per batch. When every
    file lies wholly inside its range (the usual case in a catch-up), there is no filter and
    a record's tag is its segment file's, looked up by file name in a map: the offsets are
    then no literals in Spark's generated code, so every chunk over the same topic
    partitions runs the same compiled code. Otherwise, per source partition, the filter is
    the merged offset spans and the tag a comparison chain on ``offset`` (consecutive
    batches of a partition are adjacent ranges).
    """
    from pyspark.sql import functions as F

    df, files, whole = _scan(spark, log, [r[1:] for r in ranges])
    if df is None:
        empty = spark.createDataFrame([], log_spark_schema())
        return empty.withColumn(column, F.lit(None).cast("bigint"))
    tags = {int(ranges[i][0]) for i in files}
    if whole and len(tags) == 1:  # one batch of whole files: no filter, one tag
        return df.withColumn(column, F.lit(tags.pop()).cast("bigint"))
    if whole:  # each file holds one range's records: no filter, the tag is its file's
        return df.withColumn(column, F.expr(_file_tags_sql(ranges, files)))
    groups: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for index in files:
        tag, topic, partition, first, last = ranges[index]
        groups.setdefault((topic, int(partition)), []).append((int(first), int(last), int(tag)))
    keep: list[str] = []
    tags: list[str] = []
    for (topic, partition), items in groups.items():
        items.sort()
        spans: list[list[int]] = []
        for first, last, _ in items:
            if spans and first == spans[-1][1] + 1:
                spans[-1][1] = last
            else:
                spans.append([first, last])
        where = _partition_sql(topic, partition)
        inside = " OR ".join(f"`offset` BETWEEN {a} AND {b}" for a, b in spans)
        chain = " ".join(
            f"WHEN `offset` <= {last} THEN CAST({tag} AS BIGINT)" for _, last, tag in items
        )
        keep.append(f"({where} AND ({inside}))")
        tags.append(f"WHEN {where} THEN CASE {chain} END")
    # one expression each (two driver round trips instead of a few per range)
    tag_expr = F.expr(f"CASE {' '.join(tags)} END")
    return df.where(F.expr(" OR ".join(keep))).withColumn(column, tag_expr)


def _file_tags_sql(
    ranges: Sequence[tuple[int, str, int, int, int]], files: dict[int, list[str]]
) -> str:
    """Spark SQL: a record's tag, by its segment file (``files``: each range's files, whole).

    The file names go in a map literal, which Spark's generated code references instead of
    inlining (as it does an offset), so chunks over the same topic partitions compile the
    same code; the names are segment names (:func:`_inside` checked them).
    """
    groups: dict[tuple[str, int], list[str]] = {}
    for index, paths in files.items():
        tag, topic, partition, _first, _last = ranges[index]
        entries = groups.setdefault((topic, int(partition)), [])
        entries += [f"'{os.path.basename(p)}', CAST({int(tag)} AS BIGINT)" for p in paths]
    cases = " ".join(
        f"WHEN {_partition_sql(topic, partition)} THEN "
        f"element_at(map({', '.join(entries)}), `_metadata`.`file_name`)"
        for (topic, partition), entries in groups.items()
    )
    return f"CASE {cases} END"


def _partition_sql(topic: str, partition: int) -> str:
    """Spark SQL: the records of ``topic``'s ``partition`` (the topic is a validated name)."""
    if not TOPIC_PATTERN.fullmatch(topic):  # checked by the log already: never quote others
        msg = f"invalid topic name {topic!r}"
        raise ConfigError(msg)
    return f"(`topic` = '{topic}' AND `partition` = {int(partition)})"


def _range_sql(topic: str, partition: int, first: int, last: int) -> str:
    """Spark SQL: the records of one range, offsets inclusive."""
    return f"({_partition_sql(topic, partition)} AND `offset` BETWEEN {int(first)} AND {int(last)})"


def split_conf(log: PartitionedLog, ranges: Sequence[tuple[str, int, int, int]]) -> dict[str, str]:
    """Spark settings for a multi-batch scan of ``ranges``: every segment file its own task.

    Spark packs small files into a few tasks (largest first), so a task of a tagged scan
    mixes several batches and its partial aggregation by ``(txid, key)`` holds several
    batches' keys: measured 1.5-1.8x slower than a task per file, where each task sees one
    txid (a segment never holds two batches of one partition unless they share it). Only
    when the files are big enough for a task each (mean >= :data:`PER_FILE_TASK_MIN_BYTES`);
    tiny segments stay packed. Changes which task reads a file, never what is read.
    """
    paths: dict[str, None] = {}
    for topic, partition, first, last in ranges:
        paths.update(dict.fromkeys(log.segment_files(topic, partition, first, last)))
    return per_file_tasks([os.path.getsize(p) for p in paths])


def per_file_tasks(sizes: Sequence[int]) -> dict[str, str]:
    """Spark settings giving each of a scan's files (of ``sizes`` bytes) its own task(s).

    None for fewer than two files or a mean under :data:`PER_FILE_TASK_MIN_BYTES` (tiny
    files stay packed); a file over ``spark.sql.files.maxPartitionBytes`` is still split.
    """
    if len(sizes) < 2 or sum(sizes) / len(sizes) < PER_FILE_TASK_MIN_BYTES:
        return {}
    # an open cost above the split size closes a split after every file
    return {_OPEN_COST_KEY: str(1 << 40)}


def _inside(path: str, first: int, last: int) -> bool:
    """Whether the segment file at ``path`` holds only offsets in ``first .. last``.

    By its name, which :func:`check_segment_files` has checked against the file's footer
    (row count and offsets) and checksum; a file not named like a segment is never inside.
    """
    match = SEGMENT_PATTERN.fullmatch(os.path.basename(path))
    return match is not None and first <= int(match.group(1)) and int(match.group(2)) <= last


def _checked(item: Any) -> tuple[str, int, int, int]:
    """A range as given; refused unless it has the form ``(topic, partition, first, last)``."""
    if not isinstance(item, tuple | list) or len(item) != 4:
        msg = f"a range must be (topic, partition, first, last), got {item!r}"
        raise ConfigError(msg)
    topic, partition, first, last = item
    return topic, partition, first, last


def _inline(
    spark: Any, log: PartitionedLog, ranges: Sequence[tuple[str, int, int, int]], limit: int
) -> DataFrame | None:
    """The records of ``ranges`` as a local relation, read by the log on the driver.

    None when they are more than ``limit`` records or their segment files more than
    :data:`INLINE_MAX_BYTES`, or every range is empty (the file scan's path answers all
    three). The log validates each range and checks each file's checksum as it reads.
    """
    import pyarrow as pa

    checked = [_checked(item) for item in ranges]
    if sum(max(0, int(last) - int(first) + 1) for _, _, first, last in checked) > limit:
        return None
    size = 0
    wanted = []
    for topic, partition, first, last in checked:
        for path in log.segment_files(topic, partition, first, last):  # validates the range
            _file_uri(log, path)  # a root Spark cannot read is refused on every path
            size += os.path.getsize(path)
            if size > INLINE_MAX_BYTES:
                return None
        if int(last) >= int(first):
            wanted.append((topic, int(partition), int(first), int(last)))
    if not wanted:
        return None
    table = pa.concat_tables([log.read(*r) for r in wanted])
    # fresh arrays: Spark's Arrow conversion refuses slices of a segment (the log's reads)
    table = table.take(pa.array(range(table.num_rows), pa.int64()))
    return spark.createDataFrame(table, log_spark_schema())


def _scan(
    spark: Any, log: PartitionedLog, ranges: Sequence[tuple[str, int, int, int]]
) -> tuple[DataFrame | None, dict[int, list[str]], bool]:
    """``(DataFrame over the files holding ranges, each non-empty range's files, whole)``.

    The DataFrame is None when every range is empty; the dict maps a range's index to the
    segment files it overlaps. ``whole``: every file lies wholly inside its range, so the
    files hold exactly the union of the ranges' records and no file two ranges' records
    (the log lists every file a range overlaps, and refuses a range it cannot read whole).
    """
    schema = log_spark_schema()
    files: dict[str, None] = {}
    indices: dict[int, list[str]] = {}
    whole = True
    for index, item in enumerate(ranges):
        topic, partition, first, last = _checked(item)
        paths = log.segment_files(topic, partition, first, last)  # validates everything
        if not paths:
            continue
        # checksum of every byte on every read, footer once per file
        check_segment_files(topic, int(partition), paths, log.checksums_required(topic))
        whole = whole and all(_inside(p, int(first), int(last)) for p in paths)
        files.update(dict.fromkeys(paths))
        indices[index] = list(paths)
    if not files:
        return None, {}, True
    uris = [_file_uri(log, p) for p in files]
    with driver_side_listing(spark, len(uris)):
        df = spark.read.schema(schema).parquet(*uris)
    return df, indices, whole


@contextmanager
def driver_side_listing(spark: Any, paths: int) -> Iterator[None]:
    """Let Spark check an explicit file list on the driver instead of launching a listing job.

    Spark lists more than ``parallelPartitionDiscovery.threshold`` (32) paths with a
    distributed job, which costs more than the read of a typical batch (measured ~0.7 s of
    ~1 s planning for 52 segment files). The files here are already known, so the threshold
    is raised for the duration of the (eager) file-index construction only and restored
    afterwards; it changes how paths are checked, never what is read.
    """
    key = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before: str | None = None
    changed = False
    try:
        before = spark.conf.get(key, None)
        if paths > int(before or 32):
            spark.conf.set(key, str(paths + 1))
            changed = True
    except Exception:  # a remote session may refuse the conf: let Spark list its own way
        changed = False
    try:
        yield
    finally:
        if changed:
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)

r"""Spark reads of a file spout's batch: the executors read the files, the driver only plans.

A read may ask for Spark's own sources (:mod:`~trident_assets.spark.file_native`: the
text source for lines, one task per file, and the Parquet reader, one scan for many files)
for local files; by default (:data:`NATIVE_FORMATS`), and always for a file on another
filesystem, one whose path Spark would read differently or a lines file named as
compressed, the files are read by Python tasks: the files are dealt to Spark tasks (largest
first, each to the task with the fewest bytes so far); each task reads its files whole
(local files with ``open``, others through ``pyarrow.fs`` or ``fsspec``), checks each
against its recorded size and content fingerprint (a file changed since it was numbered
fails the job, naming it) and yields Arrow batches (``mapInArrow``). Either way the rows
are the same:

* lines (JSON lines, text, and CSV after its header): the log's record schema, one row per
  non-empty line: ``topic`` the file's URL, ``partition`` 0, ``offset`` the line number
  (from 1), ``timestamp`` the file's modification time, ``value`` the line's bytes (a
  trailing ``\r`` removed), so a scheme decodes it as a log record and its dead letters
  name the file and line;
* Parquet: the declared columns (as ``__file_<name>``), with the same provenance columns
  (``offset`` the row number from 1) and a null ``value``.

Before the job, on the driver: a CSV file's header and a Parquet file's schema (its footer)
are checked against the declared fields (a mismatch refuses the txid naming the file), and
each natively read file's size and content fingerprint against the recorded ones.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from functools import reduce
from typing import TYPE_CHECKING, Any

from trident_assets.errors import BatchUnavailableError, ConfigError
from trident_assets.kafka.reader import default_parallelism
from trident_assets.log.records import log_spark_schema
from trident_assets.spark.file_native import (
    changed_message,
    native_frame,
    reads_natively,
)
from trident_assets.spark.file_schemes import FILE_COLUMN_PREFIX
from trident_assets.spouts.file_listing import fingerprint, fingerprint_bytes

if TYPE_CHECKING:
    import pyarrow as pa

    from trident_assets.spouts.file_listing import FileEntry, Location

__all__ = [
    "NATIVE_FORMATS",
    "deal_files",
    "read_file_batches",
    "read_files",
    "verified_bytes",
]

NATIVE_FORMATS: tuple[str, ...] = ("parquet",)
"""The formats read by Spark's own sources unless a read says otherwise: Parquet (one scan
per txid, no Python task). Measured on the file spout benchmark's files (8 files of 2M
words, 4 per txid, the whole catch-up in one process each): Parquet 10.8 s natively against
13.6 s by the Python reader; JSON lines 20.2 s natively (a scan per file) against 17.4 s,
so lines stay with the Python reader (see docs/benchmarks.md, "Files in and lakehouse
tables out")."""

ROWS_PER_BATCH = 1 << 16
"""Rows per Arrow batch a task yields."""

_ARROW_NAMES = {
    "string": ("string", "large_string", "string_view"),
    "boolean": ("bool",),
    "tinyint": ("int8",),
    "byte": ("int8",),
    "smallint": ("int16",),
    "short": ("int16",),
    "int": ("int32",),
    "integer": ("int32",),
    "bigint": ("int64",),
    "long": ("int64",),
    "float": ("float",),
    "real": ("float",),
    "double": ("double",),
    "binary": ("binary", "large_binary", "binary_view"),
    "date": ("date32[day]",),
}
"""Per declared scalar type, the Parquet (Arrow) types a file's column may have."""


def deal_files(entries: Sequence[FileEntry], tasks: int) -> list[list[int]]:
    """The indices of ``entries`` per task: largest first, each to the least loaded task."""
    heap = [(0, t) for t in range(tasks)]
    dealt: list[list[int]] = [[] for _ in range(tasks)]
    for i in sorted(range(len(entries)), key=lambda i: -entries[i].size):
        load, task = heapq.heappop(heap)
        dealt[task].append(i)
        heapq.heappush(heap, (load + entries[i].size, task))
    return [sorted(d) for d in dealt if d]


def _read_bytes(local: bool, target: str) -> bytes:
    """The whole content of a file (a local path, or a URL)."""
    if local:
        with open(target, "rb") as stream:
            return stream.read()
    from pyarrow import fs as pafs

    try:
        filesystem, path = pafs.FileSystem.from_uri(target)
    except (ValueError, OSError):
        import fsspec  # type: ignore[import-untyped]

        with fsspec.open(target, "rb") as stream:
            return bytes(stream.read())
    with filesystem.open_input_stream(path) as stream:
        return bytes(stream.read())


def verified_bytes(local: bool, target: str, uri: str, entry: FileEntry) -> bytes:
    """The file's content; fails (naming it) unless its size and fingerprint are as recorded."""
    data = _read_bytes(local, target)
    if len(data) != entry.size or fingerprint_bytes(data) != entry.fingerprint:
        raise RuntimeError(changed_message(uri, entry, str(len(data))))
    return data


def _provenance(uri: str, mtime_ns: int, numbers: Any) -> dict[str, Any]:
    import pyarrow as pa

    n = len(numbers)
    stamp = pa.scalar(mtime_ns // 1000, pa.timestamp("us", tz="UTC"))
    return {
        "topic": pa.repeat(pa.scalar(uri, pa.string()), n),
        "partition": pa.repeat(pa.scalar(0, pa.int32()), n),
        "offset": numbers,
        "timestamp": pa.repeat(stamp, n),
    }


def _lines(data: bytes, skip_header: bool) -> tuple[Any, Any]:
    """``(line bytes, line numbers from 1)`` of the non-empty lines (minus the header)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    pieces = pc.list_flatten(pc.split_pattern(pa.array([data], pa.large_binary()), b"\n"))
    numbers = pa.array(np.arange(1, len(pieces) + 1, dtype=np.int64))
    if pc.any(pc.ends_with(pieces, b"\r")).as_py():  # a regex over every line only then
        pieces = pc.replace_substring_regex(pieces, pattern=b"\r$", replacement=b"")
    keep = pc.greater(pc.binary_length(pieces), 0)
    if skip_header:
        keep = pc.and_(keep, pc.greater(numbers, 1))
    return pc.filter(pieces, keep), pc.filter(numbers, keep)


def _line_batches(
    data: bytes, uri: str, mtime_ns: int, skip_header: bool, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    lines, numbers = _lines(data, skip_header)
    for start in range(0, len(lines), ROWS_PER_BATCH):
        part = numbers.slice(start, ROWS_PER_BATCH)
        columns = _provenance(uri, mtime_ns, part)
        n = len(part)
        columns["key"] = pa.nulls(n, pa.binary())
        columns["value"] = lines.slice(start, ROWS_PER_BATCH).cast(pa.binary())
        columns["headers"] = pa.nulls(n, schema.field("headers").type)
        yield pa.RecordBatch.from_pydict(columns, schema=schema)


def _parquet_batches(
    data: bytes, uri: str, mtime_ns: int, names: list[str], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(pa.BufferReader(data), columns=names)
    offset = 0
    for batch in table.to_batches(max_chunksize=ROWS_PER_BATCH):
        n = batch.num_rows
        columns = _provenance(
            uri, mtime_ns, pa.array(range(offset + 1, offset + n + 1), pa.int64())
        )
        columns["value"] = pa.nulls(n, pa.binary())
        for name in names:
            target = schema.field(FILE_COLUMN_PREFIX + name).type
            columns[FILE_COLUMN_PREFIX + name] = batch.column(name).cast(target)
        offset += n
        yield pa.RecordBatch.from_pydict(columns, schema=schema)


def _check_csv(location: Location, entries: Sequence[FileEntry], scheme: Any, txid: int) -> None:
    want = scheme.header()
    for entry in entries:
        got = location.first_line(entry.path)
        if got != want:
            msg = (
                f"txid {txid}: CSV file {location.uri(entry.path)} has the header "
                f"{got.decode(errors='replace')!r}; the scheme declares "
                f"{want.decode()!r} (the fields in their order). Fix the file's header or the "
                "CsvScheme's fields."
            )
            raise ConfigError(msg)


def _check_parquet(
    location: Location, entries: Sequence[FileEntry], scheme: Any, txid: int
) -> None:
    import pyarrow.parquet as pq

    for entry in entries:
        uri = location.uri(entry.path)
        with location.open(entry.path) as stream:
            schema = pq.read_schema(stream)
        for name, declared in scheme.types.items():
            wanted = _ARROW_NAMES.get(declared.lower())
            where = f"txid {txid}: Parquet file {uri}"
            if name not in schema.names:
                msg = (
                    f"{where} has no column {name!r} (its columns: {schema.names}); the "
                    f"ParquetScheme declares {name!r} {declared}. Fix the file or the fields."
                )
                raise ConfigError(msg)
            got = schema.field(name).type
            ok = str(got) in wanted if wanted else _same_as_spark(got, declared)
            if not ok:
                msg = (
                    f"{where}: field {name!r} is {got} in the file, declared {declared}. "
                    "Declare the file's type or rewrite the file."
                )
                raise ConfigError(msg)


def _same_as_spark(got: Any, declared: str) -> bool:
    """For types without a fixed Arrow name (timestamps, decimals, nested): Spark's view."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import _parse_datatype_string

    want = to_arrow_type(_parse_datatype_string(declared), timezone="UTC")
    if pa.types.is_timestamp(got) and pa.types.is_timestamp(want):
        return (got.tz is None) == (want.tz is None) or declared.lower() == "timestamp"
    return bool(got == want)


def _check_fingerprints(location: Location, entries: Sequence[FileEntry]) -> None:
    """Refuse a file whose size or first and last bytes are no longer as recorded."""
    for entry in entries:
        uri = location.uri(entry.path)
        now = location.current(entry.path)
        if now is None or now[0] != entry.size:
            size = "no" if now is None else str(now[0])
            raise BatchUnavailableError(changed_message(uri, entry, size))
        head, tail = location.head_tail(entry.path, entry.size)
        if fingerprint(entry.size, head, tail) != entry.fingerprint:
            raise BatchUnavailableError(changed_message(uri, entry, str(entry.size)))


def read_files(
    spark: Any,
    location: Location,
    entries: Sequence[FileEntry],
    scheme: Any,
    fmt: str,
    txid: int = 0,
    *,
    native: bool | None = None,
) -> Any:
    """Return a DataFrame of the records of ``entries``, read by Spark's executors.

    ``fmt`` is ``lines``, ``csv`` or ``parquet`` (see the module docstring for the columns).
    ``native``: Spark's own sources read the files they can (False: the Python reader reads
    every file; None: native for the formats in :data:`NATIVE_FORMATS`); the rows are the
    same either way. A native read's jobs run under
    :func:`~trident_assets.spark.file_native.whole_file_conf` (a file split across tasks
    fails the job, naming it).

    Raises:
        ConfigError: a CSV header or a Parquet schema disagrees with the scheme (before any
            Spark job).
        BatchUnavailableError: a file natively read is no longer as recorded (before any job).
    """
    return _read(spark, location, [(0, txid, entries)], scheme, fmt, None, native)


def read_file_batches(
    spark: Any,
    location: Location,
    batches: Sequence[tuple[int, int, Sequence[FileEntry]]],
    scheme: Any,
    fmt: str,
    column: str,
) -> Any:
    """The records of several batches' files as :func:`read_files` gives them, tagged.

    ``batches`` are ``(tag, txid, entries)``; each row carries its batch's tag in the bigint
    ``column`` (last). The files of all batches read natively share scans (a file's tag is
    looked up with its recorded facts), so a chunk of many txids is planned as a few scans.

    Raises:
        ConfigError, BatchUnavailableError: as :func:`read_files`, naming the batch's txid.
    """
    return _read(spark, location, batches, scheme, fmt, column, None)


def _read(
    spark: Any,
    location: Location,
    batches: Sequence[tuple[int, int, Sequence[FileEntry]]],
    scheme: Any,
    fmt: str,
    column: str | None,
    native: bool | None,
) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    ddl = ", ".join(f"`{n}` {t}" for n, t in scheme.types.items()) if fmt == "parquet" else ""
    if fmt == "parquet":
        base = log_spark_schema()
        declared: Any = StructType.fromDDL(ddl)
        spark_schema = StructType(
            [
                *[base[c] for c in ("topic", "partition", "offset", "timestamp", "value")],
                *[StructField(FILE_COLUMN_PREFIX + f.name, f.dataType) for f in declared],
            ]
        )
    else:
        spark_schema = log_spark_schema()
    if not any(entries for _, _, entries in batches):
        fields = [] if column is None else [StructField(column, LongType())]
        return spark.createDataFrame([], StructType([*spark_schema.fields, *fields]))
    for _, txid, entries in batches:
        if fmt == "csv":
            _check_csv(location, entries, scheme, txid)
        elif fmt == "parquet":
            _check_parquet(location, entries, scheme, txid)
    native = fmt in NATIVE_FORMATS if native is None else native
    mine = [
        (tag, e)
        for tag, _, entries in batches
        for e in entries
        if native and reads_natively(location, e, fmt)
    ]
    frames = []
    if mine:
        files = [e for _, e in mine]
        _check_fingerprints(location, files)
        tags = None if column is None else (column, [tag for tag, _ in mine])
        frames.append(native_frame(spark, location, files, fmt, ddl, tags))
    for tag, _, entries in batches:
        rest = [e for e in entries if not (native and reads_natively(location, e, fmt))]
        if rest:
            frame = _python_frame(spark, location, rest, scheme, fmt, spark_schema)
            tagged = (
                frame if column is None else frame.withColumn(column, F.lit(tag).cast("bigint"))
            )
            frames.append(tagged)
    return reduce(lambda a, b: a.union(b), frames)


def _python_frame(
    spark: Any,
    location: Location,
    entries: Sequence[FileEntry],
    scheme: Any,
    fmt: str,
    spark_schema: Any,
) -> Any:
    """The records of ``entries`` read by Python tasks (``mapInArrow``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(spark_schema, timezone="UTC")
    dealt = deal_files(entries, max(1, min(default_parallelism(spark), len(entries))))
    files = [(location.full(e.path), location.uri(e.path), e) for e in entries]
    local = location.local
    names = list(scheme.types) if fmt == "parquet" else []

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column("id").to_pylist():
                for i in dealt[task]:
                    target, uri, entry = files[i]
                    data = verified_bytes(local, target, uri, entry)
                    if fmt == "parquet":
                        yield from _parquet_batches(data, uri, entry.mtime_ns, names, schema)
                    else:
                        yield from _line_batches(data, uri, entry.mtime_ns, fmt == "csv", schema)

    n = len(dealt)
    return spark.range(n, numPartitions=n).mapInArrow(run, spark_schema)

"""Split-and-count partials as an Arrow kernel in each Spark task: no row-by-row JVM pipeline.

A pipelined chunk's state of the shape ``spout(StringScheme) -> each(Split) ->
persistent_aggregate(Count)`` (Trident's word count) is computed by :func:`count_split` in
``mapInArrow``: each Spark task decodes its records' values as UTF-8, splits them, drops
empty pieces and counts per ``(group, txid)`` with Arrow's vectorised kernels, and yields its
partial counts. Spark still reads the log (one task per segment file, the ranges filtered
and tagged with txids in the scan) and schedules the tasks; there is no shuffle: the driver
sums the tasks' partials with Arrow (:func:`combine_task_partials`), and the commit's merge
is unchanged.

The kernel also counts the records that fail to decode (null, or not valid UTF-8: the
scheme's dead letters), in a row of its own, so the chunk needs no ``Observation`` and
fetches dead letters with a second job only when there are any. Its results equal the
Spark plan's (``Split.apply``, ``StringScheme``, ``count(1)``) exactly; the test suite checks
it on edge cases (separators at the ends and doubled, invalid UTF-8, nulls).

This module imports only pyarrow: it runs on the executors' Python workers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["DEAD_COLUMN", "CountSplit", "combine_task_partials", "count_split"]

DEAD_COLUMN = "__trident_dead"
"""Column of the kernel's output: a task's number of records that failed to decode (null on
the rows holding partial counts)."""


@dataclass(frozen=True)
class CountSplit:
    """What the kernel computes: ``count`` per ``group`` of the pieces of ``text`` split on ``sep``.

    ``text`` is the scheme's field, ``piece`` the Split's output field; ``group`` holds one
    or both of them, in the state's order; ``txid`` is the chunk's txid tag column.
    """

    text: str
    piece: str
    sep: str
    group: tuple[str, ...]
    txid: str
    output: str

    def schema(self) -> str:
        """The kernel's output schema as a Spark DDL string."""
        groups = ", ".join(f"`{g}` string" for g in self.group)
        return f"{groups}, `{self.txid}` bigint, `{self.output}` bigint, `{DEAD_COLUMN}` bigint"


def _valid_utf8(values: pa.Array) -> pa.Array:
    """Per row: non-null and valid UTF-8 (the scheme's good records)."""
    try:
        values.cast(pa.string())
        return pc.is_valid(values)
    except pa.ArrowInvalid:  # some row is not UTF-8: find which (only batches with dead letters)
        return pa.array([_decodes(v) for v in values.to_pylist()], pa.bool_())


def _decodes(value: bytes | None) -> bool:
    if value is None:
        return False
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _batch_counts(spec: CountSplit, batch: pa.RecordBatch) -> tuple[pa.Table, int]:
    """One record batch (``value``, txid) -> its partial counts and its dead-letter count."""
    values = batch.column(0)
    good = _valid_utf8(values)
    dead = len(values) - pc.sum(good).as_py() if len(values) else 0
    text = pc.filter(values, good).cast(pa.string())
    txids = pc.filter(batch.column(1), good)
    pieces = pc.split_pattern(text, pattern=spec.sep)
    rows = pc.list_parent_indices(pieces)
    words = pc.list_flatten(pieces)
    keep = pc.not_equal(words, "")
    columns = {spec.piece: pc.filter(words, keep)}
    rows = pc.filter(rows, keep)
    if spec.text in spec.group:
        columns[spec.text] = pc.take(text, rows)
    columns[spec.txid] = pc.take(txids, rows)
    table = pa.table(columns)
    keys = [*spec.group, spec.txid]
    counted = table.group_by(keys, use_threads=False).aggregate([([], "count_all")])
    return counted.rename_columns([*keys, spec.output]).select([*keys, spec.output]), dead


def count_split(spec: CountSplit, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` kernel: one task's partial counts, then its dead-letter count row.

    Input batches hold the raw ``value`` (binary) and the txid tag, in that order.
    """
    parts: list[pa.Table] = []
    dead = 0
    for batch in batches:
        counted, failed = _batch_counts(spec, batch)
        dead += failed
        if counted.num_rows:
            parts.append(counted)
    keys = [*spec.group, spec.txid]
    if parts:
        merged = pa.concat_tables(parts)
        if len(parts) > 1:
            merged = merged.group_by(keys, use_threads=False).aggregate([(spec.output, "sum")])
            merged = merged.rename_columns([*keys, spec.output])
        counts = merged.select([*keys, spec.output]).cast(_schema(spec))
        counts = counts.append_column(DEAD_COLUMN, pa.nulls(counts.num_rows, pa.int64()))
        yield from counts.to_batches()
    row = {k: pa.nulls(1, pa.string()) for k in spec.group}
    row[spec.txid] = pa.nulls(1, pa.int64())
    row[spec.output] = pa.nulls(1, pa.int64())
    row[DEAD_COLUMN] = pa.array([dead], pa.int64())
    yield pa.RecordBatch.from_pydict(row)


def _schema(spec: CountSplit) -> pa.Schema:
    fields = [pa.field(g, pa.string()) for g in spec.group]
    return pa.schema([*fields, pa.field(spec.txid, pa.int64()), pa.field(spec.output, pa.int64())])


def combine_task_partials(spec: CountSplit, table: pa.Table) -> tuple[pa.Table, int]:
    """The tasks' output -> (counts per ``(group, txid)``, the chunk's dead-letter count)."""
    dead_rows = pc.is_valid(table.column(DEAD_COLUMN))
    dead = pc.sum(pc.filter(table.column(DEAD_COLUMN), dead_rows)).as_py() or 0
    counts = table.filter(pc.invert(dead_rows)).drop_columns([DEAD_COLUMN])
    keys: Sequence[str] = [*spec.group, spec.txid]
    # one thread: with millions of distinct keys, Arrow's threaded grouping (a hash table
    # per thread, merged) took about 3x the time and more memory, and no less time otherwise
    summed = counts.group_by(keys, use_threads=False).aggregate([(spec.output, "sum")])
    summed = summed.rename_columns([*keys, spec.output]).select([*keys, spec.output])
    return summed, int(dead)

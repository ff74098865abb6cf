"""How the engine reads each spout's records: the spouts declare, Spark reads.

A spout of the sources layer (``spouts/``, ``kafka/``) never imports the engine. The
embedded log's spout and the file spout are read by :class:`LogReads` and
:class:`FileReads` here; a spout without an entry in :data:`READS` reads itself (its own
``read``, and ``read_many``/``split_conf`` if it has them, given the Spark session), as a
Kafka spout or a spout of yours does. A reader's ``read_conf``, if it has one, gives the
Spark settings its reads' jobs run with, whether a txid is read alone or with others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from trident_assets.spark import file_reader
from trident_assets.spark.file_json import (
    JSON_SOURCE_CONF,
    clean_files,
    fast_decodable,
    json_source_staged,
)
from trident_assets.spark.file_native import whole_file_conf
from trident_assets.spark.file_reader import read_file_batches, read_files
from trident_assets.spark.log_reader import per_file_tasks, read_ranges, read_ranges_tagged
from trident_assets.spark.log_reader import split_conf as log_split_conf
from trident_assets.spouts.file_spout import FileSpout
from trident_assets.spouts.log_spout import LogSpout

if TYPE_CHECKING:
    from trident_assets.log.store import PartitionedLog
    from trident_assets.spouts.ranges import BatchPlan

__all__ = ["FILE_BYTES_PER_RECORD", "READS", "FileReads", "reads_for", "records_of"]

FILE_BYTES_PER_RECORD = 32
"""The bytes of a file per record a file batch is estimated to hold (a short JSON line or
CSV row; a Parquet row of a few compressed columns)."""


class LogReads:
    """A :class:`LogSpout`'s batches read by Spark from the log's segment files."""

    def __init__(self, spout: LogSpout) -> None:
        """Read ``spout``'s batches (their ranges say which records)."""
        self.spout = spout

    def read(self, spark: Any, log: PartitionedLog, plan: BatchPlan, *, inline: bool = True) -> Any:
        """The raw records of ``plan`` as a Spark DataFrame, read in parallel by Spark.

        ``inline``: a small batch may reach Spark with the plan (:func:`~trident_assets.spark.
        log_reader.read_ranges`); False where the topology works per Spark partition, whose
        partitions then stay those of a file scan.
        """
        ranges = [
            (r.topic, r.partition_number, r.first_offset, r.last_offset) for r in plan.non_empty()
        ]
        return read_ranges(spark, log, ranges, None if inline else 0)

    def read_many(
        self, spark: Any, log: PartitionedLog, plans: Sequence[tuple[int, BatchPlan]], column: str
    ) -> Any:
        """The raw records of several batches in ONE Spark scan, each tagged with its batch.

        ``plans`` are ``(tag, plan)``; the tag goes to the bigint ``column``.
        """
        ranges = [
            (tag, r.topic, r.partition_number, r.first_offset, r.last_offset)
            for tag, plan in plans
            for r in plan.non_empty()
        ]
        return read_ranges_tagged(spark, log, ranges, column)

    def split_conf(self, log: PartitionedLog, plans: Sequence[tuple[int, BatchPlan]]) -> Any:
        """Spark settings for :meth:`read_many`'s job (:func:`~.log_reader.split_conf`)."""
        ranges = [
            (r.topic, r.partition_number, r.first_offset, r.last_offset)
            for _txid, plan in plans
            for r in plan.non_empty()
        ]
        return log_split_conf(log, ranges)


class FileReads:
    """A :class:`FileSpout`'s batches: its files, checked, read by Spark's executors."""

    def __init__(self, spout: FileSpout) -> None:
        """Read ``spout``'s batches."""
        self.spout = spout

    def records(self, log: Any, plan: BatchPlan) -> int:
        """An estimate of the records ``plan``'s files hold, from their bytes.

        A file batch's offsets number files, not records: Spark's code generation is
        chosen by records (:func:`~trident_assets.spark.codegen_conf.codegen_conf`).
        """
        return sum(e.size for e in self.spout.files(log, plan)) // FILE_BYTES_PER_RECORD

    def read_many(
        self, spark: Any, log: Any, plans: Sequence[tuple[int, BatchPlan]], column: str
    ) -> Any:
        """The records of several batches, each tagged with its batch in the bigint ``column``.

        ``plans`` are ``(tag, plan)``; each plan's files are checked as by :meth:`read`, and
        the files read natively share scans (:func:`~.file_reader.read_file_batches`).

        Raises:
            BatchUnavailableError: a file was removed or changed since it was numbered.
            ConfigError: a CSV header or a Parquet schema disagrees with the declared fields.
        """
        spout = self.spout
        batches = []
        for tag, plan in plans:
            entries = spout.files(log, plan)
            spout.check(plan, entries)
            batches.append((tag, plan.txid, entries))
        return read_file_batches(spark, spout.location, batches, spout.scheme, spout.format, column)

    def split_conf(self, log: Any, plans: Sequence[tuple[int, BatchPlan]]) -> dict[str, str]:
        """Spark settings for :meth:`read_many`'s job: :meth:`read_conf`'s, and a task per file.

        Files of several batches share a scan; a task of one file sees one batch, so its
        partial aggregation by ``(txid, key)`` holds one batch's keys
        (:func:`~.log_reader.per_file_tasks`).
        """
        sizes = [e.size for _, plan in plans for e in self.spout.files(log, plan)]
        return self._chunk_conf(log, plans, sizes)

    def _chunk_conf(
        self, log: Any, plans: Sequence[tuple[int, BatchPlan]], sizes: Sequence[int]
    ) -> dict[str, str]:
        """:meth:`split_conf` for files of ``sizes`` bytes, already listed."""
        return {**per_file_tasks(sizes), **self.read_conf(log, plans)}

    def read_conf(self, log: Any, plans: Sequence[tuple[int, BatchPlan]]) -> dict[str, str]:
        """Spark settings for the jobs reading ``plans``: each file read whole, by one task.

        For lines files read natively (:data:`~.file_reader.NATIVE_FORMATS`), whose lines are
        numbered by their position in their task (:mod:`~trident_assets.spark.file_native`);
        none otherwise (a Parquet row's number is its row index however Spark splits a file).
        """
        fmt = self.spout.format
        return whole_file_conf() if fmt != "parquet" and fmt in file_reader.NATIVE_FORMATS else {}

    def read(self, spark: Any, log: Any, plan: BatchPlan, *, inline: bool = True) -> Any:
        """The records of ``plan``'s files as a DataFrame (``inline``: the log's option).

        Raises:
            BatchUnavailableError: a file was removed or changed since it was numbered.
            ConfigError: a CSV header or a Parquet schema disagrees with the declared fields.
        """
        spout = self.spout
        entries = spout.files(log, plan)
        spout.check(plan, entries)
        return read_files(spark, spout.location, entries, spout.scheme, spout.format, plan.txid)

    def decode_many(
        self,
        spark: Any,
        log: Any,
        plans: Sequence[BatchPlan],
        column: str,
        observation: Any,
    ) -> tuple[Any, Any, dict[str, str]] | None:
        """Decoded tuples, dead letters and job settings of several batches, tagged in ``column``.

        For a lenient ``JsonScheme`` over local JSON lines files only (else None: decode the
        read records as usual): the clean files are decoded by Spark's JSON source, the
        others as usual (:mod:`~trident_assets.spark.file_json`); ``observation`` counts
        the dead letters of both, which are then read the usual way, with their lines. The
        settings are :meth:`split_conf`'s and :data:`~.file_json.JSON_SOURCE_CONF`.
        A batch's tag is its position in ``plans``, as :func:`~.txid_tags.tagged_read` tags.

        Raises:
            BatchUnavailableError: a file was removed or changed since it was numbered.
        """
        spout, keep = self.spout, (column,)
        scheme, location = spout.scheme, spout.location
        batches = []
        for tag, plan in enumerate(plans):
            if plan.record_count > 0:
                entries = spout.files(log, plan)
                batches.append((tag, plan, entries))
        everything = [e for _, _, entries in batches for e in entries]
        if not fast_decodable(spark, scheme, spout.format, location, everything):
            return None
        for _, plan, entries in batches:
            spout.check(plan, entries)
        every = [(tag, plan.txid, entries) for tag, plan, entries in batches]
        with ThreadPoolExecutor(1, thread_name_prefix="trident-clean-files") as pool:
            found = pool.submit(clean_files, spark, location, everything)
            # planned meanwhile: the dead letters' read, and the fast read of every file
            # (all clean, the usual case)
            _, dead = scheme.decode(
                read_file_batches(spark, location, every, scheme, spout.format, column), keep=keep
            )
            tags = (column, [tag for tag, _, entries in batches for _ in entries])
            staged = json_source_staged(spark, location, everything, scheme, tags)
            flags = found.result()
        if not all(flags):
            staged = self._staged(spark, batches, iter(flags), column)
        good, _ = scheme.split_staged(staged, keep=keep, observation=observation)
        plans_tagged = [(tag, plan) for tag, plan, _ in batches]
        conf = self._chunk_conf(log, plans_tagged, [e.size for e in everything])
        return good, dead, {**conf, **JSON_SOURCE_CONF}

    def _staged(
        self, spark: Any, batches: Sequence[tuple[int, Any, Any]], flags: Any, column: str
    ) -> Any:
        """The staged columns of ``batches``' files, some not clean (``flags``, per file).

        The clean files are read by the JSON source, the others the usual way.
        """
        spout = self.spout
        fast: list[tuple[int, Any]] = []
        slow: list[tuple[int, int, list[Any]]] = []
        for tag, plan, entries in batches:
            clean = [(e, next(flags)) for e in entries]
            fast += [(tag, e) for e, ok in clean if ok]
            slow.append((tag, plan.txid, [e for e, ok in clean if not ok]))
        raw = read_file_batches(spark, spout.location, slow, spout.scheme, spout.format, column)
        staged = spout.scheme.staged(raw, keep=(column,))
        if not fast:
            return staged
        tags = (column, [tag for tag, _ in fast])
        files = [e for _, e in fast]
        return json_source_staged(spark, spout.location, files, spout.scheme, tags).unionByName(
            staged
        )


READS: dict[type, Callable[[Any], Any]] = {LogSpout: LogReads, FileSpout: FileReads}
"""The reader of each spout class the engine reads itself, made for one spout."""


def records_of(spout: Any, log: Any, plan: BatchPlan) -> int:
    """The records ``spout``'s ``plan`` reads: its reader's estimate, else the plan's count."""
    estimate = getattr(reads_for(spout), "records", None)
    return plan.record_count if estimate is None else int(estimate(log, plan))


def reads_for(spout: Any) -> Any:
    """What reads ``spout``'s records: its class's reader in :data:`READS`, else the spout."""
    make = next((READS[c] for c in type(spout).__mro__ if c in READS), None)
    return spout if make is None else make(spout)

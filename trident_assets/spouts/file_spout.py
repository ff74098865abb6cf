"""Files as a transactional spout: ``FileSource`` (numbered files) and ``FileSpout``.

The files of a folder or glob (:mod:`.file_listing`) are numbered once each, for good, by
the spout's file index (:mod:`.file_catalog`); the numbers are the offsets of one partition
(``files-<index key>@0``), so the batch coordinator plans, records and replays file batches
exactly as it does log ranges: a txid takes the next files, at most ``max_files`` and
``max_bytes``, recorded at first emission and committed with the state; a replay reads
exactly those files. Before every read each file is checked against its size, modification
time and content fingerprint as numbered: a file changed or removed since refuses the txid
(:class:`~trident_assets.errors.BatchUnavailableError` naming it), never reading other data.

The driver lists and plans; Spark's executors read the files
(:mod:`trident_assets.spark.file_reader`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trident_assets.errors import BatchUnavailableError, ConfigError
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.file_catalog import CATALOG_DIR, FileCatalog
from trident_assets.spouts.file_listing import FileEntry, Location
from trident_assets.spouts.ranges import BatchPlan

if TYPE_CHECKING:
    from trident_assets.spark.scheme_base import Scheme

__all__ = ["DEFAULT_MAX_FILES", "DEFAULT_STABLE_AFTER_S", "FileSource", "FileSpout"]

DEFAULT_MAX_FILES = 1000
DEFAULT_STABLE_AFTER_S = 5.0
FILES_TOPIC = "files"


def _entries(catalog: FileCatalog, plan: BatchPlan) -> list[FileEntry]:
    return [e for r in plan.non_empty() for e in catalog.entries(r.first_offset, r.next_offset)]


def _when(mtime_ns: int) -> str:
    return datetime.fromtimestamp(mtime_ns / 1e9, UTC).isoformat(timespec="microseconds")


class FileSource:
    """A PartitionedSource of one partition whose offsets are the numbers of the files."""

    def __init__(self, catalog: FileCatalog, max_bytes: int | None) -> None:
        """Number the files of ``catalog``; a batch: at most ``max_bytes``, 1 file at least."""
        self.catalog = catalog
        self.max_bytes = max_bytes
        self.partition = f"{FILES_TOPIC}-{catalog.key}@0"
        self._latest: int | None = None

    def partitions(self) -> list[str]:
        """The one partition; lists the location first (see :meth:`latest`)."""
        self._latest = self.catalog.refresh()
        return [self.partition]

    def topic_id(self, partition: str) -> str | None:
        """The file index's ID: batches recorded against another index are never replayed."""
        return self.catalog.id

    def earliest(self, partition: str) -> int:
        """The first file's number: 0."""
        return 0

    def latest(self, partition: str) -> int:
        """The files numbered and the stable files waiting, as of the last listing."""
        if self._latest is None:
            self.partitions()
        assert self._latest is not None
        return self._latest

    def offset_for_timestamp(self, partition: str, timestamp_ms: int) -> int | None:
        """Not supported: a file spout starts at its first file (None)."""
        return None

    def bounded_end(self, partition: str, start: int, end: int) -> int:
        """The end of a batch from ``start`` of at most ``end`` files and ``max_bytes`` bytes."""
        return self.catalog.bounded_end(start, end, self.max_bytes)


class FileSpout:
    """A transactional spout over the files of a folder or glob, decoded by a scheme.

    The scheme picks the format: a line scheme (:class:`~trident_assets.spark.schemes.
    JsonScheme`, ``StringScheme``, ``RawScheme``) reads each file's lines as records (JSON
    lines, text); :class:`~trident_assets.spark.file_schemes.CsvScheme` reads CSV with a
    header; :class:`~trident_assets.spark.file_schemes.ParquetScheme` reads Parquet files
    with their schema checked against the declared fields. A line record's provenance is its
    file (the ``topic`` of its dead letter, a ``file://`` or other URL) and its line number
    (the ``offset``, from 1); its ``timestamp`` is the file's modification time.

    Args:
        path: a folder (every file under it), or a glob (``/landing/*.jsonl``,
            ``/landing/**/*.parquet``); a local path, ``file://`` URL, or a URL a
            ``pyarrow.fs`` or ``fsspec`` filesystem reads.
        scheme: the decoding (see above).
        max_files: at most this many files per txid.
        max_bytes: at most this many bytes of files per txid (a larger file is a batch of
            its own); None: no limit.
        stable_after: seconds a file must stay unmodified before it is taken (files still
            being written are skipped until then). Temp names are never taken: names
            starting with ``.`` or ``_``, ending with ``.tmp``, ``.crc`` or ``_COPYING_``.
        deployment_id: as :class:`~trident_assets.spouts.config.SpoutConfig`'s.

    Raises:
        ConfigError: a bad path, limit or quiet period.
    """

    def __init__(
        self,
        path: str,
        scheme: Scheme,
        *,
        max_files: int = DEFAULT_MAX_FILES,
        max_bytes: int | None = None,
        stable_after: float = DEFAULT_STABLE_AFTER_S,
        deployment_id: str = "default",
    ) -> None:
        """Declare the spout; nothing is listed until a batch is planned."""
        self.location = Location(path)
        for name, value in (("max_files", max_files), ("max_bytes", max_bytes)):
            if value is None and name == "max_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                msg = f"FileSpout {name} must be an integer >= 1, got {value!r}"
                raise ConfigError(msg)
        if (
            isinstance(stable_after, bool)
            or not isinstance(stable_after, int | float)
            or not stable_after >= 0
        ):
            msg = f"FileSpout stable_after must be a number of seconds >= 0, got {stable_after!r}"
            raise ConfigError(msg)
        self.format = getattr(scheme, "file_format", "lines")
        if self.format not in ("lines", "csv", "parquet"):
            msg = f"FileSpout cannot read the format {self.format!r} of scheme {scheme!r}"
            raise ConfigError(msg)
        self.scheme = scheme
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.stable_after = float(stable_after)
        self.config = SpoutConfig(
            kind=SpoutKind.TRANSACTIONAL, max_batch_size=max_files, deployment_id=deployment_id
        )
        self._sources: dict[Path, FileSource] = {}

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields the scheme produces."""
        return self.scheme.fields

    def source(self, log: Any) -> FileSource:
        """The numbered files; the file index lives in ``log``'s root (``_file_spouts/``).

        Raises:
            ConfigError: no log (a file spout keeps its index beside the log).
        """
        root = getattr(log, "root", None)
        if root is None:
            msg = (
                "a FileSpout keeps its file index in the embedded log's folder: give the "
                "runner a PartitionedLog (the home's log)"
            )
            raise ConfigError(msg)
        key = Path(root)
        if key not in self._sources:
            catalog = FileCatalog(key / CATALOG_DIR, self.location, self.stable_after)
            self._sources[key] = FileSource(catalog, self.max_bytes)
        return self._sources[key]

    def files(self, log: Any, plan: BatchPlan) -> list[FileEntry]:
        """The files of ``plan`` as numbered (size, modification time, fingerprint)."""
        return _entries(self.source(log).catalog, plan)

    def plan_metadata(self, plan: BatchPlan) -> dict[str, Any]:
        """``files`` (their URLs) and ``file_bytes`` of ``plan``, for its materialization.

        From the file index that planned it in this process (none: no files listed).
        """
        partitions = {r.partition for r in plan.ranges}
        source = next((s for s in self._sources.values() if s.partition in partitions), None)
        if source is None:
            return {"files": [], "file_bytes": 0}
        entries = _entries(source.catalog, plan)
        return {
            "files": [self.location.uri(e.path) for e in entries],
            "file_bytes": sum(e.size for e in entries),
        }

    def check(self, plan: BatchPlan, entries: list[FileEntry]) -> None:
        """Refuse ``plan`` unless every file is still as numbered (size, modification time).

        Raises:
            BatchUnavailableError: a file was removed or changed (the message names it).
        """
        for entry in entries:
            now = self.location.current(entry.path)
            if now == (entry.size, entry.mtime_ns):
                continue
            uri = self.location.uri(entry.path)
            then = f"{entry.size} bytes modified at {_when(entry.mtime_ns)}"
            what = (
                "no longer exists"
                if now is None
                else f"has changed: recorded {then}, now {now[0]} bytes modified at {_when(now[1])}"
            )
            msg = (
                f"cannot read txid {plan.txid} of spout {plan.spout!r}: its file {uri} {what}. "
                "A transactional batch is never read with other data; put the file back as it "
                "was, or redeploy the topology with a fresh state."
            )
            raise BatchUnavailableError(msg)

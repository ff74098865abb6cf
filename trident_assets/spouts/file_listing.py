"""Which files a file spout sees: a folder or glob, listed on the driver; temp names skipped.

A location is a local path, a ``file://`` URL, or any URL that ``pyarrow.fs`` (S3, GCS, HDFS,
Azure) or ``fsspec`` opens where its package is installed. Its files are those under the
base folder (the location up to its first glob character), recursively, whose path relative
to the base matches the glob (``*`` and ``?`` stay within one folder, ``**`` crosses
folders; no glob: every file).

Never listed (files still being written): a name starting with ``.`` or ``_``, ending with
``.tmp``, ``.crc`` or ``._COPYING_``/``_COPYING_``, and anything under such a folder.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from trident_assets.errors import ConfigError

__all__ = [
    "FileEntry",
    "Location",
    "fingerprint",
]

_GLOB = re.compile(r"[*?\[]")
_TEMP_SUFFIXES = (".tmp", ".crc", "_COPYING_")

FINGERPRINT_BYTES = 32 << 10
"""A fingerprint hashes a file's size and its first and last this many bytes."""


def is_temp_name(name: str) -> bool:
    """True for a name a writer uses while a file is incomplete (never read)."""
    return name.startswith((".", "_")) or name.endswith(_TEMP_SUFFIXES)


def fingerprint(size: int, head: bytes, tail: bytes) -> str:
    """The content fingerprint of a file of ``size`` bytes from its first and last bytes.

    ``head`` is the first :data:`FINGERPRINT_BYTES` bytes (all of a smaller file), ``tail``
    the last ones (empty when the file fits in ``head``).
    """
    digest = hashlib.blake2b(digest_size=16)
    digest.update(size.to_bytes(8, "little"))
    digest.update(head)
    digest.update(tail)
    return digest.hexdigest()


def fingerprint_bytes(data: bytes) -> str:
    """:func:`fingerprint` of a file whose whole content is ``data``."""
    size = len(data)
    head = data[:FINGERPRINT_BYTES]
    tail = data[-FINGERPRINT_BYTES:] if size > FINGERPRINT_BYTES else b""
    return fingerprint(size, head, tail)


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file as recorded: its path under the base, size, modification time, fingerprint."""

    path: str
    """Relative to the location's base folder, ``/``-separated."""
    size: int
    mtime_ns: int
    fingerprint: str


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """The regex of a relative glob: ``**/`` any folders, ``*``/``?`` within one name."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                msg = f"glob {pattern!r} has an unclosed '['"
                raise ConfigError(msg)
            body = pattern[i + 1 : end].replace("\\", "\\\\")
            out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


class Location:
    """A folder or glob of files, local or on a filesystem ``pyarrow.fs``/``fsspec`` opens.

    Args:
        path: a local path, ``file://`` URL or another filesystem's URL, with an optional
            glob after the base folder (``/landing/*.jsonl``, ``s3://bucket/in/**/*.parquet``).

    Raises:
        ConfigError: the path is empty, or the glob is malformed.
    """

    def __init__(self, path: str) -> None:
        if not isinstance(path, str) or not path:
            msg = f"a file spout needs a folder or glob (a path or URL), got {path!r}"
            raise ConfigError(msg)
        parsed = urlparse(path)
        self.local = parsed.scheme in ("", "file") or len(parsed.scheme) == 1  # C:\ on Windows
        raw = unquote(parsed.path) if parsed.scheme == "file" else path
        if self.local:
            raw = os.path.abspath(os.path.expanduser(raw))
        match = _GLOB.search(raw)
        if match is None:
            base, pattern = raw.rstrip("/") or "/", None
        else:
            base, _, _ = raw[: match.start()].rpartition("/")
            pattern = raw[len(base) + 1 :]
        self.base = base
        self.pattern = pattern
        self._regex = _glob_regex(pattern) if pattern else None
        self._fs: Any = None

    @property
    def url(self) -> str:
        """The location as a URL (``file://`` for a local one), glob included."""
        base = "file://" + self.base if self.local else self.base
        return base if self.pattern is None else f"{base}/{self.pattern}"

    def full(self, relative: str) -> str:
        """The path (local) or URL of the file at ``relative`` under the base."""
        return f"{self.base.rstrip('/')}/{relative}"

    def uri(self, relative: str) -> str:
        """The URL of a file, for messages and metadata (``file://`` for a local file)."""
        return ("file://" if self.local else "") + self.full(relative)

    def matches(self, relative: str) -> bool:
        """True when a file at ``relative`` belongs to the location (not a temp name)."""
        if any(is_temp_name(part) for part in relative.split("/")):
            return False
        return self._regex is None or self._regex.fullmatch(relative) is not None

    def names(self) -> Iterator[tuple[str, Any]]:
        """``(relative path, handle)`` of every file that matches; a handle stats lazily.

        Local folders are walked with ``os.scandir`` (no stat for names known already);
        a missing base folder lists nothing.
        """
        if self.local:
            yield from self._scan(self.base, "")
            return
        for info in self._remote_infos():
            relative = info[0]
            if self.matches(relative):
                yield relative, info

    def _scan(self, folder: str, prefix: str) -> Iterator[tuple[str, Any]]:
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if is_temp_name(entry.name):
                continue
            relative = prefix + entry.name
            if entry.is_dir(follow_symlinks=True):
                yield from self._scan(entry.path, relative + "/")
            elif entry.is_file(follow_symlinks=True) and (
                self._regex is None or self._regex.fullmatch(relative) is not None
            ):  # every part of the path is checked for temp names already
                yield relative, entry

    def stat(self, relative: str, handle: Any) -> tuple[int, int] | None:
        """``(size, mtime_ns)`` of a listed file, or None when it is gone."""
        if isinstance(handle, tuple):
            return handle[1], handle[2]
        try:
            st = handle.stat() if handle is not None else os.stat(self.full(relative))
        except FileNotFoundError:
            return None
        return st.st_size, st.st_mtime_ns

    def current(self, relative: str) -> tuple[int, int] | None:
        """``(size, mtime_ns)`` of a file now, or None when it is gone."""
        if self.local:
            return self.stat(relative, None)
        from pyarrow import fs as pafs

        filesystem, root = self._filesystem()
        info = filesystem.get_file_info(f"{root.rstrip('/')}/{relative}")
        if info.type != pafs.FileType.File:
            return None
        return int(info.size), int(info.mtime_ns or 0)

    def head_tail(self, relative: str, size: int) -> tuple[bytes, bytes]:
        """The first and last :data:`FINGERPRINT_BYTES` of a file (see :func:`fingerprint`)."""
        with self.open(relative) as stream:
            head = stream.read(FINGERPRINT_BYTES)
            tail = b""
            if size > FINGERPRINT_BYTES:
                stream.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
                tail = stream.read(FINGERPRINT_BYTES)
        return head, tail

    def first_line(self, relative: str, limit: int = 1 << 20) -> bytes:
        """The first line of a file (without its line break), at most ``limit`` bytes."""
        with self.open(relative) as stream:
            data = bytes(stream.read(limit))
        line = data.split(b"\n", 1)[0]
        return line[:-1] if line.endswith(b"\r") else line

    def open(self, relative: str) -> Any:
        """A binary, seekable stream of a file."""
        if self.local:
            return open(self.full(relative), "rb")
        filesystem, root = self._filesystem()
        return filesystem.open_input_file(f"{root.rstrip('/')}/{relative}")

    def _filesystem(self) -> tuple[Any, str]:
        """``(pyarrow filesystem, base path in it)``; fsspec's wrapped when pyarrow lacks one."""
        if self._fs is None:
            from pyarrow import fs as pafs

            try:
                self._fs = pafs.FileSystem.from_uri(self.base)
            except (ValueError, OSError):  # pyarrow's ArrowInvalid: a scheme it does not know
                self._fs = self._fsspec()
        filesystem, root = self._fs
        return filesystem, str(root)

    def _fsspec(self) -> tuple[Any, str]:
        try:
            import fsspec  # type: ignore[import-untyped]
            from pyarrow import fs as pafs
        except ImportError:
            msg = (
                f"no filesystem reads {self.base!r}: pyarrow.fs does not know its scheme and "
                "fsspec is not installed (pip install fsspec and the scheme's package, e.g. "
                "s3fs, gcsfs, adlfs)"
            )
            raise ConfigError(msg) from None
        filesystem, root = fsspec.core.url_to_fs(self.base)
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem)), root

    def _remote_infos(self) -> Iterator[tuple[str, int, int]]:
        from pyarrow import fs as pafs

        filesystem, root = self._filesystem()
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        prefix = root.rstrip("/") + "/"
        for info in filesystem.get_file_info(selector):
            if info.type == pafs.FileType.File and info.path.startswith(prefix):
                yield info.path[len(prefix) :], int(info.size), int(info.mtime_ns or 0)

"""The exceptions trident_assets raises: one small hierarchy, named by condition.

Every message names what was wrong (state, txid, key or field), what was expected and
how to fix it.
"""

from __future__ import annotations

import errno

__all__ = [
    "AggregationError",
    "BatchUnavailableError",
    "ConfigError",
    "CorruptLogMetadataError",
    "CorruptSegmentError",
    "CorruptStateError",
    "DiskFullError",
    "FieldNotFoundError",
    "HistoryUnavailableError",
    "HomeLockedError",
    "KeyValueStoreError",
    "LogLockTimeoutError",
    "LostCommitsError",
    "OutOfOrderCommitError",
    "PublishError",
    "QuarantineError",
    "StaleTxidError",
    "StateContractError",
    "StateLayoutError",
    "StoreLockedError",
    "TridentError",
    "UserCodeError",
]


class TridentError(Exception):
    """Base class of every error raised by trident_assets."""


class ConfigError(TridentError, ValueError):
    """A configuration or declaration is invalid; raised before anything is written."""


class StateContractError(ConfigError):
    """A declared state disagrees with the contract stored for it; refused before any write."""


class FieldNotFoundError(ConfigError):
    """An operation names a field the stream does not have."""


class StaleTxidError(TridentError):
    """A batch's txid is behind the txid already stored in the state ("behind")."""


class OutOfOrderCommitError(TridentError):
    """A commit of txid N was attempted before txid N-1 committed; nothing was changed."""


class StateLayoutError(TridentError):
    """A stored state does not have the layout (kind, key arity, types) the caller expects."""


class BatchUnavailableError(TridentError):
    """A transactional batch can no longer be re-read exactly (retention, compaction)."""


class DiskFullError(TridentError):
    """A write found no space left on its device; nothing of it became visible."""


def is_disk_full(exc: BaseException) -> bool:
    """True when ``exc`` (an OSError, or a library's error around one) means ENOSPC."""
    return getattr(exc, "errno", None) == errno.ENOSPC or "No space left on device" in str(exc)


class HistoryUnavailableError(TridentError):
    """An as-of read asks for a txid whose state versions compaction has already removed."""


class CorruptSegmentError(TridentError):
    """A log segment file cannot be read or disagrees with its name or its neighbours.

    The message names the topic, partition, offset range and file, and what to do
    (``trident log verify TOPIC`` lists every damaged segment).
    """


class CorruptLogMetadataError(CorruptSegmentError):
    """A log metadata file (``topic.json``, ``log_start.json``) is missing or unreadable.

    The message names the file and what to do.
    """


class LogLockTimeoutError(TridentError):
    """A log writer waited longer than its lock timeout for a partition or topic lock."""


class CorruptStateError(StateLayoutError):
    """A state file exists but cannot be opened or read (truncated, damaged); it is left as is.

    The message names the file and the recovery path (``trident state restore BACKUP``).
    """


class LostCommitsError(CorruptStateError):
    """A DuckDB state file is behind its commit marker file: it lost committed transactions.

    Its write-ahead log was torn or deleted, so txids reported committed would silently run
    again; the store is refused before anything is run or written. The message names both
    files, the txids, and the ways out (restore a backup, or ``trident state
    accept-lost-commits``).
    """

    def __init__(
        self, message: str, state: str, marker: str, lost: dict[str, tuple[int | None, int]]
    ) -> None:
        super().__init__(message)
        self.state = state
        """The state file."""
        self.marker = marker
        """The commit marker file."""
        self.lost = lost
        """Per topology: ``(txid in the database or None, txid in the marker file)``."""


class StoreLockedError(TridentError):
    """The state store is held by another process and did not free within the wait."""


class HomeLockedError(TridentError):
    """A trident home is held by another process (``trident ui`` or ``trident demo``).

    Raised before anything of the home is touched; the message names the holder's PID and
    command, and the way out (stop it, or pass ``--home`` with another directory).
    """

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid
        """The PID of the process holding the home (None if it had not written it yet)."""


class AggregationError(TridentError):
    """An aggregator was given input it cannot aggregate (e.g. a null partial sum in a merge)."""


class QuarantineError(TridentError):
    """A txid cannot be quarantined (unsound for the topology, committed) or nothing to replay."""


class UserCodeError(TridentError):
    """User code (a function, filter, aggregator, query or updater) raised or broke its contract.

    The message names the operation, the user function and the offending input; the batch
    failed and nothing was committed, so it is replayed once the code or the data is fixed.
    """


class KeyValueStoreError(TridentError):
    """A key-value state's servers refused, lost or did not replicate a batch's writes.

    The message names the state, the server and what to do; the txid did not commit, so it
    runs again once the servers are fixed (a memcached server that lost its keys cannot be
    fixed: its state must be built anew).
    """


class PublishError(TridentError):
    """A lakehouse table disagrees with the store: ahead of it, or behind by txids it lost.

    Raised before anything is written to the table; the message names the table, both txids
    and the way out. The store's commits are unaffected (the table is published after them).
    """

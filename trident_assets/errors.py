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
    "LogLockTimeoutError",
    "OutOfOrderCommitError",
    "QuarantineError",
    "StaleTxidError",
    "StateContractError",
    "StateLayoutError",
    "StoreLockedError",
    "TridentError",
    "UserCodeError",
    "is_disk_full",
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


class StoreLockedError(TridentError):
    """The state store is held by another process and did not free within the wait."""


class AggregationError(TridentError):
    """An aggregator was given input it cannot aggregate (e.g. a null partial sum in a merge)."""


class QuarantineError(TridentError):
    """A txid cannot be quarantined (unsound for the topology, committed) or nothing to replay."""


class UserCodeError(TridentError):
    """User code (a function, filter, aggregator, query or updater) raised or broke its contract.

    The message names the operation, the user function and the offending input; the batch
    failed and nothing was committed, so it is replayed once the code or the data is fixed.
    """

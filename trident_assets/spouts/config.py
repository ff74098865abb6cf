"""Spout kinds, start positions (Storm's FirstPollOffsetStrategy) and spout configuration."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from trident_assets.errors import ConfigError
from trident_assets.names import validate_identifier

__all__ = ["SpoutConfig", "SpoutKind", "StartPosition", "validate_name"]


def validate_name(kind: str, name: str) -> str:
    """Return ``name`` if it is a safe identifier (``names.validate_identifier``).

    Table names are derived by joining names with ``__``, so a name may not contain ``__``
    nor start or end with ``_``: that keeps every derived table name distinct.

    Raises:
        ConfigError: the name could not be used as a table or asset name.
    """
    validate_identifier(name, kind)
    if "__" in name or name.startswith("_") or name.endswith("_"):
        msg = (
            f"invalid {kind} name {name!r}: names may not contain '__' nor start or end "
            "with '_' (table names join names with '__'); e.g. 'word_count'"
        )
        raise ConfigError(msg)
    return name


class SpoutKind(enum.Enum):
    """Trident's three spout guarantees."""

    TRANSACTIONAL = "transactional"
    """A txid's batch is fixed at first emission; every replay reads exactly it."""
    OPAQUE = "opaque"
    """Each attempt reads from where the committed previous batch ended; may differ."""
    NON_TRANSACTIONAL = "non_transactional"
    """Reads whatever comes next; no replay guarantee (at-most/at-least once)."""


class StartPosition(enum.Enum):
    """Where a spout starts reading a partition (Storm's FirstPollOffsetStrategy).

    EARLIEST, LATEST and TIMESTAMP are deploy-only: they apply when the topology is deployed
    (a new ``deployment_id``) and are otherwise ignored in favour of the stored offsets.
    The UNCOMMITTED_* positions resume from stored offsets and apply only when there are none.
    """

    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"
    UNCOMMITTED_EARLIEST = "uncommitted_earliest"
    UNCOMMITTED_LATEST = "uncommitted_latest"
    UNCOMMITTED_TIMESTAMP = "uncommitted_timestamp"

    @property
    def deploy_only(self) -> bool:
        """True for the positions that reset on every new deployment."""
        return self in (StartPosition.EARLIEST, StartPosition.LATEST, StartPosition.TIMESTAMP)

    @property
    def uses_timestamp(self) -> bool:
        """True for the positions that need ``start_timestamp_ms``."""
        return self in (StartPosition.TIMESTAMP, StartPosition.UNCOMMITTED_TIMESTAMP)


@dataclass(frozen=True, slots=True)
class SpoutConfig:
    """How a spout reads its source.

    Args:
        kind: the replay guarantee.
        start: where to start (default UNCOMMITTED_EARLIEST, as Storm).
        start_timestamp_ms: for the TIMESTAMP positions: the first record with a timestamp
            at or after this (epoch milliseconds).
        max_batch_size: at most this many records per batch, split fairly across
            partitions; None reads everything available at emission.
        deployment_id: identifies a deployment; changing it re-applies deploy-only starts.
        ignore_stored_offsets: on a new deployment, ignore stored offsets and use ``start``
            (Storm's ``ignoreZkOffsets``).
    """

    kind: SpoutKind = SpoutKind.OPAQUE
    start: StartPosition = StartPosition.UNCOMMITTED_EARLIEST
    start_timestamp_ms: int | None = None
    max_batch_size: int | None = None
    deployment_id: str = "default"
    ignore_stored_offsets: bool = False

    def __post_init__(self) -> None:
        """Validate before anything is read or written.

        Raises:
            ConfigError: an option is missing or out of range.
        """
        if not isinstance(self.kind, SpoutKind) or not isinstance(self.start, StartPosition):
            msg = (
                "kind must be a SpoutKind and start a StartPosition, "
                f"got {self.kind!r}, {self.start!r}"
            )
            raise ConfigError(msg)
        for name in ("start_timestamp_ms", "max_batch_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                msg = f"SpoutConfig {name} must be an int or None, got {value!r}"
                raise ConfigError(msg)
        if self.start_timestamp_ms is not None and self.start_timestamp_ms < 0:
            got = self.start_timestamp_ms
            msg = f"SpoutConfig start_timestamp_ms must be >= 0 (epoch ms), got {got}"
            raise ConfigError(msg)
        if not isinstance(self.ignore_stored_offsets, bool):
            got = self.ignore_stored_offsets
            msg = f"SpoutConfig ignore_stored_offsets must be a bool, got {got!r}"
            raise ConfigError(msg)
        if self.start.uses_timestamp and self.start_timestamp_ms is None:
            msg = f"start position {self.start.name} needs start_timestamp_ms (epoch ms)"
            raise ConfigError(msg)
        if self.max_batch_size is not None and self.max_batch_size < 1:
            msg = f"max_batch_size must be >= 1 or None (unlimited), got {self.max_batch_size}"
            raise ConfigError(msg)
        if not isinstance(self.deployment_id, str) or not self.deployment_id:
            msg = "deployment_id must be a non-empty string"
            raise ConfigError(msg)

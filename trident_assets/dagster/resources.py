"""Resources: where a topology's log and state live, and how its batches reach Spark."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import ConfigDict, Field, field_validator

from trident_assets.backends.postgres_config import state_location
from trident_assets.backends.replica import DEFAULT_KEEP_TXIDS, Replica
from trident_assets.errors import ConfigError
from trident_assets.names import SPARK_REMOTE_ENV
from trident_assets.spark.session import DEFAULT_SPARK_CONF, build_spark_session

__all__ = ["CRASH_POINTS", "StoreConfig", "TridentResource"]

CRASH_POINTS = ("after_emit", "after_state_write", "before_commit", "after_commit")
"""The points of a batch where ``crash_at`` may kill the run process (chaos testing)."""


class StoreConfig(dg.Config):
    """``home``, and the state store in it (the DuckDB file) or in PostgreSQL (``state_dsn``)."""

    home: str = Field(default=".trident", description="Directory holding the log and state.")
    state_database: str | None = Field(
        default=None, description="DuckDB state file; default <home>/state.duckdb."
    )
    state_dsn: str | None = Field(
        default=None,
        description="PostgreSQL state store, as postgresql://user[:password]@host:port/database; "
        "when set, the state lives there instead of the DuckDB file (README, State in "
        "PostgreSQL).",
    )

    @property
    def database(self) -> Path:
        """The DuckDB state file."""
        return (
            Path(self.state_database) if self.state_database else Path(self.home) / "state.duckdb"
        )

    @property
    def state_location(self) -> str:
        """Where the state store is: ``state_dsn`` when set, else the DuckDB file.

        Raises:
            ConfigError: ``state_dsn`` is set but is not a ``postgresql://`` URI.
        """
        return state_location(self.state_dsn, self.database)

    def replica(self) -> Replica:
        """The lock-free read replica every committed txid is published to (``<home>/replica``)."""
        return Replica(Path(self.home) / "replica")


class TridentResource(dg.ConfigurableResource, StoreConfig):
    """Paths and engines of trident_assets topologies.

    The embedded log lives in ``<home>/log`` and the DuckDB state in ``<home>/state.duckdb``
    (override with ``state_database``; or keep the state in PostgreSQL: ``state_dsn``). Spark
    runs locally unless ``spark_remote`` (a Spark Connect URL), else ``TRIDENT_SPARK_REMOTE``
    (what `trident ui` sets to its warm server), or ``spark_conf["spark.master"]`` points
    elsewhere.
    """

    model_config = ConfigDict(extra="forbid")  # a misspelt setting fails, naming it

    state_memory_limit: str | None = Field(
        default=None,
        description="DuckDB memory_limit of the state store (e.g. '1GB'): DuckDB spills what "
        "exceeds it to disk. With trident.partials.spill it bounds the run's memory during "
        "commits. Default: DuckDB's (80% of RAM). DuckDB state only.",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description="Spark settings layered over the local defaults."
    )
    spark_remote: str | None = Field(
        default=None,
        description="Spark Connect URL (sc://host:port); if unset, TRIDENT_SPARK_REMOTE (set by "
        "`trident ui` to its warm server), else local Spark.",
    )
    max_spout_pending: int = Field(
        default=10,
        ge=1,
        description="Consecutive txids of a catch-up run that may share one Spark job "
        "(Trident's max spout pending); each still commits alone, in order. 1: one by one.",
    )
    keep_txids: int = Field(
        default=DEFAULT_KEEP_TXIDS,
        ge=1,
        description="How many recent txids stay readable as of a txid (the read replica).",
    )
    log_spark_root: str | None = Field(
        default=None,
        description="Where Spark (driver JVM and executors) finds <home>/log when not at that "
        "path: a Hadoop filesystem URL holding the same files; default: the same path.",
    )
    crash_at: str | None = Field(
        default=None,
        description="Chaos testing only: SIGKILL the run process at this point of a batch "
        "(after_emit, after_state_write, before_commit, after_commit).",
    )

    @field_validator("crash_at")
    @classmethod
    def _known_point(cls, value: str | None) -> str | None:
        if value is not None and value not in CRASH_POINTS:
            msg = f"crash_at must be one of {', '.join(CRASH_POINTS)} (or unset), got {value!r}"
            raise ValueError(msg)
        return value

    @field_validator("spark_remote")
    @classmethod
    def _connect_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("sc://"):
            msg = f"spark_remote must be a Spark Connect URL sc://host:port, got {value!r}"
            raise ValueError(msg)
        return value

    @property
    def log_root(self) -> Path:
        """The embedded log's directory."""
        return Path(self.home) / "log"

    def log(self) -> Any:
        """The embedded log."""
        from trident_assets.log.store import PartitionedLog

        return PartitionedLog(self.log_root, spark_root=self.log_spark_root)

    @property
    def connect_url(self) -> str | None:
        """The Spark Connect URL runs use: ``spark_remote``, else ``TRIDENT_SPARK_REMOTE``.

        Raises:
            ConfigError: ``TRIDENT_SPARK_REMOTE`` is set but not an ``sc://`` URL.
        """
        if self.spark_remote:
            return self.spark_remote
        url = os.environ.get(SPARK_REMOTE_ENV) or None
        if url is not None and not url.startswith("sc://"):
            msg = (
                f"{SPARK_REMOTE_ENV}={url!r} is not a Spark Connect URL: set it to "
                "sc://host:port, or unset it for local Spark"
            )
            raise ConfigError(msg)
        return url

    @property
    def spark_target(self) -> str:
        """Where runs run Spark jobs: ``Spark Connect sc://...`` or the local/cluster master."""
        url = self.connect_url
        if url:
            return f"Spark Connect {url}"
        master = self.spark_conf.get("spark.master", DEFAULT_SPARK_CONF["spark.master"])
        return f"Spark master {master} (a driver in this run's process)"

    def spark(self) -> Any:
        """The process's SparkSession (created once, reused by later runs in the process)."""
        return build_spark_session(self.spark_conf, remote=self.connect_url)

    def fault(self) -> Callable[[str], None] | None:
        """The batch fault hook: kills this process at ``crash_at`` (None when unset)."""
        if self.crash_at is None:
            return None
        target = self.crash_at

        def _kill(point: str) -> None:
            if point == target:
                os.kill(os.getpid(), signal.SIGKILL)

        return _kill

    @contextmanager
    def store(self) -> Iterator[Any]:
        """Open the state store (DuckDB, or PostgreSQL with ``state_dsn``) for one run.

        Closed (and unlocked) afterwards.

        Raises:
            ConfigError: ``state_dsn`` is not a PostgreSQL URI, or the server cannot be
                reached (checked before any write).
        """
        from trident_assets.backends.state_store import open_state_store

        location = self.state_location
        if not self.state_dsn:
            self.database.parent.mkdir(parents=True, exist_ok=True)
        with open_state_store(location, memory_limit=self.state_memory_limit) as store:
            yield store

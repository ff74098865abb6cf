"""Where a home's state lives: the settings ``TridentResource`` and ``TridentIOManager`` share."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pydantic import Field

from trident_assets.backends.postgres_config import state_location
from trident_assets.backends.replica import Replica

__all__ = ["StoreConfig"]


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

"""A SQLite event log for Dagster that keeps its SQLAlchemy engines: cheaper event writes.

Dagster's :class:`~dagster._core.storage.event_log.sqlite.SqliteEventLogStorage` creates a
SQLAlchemy engine for every statement batch it runs (every event written, every query) and
disposes it afterwards. A batch run writes about 56 events (run start, the planned and
written materializations and check evaluations, step outputs, logs, run end), several
of them to two databases (the run's and the asset index), so building engines is most of
what a run's event writes cost. :class:`ReusingSqliteEventLogStorage` keeps one engine per
database (the asset index and the last :data:`KEPT_RUN_SHARDS` runs' databases); each use
still opens its own SQLite connection (the engines use ``NullPool``, as Dagster's do) with
the same transactions, busy timeout and locking, so what is stored and how processes share
the files does not change.

Use it in ``$DAGSTER_HOME/dagster.yaml`` (``base_dir``: where Dagster keeps run event logs,
``<DAGSTER_HOME>/history/runs`` by default)::

    event_log_storage:
      module: trident_assets.dagster.event_log
      class: ReusingSqliteEventLogStorage
      config:
        base_dir: /path/to/dagster_home/history/runs
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from dagster._serdes import ConfigurableClassData
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

__all__ = ["KEPT_RUN_SHARDS", "ReusingSqliteEventLogStorage"]

KEPT_RUN_SHARDS = 8
"""Engines kept for the most recently used databases (run shards and the asset index)."""


class ReusingSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log, one SQLAlchemy engine per database instead of per use."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        """As :class:`SqliteEventLogStorage` (``base_dir``: the run event logs' directory)."""
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def from_config_value(  # type: ignore[override]
        cls, inst_data: ConfigurableClassData | None, config_value: Any
    ) -> ReusingSqliteEventLogStorage:
        """Build from ``dagster.yaml``'s ``config`` (``base_dir``)."""
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> Engine:
        """The engine of ``shard``'s database, created (and the database set up) once."""
        engine = self._engines.get(shard)
        if engine is None:
            engine = create_engine(
                self.conn_string_for_shard(shard),
                poolclass=NullPool,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
            )
            self._engines[shard] = engine
            while len(self._engines) > KEPT_RUN_SHARDS:
                _, old = self._engines.popitem(last=False)
                old.dispose()
        else:
            self._engines.move_to_end(shard)
        if shard not in self._initialized_dbs:  # emptied by a wipe, as Dagster's storage does
            self._initdb(engine)
            self._initialized_dbs.add(shard)
        return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        """A connection to ``shard``'s database in a transaction (as Dagster's)."""
        with self._db_lock:
            engine = self._engine(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def delete_events(self, run_id: str) -> None:
        """Delete a run's events; its database's engine is dropped with it."""
        with self._db_lock:
            engine = self._engines.pop(run_id, None)
            if engine is not None:
                engine.dispose()
        super().delete_events(run_id)

    def dispose(self) -> None:
        """Dispose of every kept engine, then as Dagster's storage."""
        with self._db_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()
        super().dispose()

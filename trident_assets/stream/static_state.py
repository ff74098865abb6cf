"""Static states: data a topology reads with ``state_query`` but never writes.

Trident's ``newStaticState`` (e.g. TridentReach's follower database). A static state is a
table in the state store, keyed by ``key_columns`` with one ``value_column``:

* :class:`StaticTable`: a table already in the state store (kept up to date by someone else);
  queries see its contents as of the batch.
* :class:`StaticFile`: a Parquet or CSV file loaded once into the store (on the first batch
  that queries it; drop the table to reload).

``MapGet`` looks keys up with ONE SQL join per batch; a custom ``QueryFunction`` gets a
:class:`~trident_assets.stream.graph.PersistedState` (store and table) in its single
``batch_retrieve`` call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trident_assets.errors import ConfigError, StateLayoutError
from trident_assets.names import validate_identifier
from trident_assets.stream.fields import Fields, as_fields
from trident_assets.stream.graph import Node, StateSpec
from trident_assets.stream.state_kinds import STATE_KIND, STATIC_STATE
from trident_assets.stream.states import TridentState

if TYPE_CHECKING:
    from trident_assets.stream.streams import Stream

__all__ = ["StaticFile", "StaticSource", "StaticState", "StaticTable"]


class StaticSource(ABC):
    """Where a static state's rows come from: key columns and one value column."""

    def __init__(self, key_columns: Fields, value_column: str) -> None:
        """Validate the column names."""
        self.key_columns = as_fields(key_columns, "static state key columns")
        if not self.key_columns:
            msg = "a static state needs at least one key column"
            raise ConfigError(msg)
        self.value_column = validate_identifier(value_column, "static state value column")
        if value_column in self.key_columns:
            msg = f"value column {value_column!r} is also a key column {list(self.key_columns)}"
            raise ConfigError(msg)

    @abstractmethod
    def table_name(self, default: str) -> str:
        """The store table holding the rows (``default`` is ``<topology>__<state>``)."""

    @abstractmethod
    def ensure(self, store: Any, table: str) -> None:
        """Make ``table`` exist in ``store`` (load it if needed); check its columns."""

    def check_columns(self, store: Any, table: str) -> None:
        """Raise StateLayoutError unless ``table`` has the key and value columns."""
        if not store.has_table(table):
            msg = f"static state table {table!r} does not exist in the store"
            raise StateLayoutError(msg)
        have = store.fetch_arrow(f'SELECT * FROM "{table}" LIMIT 0').column_names
        for name in (*self.key_columns, self.value_column):
            if name not in have:
                msg = f"static state table {table!r} has no column {name!r}; it has {have}"
                raise StateLayoutError(msg)


class StaticTable(StaticSource):
    """An existing table of the state store, read as it is when each batch runs."""

    def __init__(self, table: str, key_columns: Fields, value_column: str) -> None:
        """Read ``table`` (keys ``key_columns``, values ``value_column``)."""
        super().__init__(key_columns, value_column)
        self.table = validate_identifier(table, "static state table")

    def table_name(self, default: str) -> str:
        """The given table."""
        return self.table

    def ensure(self, store: Any, table: str) -> None:
        """The table must exist with the columns."""
        self.check_columns(store, table)


class StaticFile(StaticSource):
    """A Parquet or CSV file loaded once into a store table (one statement)."""

    def __init__(
        self,
        path: str | Path,
        key_columns: Fields,
        value_column: str,
        *,
        file_format: str | None = None,
    ) -> None:
        """Load ``path`` (format from its suffix unless ``file_format`` is parquet or csv)."""
        super().__init__(key_columns, value_column)
        self.path = Path(path)
        fmt = (file_format or self.path.suffix.lstrip(".")).lower()
        if fmt not in ("parquet", "csv"):
            msg = f"StaticFile reads parquet or csv files, not {fmt!r} ({self.path})"
            raise ConfigError(msg)
        self.file_format = fmt

    def table_name(self, default: str) -> str:
        """``<topology>__<state>``."""
        return default

    def ensure(self, store: Any, table: str) -> None:
        """Create the table from the file unless it exists (loaded once).

        Raises:
            StateLayoutError: the file does not exist or lacks the columns.
        """
        if not store.has_table(table):
            if not self.path.is_file():
                msg = f"static state file {str(self.path)!r} does not exist"
                raise StateLayoutError(msg)
            if store.dialect.is_postgres:  # the server cannot read the driver's files
                with store.staged(self._read_arrow()) as name:
                    store.execute(f'CREATE TABLE "{table}" AS SELECT * FROM "{name}"')
            else:
                reader = "read_parquet" if self.file_format == "parquet" else "read_csv_auto"
                store.execute(
                    f'CREATE TABLE "{table}" AS SELECT * FROM {reader}(?)', [str(self.path)]
                )
        self.check_columns(store, table)

    def _read_arrow(self) -> Any:
        """The file as an Arrow table (for a store that cannot read it itself)."""
        if self.file_format == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(self.path)
        import pyarrow.csv as pcsv

        return pcsv.read_csv(self.path)


class StaticState(TridentState):
    """A state read by queries and written by nothing in the topology."""

    def __init__(self, topology: Any, name: str, source: StaticSource) -> None:
        """Created by ``TridentTopology.new_static_state``."""
        spec = StateSpec(name)
        fields = (*source.key_columns, source.value_column)
        node = Node(STATIC_STATE, fields, (), {"source": source, STATE_KIND: STATIC_STATE})
        super().__init__(topology, spec, node, source.key_columns, source.value_column)
        self.source = source

    @property
    def table(self) -> str:
        """The store table holding the rows."""
        return self.source.table_name(f"{self.topology.name}__{self.spec.name}")

    def new_values_stream(self) -> Stream:
        """Static states have no writer, hence no new values.

        Raises:
            ConfigError: always.
        """
        msg = f"static state {self.spec.name!r} is not written by the topology: no new values"
        raise ConfigError(msg)

"""trident_assets: Storm Trident's exactly-once state, as Dagster assets on PySpark.

The names below are the public API. The pure core (values, map states, aggregators, commit
protocol) imports nothing heavy; DuckDB-backed classes are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from trident_assets.backends.memory import MemoryBackingMap, MemoryStore
from trident_assets.core.aggregators import (
    CombinerAggregator,
    CombinerValueUpdater,
    Count,
    Max,
    Min,
    ReducerAggregator,
    ReducerValueUpdater,
    Sum,
)
from trident_assets.core.caching import GLOBAL_KEY, CachedMap, ChunkedMap, SnapshottableMap
from trident_assets.core.commit import CommitResult, commit_batch
from trident_assets.core.maps import NonTransactionalMap, OpaqueMap, TransactionalMap
from trident_assets.core.protocols import (
    BackingMap,
    MapState,
    ReadOnlyMapState,
    Snapshottable,
    State,
)
from trident_assets.core.serializers import (
    JSONNonTransactionalSerializer,
    JSONOpaqueSerializer,
    JSONTransactionalSerializer,
)
from trident_assets.core.values import OpaqueValue, StateType, TransactionalValue
from trident_assets.errors import (
    AggregationError,
    BatchUnavailableError,
    ConfigError,
    FieldNotFoundError,
    OutOfOrderCommitError,
    StaleTxidError,
    StateLayoutError,
    StoreLockedError,
    TridentError,
    UserCodeError,
)

_LAZY = {
    "DuckDBBackingMap": "trident_assets.backends.duckdb_store",
    "DuckDBStore": "trident_assets.backends.duckdb_store",
    "FirstN": "trident_assets.stream.assemblies",
    "JoinType": "trident_assets.stream.batch_join",
    "PandasFlatMap": "trident_assets.stream.operations",
    "PandasMap": "trident_assets.stream.operations",
    "PyFlatMap": "trident_assets.stream.operations",
    "PyMap": "trident_assets.stream.operations",
    "SqlFlatMap": "trident_assets.stream.operations",
    "SqlMap": "trident_assets.stream.operations",
    "StaticFile": "trident_assets.stream.static_state",
    "StaticTable": "trident_assets.stream.static_state",
}

__all__ = [
    "GLOBAL_KEY",
    "AggregationError",
    "BackingMap",
    "BatchUnavailableError",
    "CachedMap",
    "ChunkedMap",
    "CombinerAggregator",
    "CombinerValueUpdater",
    "CommitResult",
    "ConfigError",
    "Count",
    "DuckDBBackingMap",
    "DuckDBStore",
    "FieldNotFoundError",
    "FirstN",
    "JSONNonTransactionalSerializer",
    "JSONOpaqueSerializer",
    "JSONTransactionalSerializer",
    "JoinType",
    "MapState",
    "Max",
    "MemoryBackingMap",
    "MemoryStore",
    "Min",
    "NonTransactionalMap",
    "OpaqueMap",
    "OpaqueValue",
    "OutOfOrderCommitError",
    "PandasFlatMap",
    "PandasMap",
    "PyFlatMap",
    "PyMap",
    "ReadOnlyMapState",
    "ReducerAggregator",
    "ReducerValueUpdater",
    "Snapshottable",
    "SnapshottableMap",
    "SqlFlatMap",
    "SqlMap",
    "StaleTxidError",
    "State",
    "StateLayoutError",
    "StateType",
    "StaticFile",
    "StaticTable",
    "StoreLockedError",
    "Sum",
    "TransactionalMap",
    "TransactionalValue",
    "TridentError",
    "UserCodeError",
    "commit_batch",
]


def __getattr__(name: str) -> Any:
    """Import the heavier classes on first access."""
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'trident_assets' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module), name)

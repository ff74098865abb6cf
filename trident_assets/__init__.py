"""trident_assets: Storm Trident's exactly-once state, as Dagster assets on PySpark.

One import gives everything a topology's author writes: ``import trident_assets as ta``, then
``ta.TridentTopology``, ``ta.LogSpout``, ``ta.StringScheme``, ``ta.Split``, ``ta.Count``,
``ta.StateSpec``, ``ta.TopologyRunner``, ``ta.build_spark_session``, ``ta.trident_definitions``,
``ta.TridentResource`` ... (:data:`__all__` lists them). The pure core (values, map states,
aggregators, commit protocol) is imported at once; everything that needs Spark, Dagster,
DuckDB or Kafka is imported on first use, so ``import trident_assets`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trident_assets import errors
from trident_assets.backends.memory import MemoryStore
from trident_assets.core.aggregators import (
    CombinerAggregator,
    CombinerValueUpdater,
    Count,
    DistinctCount,
    Max,
    Min,
    ReducerAggregator,
    ReducerValueUpdater,
    Sum,
)
from trident_assets.core.caching import CachedMap, SnapshottableMap
from trident_assets.core.event_windows import EventWindow
from trident_assets.core.maps import NonTransactionalMap, OpaqueMap, TransactionalMap
from trident_assets.core.protocols import (
    BackingMap,
    MapState,
    ReadOnlyMapState,
    Snapshottable,
    State,
)
from trident_assets.core.trident_windows import (
    SlidingCountWindow,
    SlidingDurationWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    WindowConfig,
)
from trident_assets.core.values import OpaqueValue, StateType, TransactionalValue
from trident_assets.errors import *  # noqa: F403 (every error class: errors.__all__)

if TYPE_CHECKING:  # what IDEs and type checkers see of the lazy names
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.backends.window_store import read_finals, read_open
    from trident_assets.core.retry import ExponentialBackoff
    from trident_assets.dagster.component import TopologyComponent
    from trident_assets.dagster.factory import trident_definitions
    from trident_assets.dagster.io_manager import TridentIOManager
    from trident_assets.dagster.resources import TridentResource
    from trident_assets.kafka.sink import (
        FieldTopicSelector,
        FixedTopicSelector,
        KafkaUpdater,
        SinkMode,
    )
    from trident_assets.kafka.spout import KafkaSpout
    from trident_assets.log.store import PartitionedLog
    from trident_assets.runtime.outcomes import BatchOutcome, StateOutcome
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.spark.file_schemes import CsvScheme, ParquetScheme
    from trident_assets.spark.rebuild import rebuild_state
    from trident_assets.spark.schemes import (
        JsonScheme,
        KeyValueScheme,
        RawScheme,
        Scheme,
        StringScheme,
    )
    from trident_assets.spark.session import build_spark_session
    from trident_assets.spouts.config import SpoutConfig, SpoutKind, StartPosition
    from trident_assets.spouts.file_spout import FileSpout
    from trident_assets.spouts.log_spout import LogSpout
    from trident_assets.stream.assemblies import Assembly, FirstN
    from trident_assets.stream.batch_join import JoinType
    from trident_assets.stream.kv_specs import MemcachedState, RedisClusterState
    from trident_assets.stream.lakehouse_specs import DeltaTable, IcebergTable
    from trident_assets.stream.operations import (
        Filter,
        FilterNull,
        FlatMapFunction,
        Function,
        MapFunction,
        PandasFlatMap,
        PandasMap,
        PyFilter,
        PyFlatMap,
        PyFunction,
        PyMap,
        Split,
        SqlFlatMap,
        SqlMap,
    )
    from trident_assets.stream.queries import MapGet, QueryFunction, SnapshotGet, TupleCollectionGet
    from trident_assets.stream.static_state import StaticFile, StaticTable
    from trident_assets.stream.topology import (
        ExactlyOnceWarning,
        GroupedStream,
        StateSpec,
        StateUpdater,
        Stream,
        TridentState,
        TridentTopology,
    )

_LAZY = {
    name: f"trident_assets.{module}"
    for module, names in {
        "backends.duckdb_store": "DuckDBStore",
        "backends.window_store": "read_finals read_open",
        "core.retry": "ExponentialBackoff",
        "dagster.component": "TopologyComponent",
        "dagster.factory": "trident_definitions",
        "dagster.io_manager": "TridentIOManager",
        "dagster.resources": "TridentResource",
        "kafka.sink": "FieldTopicSelector FixedTopicSelector KafkaUpdater SinkMode",
        "kafka.spout": "KafkaSpout",
        "log.store": "PartitionedLog",
        "runtime.outcomes": "BatchOutcome StateOutcome",
        "spark.executor": "TopologyRunner",
        "spark.file_schemes": "CsvScheme ParquetScheme",
        "spark.rebuild": "rebuild_state",
        "spark.schemes": "JsonScheme KeyValueScheme RawScheme Scheme StringScheme",
        "spark.session": "build_spark_session",
        "spouts.config": "SpoutConfig SpoutKind StartPosition",
        "spouts.file_spout": "FileSpout",
        "spouts.log_spout": "LogSpout",
        "stream.assemblies": "Assembly FirstN",
        "stream.batch_join": "JoinType",
        "stream.kv_specs": "MemcachedState RedisClusterState",
        "stream.lakehouse_specs": "DeltaTable IcebergTable",
        "stream.operations": (
            "Filter FilterNull FlatMapFunction Function MapFunction PandasFlatMap PandasMap "
            "PyFilter PyFlatMap PyFunction PyMap Split SqlFlatMap SqlMap"
        ),
        "stream.queries": "MapGet QueryFunction SnapshotGet TupleCollectionGet",
        "stream.static_state": "StaticFile StaticTable",
        "stream.topology": (
            "ExactlyOnceWarning GroupedStream StateSpec StateUpdater Stream TridentState "
            "TridentTopology"
        ),
    }.items()
    for name in names.split()
}
"""Names imported on first access (Spark, Dagster, DuckDB stay out of ``import trident_assets``)."""

__all__ = [
    # the topology API
    "TridentTopology",
    "Stream",
    "GroupedStream",
    "TridentState",
    "StateSpec",
    "RedisClusterState",
    "MemcachedState",
    "StateUpdater",
    "ExactlyOnceWarning",
    "JoinType",
    "StaticFile",
    "StaticTable",
    "EventWindow",
    "WindowConfig",
    "TumblingCountWindow",
    "SlidingCountWindow",
    "TumblingDurationWindow",
    "SlidingDurationWindow",
    "TopologyRunner",
    "build_spark_session",
    "rebuild_state",
    "BatchOutcome",
    "StateOutcome",
    "ExponentialBackoff",
    # functions, filters, queries and aggregators
    "Function",
    "MapFunction",
    "FlatMapFunction",
    "Filter",
    "FilterNull",
    "Split",
    "PyFunction",
    "PyMap",
    "PyFlatMap",
    "PyFilter",
    "PandasMap",
    "PandasFlatMap",
    "SqlMap",
    "SqlFlatMap",
    "Assembly",
    "FirstN",
    "QueryFunction",
    "MapGet",
    "SnapshotGet",
    "TupleCollectionGet",
    "CombinerAggregator",
    "ReducerAggregator",
    "CombinerValueUpdater",
    "ReducerValueUpdater",
    "Count",
    "DistinctCount",
    "Sum",
    "Min",
    "Max",
    # spouts, schemes and sinks
    "DeltaTable",
    "IcebergTable",
    "LogSpout",
    "KafkaSpout",
    "FileSpout",
    "PartitionedLog",
    "SpoutConfig",
    "SpoutKind",
    "StartPosition",
    "Scheme",
    "RawScheme",
    "StringScheme",
    "JsonScheme",
    "CsvScheme",
    "ParquetScheme",
    "KeyValueScheme",
    "KafkaUpdater",
    "SinkMode",
    "FixedTopicSelector",
    "FieldTopicSelector",
    # stores, state values and map states (Trident's state package)
    "DuckDBStore",
    "MemoryStore",
    "read_finals",
    "read_open",
    "StateType",
    "OpaqueValue",
    "TransactionalValue",
    "State",
    "MapState",
    "ReadOnlyMapState",
    "Snapshottable",
    "BackingMap",
    "OpaqueMap",
    "TransactionalMap",
    "NonTransactionalMap",
    "CachedMap",
    "SnapshottableMap",
    # Dagster
    "trident_definitions",
    "TridentResource",
    "TopologyComponent",
    "TridentIOManager",
    # errors
    *errors.__all__,
]


_MOVED = {
    "MemoryBackingMap": ("trident_assets.backends.memory", "ta.MemoryStore().map(name)"),
    "DuckDBBackingMap": ("trident_assets.backends.duckdb_store", "ta.DuckDBStore(path).map(table)"),
    "GLOBAL_KEY": ("trident_assets.core.caching", None),
    "ChunkedMap": ("trident_assets.core.caching", None),
    "CommitResult": ("trident_assets.core.commit", None),
    "commit_batch": ("trident_assets.core.commit", "ta.TopologyRunner.run_batches"),
    "JSONOpaqueSerializer": ("trident_assets.core.serializers", None),
    "JSONTransactionalSerializer": ("trident_assets.core.serializers", None),
    "JSONNonTransactionalSerializer": ("trident_assets.core.serializers", None),
}
"""Names ``import trident_assets as ta`` no longer has: their module, and what to use instead."""


def __getattr__(name: str) -> Any:
    """Import the heavier names on first access (then cached in the module).

    Raises:
        AttributeError: no such name; for a name that left the package (:data:`_MOVED`), the
            message says where it is now.
    """
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'trident_assets' has no attribute {name!r}"
        if name in _MOVED:
            where, instead = _MOVED[name]
            msg += f": it moved, `from {where} import {name}`"
            msg += f" (internal; or use {instead})" if instead else " (internal)"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names (lazy ones included), for ``dir()`` and completion."""
    return sorted(set(globals()) | set(__all__))

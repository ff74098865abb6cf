"""The txid-aware IO manager: states, outputs and new values as of a txid; user state assets.

* **Loading** (``load_input``): a downstream asset that declares a trident asset as an input
  gets, for a state, a table of the group fields and the value field (one row for a global
  state) **as of the input's txid** when the downstream asset is partitioned by the same
  txids, else the **latest committed** state; for an output, new-values or partials asset,
  the rows of that txid (of every txid of a range, with a ``txid`` column). Reads go to the
  store's read replica (:mod:`trident_assets.backends.replica`): Parquet files, no lock, so a
  reader never stalls a running batch and never sees half of one. The type follows the
  input's annotation: ``pandas.DataFrame`` (default), ``pyarrow.Table``, a PySpark
  ``DataFrame``, or a ``polars.DataFrame`` when polars is installed.
* **Persisting** (``handle_output``): a user's asset partitioned by txids returns partial
  aggregates (key fields + value, as pandas, Arrow, PySpark or polars) and the IO manager
  applies them to its named state under the partition's txid, with the declared state type
  and combiner (:func:`state_asset_metadata`): strict txid order, committed txids final
  (reported as ``already_committed``), one transaction of the runtime's one commit, then
  published to the replica (:class:`~trident_assets.runtime.state_asset.StateAsset`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg
import pyarrow as pa
from pydantic import ConfigDict, Field

from trident_assets.backends.replica import DEFAULT_KEEP_TXIDS
from trident_assets.core.values import StateType
from trident_assets.dagster.partitions import parse_txid
from trident_assets.dagster.resources import StoreConfig
from trident_assets.errors import ConfigError
from trident_assets.names import (
    MAP_LOG_PREFIX,
    MAX_IDENTIFIER_LENGTH,
    check_state_columns,
    validate_identifier,
)
from trident_assets.spouts.config import validate_name
from trident_assets.stream.fields import as_fields

__all__ = [
    "KIND_KV_STATE",
    "KIND_ROWS",
    "KIND_STATE",
    "TridentIOManager",
    "as_arrow",
    "state_asset_metadata",
]

KIND_STATE = "state"
"""``trident/kind`` of a map state: loaded as of a txid."""
KIND_KV_STATE = "kv_state"
"""``trident/kind`` of a state in a Redis Cluster or memcached: its latest values only."""
KIND_ROWS = "rows"
"""``trident/kind`` of per-txid rows (outputs, new values, partials)."""
GLOBAL_KEY_COLUMN = "key"
"""The internal key column of a global (ungrouped) state, dropped when loading."""


def state_asset_metadata(
    state: str,
    *,
    key_fields: Sequence[str],
    value_field: str,
    combiner: str = "sum",
    state_type: str | StateType = StateType.OPAQUE,
) -> dict[str, Any]:
    """Asset metadata that makes :class:`TridentIOManager` persist an asset as a state.

    Args:
        state: the state's name (its table and commit scope; an identifier).
        key_fields: the columns of the asset's output that key the state.
        value_field: the column holding each key's partial for the txid.
        combiner: ``count``/``sum``/``min``/``max`` (one SQL statement per batch) or a
            ``module:Class`` import path of a CombinerAggregator.
        state_type: ``opaque`` (default), ``transactional`` or ``non_transactional``.

    Raises:
        ConfigError: ``state`` is not a valid state name (no ``__``, no leading or trailing
            ``_``: the name is its table and commit scope), a field name is invalid or
            reserved (``txid``, ``curr``, ``prev``, ``_trident...``).

    Example:
        >>> meta = state_asset_metadata("clicks", key_fields=["page"], value_field="n")
        >>> meta["trident/state"]
        'clicks'
    """
    validate_name("state", state)
    if len(MAP_LOG_PREFIX + state) > MAX_IDENTIFIER_LENGTH:
        msg = (
            f"state asset {state!r} ({len(state)} characters) leaves no room for its store "
            f"table {MAP_LOG_PREFIX + state!r}: use at most "
            f"{MAX_IDENTIFIER_LENGTH - len(MAP_LOG_PREFIX)} characters"
        )
        raise ConfigError(msg)
    keys = as_fields(key_fields, f"state {state!r} key_fields")
    value = validate_identifier(value_field, f"state {state!r} value_field")
    check_state_columns(state, "key field", keys)
    check_state_columns(state, "value field", (value,))
    kind = StateType(state_type) if isinstance(state_type, str) else state_type
    return {
        "trident/kind": KIND_STATE,
        "trident/state": state,
        "trident/table": state,
        "trident/scope": state,
        "trident/key_fields": list(keys),
        "trident/value_field": value,
        "trident/combiner": combiner,
        "trident/state_type": kind.value,
    }


def as_arrow(obj: Any, what: str) -> pa.Table:
    """``obj`` (pyarrow, pandas, PySpark or polars table) as a pyarrow Table.

    Raises:
        ConfigError: another type.
    """
    if isinstance(obj, pa.Table):
        return obj
    module = type(obj).__module__
    if module.startswith("pandas"):
        return pa.Table.from_pandas(obj, preserve_index=False)
    if module.startswith("pyspark.sql"):
        return obj.toArrow()
    if module.startswith("polars"):
        return obj.to_arrow()
    msg = (
        f"{what} returned a {type(obj).__name__}; return a pandas DataFrame, a pyarrow Table, "
        "a PySpark DataFrame or a polars DataFrame of key fields and a value"
    )
    raise ConfigError(msg)


def _read_kv_state(meta: dict[str, Any], txids: list[int]) -> pa.Table:
    """A key-value state's latest values (a partitioned input, as of a txid, is refused).

    Raises:
        KeyValueStoreError: a read as of a txid, or a store that cannot list keys (memcached).
    """
    from trident_assets.backends.kv_backing import read_latest, refuse_as_of
    from trident_assets.backends.kv_target import KeyValueTarget

    target = KeyValueTarget.from_json(str(meta["trident/kv"]))
    if txids:
        raise refuse_as_of(target, max(txids))
    return read_latest(target, list(meta["trident/key_fields"]), str(meta["trident/value_field"]))


def _convert(table: pa.Table, wanted: Any) -> Any:
    """``table`` as the type a downstream input is annotated with."""
    if wanted is pa.Table:
        return table
    module = getattr(wanted, "__module__", "") or ""
    if module.startswith("pyspark.sql"):
        from pyspark.sql import SparkSession

        from trident_assets.spark.arrow_transfer import to_spark

        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        return to_spark(spark, table)  # sliced under Spark Connect (large states)
    if module.startswith("polars"):
        import polars as pl

        return pl.from_arrow(table)
    return table.to_pandas()


class TridentIOManager(dg.ConfigurableIOManager, StoreConfig):
    """Txid-aware state for Dagster assets: loads trident states as of a txid, persists yours.

    Point it at the same ``home`` as the topologies' ``TridentResource``
    (:func:`~trident_assets.dagster.factory.trident_definitions` does, under the resource key
    ``trident_io_manager``).
    """

    model_config = ConfigDict(extra="forbid")  # a misspelt setting fails, naming it

    keep_txids: int = Field(
        default=DEFAULT_KEEP_TXIDS,
        ge=1,
        description="How many recent txids stay readable as of a txid after compaction.",
    )

    # -- loading -------------------------------------------------------------------------------

    def load_input(self, context: dg.InputContext) -> Any:
        """The upstream trident asset as of the input's txid (partitioned) or the latest."""
        upstream = context.upstream_output
        meta = dict(upstream.definition_metadata or {}) if upstream is not None else {}
        kind = meta.get("trident/kind")
        key = context.asset_key.to_user_string() if context.has_asset_key else "?"
        if kind == "window_finals":  # window finals: the rows starting in the time range
            from trident_assets.dagster.finals_reader import read_published_finals

            window = context.asset_partitions_time_window
            table = read_published_finals(self.replica(), meta, window)
        elif kind == KIND_KV_STATE:  # a key-value state: the latest values, from its servers
            table = _read_kv_state(meta, self._input_txids(context))
        elif kind == KIND_STATE:
            txids = self._input_txids(context)
            table = self._read_state(meta, max(txids) if txids else None)
        elif kind == KIND_ROWS:
            table = self._read_rows(meta, self._input_txids(context))
        else:
            msg = (
                f"asset {key} is not a trident state, output or new-values asset; load it "
                "with its own IO manager"
            )
            raise ConfigError(msg)
        return _convert(table, context.dagster_type.typing_type)

    def _input_txids(self, context: dg.InputContext) -> list[int]:
        """The txids the input reads: the downstream run's partition, else none (the latest).

        An unpartitioned downstream asset maps to every upstream partition (Dagster's
        default); it reads the latest committed state instead.
        """
        if not context.has_asset_partitions or not context.has_partition_key:
            return []
        return sorted(parse_txid(k) for k in context.asset_partition_keys)

    def _read_state(self, meta: dict[str, Any], as_of: int | None) -> pa.Table:
        value = str(meta["trident/value_field"])
        table = self.replica().read_map(
            str(meta["trident/table"]),
            scope=str(meta["trident/scope"]),
            as_of=as_of,
            value_name=value,
        )
        if meta.get("trident/global") and GLOBAL_KEY_COLUMN in table.column_names:
            table = table.drop_columns([GLOBAL_KEY_COLUMN])
        return table

    def _read_rows(self, meta: dict[str, Any], txids: list[int]) -> pa.Table:
        table = str(meta["trident/table"])
        scope = str(meta["trident/scope"])
        if not txids:
            latest = self.replica().latest(scope)
            txids = [] if latest is None else [latest]
        parts = []
        for txid in txids:
            rows = self.replica().read_rows(table, txid)
            if rows is None:
                msg = (
                    f"{table}: no rows of txid {txid} are published (not committed yet, or "
                    f"older than the last {self.keep_txids} txids kept)"
                )
                raise ConfigError(msg)
            if len(txids) > 1:
                rows = rows.add_column(0, "txid", pa.array([txid] * rows.num_rows, pa.int64()))
            parts.append(rows)
        if not parts:
            return pa.table({})
        return pa.concat_tables(parts, promote_options="default")

    # -- persisting ------------------------------------------------------------------------------

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        """Apply a user state asset's partials under its partition's txid, exactly once."""
        if obj is None:
            return
        meta = dict(context.definition_metadata or {})
        key = context.asset_key.to_user_string()
        if meta.get("trident/kind") != KIND_STATE or "trident/combiner" not in meta:
            msg = (
                f"asset {key} uses the trident IO manager but declares no state: add "
                "metadata=state_asset_metadata(...) to persist it as a trident state"
            )
            raise ConfigError(msg)
        if not context.has_asset_partitions:
            msg = (
                f"state asset {key} must be partitioned by txids (one partition = one txid), "
                "e.g. partitions_def=txid_partitions('my_topology')"
            )
            raise ConfigError(msg)
        keys = context.asset_partition_keys
        if len(keys) != 1:
            msg = f"state asset {key}: materialize one txid per run, got partitions {keys}"
            raise ConfigError(msg)
        txid = parse_txid(keys[0])
        context.add_output_metadata(self.persist(meta, as_arrow(obj, f"state asset {key}"), txid))

    def persist(self, meta: dict[str, Any], partials: pa.Table, txid: int) -> dict[str, Any]:
        """Commit ``partials`` to the state ``meta`` declares under ``txid``; publish it.

        Returns the materialization metadata (txid, already_committed, keys, state size).

        Raises:
            ConfigError: ``txid`` is not an integer >= 1, or the batch lacks a column.
            StateContractError: a topology of the store has the state's name.
        """
        from trident_assets.backends.state_batches import StateTarget, combiner, state_total
        from trident_assets.backends.state_contracts import check_state_asset_scope
        from trident_assets.backends.state_store import open_state_store
        from trident_assets.runtime.commit import commit
        from trident_assets.runtime.outcomes import Prepared, StateOutcome
        from trident_assets.runtime.state_asset import AssetBatch, StateAsset

        target = StateTarget(
            table=str(meta["trident/table"]),
            key_columns=tuple(meta["trident/key_fields"]),
            value_column=str(meta["trident/value_field"]),
            state_type=StateType(meta.get("trident/state_type", StateType.OPAQUE.value)),
            agg=combiner(str(meta["trident/combiner"])),
        )
        names = partials.schema.names
        missing = [c for c in (*target.key_columns, target.value_column) if c not in names]
        if missing:
            msg = (
                f"state {target.table!r}: the batch lacks columns {missing}; it has "
                f"{names} (expected key columns {list(target.key_columns)} and "
                f"value column {target.value_column!r})"
            )
            raise ConfigError(msg)
        scope, prepared = str(meta["trident/scope"]), Prepared({target.table: partials}, {}, {}, {})
        with open_state_store(self.state_location) as store:
            check_state_asset_scope(store, scope)
            asset = StateAsset.of(store, scope, target, self.replica(), self.keep_txids)
            outcome = commit(asset, txid, {}, prepared, AssetBatch(store, txid))
            table = target.table  # committed before: no key counted, the state as it is
            done = outcome.states.get(table) or StateOutcome(
                table, table, 0, 0, 0, store.size(table), state_total(store, table)
            )
        meta: dict[str, Any] = {
            "txid": txid,
            "already_committed": not outcome.applied,
            "keys_in": done.keys_in,
            "keys_updated": done.keys_updated,
            "state_size": done.size,
        }
        if done.total is not None:
            meta["total"] = done.total
        return meta

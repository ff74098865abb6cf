"""The exactly-once check's verified checkpoint of a state, kept in the state store.

Table ``_trident_verified``: one row per (topology, state) with the txid the state was last
verified through, the contracts of the topology's states (JSON) and the quarantine's held
txids at that time, and how many incremental checks ran since the last full recompute. Table
``_trident_verified_<state table>``: the verified value of every key of the state as of that
txid (the key columns and ``value``). The exactly-once check writes both, in their own
transaction, only after it passed (:func:`write_checkpoint`); it compares the txids
committed since against them (:func:`trident_assets.spark.verify.verify_increment`), and
recomputes from scratch when the checkpoint does not describe the stored state any more.

The checkpoint lives in the state's store, so a backup and its restore carry it with the
state; dropping a state drops its checkpoint (:mod:`~trident_assets.backends.state_drop`).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import pyarrow as pa

from trident_assets.backends.map_layout import MapLayout, quote_ident
from trident_assets.backends.state_store import StateStore
from trident_assets.errors import ConfigError
from trident_assets.names import VERIFIED_TABLE, validate_identifier

__all__ = [
    "VerifiedCheckpoint",
    "forget_checkpoint",
    "read_checkpoint",
    "values_table",
    "write_checkpoint",
]

_VALUES_PREFIX = "_trident_verified_"


@dataclass(frozen=True, slots=True)
class VerifiedCheckpoint:
    """What the exactly-once check verified of one state, and against what."""

    topology: str
    state: str
    table: str
    through_txid: int
    """Every txid up to this one (from the contract's first txid) is in the verified values."""
    contract: str
    """The stored contracts of the topology's states (JSON) when it was verified."""
    held: str
    """The quarantine's held txids of the topology when it was verified (JSON)."""
    incremental_runs: int
    """Incremental checks passed since the last full recompute."""


def values_table(table: str) -> str:
    """The (unquoted) name of the table holding the verified values of state table ``table``."""
    return _VALUES_PREFIX + validate_identifier(table, "table")


def read_checkpoint(store: StateStore, topology: str, state: str) -> VerifiedCheckpoint | None:
    """The checkpoint of ``state`` (None: there is none); nothing is written."""
    if not store.has_table(VERIFIED_TABLE):
        return None
    rows = store.fetch_rows(
        f"SELECT table_name, through_txid, contract, held, incremental_runs FROM {VERIFIED_TABLE} "
        "WHERE topology = ? AND state = ?",
        [topology, state],
    )
    if not rows:
        return None
    table, through, contract, held, runs = rows[0]
    return VerifiedCheckpoint(
        topology, state, str(table), int(through), str(contract), str(held), int(runs)
    )


def forget_checkpoint(store: StateStore, topology: str, state: str) -> None:
    """Delete the checkpoint of ``state`` (the next check recomputes it from scratch)."""
    if store.has_table(VERIFIED_TABLE):
        store.execute(
            f"DELETE FROM {VERIFIED_TABLE} WHERE topology = ? AND state = ?", [topology, state]
        )


def write_checkpoint(
    store: StateStore,
    checkpoint: VerifiedCheckpoint,
    layout: MapLayout,
    values: pa.Table,
    *,
    replace: bool,
) -> None:
    """Record ``checkpoint`` with ``values`` (the key columns and ``value``) in one transaction.

    ``replace``: ``values`` are every key of the state (a full recompute): the stored values
    are replaced; else they are the keys verified since the previous checkpoint, upserted.

    Raises:
        ConfigError: ``values`` lacks a key column or ``value``, or the checkpoint is not of
            ``layout``'s table.
    """
    keys = list(layout.key_columns)
    if checkpoint.table != layout.table:
        msg = f"checkpoint of table {checkpoint.table!r} written for {layout.table!r}"
        raise ConfigError(msg)
    missing = [c for c in [*keys, "value"] if c not in values.column_names]
    if missing:
        msg = f"verified values of {layout.table!r} lack columns {missing}"
        raise ConfigError(msg)
    d = store.dialect
    name = quote_ident(values_table(layout.table))
    key_defs = ", ".join(
        f"{quote_ident(c)} {d.column_type(t)} NOT NULL"
        for c, t in zip(keys, layout.key_types, strict=True)
    )
    key_list = ", ".join(quote_ident(c) for c in keys)
    with store.transaction():
        store.execute(
            f"CREATE TABLE IF NOT EXISTS {VERIFIED_TABLE} (topology VARCHAR NOT NULL, "
            "state VARCHAR NOT NULL, table_name VARCHAR NOT NULL, through_txid BIGINT NOT NULL, "
            "contract VARCHAR NOT NULL, held VARCHAR NOT NULL, incremental_runs BIGINT NOT NULL, "
            "PRIMARY KEY (topology, state))"
        )
        store.execute(
            f"CREATE TABLE IF NOT EXISTS {name} ({key_defs}, "
            f"value {d.column_type(layout.value_type)}, PRIMARY KEY ({key_list}))"
        )
        if replace:
            store.execute(f"DELETE FROM {name}")
        with store.staged(values.select([*keys, "value"])) as staged:
            conflict = (
                "" if replace else f" ON CONFLICT ({key_list}) DO UPDATE SET value = excluded.value"
            )
            store.execute(f'INSERT INTO {name} SELECT {key_list}, value FROM "{staged}"{conflict}')
        store.execute(
            f"INSERT INTO {VERIFIED_TABLE} VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT "
            "(topology, state) DO UPDATE SET table_name = excluded.table_name, "
            "through_txid = excluded.through_txid, contract = excluded.contract, "
            "held = excluded.held, incremental_runs = excluded.incremental_runs",
            list(astuple(checkpoint)),  # the table's columns, in order
        )

"""Publishing committed txids to the read replica: which tables, described how.

Every committed txid is published to the replica (:mod:`trident_assets.backends.replica`)
right after its commit: the map states (keys and one value each), the per-txid row tables
(outputs, new values, grouped partials) and the append tables (event-window finals). Readers
(the TridentIOManager, the CLI) then see it without waiting for or blocking a batch.

The topology's lakehouse tables (``.publish(ta.DeltaTable(...))``) are published by the same
path, after the replica: :func:`table_publishers` binds them to the store and
:func:`publish_tables` brings each up to the commit marker, one table commit per txid
(:mod:`trident_assets.lakehouse`). The marker is the truth; a table commit is idempotent by
txid, so a crash anywhere after the marker moved is caught up at the next start or commit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from trident_assets.backends.replica import NEW_VALUES_KEPT
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.backends.replica import Replica
    from trident_assets.backends.state_store import StateStore
    from trident_assets.lakehouse.publisher import TablePublisher
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "appended_tables",
    "described",
    "publish",
    "publish_missing",
    "publish_tables",
    "table_publishers",
]


def published_tables(topology: TridentTopology) -> tuple[list[str], list[str]]:
    """The map states and the per-txid row tables the replica carries."""
    states = topology.states.values()
    maps = [s.table for s in states if state_kind(s.node).map_state]
    rows = [topology.output_table(name) for name in topology.outputs]
    for state in states:
        rows.append(state.new_values_table)
        if state_kind(state.node).map_state and state.group:
            rows.append(state.partials_table)
    return maps, rows


def appended_tables(topology: TridentTopology) -> dict[str, str]:
    """The append tables the replica carries (event-window finals), with their txid column."""
    found: dict[str, str] = {}
    for s in topology.states.values():
        found |= state_kind(s.node).appended_tables(s.table)
    return found


def described(topology: TridentTopology) -> dict[str, dict[str, Any]]:
    """Per map state: its value field and whether it is global (for the replica's readers)."""
    return {
        s.table: {"value_field": s.value_field, "global": not s.group}
        for s in topology.states.values()
        if s.value_field
    }


def publish(
    replica: Replica, store: StateStore, topology: TridentTopology, txid: int, keep_txids: int
) -> None:
    """Publish committed ``txid``, then fold what falls out of the replica's window."""
    maps, rows = published_tables(topology)
    appends = appended_tables(topology)
    replica.publish(store, topology.name, txid, maps, rows, described(topology), appends)
    fold = max(1, keep_txids // 2)
    for table in [*maps, *rows, *appends]:
        replica.compact(table, keep_txids, min_fold=fold)


def publish_missing(replica: Replica, store: StateStore, topology: TridentTopology) -> None:
    """Publish the txids committed but not published yet (a crash between the two)."""
    maps, rows = published_tables(topology)
    replica.publish_missing(
        store, topology.name, maps, rows, described(topology), appended_tables(topology)
    )


def table_publishers(topology: TridentTopology, store: StateStore) -> list[TablePublisher]:
    """The publisher of each lakehouse table the topology declares, bound to ``store``."""
    if not topology.publications:
        return []
    from trident_assets.lakehouse.publisher import open_publisher

    return [open_publisher(p, store, NEW_VALUES_KEPT) for p in topology.publications]


def publish_tables(
    publishers: list[TablePublisher],
    store: StateStore,
    fault: Callable[[str], None],
    building: Collection[str] = (),
) -> dict[str, list[int]]:
    """Bring each table up to the store's commit marker; per table asset, the txids published.

    ``building``: states still being built from the log (published once they join).

    Raises:
        PublishError: a table ahead of the store, or behind by txids it no longer keeps.
    """
    published = {}
    for publisher in publishers:
        pub = publisher.publication
        if pub.source == "state" and pub.name in building:
            continue
        published[pub.asset] = publisher.catch_up(store, fault)
    return published

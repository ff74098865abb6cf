"""LocationDB, the Trident State page's example: bulk updates and bulk queries of user locations.

``locations`` -> partition_persist(LocationUpdater): each batch of (userid, location) moves is
written with ONE set-based DuckDB statement (the last move of a user in the batch wins) and
the changed rows form the new values stream. ``location_queries`` -> state_query(QueryLocation):
the batch's user ids are looked up with ONE SQL statement, as Trident's ``bulkGetLocations``,
reading the locations committed before the batch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from trident_assets.errors import ConfigError
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.queries import QueryFunction
from trident_assets.stream.topology import (
    PersistedState,
    StateSpec,
    StateUpdater,
    TridentTopology,
)

__all__ = [
    "QUERY_TOPIC",
    "LocationUpdater",
    "QueryLocation",
    "build_location_db",
    "produce_seed",
]

LOCATION_TOPIC = "locations"
QUERY_TOPIC = "location_queries"
SEED_MOVES = ((1, "Paris"), (2, "Oslo"), (1, "Rome"), (3, "Lima"), (4, "Kyiv"))
"""Sample moves; round-robin puts both moves of user 1 in partition 0, Paris first."""
SEED_LOOKUPS = (1, 2, 5)

NEW_LOCATIONS = pa.schema([("userid", pa.int64()), ("location", pa.string())])
"""The new values stream: one row per user whose location a batch set."""


class LocationUpdater(StateUpdater):
    """Writes a batch of (userid, location) with one ``INSERT ... ON CONFLICT ... RETURNING``.

    Runs inside the batch's commit transaction, so a replayed committed txid never writes.
    A user moving twice in one batch ends at the later move (log order within a partition;
    across partitions the batch has no order, as in Trident). The SQL is what DuckDB and
    PostgreSQL both accept, through the store's portable methods (``execute``, ``staged``,
    ``fetch_arrow``), so the example runs on either state store.
    """

    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> Any:
        """Apply the batch; return the rows it set (userid, location)."""
        store.execute(
            f'CREATE TABLE IF NOT EXISTS "{table}" '
            "(userid BIGINT PRIMARY KEY, location VARCHAR, txid BIGINT)"
        )
        if batch.num_rows == 0:
            return NEW_LOCATIONS.empty_table()
        ordered = batch.append_column("__ord", pa.array(range(batch.num_rows), pa.int64()))
        with store.staged(ordered) as name:
            last_moves = (
                "SELECT userid, location FROM (SELECT userid, location, row_number() OVER "
                f'(PARTITION BY userid ORDER BY __ord DESC) AS rn FROM "{name}" '
                "WHERE userid IS NOT NULL) AS m WHERE rn = 1"
            )
            new = store.fetch_arrow(
                f'INSERT INTO "{table}" (userid, location, txid) SELECT userid, location, '
                f"CAST(? AS BIGINT) FROM ({last_moves}) AS l ON CONFLICT (userid) DO UPDATE "
                "SET location = excluded.location, txid = excluded.txid "
                "RETURNING userid, location",
                [txid],
            )
        return new.cast(NEW_LOCATIONS)


class QueryLocation(QueryFunction):
    """Looks up the location of every user id of a batch with ONE statement (bulkGetLocations)."""

    def batch_retrieve(self, state: Any, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """One location (or None) per input tuple, in order."""
        if not isinstance(state, PersistedState):
            msg = f"QueryLocation reads a partition_persist state (PersistedState), got {state!r}"
            raise ConfigError(msg)
        if not state.store.has_table(state.table):  # nothing committed yet
            return [None] * len(args)
        keys = pa.table(
            {
                "userid": pa.array([a[0] for a in args], pa.int64()),
                "__ord": pa.array(range(len(args)), pa.int64()),
            }
        )
        with state.store.staged(keys) as name:
            found = state.store.fetch_arrow(
                f'SELECT t.location FROM "{name}" AS k LEFT JOIN "{state.table}" AS t '
                "ON k.userid = t.userid ORDER BY k.__ord"
            )
        return found.column("location").to_pylist()


def build_location_db(
    name: str = "location_db",
    *,
    topic: str = LOCATION_TOPIC,
    query_topic: str = QUERY_TOPIC,
    kind: SpoutKind = SpoutKind.OPAQUE,
    max_batch_size: int | None = 50_000,
) -> TridentTopology:
    """Declare LocationDB over the embedded log's ``topic`` (moves) and ``query_topic``.

    ``topic`` carries ``{"userid": 1, "location": "Paris"}`` JSON records, ``query_topic``
    ``{"userid": 1}`` lookups. Outputs: ``user_locations`` (userid, location per lookup)
    and ``location_changes`` (the new values stream).
    """
    topo = TridentTopology(name)
    config = SpoutConfig(kind=kind, max_batch_size=max_batch_size)
    moves = JsonScheme({"userid": "bigint", "location": "string"})
    locations = topo.new_stream("locations", LogSpout(topic, moves, config)).partition_persist(
        StateSpec.opaque("locations"),
        ["userid", "location"],
        LocationUpdater(),
        ["userid", "location"],
    )
    locations.new_values_stream().as_output("location_changes")
    lookups = JsonScheme({"userid": "bigint"})
    (
        topo.new_stream("queries", LogSpout(query_topic, lookups, config))
        .state_query(locations, "userid", QueryLocation(), "location")
        .as_output("user_locations")
    )
    return topo


def produce_seed(log: Any, *, topic: str = LOCATION_TOPIC, query_topic: str = QUERY_TOPIC) -> None:
    """Create the topics if needed; append :data:`SEED_MOVES` and lookups of users 1, 2, 5.

    The moves topic gets 2 partitions, the lookups topic 1.
    """
    for name, partitions in ((topic, 2), (query_topic, 1)):
        if name not in log.topics():
            log.create_topic(name, partitions)
    moves = log.producer(topic, partitioner="round_robin")
    for userid, location in SEED_MOVES:
        moves.send(json.dumps({"userid": userid, "location": location}).encode())
    moves.flush()
    lookups = log.producer(query_topic)
    for userid in SEED_LOOKUPS:
        lookups.send(json.dumps({"userid": userid}).encode())
    lookups.flush()

"""The LocationDB example: bulk StateUpdater writes, one bulk batch_retrieve per batch, replays."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from trident_assets import ConfigError
from trident_assets.examples.location_db import (
    LocationUpdater,
    QueryLocation,
    build_location_db,
    produce_seed,
)
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.stream.topology import PersistedState


class CountingQuery(QueryLocation):
    """QueryLocation that records each batch_retrieve call."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[Any, ...]]] = []

    def batch_retrieve(self, state: Any, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        self.calls.append(sorted(args))
        return super().batch_retrieve(state, args)


class CountingUpdater(LocationUpdater):
    """LocationUpdater that counts the batches it applies."""

    def __init__(self) -> None:
        self.batches = 0

    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> Any:
        self.batches += 1
        return super().update_state(store, table, batch, txid)


def _instrument(topo: Any) -> tuple[CountingUpdater, CountingQuery]:
    updater, query = CountingUpdater(), CountingQuery()
    topo.states["locations"].node.args["updater"] = updater
    (stream,) = topo.queries
    stream.node.args["query"] = query
    return updater, query


def _out(store: Any, table: str, txid: int) -> list[tuple[Any, ...]]:
    rows = store.fetch_arrow(f'SELECT * FROM "{table}" WHERE txid = ?', [txid])
    rows = rows.drop_columns(["txid"])
    return sorted(zip(*(c.to_pylist() for c in rows.columns), strict=True), key=repr)


def _send(log: PartitionedLog, topic: str, rows: list[dict[str, Any]]) -> None:
    producer = log.producer(topic, partitioner="round_robin")
    for row in rows:
        producer.send(json.dumps(row).encode())
    producer.flush()


def test_location_db_updates_in_bulk_and_queries_committed_locations(
    spark: Any, tmp_path: Path, open_store: Any
) -> None:
    """The example on DuckDB and on PostgreSQL state (its SQL is what both accept)."""
    log = PartitionedLog(tmp_path / "log")
    produce_seed(log)  # moves 1 Paris, 2 Oslo, 1 Rome, 3 Lima, 4 Kyiv; lookups 1, 2, 5
    assert log.topics() == ["location_queries", "locations"]
    topo = build_location_db(max_batch_size=None)
    updater, query = _instrument(topo)
    store = open_store()
    runner = TopologyRunner(topo, spark, store, log)
    table = topo.states["locations"].table

    first = runner.run_batch(1)
    assert first.applied
    assert first.tuples_in == {"locations": 5, "queries": 3}
    # lookups read the state committed before the batch: nothing yet
    assert _out(store, "location_db__out_user_locations", 1) == [(1, None), (2, None), (5, None)]
    assert query.calls == [[(1,), (2,), (5,)]]
    assert updater.batches == 1
    # user 1 moved twice in the batch: Paris then Rome (same log partition, in order)
    state = store.fetch_rows(f'SELECT userid, location, txid FROM "{table}" ORDER BY 1')
    assert state == [(1, "Rome", 1), (2, "Oslo", 1), (3, "Lima", 1), (4, "Kyiv", 1)]
    assert _out(store, "location_db__out_location_changes", 1) == [
        (1, "Rome"),
        (2, "Oslo"),
        (3, "Lima"),
        (4, "Kyiv"),
    ]
    assert first.states["locations"].keys_in == 5

    _send(
        log, "locations", [{"userid": 2, "location": "Bergen"}, {"userid": 5, "location": "Quito"}]
    )
    _send(log, "location_queries", [{"userid": u} for u in (1, 2, 5, 2, 9)])
    second = runner.run_batch(2)
    assert second.applied
    assert _out(store, "location_db__out_user_locations", 2) == [
        (1, "Rome"),
        (2, "Oslo"),
        (2, "Oslo"),
        (5, None),
        (9, None),
    ]
    assert query.calls[1] == [(1,), (2,), (5,), (9,)]  # distinct ids, one call
    assert _out(store, "location_db__out_location_changes", 2) == [(2, "Bergen"), (5, "Quito")]
    state = store.fetch_rows(f'SELECT userid, location, txid FROM "{table}" ORDER BY 1')
    assert state == [
        (1, "Rome", 1),
        (2, "Bergen", 2),
        (3, "Lima", 1),
        (4, "Kyiv", 1),
        (5, "Quito", 2),
    ]

    # a committed txid is final: no update, no query
    assert runner.run_batch(2).applied is False
    assert runner.run_batch(1).applied is False
    assert (updater.batches, len(query.calls)) == (2, 2)

    # an empty batch commits and changes nothing
    empty = runner.run_batch(3)
    assert empty.outputs == {"location_changes": 0, "user_locations": 0}
    assert store.fetch_rows(f'SELECT count(*) FROM "{table}"') == [(5,)]
    assert store.last_committed("location_db") == 3
    store.close()


def test_query_location_is_one_ordered_lookup(open_store: Any) -> None:
    store = open_store()
    query = QueryLocation()
    state = PersistedState(store, "loc")
    assert query.batch_retrieve(state, [(1,), (2,)]) == [None, None]  # no table yet
    batch = pa.table({"userid": [7, 3, 7], "location": ["Oslo", "Lima", "Rome"]})
    with store.transaction():
        new = LocationUpdater().update_state(store, "loc", batch, 4)
    assert sorted(new.to_pylist(), key=lambda r: r["userid"]) == [
        {"userid": 3, "location": "Lima"},
        {"userid": 7, "location": "Rome"},
    ]
    assert query.batch_retrieve(state, [(7,), (8,), (3,), (7,)]) == ["Rome", None, "Lima", "Rome"]
    with pytest.raises(ConfigError, match="reads a partition_persist state"):
        query.batch_retrieve(object(), [(1,)])
    store.close()

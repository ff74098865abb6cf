"""Null input values: Sum/Min/Max states skip them and count them, whatever the batch holds.

A null mixed with values and the same null alone in a batch are treated alike: skipped,
counted in ``StateOutcome.null_values_skipped`` (and the state asset's Dagster metadata); a
key whose values in a batch are all null is not updated. Count counts tuples, nulls included.
One-by-one batches and a pipelined chunk (one Spark job) give the same states and counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest

from trident_assets import Count, Max, Min, Sum
from trident_assets.dagster.batch_events import batch_events, summary
from trident_assets.dagster.graph import asset_keys
from trident_assets.spark.aggregation import NULLS_COLUMN, VALUES_COLUMN, split_nulls
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import JsonScheme
from trident_assets.spouts.config import SpoutConfig
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.topology import StateSpec, TridentState, TridentTopology
from trident_assets_tests.conftest import OpenStore
from trident_assets_tests.test_executor import _counts, _log, _send

BATCHES = [
    [b'{"word": "a", "n": 5}', b'{"word": "a", "n": null}', b'{"word": "a", "n": 9}'],
    [b'{"word": "c", "n": null}', b'{"word": "c", "n": 3}', b'{"word": "b"}'],
    [b'{"word": "b", "n": null}'],
]
"""Three records per batch (``max_batch_size=3``): txid 1 mixes a null with values of its
key; txid 2 holds key b with only a null beside other keys; txid 3 holds b's null alone."""

GROUPED = {"sums": Sum(), "mins": Min(), "maxs": Max(), "counts": Count()}
GLOBAL = {"gsum": Sum(), "gmin": Min(), "gmax": Max()}


def _topology() -> tuple[TridentTopology, dict[str, TridentState]]:
    topo = TridentTopology("nulls")
    scheme = JsonScheme({"word": "string", "n": "bigint"}, optional=("n",))
    stream = topo.new_stream("events", LogSpout("events", scheme, SpoutConfig(max_batch_size=3)))
    states = {
        name: stream.group_by("word").persistent_aggregate(StateSpec.opaque(name), "n", agg, "v")
        for name, agg in GROUPED.items()
    }
    for name, agg in GLOBAL.items():
        states[name] = stream.persistent_aggregate(StateSpec.opaque(name), "n", agg, "v")
    return topo, states


def _global(store: Any, state: TridentState) -> Any:
    (row,) = store.scan(state.table).to_pylist()
    return row["value"]


# each store once and each way (one txid per job, a pipelined chunk) once in `make test`: the
# other two pairs in `make soak`
@pytest.mark.parametrize(
    ("open_store", "pending"),
    [
        ("duckdb", 1),
        pytest.param("duckdb", 3, marks=pytest.mark.slow),
        pytest.param("postgres", 1, marks=pytest.mark.slow),
        ("postgres", 3),
    ],
    indirect=["open_store"],
)
def test_nulls_are_skipped_and_counted_the_same_alone_or_mixed(
    spark: Any, tmp_path: Path, open_store: OpenStore, pending: int
) -> None:
    log = _log(tmp_path, {"events": 1})
    for values in BATCHES:
        _send(log, "events", values)
    topo, states = _topology()
    store = open_store()
    runner = TopologyRunner(topo, spark, store, log, max_spout_pending=pending)
    outcomes = list(runner.run_batches([1, 2, 3]))
    assert [(o.txid, o.applied, o.pipelined) for o in outcomes] == [
        (1, True, pending),
        (2, True, pending),
        (3, True, pending),
    ]
    assert [o.dead_letters for o in outcomes] == [0, 0, 0]
    skipped = {name: [o.states[name].null_values_skipped for o in outcomes] for name in states}
    assert skipped == {
        "sums": [1, 2, 1],
        "mins": [1, 2, 1],
        "maxs": [1, 2, 1],
        "counts": [0, 0, 0],
        "gsum": [1, 2, 1],
        "gmin": [1, 2, 1],
        "gmax": [1, 2, 1],
    }
    # b (only nulls, mixed in txid 2 and alone in txid 3) is never a key of Sum/Min/Max
    keys = {name: [o.states[name].keys_in for o in outcomes] for name in GROUPED}
    assert keys == {"sums": [1, 1, 0], "mins": [1, 1, 0], "maxs": [1, 1, 0], "counts": [1, 2, 1]}
    assert _counts(store, states["sums"].table) == {"a": 14, "c": 3}
    assert _counts(store, states["mins"].table) == {"a": 5, "c": 3}
    assert _counts(store, states["maxs"].table) == {"a": 9, "c": 3}
    assert _counts(store, states["counts"].table) == {"a": 3, "c": 2, "b": 2}
    assert (_global(store, states["gsum"]), _global(store, states["gmin"])) == (17, 3)
    assert _global(store, states["gmax"]) == 9
    assert [o.states["gsum"].total for o in outcomes] == [14.0, 17.0, 17.0]
    store.close()


def test_a_state_asset_shows_the_nulls_it_skipped(
    spark: Any, tmp_path: Path, open_store: OpenStore
) -> None:
    log = _log(tmp_path, {"events": 1})
    _send(log, "events", BATCHES[1])
    topo, _ = _topology()
    store = open_store()
    outcome = TopologyRunner(topo, spark, store, log).run_batch(1)
    store.close()
    events = list(batch_events(topo, asset_keys(topo), outcome, 0, True, ()))
    keys = asset_keys(topo)
    by_key = {e.asset_key: e.metadata for e in events if isinstance(e, dg.AssetMaterialization)}
    shown = {name: by_key[keys[f"state:{name}"]]["null_values_skipped"] for name in GROUPED}
    assert shown == {
        "sums": dg.MetadataValue.int(2),
        "mins": dg.MetadataValue.int(2),
        "maxs": dg.MetadataValue.int(2),
        "counts": dg.MetadataValue.int(0),
    }
    assert summary(outcome) == (
        "txid 1 committed (sums: 1 keys, mins: 1 keys, maxs: 1 keys, counts: 2 keys, "
        "gsum: 1 keys, gmin: 1 keys, gmax: 1 keys; 0 dead letters; 12 null values skipped)"
    )


def test_split_nulls_drops_groups_of_only_nulls_and_keeps_a_global_row() -> None:
    table = pa.table(
        {
            "word": ["a", "b"],
            "v": [5, 0],
            NULLS_COLUMN: pa.array([1, 2], pa.int64()),
            VALUES_COLUMN: pa.array([2, 0], pa.int64()),
        }
    )
    partials, nulls = split_nulls(table, grouped=True)
    assert (partials.to_pylist(), nulls) == ([{"word": "a", "v": 5}], 3)
    glob = pa.table({"v": [0], NULLS_COLUMN: [4], VALUES_COLUMN: [0]})
    assert (split_nulls(glob, grouped=False)[0].to_pylist(), split_nulls(glob, False)[1]) == (
        [{"v": 0}],
        4,
    )
    plain = pa.table({"word": ["a"], "v": [1]})
    assert split_nulls(plain, grouped=True) == (plain, 0)

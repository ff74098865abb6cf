"""A state added to a topology run by Dagster: its partitions fill as its catch-up commits,
and its ``exactly_once`` check covers it from its first txid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.graph import asset_keys
from trident_assets.dagster.partitions import txid_key
from trident_assets.dagster.resources import TridentResource
from trident_assets.stream.topology import StateSpec, TridentTopology
from trident_assets_tests.test_backfill import MORE, send, wc, words
from trident_assets_tests.test_state_contracts import SENTENCES


def run_txid(topo: TridentTopology, trident: TridentResource, instance: Any, txid: int) -> Any:
    """Materialize txid ``txid`` of ``topo`` with the definitions a user would load."""
    job = trident_definitions([topo], trident).resolve_implicit_global_asset_job_def()
    key = txid_key(txid)
    instance.add_dynamic_partitions(f"{topo.name}_txids", [key])
    result = job.execute_in_process(partition_key=key, instance=instance)
    assert result.success
    return result


def world(tmp_path: Path) -> TridentResource:
    trident = TridentResource(home=str(tmp_path))
    log = trident.log()
    log.create_topic("sentences", 1)
    send(log, SENTENCES)
    return trident


def seen_values(trident: TridentResource) -> dict[str, int]:
    with trident.store() as store:
        return {r["word"]: r["value"] for r in store.scan("wc__seen").to_pylist()}


def exactly_once(result: Any, key: dg.AssetKey) -> Any:
    (evaluation,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.asset_key == key and e.check_name == "exactly_once"
    ]
    return evaluation


def three_committed(trident: TridentResource, instance: Any) -> None:
    """Txids 1..3 of topology ``wc`` (state ``counts`` only) through Dagster."""
    for txid in (1, 2, 3):
        run_txid(wc(), trident, instance, txid)


def test_new_state_partitions_fill_as_it_is_built_and_are_checked(
    spark: Any, tmp_path: Path
) -> None:
    trident = world(tmp_path)
    with dg.DagsterInstance.ephemeral() as instance:
        three_committed(trident, instance)
        send(trident.log(), MORE)
        topo = wc(StateSpec.opaque("seen"))
        key = asset_keys(topo)["state:seen"]
        result = run_txid(topo, trident, instance, 4)

        assert sorted(instance.get_materialized_partitions(key)) == [
            txid_key(t) for t in (1, 2, 3, 4)
        ]
        built = {
            e.partition: e.materialization.metadata
            for e in result.get_asset_materialization_events()
            if e.asset_key == key
        }
        assert sorted(built) == [txid_key(t) for t in (1, 2, 3, 4)]
        for txid in (1, 2, 3):
            meta = built[txid_key(txid)]
            assert (meta["backfill"].value, meta["first_txid"].value) == (True, 1)
            assert meta["txid"].value == txid
        assert "backfill" not in built[txid_key(4)]  # txid 4 itself committed as usual
        assert seen_values(trident) == words(SENTENCES + MORE)
        check = exactly_once(result, key)
        assert check.passed
        assert check.metadata["first_txid"].value == 1
        assert check.metadata["mismatches"].value == 0


def test_from_retained_state_covers_and_is_checked_from_its_first_txid(
    spark: Any, tmp_path: Path
) -> None:
    trident = world(tmp_path)
    with dg.DagsterInstance.ephemeral() as instance:
        three_committed(trident, instance)
        log = trident.log()
        log.delete_records_before("sentences", 0, 2)  # the records txid 1 read
        send(log, MORE)
        topo = wc(StateSpec("seen", backfill="from_retained"))
        key = asset_keys(topo)["state:seen"]
        result = run_txid(topo, trident, instance, 4)

        # txid 1 is not covered: its partition stays unmaterialized
        assert sorted(instance.get_materialized_partitions(key)) == [txid_key(t) for t in (2, 3, 4)]
        assert seen_values(trident) == words(SENTENCES[2:] + MORE)
        check = exactly_once(result, key)
        # recomputed over txids 2..4 only: txid 1's records are gone and not in the state
        assert check.passed, check.description
        assert check.metadata["first_txid"].value == 2
        assert check.metadata["keys_recomputed"].value == len(words(SENTENCES[2:] + MORE))
        # the older state covers txid 1, whose records retention deleted: said, not hidden
        counts = exactly_once(result, asset_keys(topo)["state:counts"])
        assert (counts.passed, counts.severity) == (False, dg.AssetCheckSeverity.WARN)
        assert counts.metadata["first_txid"].value == 1
        assert counts.description.startswith(
            "cannot recompute: topic 'sentences' partition 0: offsets 0..7 cannot be read: "
            "offsets before 2 were deleted by retention"
        )

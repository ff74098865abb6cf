"""Published tables as Dagster assets, loaded by Dagster's own Delta and Iceberg IO managers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
from dagster_deltalake import DeltaLakePyarrowIOManager, LocalConfig
from dagster_iceberg.config import IcebergCatalogConfig
from dagster_iceberg.io_manager.arrow import PyArrowIcebergIOManager

import trident_assets as ta
from trident_assets.dagster.lakehouse_assets import table_events, table_key, table_specs
from trident_assets.spark.executor import TopologyRunner
from trident_assets_tests.lakehouse_util import SENTENCES, make_log, send, truth


def _topology(root: Path) -> ta.TridentTopology:
    topo = ta.TridentTopology("lh_dg")
    config = ta.SpoutConfig(kind=ta.SpoutKind.OPAQUE, max_batch_size=4)
    counts = (
        topo.new_stream("sentences", ta.LogSpout("sentences", ta.StringScheme("sentence"), config))
        .each("sentence", ta.Split(), "word")
        .group_by("word")
        .persistent_aggregate(ta.StateSpec.opaque("counts"), "word", ta.Count(), "count")
    )
    # where Dagster's IO managers look for asset lh_dg/counts_<format>
    counts.publish(ta.DeltaTable(root / "delta" / "lh_dg" / "counts_delta"))
    counts.publish(ta.IcebergTable("lh_dg.counts_iceberg", warehouse=root / "warehouse"))
    return topo


def test_a_downstream_asset_loads_each_table_with_dagsters_io_managers(
    spark: Any, tmp_path: Path
) -> None:
    log = make_log(tmp_path)
    send(log, SENTENCES)
    topo = _topology(tmp_path)
    with ta.DuckDBStore(tmp_path / "state.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, log)
        outcomes = [runner.run_batch(1), runner.run_batch(2)]
        events = [e for o in outcomes for e in table_events(topo, runner.tables, o.published)]
    versions = {(e.asset_key.path[-1], e.metadata["txid"].value): e.metadata for e in events}
    assert sorted(versions) == [
        ("counts_delta", 1), ("counts_delta", 2), ("counts_iceberg", 1), ("counts_iceberg", 2),
    ]  # fmt: skip
    assert versions[("counts_delta", 2)]["version"].value == 1  # Delta versions 0 and 1
    assert versions[("counts_iceberg", 2)]["snapshot_id"].value > 0

    specs = table_specs(topo, {"delta": "delta_io", "iceberg": "iceberg_io"})
    assert {s.key: s.kinds for s in specs} == {
        table_key(topo, "counts_delta"): {"delta"},
        table_key(topo, "counts_iceberg"): {"iceberg"},
    }
    assert all(s.deps[0].asset_key == dg.AssetKey(["lh_dg", "counts"]) for s in specs)
    loaded: dict[str, dict[str, int]] = {}

    @dg.asset(
        ins={
            "delta": dg.AssetIn(key=table_key(topo, "counts_delta")),
            "iceberg": dg.AssetIn(key=table_key(topo, "counts_iceberg")),
        }
    )
    def top_words(delta: pa.Table, iceberg: pa.Table) -> None:
        for name, table in (("delta", delta), ("iceberg", iceberg)):
            loaded[name] = {r["word"]: r["count"] for r in table.to_pylist()}

    catalog = IcebergCatalogConfig(
        properties={
            "type": "sql",
            "uri": f"sqlite:///{tmp_path / 'iceberg_catalog.db'}",
            "warehouse": (tmp_path / "warehouse").as_uri(),
        }
    )
    result = dg.materialize(
        [*specs, top_words],
        selection=[top_words.key],
        resources={
            "delta_io": DeltaLakePyarrowIOManager(
                root_uri=str(tmp_path / "delta"), storage_options=LocalConfig()
            ),
            "iceberg_io": PyArrowIcebergIOManager(
                name="trident", config=catalog, namespace="lh_dg"
            ),
        },
    )
    assert result.success
    assert loaded["delta"] == loaded["iceberg"] == truth(log)


def test_a_dagster_run_materializes_the_table_asset_with_its_version(
    spark: Any, tmp_path: Path
) -> None:
    from trident_assets.dagster.factory import trident_definitions
    from trident_assets.dagster.partitions import txid_key
    from trident_assets.dagster.resources import TridentResource

    trident = TridentResource(home=str(tmp_path))
    log = trident.log()
    log.create_topic("sentences", 2)
    send(log, SENTENCES)
    topo = _topology(tmp_path)
    defs = trident_definitions([topo], trident)
    spec = defs.resolve_assets_def(table_key(topo, "counts_delta"))
    assert spec.specs_by_key[table_key(topo, "counts_delta")].kinds == {"delta"}
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("lh_dg_txids", [txid_key(1), txid_key(2)])
        for txid in (1, 2):
            assert job.execute_in_process(partition_key=txid_key(txid), instance=instance).success
        for asset, what in (("counts_delta", "version"), ("counts_iceberg", "snapshot_id")):
            records = instance.fetch_materializations(table_key(topo, asset), limit=10).records
            metas = [r.asset_materialization.metadata for r in records]
            assert sorted(m["txid"].value for m in metas) == [1, 2]
            assert all(what in m for m in metas)

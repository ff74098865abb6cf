"""Runs as the UI launches them, and what their asset pages show (in-process Dagster).

* a run without the sensor's tags (the Materialize button, a backfill) is seen in flight by
  the coordinator, through its concurrency pool or its asset selection;
* a subset run commits the whole txid, yields only what it selected, and the coordinator
  moves on;
* a refused txid leaves the state as it was and skips the checks;
* a batch's previews and column schemas are exact.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.loader import LoadingContextForTest
from dagster._core.storage.asset_check_execution_record import (
    AssetCheckExecutionResolvedStatus,
)

from trident_assets.core.retry import ExponentialBackoff
from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.in_flight import batches_pool, pool_name, touches_topology
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.runs import materialize_batches
from trident_assets.dagster.sensors import decide_next
from trident_assets.examples.downstream import downstream_assets
from trident_assets.examples.page_views import build_page_views
from trident_assets.examples.word_count import build_word_count

NO_WAIT = ExponentialBackoff(initial_delay_s=0, delay_period_s=0, max_delay_s=0)
STATE = dg.AssetKey(["word_count", "word_counts"])
SPOUT = dg.AssetKey(["word_count", "sentences_batch"])


def _home(tmp_path: Path, sentences: list[bytes], partitions: int = 1) -> TridentResource:
    trident = TridentResource(home=str(tmp_path))
    log = trident.log()
    log.create_topic("sentences", partitions)
    log.create_topic("word_queries", 1)
    producer = log.producer("sentences", partitioner="round_robin")
    for value in sentences:
        producer.send(value)
    producer.flush()
    return trident


def _meta(event: Any) -> dict[str, Any]:
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_untagged_runs_are_in_flight_for_the_coordinator(tmp_path: Path) -> None:
    trident = _home(tmp_path, [b"a b", b"b c"])
    topo = build_word_count()
    defs = trident_definitions([topo], trident, assets=downstream_assets(topo.name))
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        first = decide_next(instance, topo, trident, NO_WAIT, max_attempts=3)
        assert isinstance(first, dg.SensorResult), "nothing in flight: txid 1 is requested"

        # the Materialize button on the state asset: an asset selection, no trident tags
        ui = instance.create_run_for_job(job, asset_selection={STATE})  # NOT_STARTED
        assert ui.tags == {}
        assert ui.run_op_concurrency is not None
        shared = batches_pool("word_count", None, trident.database)
        assert shared.startswith("trident_duckdb_")
        assert ui.run_op_concurrency.all_pools == {shared}
        waiting = decide_next(instance, topo, trident, NO_WAIT, max_attempts=3)
        assert isinstance(waiting, dg.SkipReason)
        assert waiting.skip_message == f"word_count: run {ui.run_id} is in flight"
        instance.report_run_canceled(ui)

        # a downstream-only run (top_words) does not touch the topology's txids
        top = instance.create_run_for_job(
            job,
            asset_selection={dg.AssetKey(["word_count", "top_words"])},
        )
        assert not touches_topology(top, "word_count", [STATE, SPOUT], shared)
        assert isinstance(decide_next(instance, topo, trident, NO_WAIT, 3), dg.SensorResult)
        instance.report_run_canceled(top)

        # a run without an asset selection (the whole asset job): seen through its pool
        whole = instance.create_run_for_job(job)
        assert whole.asset_selection is None
        assert touches_topology(whole, "word_count", [STATE], shared)
        waiting = decide_next(instance, topo, trident, NO_WAIT, max_attempts=3)
        assert waiting.skip_message == f"word_count: run {whole.run_id} is in flight"


def test_subset_run_commits_the_whole_txid_and_yields_only_its_selection(
    tmp_path: Path, spark: Any
) -> None:
    trident = _home(tmp_path, [b"a b", b"b c"])
    topo = build_word_count()
    defs = trident_definitions([topo], trident)
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("word_count_txids", ["0000000001"])
        result = job.execute_in_process(
            partition_key="0000000001", instance=instance, asset_selection=[STATE]
        )
        assert result.success
        materialized = sorted(
            e.asset_key.path[-1] for e in result.get_asset_materialization_events()
        )
        assert materialized == [
            "overview",
            "queries_batch",
            "sentences_batch",
            "word_counts",
            "word_counts_new_values",
            "word_counts_partials",
            "words",
        ], "the txid committed every asset in one transaction (and the topology's overview)"
        assert [
            (e.asset_key.path[-1], e.check_name) for e in result.get_asset_check_evaluations()
        ] == [("word_counts", "exactly_once")], "only the selected asset's check runs"
        with trident.store() as store:
            assert store.last_committed("word_count") == 1
        decision = decide_next(instance, topo, trident, NO_WAIT, max_attempts=3)
        assert decision.skip_message == "word_count: no new records after txid 1", (
            "the coordinator does not ask for txid 1 again"
        )


def test_refused_txid_keeps_the_state_and_skips_the_checks(tmp_path: Path, spark: Any) -> None:
    trident = _home(tmp_path, [b"a b", b"b c"])
    topo = build_word_count(max_batch_size=1)
    job = trident_definitions([topo], trident).resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        assert materialize_batches(topo, trident, instance, [1], catch_up=False, job=job)[0].success
        with trident.store() as store:
            before = store.scan("word_count__word_counts").to_pylist()
        instance.add_dynamic_partitions("word_count_txids", ["0000000003"])
        result = job.execute_in_process(partition_key="0000000003", instance=instance)
        assert result.success
        assert result.get_asset_materialization_events() == []
        (observation, _) = result.get_asset_observation_events()
        meta = observation.asset_observation_data.asset_observation.metadata
        assert (observation.partition, meta["run_first"].value, meta["refused"].value) == (
            "0000000003",
            "0000000002",
            True,
        )
        loading = LoadingContextForTest(instance)
        statuses = {}
        for key, name in [
            (SPOUT, "txids_contiguous"),
            (SPOUT, "ranges_contiguous"),
            (STATE, "exactly_once"),
        ]:
            (latest, *_) = instance.event_log_storage.get_asset_check_execution_history(
                dg.AssetCheckKey(key, name), limit=1
            )
            assert latest.run_id == result.run_id
            statuses[name] = asyncio.run(latest.resolve_status(loading))
        assert set(statuses.values()) == {AssetCheckExecutionResolvedStatus.SKIPPED}
        with trident.store() as store:
            assert store.last_committed("word_count") == 1
            assert store.scan("word_count__word_counts").to_pylist() == before


def test_partition_key_that_is_no_txid_key_fails_clearly(tmp_path: Path) -> None:
    trident = _home(tmp_path, [b"a"])
    topo = build_word_count()
    job = trident_definitions([topo], trident).resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("word_count_txids", ["12"])
        result = job.execute_in_process(partition_key="12", instance=instance, raise_on_error=False)
        assert not result.success
        error = result.failure_data_for_node("word_count_batches").error
        assert error is not None
        assert error.message.splitlines()[0] == (
            "dagster._core.definitions.events.Failure: partition key '12' is not a txid key: "
            "txid keys are 10 digits, zero-padded (e.g. '0000000012'); use the partition the "
            "coordinator created; nothing was read or written"
        )
        assert not (tmp_path / "state.duckdb").exists(), "nothing opened, nothing written"


def test_previews_and_schemas_of_a_small_batch_are_exact(tmp_path: Path, spark: Any) -> None:
    sentences = [b"the cow the moon", b"the \xff bad", b"cow jumped", b"\xfe also bad"]
    trident = _home(tmp_path, sentences)
    topo = build_word_count()
    with dg.instance_for_test() as instance:
        query = trident.log().producer("word_queries")
        query.send(b"the cow")
        query.flush()
        (result,) = materialize_batches(topo, trident, instance, [1], catch_up=False)
        assert result.success
        events = {e.asset_key.path[-1]: _meta(e) for e in result.get_asset_materialization_events()}
    top = "| word | count |\n|---|---|\n| cow | 2 |\n| the | 2 |\n| jumped | 1 |\n| moon | 1 |"
    schema = dg.TableSchema(
        columns=[dg.TableColumn("word", "string"), dg.TableColumn("count", "int64")]
    )
    state = events["word_counts"]
    assert state["preview"] == top
    assert state["dagster/column_schema"] == schema
    assert state["dagster/table_name"] == "word_count__word_counts"
    assert (state["keys_in"], state["state_size"]) == (4, 4)
    assert events["word_counts_new_values"]["preview"] == top
    assert events["word_counts_new_values"]["dagster/column_schema"] == schema
    assert (
        events["word_counts_new_values"]["dagster/table_name"]
        == "word_count__word_counts__new_values"
    )
    partials = events["word_counts_partials"]
    assert partials["preview"] == top
    assert partials["dagster/column_schema"] == schema
    words = events["words"]
    # the query reads the state as the previous txid left it (none yet): a sum of 0
    assert words["preview"] == "| sum |\n|---|\n| 0 |"
    assert words["dagster/column_schema"] == dg.TableSchema(
        columns=[dg.TableColumn("sum", "int64")]
    )
    spout = events["sentences_batch"]
    assert spout["dead_letters"] == 2
    assert spout["dead_letters_preview"] == (
        "| topic | partition | offset | reason |\n|---|---|---|---|\n"
        "| sentences | 0 | 1 | value is not valid UTF-8 |\n"
        "| sentences | 0 | 3 | value is not valid UTF-8 |"
    )
    assert events["queries_batch"]["dead_letters_preview"] == "_no dead letters in txid 1_"


@pytest.mark.parametrize("rows", [0, 25])
def test_preview_says_how_many_rows_it_leaves_out(rows: int) -> None:
    import pyarrow as pa

    from trident_assets.dagster.previews import preview_metadata
    from trident_assets.runtime.outcomes import top_rows

    table = pa.table({"k": [f"k{i:02d}" for i in range(rows)], "v": list(range(rows))})
    meta = preview_metadata(top_rows(table, "v", ["k"]), rows)
    lines = meta["preview"].value.splitlines()
    if rows == 0:
        assert lines == ["| k | v |", "|---|---|"]
    else:
        assert lines[2] == "| k24 | 24 |"
        assert lines[11] == "| k15 | 15 |"
        assert lines[-1] == "10 of 25 rows"


def test_sensors_tick_every_5_s_with_or_without_data(tmp_path: Path) -> None:
    """A fresh home's first records start a run within one tick (the live path's latency)."""
    fed = _home(tmp_path / "fed", [b"a"])
    empty = _home(tmp_path / "empty", [])
    never = TridentResource(home=str(tmp_path / "never"))  # no topics at all
    intervals = {}
    for name, trident in [("fed", fed), ("empty", empty), ("never", never)]:
        defs = trident_definitions([build_word_count()], trident)
        (sensor,) = defs.sensors  # type: ignore[misc]
        intervals[name] = sensor.minimum_interval_seconds
    assert intervals == {"fed": 5, "empty": 5, "never": 5}


def test_topologies_writing_one_duckdb_file_share_one_pool(tmp_path: Path) -> None:
    """Their runs take turns in Dagster's queue (a run holds the file's write lock)."""
    trident = _home(tmp_path, [b"a b"])
    word_count, page_views = build_word_count(), build_page_views()
    defs = trident_definitions([word_count, page_views], trident)
    pv_state = dg.AssetKey(["page_views", "views_10m"])
    pools = {defs.resolve_assets_def(k).op.pool for k in (STATE, pv_state)}
    shared = batches_pool("word_count", None, tmp_path / "state.duckdb")
    assert pools == {shared}
    assert shared == batches_pool("page_views", None, trident.database)
    other = batches_pool("word_count", None, tmp_path / "other.duckdb")
    assert other.startswith("trident_duckdb_")
    assert other != shared
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        run = instance.create_run_for_job(job, asset_selection={pv_state})
        assert run.run_op_concurrency is not None
        assert run.run_op_concurrency.all_pools == {shared}
        assert touches_topology(run, "word_count", [STATE, SPOUT], shared)
        waiting = decide_next(instance, word_count, trident, NO_WAIT, max_attempts=3)
        assert isinstance(waiting, dg.SkipReason)
        assert waiting.skip_message == f"word_count: run {run.run_id} is in flight"
        instance.report_run_canceled(run)

    dsn = TridentResource(home=str(tmp_path), state_dsn="postgresql://u@127.0.0.1:5/db")
    defs = trident_definitions([word_count, page_views], dsn)
    assert [defs.resolve_assets_def(k).op.pool for k in (STATE, pv_state)] == [
        pool_name("word_count"),
        pool_name("page_views"),
    ]

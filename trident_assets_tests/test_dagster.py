"""The Dagster layer: definitions load, txid materializations, the coordinator's decisions."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.loader import LoadingContextForTest
from dagster._core.storage.asset_check_execution_record import (
    AssetCheckExecutionResolvedStatus,
)

from trident_assets.core.retry import ExponentialBackoff
from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.partitions import parse_txid, txid_key
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.sensors import decide_next
from trident_assets.errors import ConfigError
from trident_assets.examples.word_count import SENTENCES, build_word_count
from trident_assets_tests.stacks import one_commit_frames

REPO = Path(__file__).resolve().parents[1]


def test_definitions_validate_with_the_dagster_cli(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"TRIDENT_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_txid_keys() -> None:
    assert txid_key(42) == "0000000042"
    assert parse_txid("0000000042") == 42
    with pytest.raises(ConfigError, match="is not a txid"):
        parse_txid("abc")
    with pytest.raises(
        ConfigError,
        match=r"^partition key '12' is not a txid key: txid keys are 10 digits, zero-padded "
        r"\(e\.g\. '0000000012'\); use the partition the coordinator created$",
    ):
        parse_txid("12")
    with pytest.raises(ConfigError, match="'0000000000' is not a txid key"):
        parse_txid("0000000000")


@pytest.fixture(params=["duckdb"])
def world(request: pytest.FixtureRequest, tmp_path: Path, spark):
    """A word-count topology with 20 sentences waiting; state in DuckDB, or in PostgreSQL when
    parametrized indirectly with ``"postgres"``."""
    if request.param == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        trident = TridentResource(home=str(tmp_path), state_dsn=dsn)
    else:
        trident = TridentResource(home=str(tmp_path))
    log = trident.log()
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    producer = log.producer("sentences", partitioner="round_robin")
    for sentence in SENTENCES * 4:
        producer.send(sentence.encode())
    producer.flush()
    topo = build_word_count(max_batch_size=8)
    job = trident_definitions([topo], trident).resolve_implicit_global_asset_job_def()
    with dg.DagsterInstance.ephemeral() as instance:
        yield topo, trident, job, instance


def counts(trident: TridentResource) -> dict[str, int]:
    with trident.store() as store:
        return {r["word"]: r["value"] for r in store.scan("word_count__word_counts").to_pylist()}


def test_coordinator_drives_txids_until_the_log_is_drained(world) -> None:
    topo, trident, job, instance = world
    no_wait = ExponentialBackoff(initial_delay_s=0, delay_period_s=0, max_delay_s=0)
    keys = []
    while True:
        decision = decide_next(instance, topo, trident, no_wait, max_attempts=3)
        if isinstance(decision, dg.SkipReason):
            assert decision.skip_message == "word_count: no new records after txid 3"
            break
        request = decision.run_requests[0]
        instance.add_dynamic_partitions("word_count_txids", [request.partition_key])
        assert job.execute_in_process(
            partition_key=request.partition_key, instance=instance, tags=request.tags
        ).success
        keys.append(request.partition_key)
    assert keys == ["0000000001", "0000000002", "0000000003"], "20 sentences, 8 per batch"
    expected: dict[str, int] = {}
    for sentence in SENTENCES * 4:
        for word in sentence.split():
            expected[word] = expected.get(word, 0) + 1
    assert counts(trident) == expected

    before = counts(trident)
    again = job.execute_in_process(partition_key="0000000002", instance=instance)
    # a no-op re-run is recorded as observations: txid 2's materialization stays the latest
    assert again.get_asset_materialization_events() == []
    flags = {
        e.asset_key.path[-1]: e.asset_observation_data.asset_observation.metadata[
            "already_committed"
        ].value
        for e in again.get_asset_observation_events()
    }
    assert flags == {
        "sentences_batch": True,
        "queries_batch": True,
        "word_counts_partials": True,
        "word_counts": True,
        "word_counts_new_values": True,
        "words": True,
    }
    assert counts(trident) == before, "re-materializing a committed txid changes nothing"

    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(["word_count", "sentences_batch"]), asset_partitions=[keys[1]]
        ),
        limit=5,
    ).records
    first_run = records[-1].asset_materialization.metadata
    assert first_run["txid"].value == 2
    assert first_run["offsets"].value == {"sentences@0": [4, 7], "sentences@1": [4, 7]}
    decision = decide_next(instance, topo, trident, no_wait, max_attempts=3)
    assert decision.skip_message == "word_count: no new records after txid 3", (
        "a re-materialized old txid does not confuse the coordinator"
    )


def test_out_of_order_materialization_is_refused(world) -> None:
    """Refused before anything is written: the run succeeds, its checks are skipped."""
    _, trident, job, instance = world
    instance.add_dynamic_partitions("word_count_txids", ["0000000002"])
    result = job.execute_in_process(
        partition_key="0000000002", instance=instance, raise_on_error=False
    )
    assert result.success
    assert result.get_asset_materialization_events() == []
    assert result.get_asset_check_evaluations() == []
    reason = (
        "refusing to commit txid 2 to 'word_count': it has committed no txid yet, so txid 1 "
        "must commit first (batches commit in strict txid order). Nothing was changed; run "
        "txid 1 (the coordinator sensor does this) and then retry txid 2."
    )
    observed = {
        e.asset_key.path[-1]: (
            e.partition,
            {k: v.value for k, v in e.asset_observation_data.asset_observation.metadata.items()},
        )
        for e in result.get_asset_observation_events()
    }
    expected = {"txid": 2, "refused": True, "run_first": "0000000001", "reason": reason}
    assert observed == {
        "sentences_batch": ("0000000002", expected),
        "queries_batch": ("0000000002", expected),
    }
    errors = [e.message for e in instance.all_logs(result.run_id) if e.level == logging.ERROR]
    assert errors == [
        f"txid 2 refused, nothing written for it: {reason} The asset checks of this run are "
        "skipped."
    ]
    checks = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(dg.AssetKey(["word_count", "sentences_batch"]), "txids_contiguous"),
        limit=5,
    )
    assert [asyncio.run(c.resolve_status(LoadingContextForTest(instance))) for c in checks] == [
        AssetCheckExecutionResolvedStatus.SKIPPED
    ], "planned, not evaluated, run succeeded: the UI shows the check skipped"
    with trident.store() as store:
        assert store.last_committed("word_count") is None
        assert store.layout("word_count__word_counts") is None, "state unchanged (none)"


def _fail_a_run(world, request_tags: dict, partition_key: str) -> None:
    """Run the txid's partition against a store path that cannot open: the run fails."""
    topo, trident, _job, instance = world
    broken = TridentResource(home=trident.home, state_database="/nonexistent-dir/\0bad")
    failing = trident_definitions([topo], broken).resolve_implicit_global_asset_job_def()
    assert not failing.execute_in_process(
        partition_key=partition_key, instance=instance, tags=request_tags, raise_on_error=False
    ).success


def test_coordinator_replays_with_backoff_then_gives_up(world) -> None:
    topo, trident, _job, instance = world
    backoff = ExponentialBackoff(initial_delay_s=100, delay_period_s=100, max_delay_s=1000)
    first = decide_next(instance, topo, trident, backoff, max_attempts=2)
    request = first.run_requests[0]
    assert request.run_key == "word_count-0000000001-a0"
    instance.add_dynamic_partitions("word_count_txids", [request.partition_key])
    _fail_a_run(world, request.tags, request.partition_key)
    waiting = decide_next(instance, topo, trident, backoff, max_attempts=2)
    assert isinstance(waiting, dg.SkipReason)
    assert waiting.skip_message.startswith("word_count: replaying txid 1 in ")
    import time

    retry = decide_next(instance, topo, trident, backoff, max_attempts=2, now=time.time() + 101)
    assert retry.run_requests[0].run_key == "word_count-0000000001-a1", "a new run key per attempt"
    _fail_a_run(world, retry.run_requests[0].tags, request.partition_key)
    gave_up = decide_next(
        instance, topo, trident, backoff, max_attempts=2, now=time.time() + 10_000
    )
    assert isinstance(gave_up, dg.SkipReason)
    assert "txid 1 failed 2 times (max_attempts=2); giving up" in gave_up.skip_message


def test_coordinator_gives_up_after_the_retry_policys_max_retries(world) -> None:
    """A retry policy with ``max_retries=0`` allows one failed run, though max_attempts is 5;
    the give-up names the setting that stopped it."""
    import time

    topo, trident, _job, instance = world
    backoff = ExponentialBackoff(initial_delay_s=1, delay_period_s=1, max_retries=0)
    first = decide_next(instance, topo, trident, backoff, max_attempts=5)
    request = first.run_requests[0]
    instance.add_dynamic_partitions("word_count_txids", [request.partition_key])
    _fail_a_run(world, request.tags, request.partition_key)
    gave_up = decide_next(instance, topo, trident, backoff, max_attempts=5, now=time.time() + 60)
    assert isinstance(gave_up, dg.SkipReason)
    assert (
        "txid 1 failed 1 times (max_retries=0 of the retry policy); giving up. See run "
        in gave_up.skip_message
    )
    assert "by hand or raise max_retries. " in gave_up.skip_message
    lenient = ExponentialBackoff(initial_delay_s=1, delay_period_s=1, max_retries=9)
    retry = decide_next(instance, topo, trident, lenient, max_attempts=5, now=time.time() + 60)
    assert retry.run_requests[0].run_key == "word_count-0000000001-a1", "max_attempts is lower"


def test_one_commit_function_on_the_stack_from_the_op_to_the_store(world, monkeypatch) -> None:
    """A txid's path from the Dagster op to the store transaction reads in one stack: one
    function named commit in the runtime (and the core's commit protocol), the engine's apply
    of the state inside the open transaction."""
    import traceback

    from trident_assets.spark import state_apply

    _, _, job, instance = world
    seen: list[tuple[list[traceback.FrameSummary], bool]] = []
    applied = state_apply.apply_state_batch

    def apply_state_batch(store, *args):
        seen.append((traceback.extract_stack(), store.in_transaction))
        return applied(store, *args)

    monkeypatch.setattr(state_apply, "apply_state_batch", apply_state_batch)
    instance.add_dynamic_partitions("word_count_txids", ["0000000001"])
    assert job.execute_in_process(partition_key="0000000001", instance=instance).success
    frames = one_commit_frames(seen)  # the one state of word_count, applied once
    assert frames[0][0] == "trident_assets/dagster/assets.py", "the Dagster op's frame first"
    assert frames[-2:] == [
        ("trident_assets/spark/execution.py", "apply"),
        ("trident_assets/spark/state_apply.py", "apply_map_state"),
    ], "inside the transaction: the engine's apply of the state's kind"


def _check_results(result: dg.ExecuteInProcessResult) -> dict[tuple[str, str], bool]:
    return {
        (e.asset_key.path[-1], e.check_name): e.passed for e in result.get_asset_check_evaluations()
    }


@pytest.mark.parametrize("world", ["duckdb", "postgres"], indirect=True)
def test_catch_up_run_commits_each_txid_in_order_and_checks_pass(world) -> None:
    topo, trident, _job, instance = world
    from trident_assets.dagster.runs import materialize_batches

    no_wait = ExponentialBackoff(initial_delay_s=0, delay_period_s=0, max_delay_s=0)
    decision = decide_next(instance, topo, trident, no_wait, max_attempts=3, max_catch_up=10)
    (request,) = decision.run_requests
    assert request.partition_key is None
    assert request.tags["dagster/asset_partition_range_start"] == "0000000001"
    assert request.tags["dagster/asset_partition_range_end"] == "0000000003", (
        "20 sentences at 8 per batch: 3 batches wait"
    )
    assert decision.dynamic_partitions_requests[0].partition_keys == [
        "0000000001",
        "0000000002",
        "0000000003",
    ]

    (result,) = materialize_batches(topo, trident, instance, [1, 2, 3], catch_up=True)
    assert result.success
    spout_events = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key.path[-1] == "sentences_batch"
    ]
    assert [e.partition for e in spout_events] == ["0000000001", "0000000002", "0000000003"]
    assert [e.materialization.metadata["txid"].value for e in spout_events] == [1, 2, 3]
    assert [e.materialization.metadata["tuples_in"].value for e in spout_events] == [8, 8, 4]
    lag = [
        {k: v.value for k, v in e.materialization.metadata.items() if k.startswith("lag")}
        for e in spout_events
    ]
    assert lag == [
        {"lag": 12, "lag sentences@0": 6, "lag sentences@1": 6},
        {"lag": 4, "lag sentences@0": 2, "lag sentences@1": 2},
        {"lag": 0, "lag sentences@0": 0, "lag sentences@1": 0},
    ], "records waiting after each txid, per partition (20 round robin, 8 per batch)"
    assert instance.get_materialized_partitions(dg.AssetKey(["word_count", "word_counts"])) == {
        "0000000001",
        "0000000002",
        "0000000003",
    }
    assert _check_results(result) == {
        ("sentences_batch", "txids_contiguous"): True,
        ("sentences_batch", "ranges_contiguous"): True,
        ("sentences_batch", "dead_letters_below_threshold"): True,
        ("sentences_batch", "lag_below_threshold"): True,
        ("queries_batch", "txids_contiguous"): True,
        ("queries_batch", "ranges_contiguous"): True,
        ("queries_batch", "dead_letters_below_threshold"): True,
        ("queries_batch", "lag_below_threshold"): True,
        ("word_counts", "exactly_once"): True,
    }
    exactly = next(
        e for e in result.get_asset_check_evaluations() if e.check_name == "exactly_once"
    )
    assert exactly.metadata["mismatches"].value == 0
    assert exactly.metadata["keys_in_state"].value == len(counts(trident))
    assert decide_next(instance, topo, trident, no_wait, 3, max_catch_up=10).skip_message == (
        "word_count: no new records after txid 3"
    )


@pytest.mark.parametrize("world", ["duckdb", "postgres"], indirect=True)
def test_exactly_once_check_catches_a_double_count(world) -> None:
    topo, trident, _job, instance = world
    from trident_assets.core.values import OpaqueValue
    from trident_assets.dagster.runs import materialize_batches

    assert materialize_batches(topo, trident, instance, [1], catch_up=False)[0].success
    with trident.store() as store:  # simulate a bug: the state counts "the" once too many
        counts = store.map("word_count__word_counts")
        (the,) = counts.multi_get([("the",)])
        counts.multi_put([("the",)], [OpaqueValue(the.curr_txid, the.curr + 1, the.prev)])
    (result,) = materialize_batches(topo, trident, instance, [2], catch_up=False)
    assert result.success, "checks are not blocking: the batch commits, the check reports"
    exactly = next(
        e for e in result.get_asset_check_evaluations() if e.check_name == "exactly_once"
    )
    assert not exactly.passed
    assert exactly.metadata["mismatches"].value == 1
    (row,) = exactly.metadata["sample"].value
    assert row["word"] == "the"
    assert row["stored"] == row["expected"] + 1


def test_lag_check_warns_when_the_topology_falls_behind(world) -> None:
    topo, trident, _job, instance = world
    from trident_assets.dagster.checks import CheckSettings
    from trident_assets.dagster.runs import materialize_batches

    (result,) = materialize_batches(
        topo, trident, instance, [1], catch_up=False, checks=CheckSettings(max_lag=11)
    )
    assert result.success, "checks are not blocking"
    lag = next(
        e for e in result.get_asset_check_evaluations()
        if e.check_name == "lag_below_threshold" and e.asset_key.path[-1] == "sentences_batch"
    )  # fmt: skip
    assert (lag.passed, lag.severity) == (False, dg.AssetCheckSeverity.WARN)
    assert lag.metadata["lag"].value == 12
    assert lag.metadata["max_lag"].value == 11
    assert lag.metadata["by_partition"].value == {"sentences@0": 6, "sentences@1": 6}


def test_dead_letter_check_fails_above_the_threshold(tmp_path: Path, spark) -> None:
    from trident_assets.dagster.checks import CheckSettings
    from trident_assets.dagster.runs import materialize_batches

    trident = TridentResource(home=str(tmp_path))
    log = trident.log()
    log.create_topic("sentences", 1)
    log.create_topic("word_queries", 1)
    producer = log.producer("sentences")
    for value in [b"good words here", b"\xff\xfe not utf8", b"more good words"]:
        producer.send(value)
    producer.flush()
    topo = build_word_count()
    with dg.DagsterInstance.ephemeral() as instance:
        (result,) = materialize_batches(
            topo,
            trident,
            instance,
            [1],
            catch_up=False,
            checks=CheckSettings(dead_letter_threshold=0.25),
        )
    assert result.success
    dead = next(
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "dead_letters_below_threshold"
        and e.asset_key.path[-1] == ("sentences_batch")
    )
    assert not dead.passed
    assert dead.severity == dg.AssetCheckSeverity.WARN
    assert dead.metadata["dead_letters"].value == 1
    assert dead.metadata["records"].value == 3


def test_coordinator_waits_for_a_topic_that_does_not_exist_yet(tmp_path: Path) -> None:
    """A code location may declare topologies whose topics are not created yet: the coordinator
    skips with the reason and the command to run; once txids committed, a vanished topic fails."""
    trident = TridentResource(home=str(tmp_path))
    log = trident.log()
    log.create_topic("word_queries", 1)
    topo = build_word_count(max_batch_size=8)
    no_wait = ExponentialBackoff(initial_delay_s=0.0, delay_period_s=0.0, max_delay_s=0.0)
    with dg.DagsterInstance.ephemeral() as instance:
        decision = decide_next(instance, topo, trident, no_wait, max_attempts=3)
        assert isinstance(decision, dg.SkipReason)
        assert decision.skip_message == (
            f"word_count: waiting for its topic: topic 'sentences' does not exist in log "
            f"'{tmp_path}/log'; create it first (`trident log create-topic sentences PARTITIONS`"
            " or PartitionedLog.create_topic)"
        )
        log.create_topic("sentences", 2)
        assert decide_next(instance, topo, trident, no_wait, max_attempts=3).skip_message == (
            "word_count: no records in its sources yet"
        )


def test_each_spout_batch_reports_its_own_dead_letters(tmp_path: Path, spark) -> None:
    """A txid's dead letters of two spouts: each spout's asset counts only its own."""
    from trident_assets.dagster.runs import materialize_batches

    trident = TridentResource(home=str(tmp_path))
    log = trident.log()
    sentences = [b"good words", b"\xff one", b"\xfe two", b"\xfd three", b"more words"]
    for topic, values in (("sentences", sentences), ("word_queries", [b"good", b"\xff"])):
        log.create_topic(topic, 1)
        producer = log.producer(topic)
        for value in values:
            producer.send(value)
        producer.flush()
    topo = build_word_count()
    with dg.DagsterInstance.ephemeral() as instance:
        (result,) = materialize_batches(topo, trident, instance, [1], catch_up=False)
    assert result.success
    events = {
        e.asset_key.path[-1]: e.materialization.metadata
        for e in result.get_asset_materialization_events()
    }
    checks = {
        e.asset_key.path[-1]: e.metadata
        for e in result.get_asset_check_evaluations()
        if e.check_name == "dead_letters_below_threshold"
    }
    for asset, dead, records in (("sentences_batch", 3, 5), ("queries_batch", 1, 2)):
        meta = events[asset]
        assert meta["dead_letters"].value == dead
        assert (checks[asset]["dead_letters"].value, checks[asset]["records"].value) == (
            dead,
            records,
        )
        preview = meta["dead_letters_preview"].value
        assert preview.count("\n") == dead + 1, "a header, its rule and one line per dead letter"


def test_an_incremental_exactly_once_check_counts_every_key_of_the_state(
    tmp_path: Path, spark
) -> None:
    """txid 1 stores keys a, b, c; txid 2 touches only a: the state still holds 3 keys."""
    from trident_assets.dagster.checks import CheckSettings
    from trident_assets.dagster.runs import materialize_batches

    trident = TridentResource(home=str(tmp_path))
    log = trident.log()
    log.create_topic("sentences", 1)
    log.create_topic("word_queries", 1)
    producer = log.producer("sentences")
    for value in [b"a b c", b"a"]:
        producer.send(value)
    producer.flush()
    topo = build_word_count(max_batch_size=1)
    evaluations = []
    with dg.DagsterInstance.ephemeral() as instance:
        for txid in (1, 2):
            (result,) = materialize_batches(
                topo, trident, instance, [txid], catch_up=False, checks=CheckSettings(full_every=50)
            )
            assert result.success
            (check,) = [
                e for e in result.get_asset_check_evaluations() if e.check_name == "exactly_once"
            ]
            assert check.passed
            evaluations.append({k: v.value for k, v in check.metadata.items()})
    assert counts(trident) == {"a": 2, "b": 1, "c": 1}
    assert [
        (m["mode"], m["keys_in_state"], m["keys_recomputed"], m["mismatches"]) for m in evaluations
    ] == [("full", 3, 3, 0), ("incremental", 3, 1, 0)]

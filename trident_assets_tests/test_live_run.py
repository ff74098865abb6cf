"""The live run: one Dagster run committing txid after txid as records arrive.

Executed in process against a SQLite instance under ``tmp_path`` (as `dagster dev` keeps
it): records appended by a thread while the run polls each become one txid, one partition
with its materialization and the run's check results; a second live run is refused while
one is in flight; a live run SIGKILLed between a state write and its commit loses nothing.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from trident_assets.backends.replica import Replica
from trident_assets.cli.ui import ui_environment
from trident_assets.core.retry import ExponentialBackoff
from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.live import LIVE_TAG, LiveSettings, live_topologies
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.runs import fail_killed_run
from trident_assets.dagster.sensors import decide_next
from trident_assets.errors import ConfigError
from trident_assets.examples.word_count import SENTENCES, build_word_count
from trident_assets_tests.conftest import JVM_ENV
from trident_assets_tests.stacks import one_commit_frames

REPO = Path(__file__).resolve().parents[1]
FAST = LiveSettings(poll_interval_s=0.05, idle_s=30, check_every_s=600)
NO_WAIT = ExponentialBackoff(initial_delay_s=0, delay_period_s=0, max_delay_s=0)
STATE = "word_count__word_counts"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home whose word-count topics exist, still empty."""
    log = TridentResource(home=str(tmp_path / "home")).log()
    log.create_topic("sentences", 2)
    log.create_topic("word_queries", 1)
    return tmp_path / "home"


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    """A Dagster instance on disk (SQLite) under ``tmp_path``, without compute-log capture.

    Capture starts ``tail`` processes on the process-wide stdout and stderr; with two runs in
    one process at once (a live run in a thread and a second run) one run's clean-up left the
    other's ``tail`` processes running after the test.
    """
    path = tmp_path / "dagster"
    path.mkdir()
    (path / "dagster.yaml").write_text(
        "compute_logs:\n"
        "  module: dagster._core.storage.noop_compute_log_manager\n"
        "  class: NoOpComputeLogManager\n"
    )
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(path))) as inst:
        yield inst


def _live_job(home: Path, settings: LiveSettings) -> Any:
    defs = trident_definitions(
        [build_word_count()], TridentResource(home=str(home)), live=True, live_settings=settings
    )
    return defs.resolve_job_def("word_count_live")


def _append(home: Path, *sentences: str) -> None:
    producer = TridentResource(home=str(home)).log().producer("sentences", "round_robin")
    for sentence in sentences:
        producer.send(sentence.encode())
    producer.flush()


def _published(home: Path) -> int:
    return Replica(home / "replica").latest("word_count") or 0


def _wait_published(home: Path, txid: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while _published(home) < txid:
        assert time.monotonic() < deadline, f"txid {txid} not published in {timeout_s} s"
        time.sleep(0.05)


def _counts(home: Path) -> dict[str, int]:
    with TridentResource(home=str(home)).store() as store:
        return {r["word"]: r["value"] for r in store.scan(STATE).to_pylist()}


def _truth(sentences: list[str]) -> dict[str, int]:
    return dict(collections.Counter(w for s in sentences for w in s.split()))


def _spout_metadata(instance: dg.DagsterInstance) -> dict[str, dict[str, Any]]:
    """Per partition of the sentences batch asset: its latest materialization's metadata."""
    key = dg.AssetKey(["word_count", "sentences_batch"])
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), 100).records
    found: dict[str, dict[str, Any]] = {}
    for record in reversed(records):  # newest first: keep each partition's latest
        mat = record.asset_materialization
        assert mat is not None
        assert mat.partition is not None
        found[mat.partition] = {k: v.value for k, v in mat.metadata.items()}
    return found


def _while_producing(producer: Any, job: Any, instance: dg.DagsterInstance, **run: Any) -> Any:
    """``job`` run in process while ``producer`` appends records on a thread of its own."""
    thread = threading.Thread(target=producer)
    thread.start()
    try:
        return job.execute_in_process(instance=instance, **run)
    finally:
        thread.join(timeout=180)


def _failure(result: Any) -> str:
    (failed,) = [e for e in result.all_events if e.is_step_failure]
    data = failed.step_failure_data
    return data.user_failure_data.description if data.user_failure_data else data.error.message


def test_live_run_commits_each_txid_appended_while_it_runs(home: Path, instance, spark) -> None:
    sentences = [SENTENCES[i % len(SENTENCES)] for i in range(4)]
    job = _live_job(home, replace(FAST, max_txids=4))

    def producer() -> None:  # one sentence, then the next once it committed: one txid each
        for i, sentence in enumerate(sentences, start=1):
            _append(home, sentence)
            _wait_published(home, i)

    result = _while_producing(producer, job, instance, tags={LIVE_TAG: "true"})
    assert result.success
    keys = [f"{t:010d}" for t in (1, 2, 3, 4)]
    assert instance.get_dynamic_partitions("word_count_txids") == keys
    for asset in ("sentences_batch", "word_counts", "word_counts_new_values"):
        done = instance.get_materialized_partitions(dg.AssetKey(["word_count", asset]))
        assert done == set(keys), asset
    meta = _spout_metadata(instance)
    assert {k: (m["txid"], m["tuples_in"], m["already_committed"]) for k, m in meta.items()} == {
        k: (t, 1, False) for t, k in enumerate(keys, start=1)
    }
    checks = {
        (e.asset_key.path[-1], e.check_name): (e.passed, e.metadata)
        for e in result.get_asset_check_evaluations()
    }
    spout_checks = [
        "dead_letters_below_threshold",
        "lag_below_threshold",
        "ranges_contiguous",
        "txids_contiguous",
    ]
    assert sorted(checks) == [
        *(("queries_batch", name) for name in spout_checks),
        *(("sentences_batch", name) for name in spout_checks),
        ("word_counts", "exactly_once"),
    ]
    assert all(passed for passed, _ in checks.values()), checks
    txids = checks["sentences_batch", "txids_contiguous"][1]
    assert (txids["last_txid"].value, txids["store_last_committed"].value) == (4, 4)
    assert checks["sentences_batch", "ranges_contiguous"][1]["ranges_checked"].value == 8
    assert checks["word_counts", "exactly_once"][1]["mismatches"].value == 0
    record = instance.get_latest_materialization_event(dg.AssetKey(["word_count", "word_counts"]))
    assert record is not None
    assert record.run_id == result.run_id
    assert _counts(home) == _truth(sentences)
    assert _published(home) == 4


def test_a_second_live_run_is_refused_while_one_is_in_flight(home: Path, instance, spark) -> None:
    job = _live_job(home, LiveSettings(poll_interval_s=0.05, idle_s=60, max_txids=1))
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(job.execute_in_process(
        instance=instance, raise_on_error=False)))  # fmt: skip
    first.start()
    try:
        deadline = time.monotonic() + 60
        while not instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
            assert time.monotonic() < deadline, "the first live run did not start"
            time.sleep(0.05)
        (running,) = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        second = job.execute_in_process(instance=instance, raise_on_error=False)
        assert not second.success
        assert _failure(second) == (
            f"word_count: run {running.run_id} (word_count_live, STARTED) may commit txids of "
            "word_count; a live run is the topology's only writer, so this one did not start "
            "and nothing was read or written. The coordinator sensor launches a live run once "
            "that run has finished"
        )
        assert _published(home) == 0
        _append(home, SENTENCES[0])
    finally:
        first.join(timeout=180)
    assert results[0].success
    assert _counts(home) == _truth([SENTENCES[0]])


def test_a_killed_live_run_loses_nothing_and_the_next_replays_its_txid(
    home: Path, instance, spark, tmp_path: Path
) -> None:
    job = _live_job(home, LiveSettings(poll_interval_s=0.05, idle_s=60, max_txids=1))
    _append(home, SENTENCES[0])
    assert job.execute_in_process(instance=instance).success  # txid 1
    _append(home, SENTENCES[1], SENTENCES[2])
    before = _counts(home)
    env = {**os.environ, **JVM_ENV, "PYSPARK_PYTHON": sys.executable}
    child = subprocess.run(
        [sys.executable, "-m", "trident_assets_tests.live_child", str(home),
         str(tmp_path / "dagster")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    assert _counts(home) == before, "nothing of txid 2 was committed"
    with TridentResource(home=str(home)).store() as store:
        assert store.last_committed("word_count") == 1
    (killed,) = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    assert (killed.tags[LIVE_TAG], killed.tags["trident/txid"]) == ("true", "0000000002")
    # the coordinator waits while the killed run shows in flight ...
    waiting = decide_next(instance, build_word_count(), TridentResource(home=str(home)), NO_WAIT,
                          max_attempts=3, live_job="word_count_live")  # fmt: skip
    assert isinstance(waiting, dg.SkipReason)
    assert waiting.skip_message == f"word_count: run {killed.run_id} is in flight"
    # ... until it is recorded as failed (`dagster dev`'s code server does it for a killed run)
    assert fail_killed_run(instance, killed, "SIGKILLed") == ["word_count_live_commits"]
    decision = decide_next(instance, build_word_count(), TridentResource(home=str(home)),
                           NO_WAIT, max_attempts=3, live_job="word_count_live")  # fmt: skip
    assert isinstance(decision, dg.SensorResult)
    (request,) = decision.run_requests
    assert (request.job_name, request.run_key) == (
        "word_count_live",
        "word_count-live-0000000002-a1",
    )
    assert (request.tags["trident/txid"], request.tags["trident/attempt"]) == ("0000000002", "1")
    again = job.execute_in_process(instance=instance, tags=request.tags)
    assert again.success
    assert _counts(home) == _truth(list(SENTENCES[:3]))
    meta = _spout_metadata(instance)
    assert sorted(meta) == ["0000000001", "0000000002"]
    replayed = meta["0000000002"]
    assert (replayed["tuples_in"], replayed["replay"], replayed["attempt"]) == (2, True, 1)
    assert _published(home) == 2


def test_live_topologies_come_from_the_argument_or_trident_live(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRIDENT_LIVE", "page_views")
    assert ui_environment(tmp_path, live=True)["TRIDENT_LIVE"] == "all"
    assert ui_environment(tmp_path)["TRIDENT_LIVE"] == "page_views"  # yours, kept
    names = ["word_count", "page_views"]
    assert live_topologies(True, names) == {"word_count", "page_views"}
    assert live_topologies(["page_views"], names) == {"page_views"}
    monkeypatch.delenv("TRIDENT_LIVE", raising=False)
    assert live_topologies(None, names) == set()
    monkeypatch.setenv("TRIDENT_LIVE", "all")
    assert live_topologies(None, names) == {"word_count", "page_views"}
    monkeypatch.setenv("TRIDENT_LIVE", "word_count, nosuch")
    with pytest.raises(ConfigError) as refused:
        live_topologies(None, names)
    assert str(refused.value) == (
        "TRIDENT_LIVE='word_count, nosuch' names 'nosuch', not a topology of these definitions "
        "(word_count, page_views): name one of them, or all"
    )
    with pytest.raises(ConfigError, match=r"^LiveSettings\.idle_s must be a number of seconds"):
        LiveSettings(idle_s=0)


def test_a_txid_committed_but_never_reported_is_reported_by_the_next_live_run(
    home: Path, instance, spark
) -> None:
    """A run killed between its commit and its events: the next live run reports the txid."""
    from trident_assets.spark.executor import TopologyRunner

    job = _live_job(home, LiveSettings(poll_interval_s=0.05, idle_s=60, max_txids=1))
    _append(home, SENTENCES[0])
    assert job.execute_in_process(instance=instance).success  # txid 1
    _append(home, SENTENCES[1])
    trident = TridentResource(home=str(home))
    with trident.store() as store:  # committed, not published, no Dagster event
        assert TopologyRunner(build_word_count(), spark, store, trident.log()).run_batch(2).applied
    decision = decide_next(instance, build_word_count(), trident, NO_WAIT, max_attempts=3,
                           live_job="word_count_live")  # fmt: skip
    assert isinstance(decision, dg.SensorResult)
    (request,) = decision.run_requests
    assert request.tags["trident/txid"] == "0000000002"
    result = job.execute_in_process(instance=instance, tags=request.tags)
    assert result.success
    observed = {
        e.asset_key.path[-1]: e.asset_observation_data.asset_observation.metadata[
            "already_committed"
        ].value
        for e in result.get_asset_observation_events()
    }
    assert observed["sentences_batch"] is True
    assert result.get_asset_materialization_events() == []
    checks = {(e.asset_key.path[-1], e.check_name): e for e in result.get_asset_check_evaluations()}
    txids = checks["sentences_batch", "txids_contiguous"]
    assert txids.passed
    assert (txids.metadata["last_txid"].value, txids.metadata["store_last_committed"].value) == (
        2,
        2,
    )
    assert _published(home) == 2
    assert _counts(home) == _truth(list(SENTENCES[:2]))


def test_a_txid_committed_and_published_but_never_reported_is_reported_first(
    home: Path, instance, spark
) -> None:
    """Killed after its commit and publish, before its events: the replica is ahead of Dagster.

    The coordinator's next txid follows the replica (3); the live run still reports txid 2
    first (an observation), so every txid has its partition's events.
    """
    from trident_assets.dagster.batch_steps import topology_runner

    first = _live_job(home, LiveSettings(poll_interval_s=0.05, idle_s=60, max_txids=1))
    job = _live_job(home, LiveSettings(poll_interval_s=0.05, idle_s=60, max_txids=2))
    _append(home, SENTENCES[0])
    assert first.execute_in_process(instance=instance).success  # txid 1 (then it ends)
    _append(home, SENTENCES[1])
    trident = TridentResource(home=str(home))
    with trident.store() as store:  # committed and published, no Dagster event
        assert topology_runner(trident, build_word_count(), spark, store).run_batch(2).applied
    assert _published(home) == 2
    _append(home, SENTENCES[2])
    decision = decide_next(instance, build_word_count(), trident, NO_WAIT, max_attempts=3,
                           live_job="word_count_live")  # fmt: skip
    assert isinstance(decision, dg.SensorResult)
    (request,) = decision.run_requests
    assert request.tags["trident/txid"] == "0000000003"
    result = job.execute_in_process(instance=instance, tags=request.tags)
    assert result.success
    observed = [
        (e.partition, e.asset_key.path[-1])
        for e in result.get_asset_observation_events()
        if e.asset_key.path[-1] == "sentences_batch"
    ]
    assert observed == [("0000000002", "sentences_batch")]
    materialized = {
        e.partition for e in result.get_asset_materialization_events()
        if e.asset_key.path[-1] == "sentences_batch"
    }  # fmt: skip
    assert materialized == {"0000000003"}
    assert _counts(home) == _truth(list(SENTENCES[:3]))


def test_the_coordinator_launches_no_live_run_while_trident_ui_stops(home: Path, instance) -> None:
    """The stop file of `trident ui`: no live run is requested; one that starts ends at once."""
    from trident_assets.dagster.live_stop import clear_stop, request_stop

    _append(home, SENTENCES[0])
    trident = TridentResource(home=str(home))
    request_stop(Path(instance.root_directory), "trident ui is stopping")
    decision = decide_next(instance, build_word_count(), trident, NO_WAIT, max_attempts=3,
                           live_job="word_count_live")  # fmt: skip
    assert isinstance(decision, dg.SkipReason)
    assert decision.skip_message == ("word_count: no live run is launched: trident ui is stopping")
    result = _live_job(home, FAST).execute_in_process(instance=instance)
    assert result.success
    messages = [e.message for e in instance.all_logs(result.run_id) if e.message]
    assert "live run of word_count ends before it began: trident ui is stopping" in messages
    assert _published(home) == 0  # nothing read, nothing committed
    clear_stop(Path(instance.root_directory))
    decision = decide_next(instance, build_word_count(), trident, NO_WAIT, max_attempts=3,
                           live_job="word_count_live")  # fmt: skip
    assert isinstance(decision, dg.SensorResult)


def test_checks_evaluated_while_the_log_is_idle_cover_every_committed_txid(
    home: Path, instance, spark
) -> None:
    """Checks run between txids (the log idle): each covers every txid committed until then."""
    settings = LiveSettings(poll_interval_s=0.05, idle_s=30, check_every_s=0.2, max_txids=3)
    job = _live_job(home, settings)
    sentences = list(SENTENCES[:3])

    def producer() -> None:  # a txid, then an idle log long enough for the checks
        for i, sentence in enumerate(sentences, start=1):
            _append(home, sentence)
            _wait_published(home, i)
            time.sleep(1.0)

    result = _while_producing(producer, job, instance, tags={LIVE_TAG: "true"})
    assert result.success
    evaluations = [
        e.metadata
        for e in result.get_asset_check_evaluations()
        if (e.asset_key.path[-1], e.check_name) == ("sentences_batch", "txids_contiguous")
    ]
    seen = [(m["last_txid"].value, m["store_last_committed"].value) for m in evaluations]
    assert seen == [(1, 1), (2, 2), (3, 3)]
    assert all(e.passed for e in result.get_asset_check_evaluations())
    assert _counts(home) == _truth(sentences)


def _split_or_fail(sentence: str) -> list[tuple[str]]:
    if "boom" in sentence.split():
        msg = "a sentence says boom"
        raise ValueError(msg)
    return [(w,) for w in sentence.split()]


def test_a_failing_txid_fails_the_live_run_with_its_error_and_commits_nothing_of_it(
    home: Path, instance, spark
) -> None:
    import trident_assets as ta
    from trident_assets.status import last_failure

    topo = ta.TridentTopology("word_count")
    config = ta.SpoutConfig(kind=ta.SpoutKind.OPAQUE)
    (
        topo.new_stream("sentences", ta.LogSpout("sentences", ta.StringScheme("sentence"), config))
        .each("sentence", ta.PyFunction(_split_or_fail, {"word": "string"}), "word")
        .group_by("word")
        .persistent_aggregate(ta.StateSpec.opaque("word_counts"), "word", ta.Count(), "count")
    )
    settings = LiveSettings(poll_interval_s=0.05, idle_s=30, max_txids=3)
    defs = trident_definitions(
        [topo], TridentResource(home=str(home)), live=True, live_settings=settings
    )
    job = defs.resolve_job_def("word_count_live")

    def producer() -> None:
        _append(home, "the cow")
        _wait_published(home, 1)
        _append(home, "the boom")

    result = _while_producing(producer, job, instance, raise_on_error=False)
    assert not result.success
    message = _failure(result)
    assert message.startswith("each(sentence) -> sentence, word [PyFunction]: "), message
    assert "ValueError: a sentence says boom" in message
    assert _counts(home) == {"the": 1, "cow": 1}
    with TridentResource(home=str(home)).store() as store:
        assert store.last_committed("word_count") == 1
    failure = last_failure(home, "word_count")
    assert failure is not None
    assert (failure["txid"], failure["run"]) == (2, result.run_id)
    done = instance.get_materialized_partitions(dg.AssetKey(["word_count", "word_counts"]))
    assert done == {"0000000001"}


def test_a_live_commit_has_the_one_commit_function_on_its_stack(
    home: Path, instance, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A txid of the live run, from its committer's thread to the store transaction: one
    function named commit in the runtime and the core's commit protocol, as in a run per txid
    and in the IO manager."""
    import traceback

    from trident_assets.spark import state_apply

    seen: list[tuple[list[traceback.FrameSummary], bool]] = []
    applied = state_apply.apply_state_batch

    def apply_state_batch(store: Any, *args: Any) -> Any:
        seen.append((traceback.extract_stack(), store.in_transaction))
        return applied(store, *args)

    monkeypatch.setattr(state_apply, "apply_state_batch", apply_state_batch)
    _append(home, SENTENCES[0])
    assert _live_job(home, replace(FAST, max_txids=1)).execute_in_process(instance=instance).success
    frames = one_commit_frames(seen)  # the one state of word_count, applied once
    assert frames[0] == ("trident_assets/dagster/live_commits.py", "run"), "the committer's thread"
    assert _counts(home) == _truth([SENTENCES[0]])

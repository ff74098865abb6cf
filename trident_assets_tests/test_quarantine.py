"""Poison batches: quarantined with their ranges and error, the topology moves on, replayed later.

Exactly-once across the detour: the quarantined records count once, when a later txid
replays them; a replay that fails or crashes before its commit changes nothing.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from trident_assets import Count
from trident_assets.backends.replica import Replica
from trident_assets.core.aggregators import ReducerAggregator
from trident_assets.core.retry import ExponentialBackoff
from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.in_flight import QUARANTINE_TAG
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.sensors import coordinator_sensor, decide_next
from trident_assets.errors import (
    BatchUnavailableError,
    ConfigError,
    OutOfOrderCommitError,
    QuarantineError,
    UserCodeError,
)
from trident_assets.log.store import PartitionedLog
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import StringScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.graph import StateSpec
from trident_assets.stream.topology import TridentTopology
from trident_assets_tests.conftest import JVM_ENV
from trident_assets_tests.userland.poison_app import build

BATCHES = [["a b", "c d"], ["a poison", "b"], ["a c", "d d"]]


def counts(store: Any) -> dict[str, int]:
    return {r["word"]: r["value"] for r in store.scan("poisoned__counts").to_pylist()}


def truth(batches: list[list[str]]) -> dict[str, int]:
    return dict(Counter(w for batch in batches for s in batch for w in s.split()))


def feed(log: PartitionedLog, *sentences: str) -> None:
    producer = log.producer("sentences")
    for sentence in sentences:
        producer.send(sentence.encode())
    producer.flush()


@pytest.fixture
def setup(tmp_path: Path, open_store: Any) -> tuple[PartitionedLog, Any, Replica]:
    """The log with BATCHES waiting, a store (DuckDB, then PostgreSQL) and a replica."""
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("sentences", 1)
    for batch in BATCHES:
        feed(log, *batch)
    return log, open_store(), Replica(tmp_path / "replica")


# each spout kind once and each store once in `make test`: the other two pairs in `make soak`
@pytest.mark.parametrize(
    ("open_store", "kind"),
    [
        ("duckdb", SpoutKind.TRANSACTIONAL),
        pytest.param("duckdb", SpoutKind.OPAQUE, marks=pytest.mark.slow),
        pytest.param("postgres", SpoutKind.TRANSACTIONAL, marks=pytest.mark.slow),
        ("postgres", SpoutKind.OPAQUE),
    ],
    indirect=["open_store"],
)
def test_poison_txid_is_set_aside_then_replayed_exactly_once(
    spark: Any, setup: Any, kind: SpoutKind
) -> None:
    log, store, replica = setup
    runner = TopologyRunner(build("poison", kind), spark, store, log, replica=replica)
    assert runner.run_batch(1).applied
    with pytest.raises(UserCodeError, match="cannot handle 'poison'"):
        runner.run_batch(2)
    assert runner.last_committed() == 1

    held = runner.quarantine(2, "UserCodeError: cannot handle 'poison'")
    assert (held.txid, held.applied, held.quarantined) == (2, True, 2)
    assert runner.last_committed() == 2
    assert counts(store) == truth(BATCHES[:1]), "a quarantined txid changes no state"
    assert replica.latest("poisoned") == 2
    [entry] = runner.quarantined()
    assert entry.as_row() | {"quarantined_at": None} == {
        "topology": "poisoned",
        "txid": 2,
        "spout": "sentences",
        "ranges": "sentences@0[2..3]",
        "records": 2,
        "error": "UserCodeError: cannot handle 'poison'",
        "quarantined_at": None,
        "replayed_txid": None,
    }

    assert runner.run_batch(3).applied, "the topology moves on past the quarantined txid"
    assert counts(store) == truth([BATCHES[0], BATCHES[2]])

    # the cause is not fixed yet: the replay fails and changes nothing
    with pytest.raises(UserCodeError, match="cannot handle 'poison'"):
        runner.replay_quarantined()
    assert runner.last_committed() == 3
    assert [e.txid for e in runner.quarantined()] == [2]

    # the fixed code replays it as txid 4: every record counted once
    fixed = TopologyRunner(build(None, kind), spark, store, log, replica=replica)
    replayed = fixed.replay_quarantined()
    assert (replayed.txid, replayed.reprocessed_txid, replayed.tuples_in) == (
        4, 2, {"sentences": 2}
    )  # fmt: skip
    assert counts(store) == truth(BATCHES)
    assert fixed.quarantined() == []
    assert [e.replayed_txid for e in fixed.quarantined(pending_only=False)] == [4]
    assert not fixed.run_batch(4).applied, "a committed replay is final"
    with pytest.raises(QuarantineError, match="nothing waits in the quarantine"):
        fixed.replay_quarantined()

    # later txids continue where txid 3 ended: nothing re-read, nothing skipped
    feed(log, "e a")
    outcome = fixed.run_batch(5)
    assert outcome.tuples_in == {"sentences": 1}
    assert counts(store) == truth([*BATCHES, ["e a"]])
    assert replica.latest("poisoned") == 5


def test_a_crash_before_the_replay_commits_leaves_it_pending(spark: Any, setup: Any) -> None:
    log, store, _ = setup
    runner = TopologyRunner(build("poison"), spark, store, log)
    runner.run_batch(1)
    runner.quarantine(2, "poison")

    def crash(point: str) -> None:
        if point == "before_commit":
            raise RuntimeError("killed before commit")

    crashing = TopologyRunner(build(None), spark, store, log, fault=crash)
    with pytest.raises(RuntimeError, match="killed before commit"):
        crashing.replay_quarantined()
    assert runner.last_committed() == 2
    assert [e.txid for e in runner.quarantined()] == [2]
    assert counts(store) == truth(BATCHES[:1])
    fixed = TopologyRunner(build(None), spark, store, log)
    assert fixed.replay_quarantined(2).txid == 3
    assert counts(store) == truth(BATCHES[:2])


def test_quarantine_refusals_name_the_reason(spark: Any, setup: Any) -> None:
    log, store, _ = setup
    runner = TopologyRunner(build("poison"), spark, store, log)
    with pytest.raises(OutOfOrderCommitError):
        runner.quarantine(2, "x")
    runner.run_batch(1)
    with pytest.raises(QuarantineError) as committed:
        runner.quarantine(1, "x")
    assert str(committed.value) == (
        "txid 1 of topology 'poisoned' has committed (last committed: 1); only the txid after "
        "it can be quarantined"
    )
    with pytest.raises(QuarantineError, match="no txid 7 waits in the quarantine"):
        runner.replay_quarantined(7)

    class Concat(ReducerAggregator):
        def init(self) -> str:
            return ""

        def reduce(self, curr: str, word: str) -> str:
            return curr + word

    topo = TridentTopology("ordered")
    topo.new_stream("s", LogSpout("sentences", StringScheme("sentence"))).group_by(
        "sentence"
    ).persistent_aggregate(StateSpec.opaque("joined"), "sentence", Concat(), "joined")
    ordered = TopologyRunner(topo, spark, store, log)
    with pytest.raises(QuarantineError) as refused:
        ordered.quarantine(1, "x")
    assert str(refused.value) == (
        "cannot quarantine txid 1 of topology 'ordered': state 'joined' uses a Concat, which "
        "folds tuples in order; only combiner aggregates may see records later than others. "
        "Fix the cause and re-run the txid instead"
    )
    loose = TridentTopology("loose")
    spout = LogSpout(
        "sentences", StringScheme("sentence"), SpoutConfig(kind=SpoutKind.NON_TRANSACTIONAL)
    )
    with pytest.warns(UserWarning, match="not exactly-once"):
        loose.new_stream("s", spout).group_by("sentence").persistent_aggregate(
            StateSpec.opaque("n"), "sentence", Count(), "n"
        )
    with pytest.raises(QuarantineError, match="spout 's' is non-transactional"):
        TopologyRunner(loose, spark, store, log).quarantine(1, "x")
    assert store.last_committed("ordered") is None
    assert store.last_committed("loose") is None


def test_replay_refused_once_retention_deleted_the_records(spark: Any, setup: Any) -> None:
    log, store, _ = setup
    runner = TopologyRunner(build("poison"), spark, store, log)
    runner.run_batch(1)
    runner.quarantine(2, "poison")
    log.delete_records_before("sentences", 0, 4)
    with pytest.raises(BatchUnavailableError) as gone:
        TopologyRunner(build(None), spark, store, log).replay_quarantined()
    assert str(gone.value).startswith(
        "quarantined txid 2 can no longer be reprocessed: cannot replay txid 3 of spout "
        "'sentences': it needs sentences@0 offsets 2..3, but the log now holds"
    )
    assert [e.txid for e in runner.quarantined()] == [2], "the entry stays, nothing lost"


# -- the operator's path: the sensor, a quarantine run, the CLI in a clean child process ------

USERLAND = Path(__file__).parent / "userland"
TRIDENT = Path(sys.executable).parent / "trident"


def test_sensor_quarantines_a_poison_txid_and_the_cli_replays_it(
    spark: Any, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    trident = TridentResource(home=str(home))
    log = trident.log()
    log.create_topic("sentences", 1)
    for batch in BATCHES:
        feed(log, *batch)
    topo = build("poison")
    job = trident_definitions([topo], trident).resolve_implicit_global_asset_job_def()
    now = ExponentialBackoff(initial_delay_s=0, delay_period_s=0, max_delay_s=0)

    def run(decision: Any) -> Any:
        assert isinstance(decision, dg.SensorResult), decision
        request = decision.run_requests[0]
        instance.add_dynamic_partitions("poisoned_txids", [request.partition_key])
        return job.execute_in_process(
            partition_key=request.partition_key,
            instance=instance,
            tags=request.tags,
            raise_on_error=False,
        )

    with dg.instance_for_test() as instance:
        assert run(decide_next(instance, topo, trident, now, 1)).success
        poisoned = run(decide_next(instance, topo, trident, now, 1))  # txid 2: poison
        assert not poisoned.success
        # the user's error first, in the step's failure and the run's log, no Java trace
        user_error = (
            "each(sentence) -> sentence, word [PyFunction]: trident_assets_tests.userland."
            "poison_app.build.<locals>.split failed on input tuple ('a poison',): ValueError: "
            "cannot handle 'poison'"
        )
        failure = poisoned.failure_data_for_node("poisoned_batches").error
        assert failure.message == f"dagster._core.definitions.events.Failure: {user_error}\n"
        assert (failure.cause, failure.context) == (None, None)
        assert "java" not in str(failure).lower()
        logged = [e.message for e in instance.all_logs(poisoned.run_id) if e.level == logging.ERROR]
        assert logged[:2] == [
            f"txid 2 failed, nothing committed: UserCodeError: {user_error}",
            'Execution of step "poisoned_batches" failed.',
        ]
        stop = decide_next(instance, topo, trident, now, 1)
        assert isinstance(stop, dg.SkipReason)
        assert stop.skip_message.endswith(
            ". Or set its records aside and move on: `trident quarantine add poisoned 2` (or "
            "launch partition 0000000002 with tag trident/quarantine=<reason>; "
            'coordinator_sensor(on_poison="quarantine") does it itself), then `trident '
            "quarantine replay poisoned` once the cause is fixed."
        )
        decision = decide_next(instance, topo, trident, now, 1, on_poison="quarantine")
        request = decision.run_requests[0]
        assert request.run_key == "poisoned-0000000002-quarantine"
        assert request.tags[QUARANTINE_TAG].startswith("txid 2 failed 1 times (max_attempts=1)")
        held = run(decision)
        assert held.success
        assert {e.check_name: e.passed for e in held.get_asset_check_evaluations()} == {
            "txids_contiguous": True,
            "ranges_contiguous": True,
            "dead_letters_below_threshold": True,
            "lag_below_threshold": True,
            "exactly_once": True,  # the state lacks exactly the quarantined records
        }
        spout_key = dg.AssetKey(["poisoned", "sentences_batch"])
        event = instance.get_latest_materialization_event(spout_key)
        assert event.asset_materialization.partition == "0000000002"
        assert event.asset_materialization.metadata["quarantined"].value == 2
        assert run(decide_next(instance, topo, trident, now, 1)).success  # txid 3 moves on
        with trident.store() as store:
            assert counts(store) == truth([BATCHES[0], BATCHES[2]])

        def trident_cli(*args: str, poison: str = "") -> subprocess.CompletedProcess[str]:
            env = {
                "HOME": str(tmp_path),
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "LANG": "C.UTF-8",
                "PYTHONPATH": str(USERLAND),
                **JVM_ENV,
                "DAGSTER_HOME": instance.root_directory,  # records txid 4 there
                **({"POISON_WORD": poison} if poison else {}),
            }
            return subprocess.run(
                [str(TRIDENT), "quarantine", *args, "--home", str(home)],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip

        shown = subprocess.run(
            [str(TRIDENT), "status", "--home", str(home), "--format", "json"],
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        [status] = json.loads(shown.stdout)
        error = status.pop("last_error")
        assert status == {
            "topology": "poisoned",
            "last_txid": 3,
            "lag": 0,
            "lag_by_partition": "sentences@0=0",
            "quarantined": 2,
        }
        assert error.startswith("txid 2 at ")
        assert error.endswith(
            " (since passed: txid 3 committed): UserCodeError: each(sentence) -> sentence, word "
            "[PyFunction]: trident_assets_tests.userland.poison_app.build.<locals>.split failed "
            "on input tuple ('a poison',): ValueError: cannot handle 'poison'"
        )
        listed = trident_cli("list", "--format", "json")
        assert listed.returncode == 0, listed.stderr
        [row] = json.loads(listed.stdout)
        assert (row["txid"], row["ranges"], row["records"], row["replayed_txid"]) == (
            2, "sentences@0[2..3]", 2, None
        )  # fmt: skip
        failed = trident_cli("replay", "poisoned", "--module", "poison_app", poison="poison")
        assert failed.returncode == 1
        assert failed.stderr.startswith("error: each(sentence) -> sentence, word [PyFunction]: ")
        assert "ValueError: cannot handle 'poison'" in failed.stderr
        fixed = trident_cli("replay", "poisoned", "--module", "poison_app")
        assert (fixed.returncode, fixed.stdout) == (
            0, "quarantined txid 2 of poisoned processed as txid 4\n"
        ), fixed.stderr  # fmt: skip
        with trident.store() as store:
            assert counts(store) == truth(BATCHES)
        # the fixed code deployed (its exactly_once check recomputes txid 2's records too)
        topo = build(None)
        job = trident_definitions([topo], trident).resolve_implicit_global_asset_job_def()
        feed(log, "e a")
        replayed = instance.get_latest_materialization_event(spout_key).asset_materialization
        assert replayed.partition == "0000000004"
        assert replayed.metadata["reprocessed_txid"].value == 2
        assert replayed.metadata["tuples_in"].value == 2
        decision = decide_next(instance, topo, trident, now, 1)
        assert decision.run_requests[0].partition_key == "0000000005", "after the CLI's txid"
        after = run(decision)
        assert after.success
        checks = {e.check_name: e.passed for e in after.get_asset_check_evaluations()}
        assert checks == dict.fromkeys(checks, True), checks
        assert "exactly_once" in checks
        with trident.store() as store:
            assert counts(store) == truth([*BATCHES, ["e a"]])


def test_on_poison_is_validated() -> None:
    with pytest.raises(ConfigError, match='on_poison must be "stop" or "quarantine", got'):
        coordinator_sensor(build(None), on_poison="skip")

"""The main job (``trident demo``): word count through Dagster, a real crash, a replay, a check.

1. Produces seeded sample sentences into the embedded log of the trident home (the default
   home ``.trident``, so ``trident state ...`` and ``trident ui`` read the demo afterwards).
2. Drives the word-count topology through Dagster with its coordinator sensor's decisions,
   one run per txid, on Spark, committing into DuckDB.
3. SIGKILLs the process running one batch between its state write and its commit, shows
   the state unchanged, and lets the coordinator replay the txid (attempt 1).
4. Prints the top words, re-materializes a committed txid (nothing changes), and checks
   the state against counts computed directly from the log: exactly once.

Only the story is printed; Dagster's and Spark's logs go to ``<home>/demo.log`` (``verbose``
prints them too). The home's Dagster instance is ``<home>/dagster`` with the shipped
``dagster.yaml`` (telemetry off). The demo holds the home's lock
(:mod:`trident_assets.home_lock`) from before it empties the home until it ends: it is refused
while ``trident ui`` (or another demo) uses the home. The runs the coordinator's decisions
start are tagged as its sensor's (``dagster/sensor_name``: the UI shows them launched by
``word_count_coordinator``), and every run of the demo ``trident/launched_by: trident demo``.
Ctrl-C is seen even while Dagster runs a batch in the process
(:mod:`trident_assets.cli.demo_interrupt`).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trident_assets.cli.common import engine_logs_to
from trident_assets.cli.demo_home import DEMO_MARKER, check_home, prepare_home, record_home
from trident_assets.cli.demo_interrupt import sigint_check, was_interrupted
from trident_assets.errors import TridentError
from trident_assets.examples.word_count import SENTENCES, build_word_count
from trident_assets.home_lock import home_lock

__all__ = ["DEMO_MARKER", "LOG_FILE", "run_demo"]

TOPOLOGY = "word_count"
STATE = "word_counts"
STATE_TABLE = f"{TOPOLOGY}__{STATE}"
LOG_FILE = "demo.log"
"""Dagster's and Spark's logs of a demo run, in its home."""
LAUNCHED_BY_TAG = "trident/launched_by"
"""Run tag of every run the demo executes: ``trident demo``."""
SENSOR_NAME_TAG = "dagster/sensor_name"
"""Dagster's run tag naming the sensor that requested a run (the UI: "launched by sensor")."""


def _instance(home: Path) -> Any:
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    from trident_assets.cli.ui import dagster_home

    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_home(home))))


def _job(home: Path, crash_at: str | None, batch_size: int) -> tuple[Any, Any, Any]:
    from trident_assets.dagster.factory import trident_definitions
    from trident_assets.dagster.resources import TridentResource

    topo = build_word_count(max_batch_size=batch_size)
    trident = TridentResource(home=str(home), crash_at=crash_at)
    defs = trident_definitions([topo], trident)
    return topo, trident, defs.resolve_implicit_global_asset_job_def()


def _ground_truth(home: Path) -> collections.Counter[str]:
    from trident_assets.log.store import PartitionedLog

    log = PartitionedLog(home / "log")
    counts: collections.Counter[str] = collections.Counter()
    for p in range(log.partitions("sentences")):
        latest = log.latest_offset("sentences", p)
        table = log.read("sentences", p, log.earliest_offset("sentences", p), latest - 1)
        for value in table.column("value").to_pylist():
            counts.update(w for w in value.decode().split(" ") if w)
    return counts


def _state(home: Path) -> tuple[dict[str, int], int | None]:
    from trident_assets.backends.duckdb_store import DuckDBStore

    with DuckDBStore(home / "state.duckdb") as store:
        marker = store.last_committed(TOPOLOGY)
        if store.layout(STATE_TABLE) is None:
            return {}, marker
        rows = store.scan(STATE_TABLE).to_pylist()
    return {r["word"]: r["value"] for r in rows}, marker


def crash_child(home: str, partition_key: str, tags_json: str, batch_size: int) -> None:
    """Run one batch in this process and SIGKILL it between state write and commit."""
    _, _, job = _job(Path(home), "after_state_write", batch_size)
    job.execute_in_process(
        partition_key=partition_key, instance=_instance(Path(home)), tags=json.loads(tags_json)
    )


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path.resolve())


def _demo_command(home: Path, *more: str) -> str:
    """The command that runs the demo over ``home`` again, pasted in this shell's directory.

    ``more``: further arguments (then never ``make demo``, which passes none).
    """
    from trident_assets.cli.common import DEFAULT_HOME

    default = home.resolve() == DEFAULT_HOME.resolve()
    if os.environ.get("MAKELEVEL") and default and not more:
        return "make demo"
    args = [_shown(Path(sys.executable).parent / "trident"), "demo"]
    return shlex.join([*(args if default else [*args, "--home", _shown(home)]), *more])


@dataclass
class _Progress:
    """What the demo is doing now (named when it is interrupted)."""

    doing: str = "preparing its home"


def _interrupted(home: Path, doing: str) -> str:
    """What to tell the user after a Ctrl-C while the demo was ``doing`` something."""
    return (
        f"trident demo interrupted while {doing}. Nothing committed is lost: every txid "
        f"committed before stays committed in {_shown(home)} (a batch stopped before its "
        f"commit changed nothing). Run `{_demo_command(home)}` to run the demo again (it "
        "starts over)."
    )


def run_demo(
    home: Path,
    sentences: int = 20_000,
    batch_size: int = 4_000,
    kill_txid: int = 3,
    verbose: bool = False,
    force: bool = False,
) -> bool:
    """Run the demo in ``home``; return True if the exactly-once check passed.

    The home's lock is held throughout (:mod:`trident_assets.home_lock`). ``force``: move
    what the demo did not write aside (:func:`~trident_assets.cli.demo_home.prepare_home`)
    instead of refusing the home. The demo records what it left when it ends.

    Raises:
        ConfigError: ``home`` holds data the demo did not write (and not ``force``).
        HomeLockedError: ``trident ui`` or another demo uses ``home``; nothing was changed.
        KeyboardInterrupt: interrupted (Ctrl-C, also while a run executes); its message says
            what was interrupted, that nothing committed is lost and how to run the demo again.
    """
    from rich.console import Console

    home = Path(home)
    forced = _demo_command(home, "--force")
    check_home(home, force, forced, read_data=False)  # touches nothing before the lock
    progress = _Progress()
    interrupted = lambda: _interrupted(home, progress.doing)  # noqa: E731
    with home_lock(home, "trident demo"), sigint_check(interrupted) as check_sigint:
        found = check_home(home, force, forced)  # its state read under the lock
        try:
            aside = prepare_home(home, found)
            progress.doing = "producing sentences (step 1)"
            log_path = home / LOG_FILE
            with engine_logs_to(log_path, verbose) as out:
                console = Console(file=out, highlight=False, soft_wrap=True)
                where = "" if verbose else f" (Dagster and Spark logs: {_shown(log_path)})"
                console.print(f"[bold]trident demo[/] in {_shown(home)}{where}")
                if aside is not None:
                    held = ", ".join(found)
                    console.print(f"   moved the home's earlier data ({held}) to {_shown(aside)}")
                return _story(
                    console, home, sentences, batch_size, kill_txid, progress, check_sigint
                )
        except KeyboardInterrupt:
            raise KeyboardInterrupt(_interrupted(home, progress.doing)) from None
        finally:  # what the demo left: a next demo replaces exactly that
            with contextlib.suppress(OSError, TridentError):
                record_home(home)


def _story(
    console: Any,
    home: Path,
    sentences: int,
    batch_size: int,
    kill_txid: int,
    progress: _Progress,
    check_sigint: Callable[[], None],
) -> bool:
    import dagster as dg
    from rich.table import Table

    from trident_assets.cli.common import DEFAULT_HOME
    from trident_assets.cli.ui import paste_command
    from trident_assets.core.retry import ExponentialBackoff
    from trident_assets.dagster.runs import fail_killed_run
    from trident_assets.dagster.sensors import coordinator_name, decide_next
    from trident_assets.log.store import PartitionedLog
    from trident_assets.status import record_failure

    log = PartitionedLog(home / "log")
    log.create_topic("sentences", 4)
    log.create_topic("word_queries", 1)
    rng = random.Random(42)
    producer = log.producer("sentences", partitioner="round_robin")
    for _ in range(sentences):
        producer.send(rng.choice(SENTENCES).encode())
    producer.flush()
    console.print(
        f"[bold]1.[/] produced {sentences:,} sentences into {_shown(home / 'log')} "
        "(topic sentences, 4 partitions)"
    )
    step2 = f"running {TOPOLOGY} through Dagster (step 2"
    progress.doing = f"{step2})"

    topo, trident, job = _job(home, None, batch_size)
    instance = _instance(home)
    backoff = ExponentialBackoff(initial_delay_s=0.0, delay_period_s=0.0, max_delay_s=0.0)
    killed = False
    # the coordinator's decisions, as its sensor would request them
    coordinator = {SENSOR_NAME_TAG: coordinator_name(TOPOLOGY), LAUNCHED_BY_TAG: "trident demo"}
    console.print(
        f"[bold]2.[/] running {TOPOLOGY} through Dagster: one run per txid, Spark + DuckDB"
    )
    while True:
        decision = decide_next(instance, topo, trident, backoff, max_attempts=3)
        if isinstance(decision, dg.SkipReason):
            console.print(f"   coordinator: {decision.skip_message}")
            break
        request = decision.run_requests[0]
        key = request.partition_key
        txid = int(key)
        progress.doing = f"{step2}, txid {txid})"
        tags = {**request.tags, **coordinator}
        instance.add_dynamic_partitions(f"{TOPOLOGY}_txids", [key])
        if txid == kill_txid and not killed:
            killed = True
            before = _state(home)
            console.print(
                f"   txid {txid}: run in a child process, SIGKILLed between its state write "
                "and its commit..."
            )
            sys.stdout.flush()
            sys.stderr.flush()
            child = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "trident_assets.cli.demo",
                    str(home),
                    key,
                    json.dumps(tags),
                    str(batch_size),
                ],
                check=False,
            )
            check_sigint()
            for run in instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": key})):
                if not run.is_finished:
                    # a killed process records nothing itself: its supervisor (here the demo,
                    # in production Dagster's run monitoring) reports the failure
                    killed_msg = (
                        f"run process killed (exit code {child.returncode}) between its state "
                        "write and its commit; the coordinator replays the txid"
                    )
                    fail_killed_run(instance, run, killed_msg)
                    record_failure(home, TOPOLOGY, txid, killed_msg, run.run_id)
            after = _state(home)
            same = "unchanged" if after == before else "CHANGED (bug!)"
            how = " (SIGKILL)" if child.returncode == -9 else ""
            console.print(
                f"   txid {txid}: child exit code {child.returncode}{how}; state and commit "
                f"marker {same} (last committed txid {after[1]})"
            )
            continue
        if txid == 2:
            q = log.producer("word_queries")
            q.send(b"the cow")
            q.send(b"apples moon nosuchword")
            q.flush()
        result = job.execute_in_process(
            partition_key=key, instance=instance, tags=tags, raise_on_error=False
        )
        check_sigint()
        if was_interrupted(result):  # Ctrl-C, even where the signal's byte was not seen
            raise KeyboardInterrupt
        if not result.success:
            console.print(
                f"   txid {txid}: run {result.run_id} failed (see {_shown(home / LOG_FILE)}); "
                "the coordinator replays it"
            )
            continue
        event = next(
            e
            for e in result.get_asset_materialization_events()
            if e.asset_key.path[-1] == "sentences_batch"
        )
        meta = event.materialization.metadata
        attempt = meta["attempt"].value
        what = "replayed after the crash" if attempt > 0 else "committed"
        console.print(
            f"   txid {txid}: {meta['tuples_in'].value:,} sentences {what} "
            f"(attempt {attempt}, {meta['total_s'].value:.1f}s)"
        )

    progress.doing = "reading the state"
    counts, marker = _state(home)
    top = Table(title=f"top words after txid {marker}", title_justify="left")
    top.add_column("word")
    top.add_column("count", justify="right")
    for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]:
        top.add_row(word, f"{n:,}")
    console.print(top)

    # without the asset checks: a re-run of txid 1 would evaluate them against txid 1's
    # materialization, and the UI (which shows the checks of the latest one) would show none
    no_checks = job.get_subset(
        asset_selection=set(job.asset_layer.selected_asset_keys), asset_check_selection=set()
    )
    progress.doing = "re-materializing txid 1 (step 3)"
    again = no_checks.execute_in_process(
        partition_key="0000000001",
        instance=instance,
        tags={LAUNCHED_BY_TAG: "trident demo"},
        raise_on_error=False,
    )
    check_sigint()
    if not again.success:
        console.print(
            f"[bold]3.[/] re-materializing txid 1 failed: run {again.run_id} (see "
            f"{_shown(home / LOG_FILE)})"
        )
        return False
    # a no-op re-run is recorded as observations (the real materialization stays the latest)
    noop = again.get_asset_observation_events()[0].asset_observation_data.asset_observation
    flag = noop.metadata["already_committed"]
    unchanged = _state(home)[0] == counts
    console.print(
        f"[bold]3.[/] re-materialized txid 1: already_committed={flag.value}, "
        f"state unchanged={unchanged}"
    )
    progress.doing = "checking the state against the log (step 4)"
    truth = _ground_truth(home)
    ok = dict(truth) == counts and unchanged
    verdict = "[green]PASSED[/]" if ok else "[red]FAILED[/]"
    console.print(
        f"[bold]4.[/] exactly-once check {verdict}: {sum(counts.values()):,} words in state, "
        f"{sum(truth.values()):,} in the log, {len(counts)} distinct"
    )
    trident = shlex.quote(_shown(Path(sys.executable).parent / "trident"))
    default = home.resolve() == DEFAULT_HOME.resolve()
    other = "" if default else f" --home {shlex.quote(_shown(home))}"
    console.print(f"Read the state: {trident} state scan {TOPOLOGY} {STATE}{other}", markup=False)
    console.print("Open the Dagster UI (http://127.0.0.1:3000) with:")
    console.print(paste_command(home, DEFAULT_HOME), markup=False)
    return ok


if __name__ == "__main__":  # the crash child: python -m trident_assets.cli.demo HOME KEY TAGS SIZE
    from dagster._core.errors import DagsterExecutionInterruptedError

    try:
        crash_child(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
    except (KeyboardInterrupt, DagsterExecutionInterruptedError):
        sys.exit(130)  # Ctrl-C reached the child too: the demo says what was interrupted

"""Chaos soak of live mode: SIGKILL the live run's process under a steady producer, compare.

Run: ``python -m bench.chaos_soak --live [--kills 12] [--seed 7] [--rate 30] [--batch-size 500]
[--root DIR] [--json PATH]``.

The shipped code location (``trident_assets.definitions``, ``TRIDENT_LIVE=all``) runs over a
fresh home as ``trident ui --live`` runs it: the home's Dagster instance and ``dagster.yaml``,
a warm Spark Connect server, and the Dagster daemon (``dagster-daemon run``, which also serves
the code location) supervised by this command as a service manager would (restarted when it
died). The chaos producer (:func:`bench.chaos_soak.run_producer`) appends sentences (a few
malformed) and word queries the whole time. Then, ``--kills`` times: once a live run of
``word_count`` has committed a txid, a random 0-3 s later its process (the run worker, the
code server's child) gets SIGKILL; the code server records the run as failed, and the
coordinator sensor launches a new live run, which replays the txid in flight and goes on.
Once, halfway, the daemon itself gets SIGKILL and is started again 1 s later (the live run
keeps committing meanwhile); the next kill's new live run is launched by the new daemon.

For each kill it prints the seconds from the kill to the next txid committed (published to
the read replica). At the end the producer stops, the live run commits what is left and
stops cleanly (:mod:`trident_assets.dagster.live_stop`), and the state is compared with
every record in the log (:meth:`bench.chaos_soak.Driver.compare`: lost and double-counted
words per key, dead letters, the committed offset ranges of every txid, as Dagster recorded
them, tiling the log). Exits non-zero on any mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import dagster as dg

from bench.chaos_soak import TOPIC, Driver, producer_argv
from trident_assets.backends.replica import Replica
from trident_assets.cli.ui import dagster_home, ui_environment
from trident_assets.dagster.live import LIVE_TAG
from trident_assets.dagster.live_stop import clear_stop, request_stop, wait_live_runs_ended
from trident_assets.spark.local_servers import die_with_parent, start_connect_server

__all__ = ["run_live_soak"]

NAME = "word_count"
"""The topology the soak kills the live run of (the shipped word count)."""
WAIT_S = 300.0
"""The longest wait for one step (a live run to start, a txid to commit, the drain)."""


class LiveDriver(Driver):
    """The batch soak's comparison, with the committed ranges Dagster recorded.

    A txid a live run committed and was killed before reporting is reported by the next live
    run as already committed, without its ranges: the ranges known must tile the log, with a
    gap only where such txids lie.
    """

    def _check_ranges(
        self, name: str, last: int | None, latest: dict[str, int]
    ) -> tuple[bool, str]:
        known = self.committed[name]
        if last is None:
            return False, "nothing committed"
        ends = dict.fromkeys(latest, 0)
        unknown = 0
        for txid in range(1, last + 1):
            if txid not in known:
                unknown += 1
                continue
            for partition, first, nxt in known[txid].get(TOPIC, []):
                if first < ends[partition] or (first > ends[partition] and not unknown):
                    kind = "overlap" if first < ends[partition] else "gap"
                    return False, f"{kind} in {partition} at txid {txid}: {first} after {ends}"
                ends[partition] = nxt
            unknown = 0
        if ends != latest and not unknown:
            return False, f"ranges end at {ends}, the log at {latest}"
        return True, ""


class Soak:
    """The processes, the instance and the figures of one live soak."""

    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        """Prepare the home under ``root`` (its log and topics, its Dagster directory)."""
        self.args = args
        self.root = root
        self.home = root / "home"
        self.location = str(self.home / "state.duckdb")
        self.driver = LiveDriver(args, self.home, self.location)  # creates the topics
        self.dagster_dir = dagster_home(self.home)
        clear_stop(self.dagster_dir)
        self.replica = Replica(self.home / "replica")
        self.rng = random.Random(args.seed)
        self.daemons: list[subprocess.Popen[bytes]] = []
        self.env: dict[str, str] = {}
        self.kills: list[dict[str, Any]] = []
        self.daemon_kill: dict[str, Any] | None = None
        self.problems: list[str] = []

    # -- processes

    def start_daemon(self) -> subprocess.Popen[bytes]:
        """Start ``dagster-daemon run`` over the home's instance and workspace."""
        out = (self.root / "daemon.log").open("ab")
        daemon = subprocess.Popen(
            [str(Path(sys.executable).parent / "dagster-daemon"), "run",
             "-w", str(self.dagster_dir / "workspace.yaml")],
            cwd=self.dagster_dir, env=self.env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        out.close()
        self.daemons.append(daemon)
        return daemon

    def stop_daemons(self) -> None:
        """Stop every daemon started (and what each started: code servers), by process group."""
        live = self.daemons[-1]
        if live.poll() is None:
            live.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                live.wait(60)
        for daemon in self.daemons:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.pid, sig)
                    time.sleep(2)
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.wait(30)

    # -- what the instance and the replica say

    def latest(self) -> int:
        """The last txid of the word count committed and published."""
        return self.replica.latest(NAME) or 0

    def live_run(self, instance: dg.DagsterInstance) -> dg.DagsterRun | None:
        """The word count's live run that is running, if any."""
        runs = instance.get_runs(
            filters=dg.RunsFilter(
                tags={LIVE_TAG: "true", "trident/topology": NAME},
                statuses=[dg.DagsterRunStatus.STARTED],
            ),
            limit=1,
        )
        return runs[0] if runs else None

    @staticmethod
    def worker_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
        """The PID of the run's process (its RUN_START event's), if it logged it."""
        found = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_START)
        event = found[0].dagster_event if found else None
        return event.pid if event is not None and event.pid else None

    def wait(self, what: str, probe: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
        """Poll ``probe`` every 0.2 s until it returns something true; fail after timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = probe()
            if got:
                return got
            time.sleep(0.2)
        raise RuntimeError(f"{what}: not within {timeout_s:.0f} s (see {self.root}/daemon.log)")

    # -- the soak

    def await_new_run(
        self, instance: dg.DagsterInstance, previous: str | None, floor: int
    ) -> dg.DagsterRun:
        """A live run other than ``previous`` runs and a txid after ``floor`` committed."""
        run = self.wait(
            "a new live run",
            lambda: (r := self.live_run(instance)) is not None and r.run_id != previous and r,
        )
        self.wait(f"a txid after {floor}", lambda: self.latest() > floor)
        return run

    def kill_live_run(
        self, instance: dg.DagsterInstance, run: dg.DagsterRun, number: int
    ) -> dict[str, Any]:
        """SIGKILL ``run``'s process 0-3 s from now; then wait for the next live run's commit."""
        pid = self.wait("its process", lambda: self.worker_pid(instance, run.run_id))
        time.sleep(self.rng.uniform(0.0, 3.0))
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            ended = instance.get_run_by_id(run.run_id)
            status = "gone" if ended is None else ended.status.value
            msg = f"run {run.run_id} ended before its kill ({status}): see {self.root}/daemon.log"
            raise RuntimeError(msg) from None
        if b"multiprocessing" not in cmdline:
            raise RuntimeError(f"pid {pid} of run {run.run_id} is not a run worker: {cmdline!r}")
        in_flight = instance.get_run_by_id(run.run_id)
        tag = None if in_flight is None else in_flight.tags.get("trident/txid")
        os.kill(pid, signal.SIGKILL)
        at = time.monotonic()
        latest = self.latest()
        if self.args.verbose:
            print(f"  kill {number}: run {run.run_id[:8]} (pid {pid}) at txid {latest}", flush=True)
        after = self.await_new_run(instance, run.run_id, latest)
        kill = {
            "kill": number, "run_id": run.run_id, "pid": pid, "latest_at_kill": latest,
            "txid_tag": int(tag) if tag else None,
            "restart_s": round(time.monotonic() - at, 2),
            "next_run_id": after.run_id,
            "next_run_attempt": int(after.tags.get("trident/attempt", "0")),
        }  # fmt: skip
        self.kills.append(kill)
        return kill

    def kill_daemon(self) -> None:
        """SIGKILL the daemon, start it again 1 s later, time the next txid committed."""
        daemon = self.daemons[-1]
        latest = self.latest()
        os.kill(daemon.pid, signal.SIGKILL)
        at = time.monotonic()
        daemon.wait(30)
        time.sleep(1.0)
        self.start_daemon()
        self.wait(f"a txid after {latest}", lambda: self.latest() > latest)
        self.daemon_kill = {
            "latest_at_kill": latest,
            "next_txid_s": round(time.monotonic() - at, 2),
        }
        if self.args.verbose:
            print(f"  daemon killed at txid {latest}, restarted", flush=True)

    def drain(self, instance: dg.DagsterInstance) -> None:
        """Wait until Dagster's committed ranges reach the end of every partition of the log."""
        log = self.driver_log()
        ends = {f"{TOPIC}@{p}": log.latest_offset(TOPIC, p) for p in range(log.partitions(TOPIC))}

        def drained() -> bool:
            reached = dict.fromkeys(ends, 0)
            for ranges in self.ranges(instance).values():
                for partition, _first, nxt in ranges.get(TOPIC, []):
                    reached[partition] = max(reached[partition], nxt)
            return reached == ends

        self.wait("the drain", drained)

    def driver_log(self) -> Any:
        """The home's log."""
        from trident_assets.log.store import PartitionedLog

        return PartitionedLog(self.home / "log")

    @staticmethod
    def ranges(
        instance: dg.DagsterInstance, problems: list[str] | None = None
    ) -> dict[int, dict[str, list[list[Any]]]]:
        """Every txid's ranges of the sentences spout as Dagster recorded them (per txid).

        ``problems``: where a txid recorded twice with other ranges is reported.
        """
        from trident_assets.dagster.graph import asset_keys
        from trident_assets.examples.topologies import word_count

        key = asset_keys(word_count)["spout:sentences"]
        found: dict[int, dict[str, list[list[Any]]]] = {}
        reported: set[int] = set()
        records = []
        for fetch in (instance.fetch_materializations, instance.fetch_observations):
            cursor = None
            while True:
                page = fetch(dg.AssetRecordsFilter(asset_key=key), 10_000, cursor, True)
                records += page.records
                if not page.has_more:
                    break
                cursor = page.cursor
        for record in records:  # oldest first: a txid's last record wins
            event = record.event_log_entry.asset_materialization or (
                record.event_log_entry.asset_observation
            )
            if event is None or event.partition is None:
                continue
            reported.add(int(event.partition))
            if "offsets" not in event.metadata:
                continue
            offsets = event.metadata["offsets"].value
            txid = int(event.partition)
            ranges = {TOPIC: [[p, first, last + 1] for p, (first, last) in sorted(offsets.items())]}
            if problems is not None and found.get(txid, ranges) != ranges:
                problems.append(f"txid {txid} recorded with ranges {found[txid]} and {ranges}")
            found[txid] = ranges
        if problems is not None and reported:
            missing = sorted(set(range(1, max(reported) + 1)) - reported)
            if missing:
                problems.append(f"txids {missing} committed without any event in Dagster")
        return found


def run_live_soak(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Run the live soak in ``root`` (see the module); return its figures."""
    started = time.monotonic()
    soak = Soak(args, root)
    server = start_connect_server(root / "spark-connect.log", with_parent=True)
    soak.env = {
        **ui_environment(soak.home, server.url, live=True),
        "TRIDENT_MAX_BATCH_SIZE": str(args.batch_size),
    }
    producer = None
    try:
        # the instance's storage exists before the daemon and its code server open it
        with dg.DagsterInstance.from_config(str(soak.dagster_dir)) as instance:
            soak.start_daemon()
            producer = subprocess.Popen(
                producer_argv(soak.home, args), stdout=subprocess.PIPE, text=True,
                start_new_session=True, preexec_fn=die_with_parent,
            )  # fmt: skip
            run = soak.await_new_run(instance, None, 0)
            for number in range(1, args.kills + 1):
                if number == args.kills // 2 + 1:
                    soak.kill_daemon()
                run = instance.get_run_by_id(run.run_id) or run
                kill = soak.kill_live_run(instance, run, number)
                run = instance.get_run_by_id(kill["next_run_id"]) or run
            chaos_s = time.monotonic() - started
            producer.send_signal(signal.SIGTERM)
            out, _ = producer.communicate(timeout=60)
            produced = json.loads(out.strip().splitlines()[-1])
            soak.drain(instance)
            request_stop(soak.dagster_dir, "the soak ends")
            left = wait_live_runs_ended(soak.dagster_dir, 120)
            if left:
                soak.problems.append(f"live runs {left} did not stop within 120 s")
            ranges = soak.ranges(instance, soak.problems)
            runs = instance.get_runs(filters=dg.RunsFilter(tags={LIVE_TAG: "true"}))
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
        soak.stop_daemons()
        server.stop()
        clear_stop(soak.dagster_dir)
    soak.driver.committed[NAME] = ranges
    comparison = soak.driver.compare(NAME)
    reported_only = sorted(set(range(1, (comparison.last_txid or 0) + 1)) - set(ranges))
    statuses: dict[str, int] = {}
    for run in runs:
        statuses[run.status.value] = statuses.get(run.status.value, 0) + 1
    restarts = sorted(k["restart_s"] for k in soak.kills)
    return {
        "seed": args.seed,
        "kills": len(soak.kills),
        "kill_figures": soak.kills,
        "restart_s_median": restarts[len(restarts) // 2],
        "restart_s_max": restarts[-1],
        "daemon_kill": soak.daemon_kill,
        "live_runs": statuses,
        "produced": produced,
        "chaos_s": round(chaos_s, 1),
        "total_s": round(time.monotonic() - started, 1),
        "comparison": {**asdict(comparison), "ok": comparison.ok},
        "already_committed_txids": reported_only,
        "problems": soak.problems,
        "ok": comparison.ok and not soak.problems,
    }


def print_live(result: dict[str, Any]) -> None:
    """Print the live soak's summary."""
    cmp, produced = result["comparison"], result["produced"]
    print(
        f"live chaos soak (seed {result['seed']}): {result['kills']} SIGKILLs of the live run's "
        f"process survived, each followed by a new live run; chaos phase {result['chaos_s']}s, "
        f"total {result['total_s']}s"
    )
    for kill in result["kill_figures"]:
        replay = (
            f"replaying txid {kill['txid_tag']} (attempt {kill['next_run_attempt']})"
            if kill["next_run_attempt"]
            else "from the next txid (none was in flight)"
        )
        print(
            f"  kill {kill['kill']}: run {kill['run_id'][:8]} at txid {kill['latest_at_kill']}; "
            f"new live run {kill['next_run_id'][:8]} {replay}; next txid committed "
            f"{kill['restart_s']}s after the kill"
        )
    print(
        f"  restart (kill -> next txid committed): median {result['restart_s_median']}s, "
        f"max {result['restart_s_max']}s"
    )
    if result["daemon_kill"]:
        daemon = result["daemon_kill"]
        print(
            f"  daemon SIGKILLed at txid {daemon['latest_at_kill']} and restarted: next txid "
            f"committed {daemon['next_txid_s']}s after the kill (the live run kept running)"
        )
    print(f"  live runs by status: {result['live_runs']}")
    print(
        f"  producer: {produced['good']} sentences + {produced['bad']} malformed records + "
        f"{produced['queries']} queries"
    )
    verdict = "OK" if cmp["ok"] else "MISMATCH"
    print(
        f"  {verdict}: words {cmp['words_truth']} in the log vs {cmp['words_state']} in the "
        f"state: lost {cmp['lost']}, double-counted {cmp['double_counted']}; "
        f"{cmp['keys_mismatched']} keys mismatched; dead letters {cmp['dead_letters']} for "
        f"{cmp['malformed_in_log']} malformed records; ranges up to txid {cmp['last_txid']} "
        f"{'tile the log' if cmp['ranges_ok'] else cmp['ranges_problem']}; read replica "
        f"{cmp['replica_mismatched']} keys differ"
    )
    if result["already_committed_txids"]:
        print(
            f"  txids {result['already_committed_txids']} committed by a run killed before it "
            "reported them: the next live run reported them as already committed"
        )
    for problem in result["problems"]:
        print(f"  PROBLEM: {problem}")
    print("RESULT:", "PASS" if result["ok"] else "FAIL")

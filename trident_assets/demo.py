"""The main job (``trident demo``): word count through Dagster, a real crash, a replay, a check.

1. Creates an embedded log under ``<home>/demo`` and produces seeded sample sentences.
2. Drives the word-count topology through Dagster with its coordinator sensor's decisions,
   one run per txid, on Spark, committing into DuckDB.
3. SIGKILLs the process running one batch between its state write and its commit, shows
   the state unchanged, and lets the coordinator replay the txid.
4. Prints the top words, re-materializes a committed txid (nothing changes), and checks
   the state against counts computed directly from the log: exactly once.
"""

from __future__ import annotations

import collections
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from trident_assets.examples.word_count import SENTENCES, build_word_count

__all__ = ["run_demo"]

TOPOLOGY = "word_count"
STATE_TABLE = f"{TOPOLOGY}__word_counts"


def _instance(dagster_dir: Path) -> Any:
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    dagster_dir.mkdir(parents=True, exist_ok=True)
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(dagster_dir)))


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


def crash_child(home: str, partition_key: str, attempt: str, batch_size: int) -> None:
    """Run one batch in this process and SIGKILL it between state write and commit."""
    _, _, job = _job(Path(home), "after_state_write", batch_size)
    job.execute_in_process(
        partition_key=partition_key,
        instance=_instance(Path(home) / "dagster"),
        tags={"trident/topology": TOPOLOGY, "trident/attempt": attempt},
    )


def run_demo(
    home: Path, sentences: int = 20_000, batch_size: int = 4_000, kill_txid: int = 3
) -> bool:
    """Run the demo under ``<home>/demo``; return True if the exactly-once check passed."""
    import dagster as dg
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from trident_assets.core.retry import ExponentialBackoff
    from trident_assets.dagster.sensors import decide_next
    from trident_assets.log.store import PartitionedLog

    console = Console()
    demo = Path(home) / "demo"
    if demo.exists():
        shutil.rmtree(demo)
    log = PartitionedLog(demo / "log")
    log.create_topic("sentences", 4)
    log.create_topic("word_queries", 1)
    rng = random.Random(42)
    producer = log.producer("sentences", partitioner="round_robin")
    for _ in range(sentences):
        producer.send(rng.choice(SENTENCES).encode())
    producer.flush()
    console.print(
        f"[bold]1.[/] produced {sentences:,} sentences into {demo / 'log'} (4 partitions)"
    )

    topo, trident, job = _job(demo, None, batch_size)
    instance = _instance(demo / "dagster")
    backoff = ExponentialBackoff(initial_delay_s=0.0, delay_period_s=0.0, max_delay_s=0.0)
    killed = False
    console.print(
        f"[bold]2.[/] running {TOPOLOGY} through Dagster, one run per txid (Spark + DuckDB)"
    )
    with Progress(console=console) as progress:
        bar = progress.add_task("records", total=sentences)
        done = 0
        while True:
            decision = decide_next(instance, topo, trident, backoff, max_attempts=3)
            if isinstance(decision, dg.SkipReason):
                progress.console.print(f"   coordinator: {decision.skip_message}")
                break
            request = decision.run_requests[0]
            key = request.partition_key
            instance.add_dynamic_partitions(f"{TOPOLOGY}_txids", [key])
            if int(key) == kill_txid and not killed:
                killed = True
                before = _state(demo)
                progress.console.print(
                    f"   txid {int(key)}: running in a child process that is SIGKILLed "
                    "between its state write and its commit..."
                )
                child = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "trident_assets.demo",
                        str(demo),
                        key,
                        "0",
                        str(batch_size),
                    ],
                    check=False,
                    capture_output=True,
                )
                for run in instance.get_runs(
                    filters=dg.RunsFilter(tags={"dagster/partition": key})
                ):
                    if not run.is_finished:
                        instance.report_run_failed(run)
                after = _state(demo)
                same = "unchanged" if after == before else "CHANGED (bug!)"
                progress.console.print(
                    f"   child exit code {child.returncode} (-9 = SIGKILL); state and commit "
                    f"marker {same}: last committed txid {after[1]}"
                )
                continue
            if int(key) == 2:
                q = log.producer("word_queries")
                q.send(b"the cow")
                q.send(b"apples moon nosuchword")
                q.flush()
            result = job.execute_in_process(
                partition_key=key, instance=instance, tags=request.tags, raise_on_error=False
            )
            event = next(
                e
                for e in result.get_asset_materialization_events()
                if e.asset_key.path[-1] == "sentences_batch"
            )
            meta = event.materialization.metadata
            done += meta["tuples_in"].value if not meta["already_committed"].value else 0
            progress.update(bar, completed=done)
            state = "replayed after the crash" if int(key) == kill_txid else "committed"
            progress.console.print(
                f"   txid {int(key)}: {meta['tuples_in'].value} sentences {state} "
                f"(attempt {request.tags['trident/attempt']}, {meta['total_s'].value:.1f}s)"
            )

    counts, marker = _state(demo)
    top = Table(title=f"top words after txid {marker}")
    top.add_column("word")
    top.add_column("count", justify="right")
    for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]:
        top.add_row(word, f"{n:,}")
    console.print(top)

    again = job.execute_in_process(partition_key="0000000001", instance=instance)
    flag = again.get_asset_materialization_events()[0].materialization.metadata["already_committed"]
    unchanged = _state(demo)[0] == counts
    console.print(
        f"[bold]3.[/] re-materialized txid 1: already_committed={flag.value}, "
        f"state unchanged={unchanged}"
    )
    truth = _ground_truth(demo)
    ok = dict(truth) == counts and unchanged
    verdict = "[green]PASSED[/]" if ok else "[red]FAILED[/]"
    console.print(
        f"[bold]4.[/] exactly-once check {verdict}: {sum(counts.values()):,} words in state, "
        f"{sum(truth.values()):,} in the log, {len(counts)} distinct; "
        f"Dagster UI: DAGSTER_HOME={demo / 'dagster'} TRIDENT_HOME={demo} dagster dev"
    )
    return ok


if __name__ == "__main__":  # the crash child: python -m trident_assets.demo HOME KEY ATTEMPT SIZE
    crash_child(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))

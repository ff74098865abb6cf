"""``trident quarantine list|add|replay``: poison batches set aside, and their later replay.

``list`` reads the state file read-only. ``add`` and ``replay`` run the topology (Spark, the
state file's write lock; Spark's logs go to ``HOME/cli.log``), found by name in a code
location module (``--module``, default ``trident_assets.examples.topologies``: any module-level
topology, or list of them, counts). What they commit is recorded in Dagster's instance
(``$DAGSTER_HOME``, else ``HOME/dagster``) as materializations, as a run would have.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trident_assets.backends.quarantine import waiting
from trident_assets.cli.common import (
    DEFAULT_HOME,
    DEFAULT_MODULE,
    DatabaseOption,
    Format,
    FormatOption,
    HomeOption,
    ModulesOption,
    WaitOption,
    cli_errors,
    code_location,
    emit,
    engine_logs_to,
    module_topologies,
    open_state,
    require_home,
)
from trident_assets.errors import ConfigError, StoreLockedError
from trident_assets.planner import check_quarantine

if TYPE_CHECKING:
    from trident_assets.runtime.outcomes import BatchOutcome
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets.stream.topology import TridentTopology

__all__ = ["DEFAULT_MODULE", "module_topologies", "quarantine_app"]

quarantine_app = typer.Typer(
    help="Poison batches set aside (their offset ranges and error) and their replay.",
    no_args_is_help=True,
)

COLUMNS = ["topology", "txid", "spout", "ranges", "records", "error", "quarantined_at",
           "replayed_txid"]  # fmt: skip
LOG_FILE = "cli.log"
"""Where ``add`` and ``replay`` write Spark's logs (in HOME)."""


@contextmanager
def home_runtime(
    home: Path, topology: str, modules: list[str] | None, database: str | None
) -> Iterator[tuple[TridentTopology, Any, Any]]:
    """``topology`` of code location ``modules``, HOME's ``TridentResource`` and its open store.

    ``database``: the state store (a DuckDB file or a ``postgresql://`` DSN; default
    ``<home>/state.duckdb``). Spark's logs go to ``HOME/cli.log`` meanwhile.
    """
    require_home(home)
    os.environ.setdefault("TRIDENT_HOME", str(home))
    topo = code_location(modules).topology(topology)  # before Spark and Dagster are imported

    from trident_assets.backends.postgres_config import is_postgres_dsn
    from trident_assets.dagster.resources import TridentResource

    key = "state_dsn" if database is not None and is_postgres_dsn(database) else "state_database"
    trident = TridentResource(home=str(home), **{key: database})
    with engine_logs_to(home / LOG_FILE, verbose=False), trident.store() as store:
        yield topo, trident, store


def _run(
    home: Path, topology: str, modules: list[str] | None, work: Any, database: str | None = None
) -> Any:
    """Open ``topology``'s runner over HOME (Spark, the store, the replica) and call ``work``."""
    with home_runtime(home, topology, modules, database) as (topo, trident, store):
        from trident_assets.spark.executor import TopologyRunner

        runner = TopologyRunner(
            topo, trident.spark(), store, trident.log(), replica=trident.replica()
        )
        outcomes = work(runner)
        _report_to_dagster(home, topo, outcomes)
        return outcomes


def _refuse_before_spark(
    home: Path,
    topology: str,
    modules: list[str] | None,
    database: str | None,
    check: Callable[[TridentTopology, Any], None],
) -> None:
    """Run ``check(topology, store)`` over the state opened read-only, before Spark and Dagster.

    A refusal that the declaration and the stored state decide alone (a txid out of order,
    nothing quarantined) then comes at once. The run checks again under the state's write
    lock; without a state file yet, or while a writer holds it, only the run checks.
    """
    require_home(home)
    topo = code_location(modules).topology(topology)
    try:
        store = open_state(home, database, 0.0)
    except (ConfigError, StoreLockedError):
        return
    with store:
        check(topo, store)


def _report_to_dagster(home: Path, topology: TridentTopology, outcomes: list[Any]) -> None:
    """Record the committed txids in Dagster's instance, as a run would have materialized them.

    The instance is ``$DAGSTER_HOME``, else ``HOME/dagster`` (where `trident ui` keeps it);
    without one there is nothing to record. The sensor then continues after these txids and
    the checks see their offsets.
    """
    import dagster as dg

    from trident_assets.dagster.batch_events import batch_events
    from trident_assets.dagster.graph import asset_keys
    from trident_assets.dagster.partitions import txid_key, txid_partitions

    root = os.environ.get("DAGSTER_HOME") or str(home / "dagster")
    if not Path(root).is_dir():
        return
    instance = dg.DagsterInstance.from_config(str(Path(root).resolve()))
    applied = [o for o in outcomes if o.applied]
    partitions = txid_partitions(topology.name).name
    assert partitions is not None
    instance.add_dynamic_partitions(partitions, [txid_key(o.txid) for o in applied])
    keys = asset_keys(topology)
    for outcome in applied:
        for event in batch_events(topology, keys, outcome, 0, True, ()):
            instance.report_runless_asset_event(event)


@quarantine_app.command("list")
def list_(
    topology: Annotated[str | None, typer.Argument(help="Only this topology.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Replayed entries too.")] = False,
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    fmt: FormatOption = Format.table,
    wait: WaitOption = 0.0,
) -> None:
    """The quarantined txids: per spout, the offset ranges set aside and the error."""
    from trident_assets.backends.quarantine import entries

    with cli_errors():
        with open_state(home, database, wait) as store:
            rows = [e.as_row() for e in entries(store, topology, pending_only=not all_)]
        title = None if rows else "nothing waits in the quarantine"
        emit(rows, COLUMNS, fmt, title=title)


@quarantine_app.command("add")
def add(
    topology: Annotated[str, typer.Argument(help="Topology name.")],
    txid: Annotated[
        int, typer.Argument(help="The failing txid (the one after the last committed).", min=1)
    ],
    reason: Annotated[
        str, typer.Option(help="Why (kept with the ranges).")
    ] = "set aside by operator",
    home: HomeOption = DEFAULT_HOME,
    module: ModulesOption = None,
    database: DatabaseOption = None,
) -> None:
    """Set TXID aside: commit it with no state change, its ranges kept in the quarantine."""

    def check(topo: TridentTopology, store: Any) -> None:
        check_quarantine(topo, store.last_committed(topo.name), txid)

    with cli_errors():
        _refuse_before_spark(home, topology, module, database, check)
        [outcome] = _run(home, topology, module, lambda r: [r.quarantine(txid, reason)], database)
    typer.echo(
        f"txid {outcome.txid} of {topology} quarantined: {outcome.quarantined} records set aside; "
        f"`trident quarantine replay {topology}` processes them once the cause is fixed"
    )


@quarantine_app.command("replay")
def replay(
    topology: Annotated[str, typer.Argument(help="Topology name.")],
    txid: Annotated[
        int | None, typer.Option("--txid", min=1, help="This quarantined txid (default: all).")
    ] = None,
    home: HomeOption = DEFAULT_HOME,
    module: ModulesOption = None,
    database: DatabaseOption = None,
) -> None:
    """Process quarantined records, each quarantined txid as the topology's next txid."""

    def work(runner: TopologyRunner) -> list[BatchOutcome]:
        targets = [txid] if txid is not None else sorted({e.txid for e in runner.quarantined()})
        return [runner.replay_quarantined(t) for t in targets or [None]]  # None: says so

    with cli_errors():
        _refuse_before_spark(
            home, topology, module, database, lambda topo, store: waiting(store, topo.name, txid)
        )
        done = _run(home, topology, module, work, database)
    for outcome in done:
        typer.echo(
            f"quarantined txid {outcome.reprocessed_txid} of {topology} processed as txid "
            f"{outcome.txid}"
        )

"""The ``trident`` command: the demo, the UI, states, outputs, dead letters and the embedded log.

Every command takes ``--home`` (envvar ``TRIDENT_HOME``, default ``.trident``, where the demo
writes too). Errors are one ``error: ...`` line on stderr with exit code 1; usage errors exit
2 (see :mod:`trident_assets.cli_common`).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from trident_assets.cli_common import DEFAULT_HOME, HomeOption, cli_errors, require_home
from trident_assets.cli_outputs import dead_letters, outputs
from trident_assets.cli_quarantine import quarantine_app
from trident_assets.cli_state import state_app
from trident_assets.cli_status import status
from trident_assets.log.cli import log_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="trident",
    help="Exactly-once Trident topologies on Dagster + PySpark.",
    no_args_is_help=True,
)
app.add_typer(log_app, name="log")
app.add_typer(state_app, name="state")
app.add_typer(quarantine_app, name="quarantine")
app.command("outputs")(outputs)
app.command("dead-letters")(dead_letters)
app.command("status")(status)


@app.command()
def demo(
    home: HomeOption = DEFAULT_HOME,
    sentences: Annotated[int, typer.Option(help="Sentences to produce.", min=1)] = 20_000,
    batch_size: Annotated[int, typer.Option(help="Max sentences per batch.", min=1)] = 4_000,
    kill_txid: Annotated[int, typer.Option(help="The txid whose process is killed.", min=1)] = 3,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show Dagster and Spark logs here too.")
    ] = False,
) -> None:
    """Run word count through Dagster, crash a batch mid-commit, replay it, check exactly-once.

    The demo writes into HOME (the default home, so `trident state ...` reads it next); it
    refuses a HOME with data it did not write. Dagster and Spark logs go to HOME/demo.log.
    """
    from trident_assets.demo import run_demo

    with cli_errors():
        ok = run_demo(home, sentences, batch_size, kill_txid, verbose=verbose)
    if not ok:
        raise typer.Exit(1)


@app.command()
def ui(
    home: HomeOption = DEFAULT_HOME,
    port: Annotated[int, typer.Option(help="Port of the web UI.", min=1, max=65535)] = 3000,
) -> None:
    """Start `dagster dev` on 127.0.0.1 over HOME (after `trident demo`: its runs and data).

    DAGSTER_HOME is HOME/dagster (absolute) with the shipped dagster.yaml (telemetry off,
    one run at a time per topology); TRIDENT_HOME is HOME.
    """
    from trident_assets.ui import ui_command, ui_environment

    with cli_errors():
        require_home(home)
        command = ui_command(home, port)
        env = ui_environment(home)
    typer.echo(f"DAGSTER_HOME={env['DAGSTER_HOME']} {' '.join(command)}", err=True)
    sys.stdout.flush()
    os.execve(command[0], command, env)  # dagster dev replaces this process (same PID)


def main() -> None:
    """Entry point of the ``trident`` console script."""
    app()

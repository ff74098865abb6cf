"""The ``trident`` command: the demo, the UI, states, outputs, dead letters and the embedded log.

Every command takes ``--home`` (envvar ``TRIDENT_HOME``, default ``.trident``, where the demo
writes too). Errors are one ``error: ...`` line on stderr with exit code 1; usage errors exit
2 (see :mod:`trident_assets.cli.common`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from trident_assets.cli.common import (
    DEFAULT_HOME,
    HomeOption,
    cli_errors,
    find_module,
    require_home,
)
from trident_assets.cli.launch import launch
from trident_assets.cli.log import log_app
from trident_assets.cli.outputs import dead_letters, outputs
from trident_assets.cli.quarantine import quarantine_app
from trident_assets.cli.state import state_app
from trident_assets.cli.status import status

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
app.command("launch")(launch)


@app.command()
def demo(
    home: HomeOption = DEFAULT_HOME,
    sentences: Annotated[int, typer.Option(help="Sentences to produce.", min=1)] = 20_000,
    batch_size: Annotated[int, typer.Option(help="Max sentences per batch.", min=1)] = 4_000,
    kill_txid: Annotated[int, typer.Option(help="The txid whose process is killed.", min=1)] = 3,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show Dagster and Spark logs here too.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Move HOME's log, state and Dagster instance aside (HOME.before-demo-TIME) "
            "when they hold data the demo did not write, instead of refusing.",
        ),
    ] = False,
) -> None:
    """Run word count through Dagster, crash a batch mid-commit, replay it, check exactly-once.

    The demo writes into HOME (the default home, so `trident state ...` reads it next); it
    refuses a HOME with data it did not write (other topics, records, topologies, states or
    txids; --force moves them aside), and a HOME `trident ui` (or another demo) is using.
    Dagster and Spark logs go to HOME/demo.log. Ctrl-C stops it with exit code 130.
    """
    from trident_assets.cli.demo import run_demo

    try:
        with cli_errors():
            ok = run_demo(home, sentences, batch_size, kill_txid, verbose=verbose, force=force)
    except KeyboardInterrupt as stop:
        typer.echo(str(stop) or "trident demo interrupted", err=True)
        raise typer.Exit(130) from None
    if not ok:
        raise typer.Exit(1)


@app.command()
def ui(
    home: HomeOption = DEFAULT_HOME,
    port: Annotated[int, typer.Option(help="Port of the web UI.", min=1, max=65535)] = 3000,
    spark_remote: Annotated[
        str | None,
        typer.Option(
            envvar="TRIDENT_SPARK_REMOTE",
            help="Spark Connect URL (sc://host:port) the runs use instead of a warm server "
            "started here.",
        ),
    ] = None,
    warm_spark: Annotated[
        bool,
        typer.Option(
            "--warm-spark/--local-spark",
            help="Start a Spark Connect server the runs share (default), or let each run "
            "start local Spark in its own process.",
        ),
    ] = True,
    module: Annotated[
        list[str] | None,
        typer.Option(
            "--module",
            "-m",
            envvar="TRIDENT_MODULE",
            help="A code location module of yours (e.g. my_pkg.defs, importable from this "
            "directory or installed) defining `defs = trident_definitions(...)`; repeat for "
            "several. Replaces the built-in examples; add --module trident_assets.definitions "
            "to keep them.",
        ),
    ] = None,
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Live mode: the coordinator of each topology launches a long-lived run that "
            "commits each txid seconds after its records arrive, instead of a run per txid.",
        ),
    ] = False,
) -> None:
    """Start `dagster dev` on 127.0.0.1 over HOME (after `trident demo`: its runs and data).

    With --module, the UI loads your own topologies (each module a code location) instead of
    the built-in examples.

    DAGSTER_HOME is HOME/dagster (absolute) with the shipped dagster.yaml (telemetry off,
    one run at a time per topology); TRIDENT_HOME is HOME. Runs use a warm Spark: a Spark
    Connect server started first (log HOME/spark-connect.log) and stopped with the UI.
    Ctrl-C (or SIGTERM) stops both.
    """
    from trident_assets.cli.ui import serve_ui

    if spark_remote is not None and not spark_remote.startswith("sc://"):
        typer.echo(
            f"error: --spark-remote must be a Spark Connect URL sc://host:port, got "
            f"{spark_remote!r}",
            err=True,
        )
        raise typer.Exit(2)
    with cli_errors():
        require_home(home)
        modules = [find_module(m) for m in dict.fromkeys(module or [])]
        code = serve_ui(
            home,
            port,
            spark_remote=spark_remote,
            warm_spark=warm_spark,
            modules=modules,
            live=live,
            echo=lambda line: typer.echo(line, err=True),
        )
    raise typer.Exit(code)


@app.command("class-cache")
def class_cache(
    rebuild: Annotated[
        bool, typer.Option("--rebuild", help="Dump a new archive even if one exists.")
    ] = False,
) -> None:
    """Build the class archive local Spark JVMs start from (about twice as fast).

    Once per Java and Spark install (`make setup` runs it); about 180 MB under
    ~/.cache/trident_assets, or at TRIDENT_CLASS_CACHE (`off` disables it). An archive
    dumped by another version's workload is rebuilt; one that no longer fits the installed
    Java or Spark is ignored: run this again with --rebuild.
    """
    from trident_assets.spark.class_cache import archive_current, archive_path, build_archive

    with cli_errors():
        path = archive_path()
        if path is not None and archive_current(path) and not rebuild:
            typer.echo(f"class archive {path} exists ({path.stat().st_size >> 20} MiB)")
            return
        built = build_archive(path)
        typer.echo(f"class archive {built} built ({built.stat().st_size >> 20} MiB)")


def main() -> None:
    """Entry point of the ``trident`` console script.

    A crash in native code (a fatal signal: SIGSEGV, SIGABRT, ...) first prints every
    thread's Python stack on stderr (:mod:`faulthandler`), so a report names where it was.

    When the command is done, the process ends without the interpreter's shutdown (after its
    output is flushed and its ``atexit`` handlers ran, as at any exit): that shutdown
    garbage-collects py4j's connections to the Spark JVM while native threads (DuckDB's,
    Arrow's, PySpark's socket servers) are still alive, and aborted a finished ``trident
    demo`` now and then (``terminate called without an active exception``, with the main
    thread in py4j's ``ClientServerConnection.__del__``). The exit status is the command's.
    """
    import faulthandler

    if not faulthandler.is_enabled():
        faulthandler.enable()
    try:
        app()
    except SystemExit as exc:
        _exit_now(exc.code)
    _exit_now(0)


def _exit_now(code: object) -> None:
    """Flush, run the ``atexit`` handlers, end the process with ``code`` (as ``sys.exit``)."""
    import atexit
    import os
    import sys

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): the message on stderr, status 1
        print(code, file=sys.stderr)
        status = 1
    _flush(sys.stdout, sys.stderr)
    atexit._run_exitfuncs()  # temporary directories, logging, pyspark's own handlers
    _flush(sys.stdout, sys.stderr)
    os._exit(status)


def _flush(*streams: object) -> None:
    """Flush ``streams``; a closed one or a reader gone (``trident ... | head``) is no error."""
    import contextlib

    for stream in streams:
        with contextlib.suppress(OSError, ValueError):
            stream.flush()  # type: ignore[attr-defined]

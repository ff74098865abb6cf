"""The Dagster instance of a trident home: ``<home>/dagster`` with the shipped ``dagster.yaml``.

``trident ui`` (and ``make ui``) start ``dagster dev`` on 127.0.0.1 over a home: an absolute
``DAGSTER_HOME`` of ``<home>/dagster`` holding the repository's ``dagster.yaml`` (telemetry
and nux off, one run at a time per topology), ``TRIDENT_HOME`` set to the home, and the
shipped code location ``trident_assets.definitions``. By default it also starts a warm Spark
(a Spark Connect server) that every run ``dagster dev`` launches connects to
(``TRIDENT_SPARK_REMOTE``), instead of each run starting a JVM of its own, and warms it
up in the background: :func:`serve_ui`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

from trident_assets.cli.dagster_dev import IdleTickFilter, copy_filtered
from trident_assets.dagster.live_stop import clear_stop, request_stop, wait_live_runs_ended
from trident_assets.errors import ConfigError
from trident_assets.names import LIVE_ENV, SPARK_REMOTE_ENV
from trident_assets.spark.local_servers import (
    die_with_parent,
    start_connect_server,
    stop_process_group,
)

__all__ = [
    "SPARK_REMOTE_ENV",
    "IdleTickFilter",
    "check_port",
    "dagster_home",
    "paste_command",
    "serve_ui",
    "instance_dir",
    "stop_process_group",
    "ui_environment",
]


BUILTIN_MODULE = "trident_assets.definitions"
"""The shipped code location: the example topologies."""


def workspace_yaml(modules: Sequence[str] = (), working_directory: Path | None = None) -> str:
    """A workspace of the code location modules ``modules`` (default: the shipped one).

    Each module is its own code location, named after it; ``working_directory`` (absolute) is
    where a user's modules are imported from (the directory ``trident ui`` ran in).
    """
    header = (
        "# Written by `trident ui --module`: one code location per module."
        if modules
        else "# Written by trident_assets: the shipped code location (as the repository's "
        "workspace.yaml)."
    )
    lines = [header, "load_from:"]
    for module in modules or (BUILTIN_MODULE,):
        lines += ["  - python_module:", f"      module_name: {module}"]
        name = "trident_assets" if module == BUILTIN_MODULE else module.replace(".", "_")
        lines.append(f"      location_name: {name}")
        if working_directory is not None and module != BUILTIN_MODULE:
            lines.append(f"      working_directory: {json.dumps(str(working_directory))}")
    return "\n".join(lines) + "\n"


_FALLBACK_YAML = """\
# Written by trident_assets (the repository's dagster.yaml was not found next to the package).
telemetry:
  enabled: false
nux:
  enabled: false
concurrency:
  runs:
    tag_concurrency_limits:
      - key: trident/topology
        value:
          applyLimitPerUniqueValue: true
        limit: 1
"""


def instance_dir(path: Path) -> Path:
    """Create Dagster instance directory ``path`` with the shipped ``dagster.yaml`` if it has none.

    The shipped file is the repository's (a minimal equivalent if it is not installed).
    """
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    if not config.exists():
        shipped = Path(__file__).resolve().parents[2] / "dagster.yaml"
        text = shipped.read_text(encoding="utf-8") if shipped.is_file() else _FALLBACK_YAML
        config.write_text(text, encoding="utf-8")
    return path


def dagster_home(
    home: Path, modules: Sequence[str] = (), working_directory: Path | None = None
) -> Path:
    """Create ``<home>/dagster`` (absolute) with the shipped ``dagster.yaml`` if it has none.

    A ``workspace.yaml`` naming the code locations (``modules``, default the shipped one; see
    :func:`workspace_yaml`) is written next to it, so ``dagster dev -w
    <home>/dagster/workspace.yaml`` works from any directory.
    """
    path = instance_dir(Path(home).resolve() / "dagster")
    workspace = workspace_yaml(modules, working_directory)
    (path / "workspace.yaml").write_text(workspace, encoding="utf-8")
    return path


def ui_environment(
    home: Path, spark_remote: str | None = None, *, live: bool = False
) -> dict[str, str]:
    """The environment of ``dagster dev`` over ``home``: absolute DAGSTER_HOME and TRIDENT_HOME.

    ``spark_remote``: the Spark Connect URL its runs use (``TRIDENT_SPARK_REMOTE``); without
    it, an inherited ``TRIDENT_SPARK_REMOTE`` is dropped and each run starts local Spark.
    ``live``: every topology runs live (``TRIDENT_LIVE=all``; else an inherited value stays).
    """
    env = {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home(home)),
        "TRIDENT_HOME": str(Path(home).resolve()),
    }
    env.pop(SPARK_REMOTE_ENV, None)
    if spark_remote:
        env[SPARK_REMOTE_ENV] = spark_remote
    if live:
        env[LIVE_ENV] = "all"
    return env


def ui_command(home: Path, port: int) -> list[str]:
    """``dagster dev`` on 127.0.0.1:``port`` with the workspace of ``home``.

    Run by this Python with FutureWarnings ignored in that one process: ``dagster dev``
    warns on every start that it is superseded by ``dg dev`` (not installed here).
    """
    dagster = Path(sys.executable).parent / "dagster"
    workspace = dagster_home(home) / "workspace.yaml"
    return [
        sys.executable, "-W", "ignore::FutureWarning", str(dagster),
        "dev", "--host", "127.0.0.1", "--port", str(port), "-w", str(workspace),
    ]  # fmt: skip


def paste_command(home: Path, default_home: Path) -> str:
    """One command that opens the UI over ``home`` when pasted in this shell's directory."""
    if os.environ.get("MAKELEVEL") and Path(home).resolve() == default_home.resolve():
        return "make ui"
    trident = Path(sys.executable).parent / "trident"
    try:
        shown = str(trident.relative_to(Path.cwd()))
    except ValueError:
        shown = str(trident)
    args = [shown, "ui"]
    if Path(home).resolve() != default_home.resolve():
        args += ["--home", str(Path(home).resolve())]
    return shlex.join(args)


def serve_ui(
    home: Path,
    port: int,
    *,
    spark_remote: str | None = None,
    warm_spark: bool = True,
    modules: Sequence[str] = (),
    live: bool = False,
    echo: Callable[[str], None] = print,
) -> int:
    """Run ``dagster dev`` over ``home`` until it exits or this process is told to stop.

    Spark for the runs ``dagster dev`` launches: ``spark_remote`` (a Spark Connect URL) if
    given; else, with ``warm_spark``, a Spark Connect server (``local[2]``, log
    ``<home>/spark-connect.log``) started here first and shared by every run, so a run does not
    start a JVM of its own, and warmed up in the background once ``dagster dev`` is started
    (:func:`~trident_assets.spark.warm_up.warm_up_server`); else local Spark in each run's
    process. ``modules``: the code location modules (default: the shipped one), imported
    from the current directory.
    ``live``: every topology runs live (``TRIDENT_LIVE=all``: a live run per topology commits
    each txid seconds after its records arrive; :mod:`trident_assets.dagster.live`).
    ``dagster dev`` runs in ``<home>/dagster`` (so a ``dagster.yaml`` of the current directory
    is not mistaken for the instance's). Its output is copied to this process's stdout without
    sensor ticks that request nothing (:class:`IdleTickFilter`).

    Before anything starts, it takes the home's lock (:mod:`trident_assets.home_lock`, held
    until it returns: ``trident demo`` and another ``trident ui`` are refused meanwhile),
    checks that ``port`` is free (:func:`check_port`) and that each module imports
    (:func:`check_modules`).

    SIGINT or SIGTERM to this process stops ``dagster dev`` (its own process group, sent
    the same signal), then the Spark Connect server, by PID. In live mode the live runs end
    first, after the txids in hand (:func:`_end_live_runs`; a second signal stops at once).
    Both children also get SIGTERM from the kernel if this process dies without stopping
    them (SIGKILL). Returns ``dagster dev``'s exit status (0 after a stop so requested).

    Raises:
        HomeLockedError: another ``trident ui`` or a demo uses ``home``; nothing started.
        ConfigError: ``port`` is in use, or a module fails on import; nothing started.
        TridentError: the Spark Connect server did not start (see its log).
    """
    from trident_assets.home_lock import acquire_home_lock

    lock = acquire_home_lock(home, f"trident ui on port {port}")
    try:
        check_port(port)
        check_modules(modules, ui_environment(home, spark_remote, live=live), Path.cwd())
    except BaseException:
        lock.release()
        raise
    stop_requested: list[int] = []
    graceful = False  # live mode: the first signal lets the live runs end first

    def _request_stop(signum: int, _frame: FrameType | None) -> None:
        stop_requested.append(signum)
        if dev is not None and dev.poll() is None and (len(stop_requested) > 1 or not graceful):
            os.killpg(dev.pid, signum)

    dev: subprocess.Popen[bytes] | None = None
    copier: threading.Thread | None = None
    previous = {s: signal.signal(s, _request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    server = None
    warming: threading.Thread | None = None
    scratch: Path | None = None  # the warm-up's log
    stopping = threading.Event()  # set before the server stops: a warm-up then stays quiet
    try:
        if spark_remote is None and warm_spark:
            log_path = Path(home).resolve() / "spark-connect.log"
            server = start_connect_server(log_path, with_parent=True)
            spark_remote = server.url
            echo(
                f"Spark Connect {server.url} (pid {server.process.pid}, log {log_path}): "
                "every run launched by dagster dev uses it"
            )
        command = ui_command(home, port)
        env = ui_environment(home, spark_remote, live=live)
        here = Path.cwd().resolve()
        dagster_home(home, modules, here)  # the workspace of these modules
        shown = f" {SPARK_REMOTE_ENV}={spark_remote}" if spark_remote else ""
        shown += f" {LIVE_ENV}={env[LIVE_ENV]}" if env.get(LIVE_ENV) else ""
        echo(f"DAGSTER_HOME={env['DAGSTER_HOME']}{shown} {' '.join(command)}")
        if stop_requested:
            return 0
        graceful = bool(env.get(LIVE_ENV))
        if graceful:
            clear_stop(Path(env["DAGSTER_HOME"]))  # a stop request of an earlier trident ui
        sys.stdout.flush()
        dev = subprocess.Popen(
            command,
            env=env,
            # your code locations run where you are (their relative paths, e.g. a
            # TridentResource's home, mean what they mean in your shell); the built-in
            # examples' (absolute TRIDENT_HOME) in DAGSTER_HOME, away from a dagster.yaml
            # here that would not be used
            cwd=here if modules else env["DAGSTER_HOME"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        assert dev.stdout is not None
        copier = threading.Thread(
            target=copy_filtered,
            args=(dev.stdout, IdleTickFilter().keep),
            name="dagster-dev-log",
            daemon=True,
        )
        echo(f"dagster dev: pid {dev.pid}")
        sys.stdout.flush()
        copier.start()
        if server is not None:
            scratch = Path(tempfile.mkdtemp(prefix="trident-warm-up-"))
            from trident_assets.spark.warm_up import warm_up_server

            warming = warm_up_server(server.url, scratch, echo, stopping)
        while dev.poll() is None and not stop_requested:
            with contextlib.suppress(subprocess.TimeoutExpired):
                dev.wait(timeout=0.5)  # a signal's handler runs meanwhile
        if graceful and stop_requested and dev.poll() is None:
            _end_live_runs(Path(env["DAGSTER_HOME"]), echo, stop_requested)
            if dev.poll() is None and len(stop_requested) == 1:
                dev.send_signal(signal.SIGINT)  # dagster dev stops its services itself
        return dev.wait()
    finally:
        if dev is not None:
            stop_process_group(dev)
        if copier is not None:
            copier.join(timeout=10)
        stopping.set()
        if server is not None:
            server.stop()
        if warming is not None:
            warming.join(timeout=10)  # its server is gone: it ends with an error
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        if graceful:
            clear_stop(Path(env["DAGSTER_HOME"]))
        if stop_requested:
            echo("trident ui stopped: nothing it started runs")
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        lock.release()


_IMPORT_CHECK = """
import importlib, json, sys, traceback
try:
    importlib.import_module(sys.argv[1])
except BaseException as exc:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    print("\\n" + json.dumps({"error": f"{type(exc).__name__}: {exc}", "where": where}))
    sys.exit(3)
"""


def check_modules(modules: Sequence[str], env: Mapping[str, str], cwd: Path) -> None:
    """Import each code location module in a child process, as ``dagster dev`` will.

    The child has ``env`` and runs in ``cwd`` (``cwd`` first on ``sys.path``), so a module that
    imports here loads in ``dagster dev``'s code server too; importing it in this process
    could start what the module starts (a SparkSession, a store) before anything is checked.

    Raises:
        ConfigError: a module fails on import; names it, the exception and where it was raised.
    """
    for module in modules:
        if module == BUILTIN_MODULE:
            continue
        done = subprocess.run(
            [sys.executable, "-c", _IMPORT_CHECK, module],
            cwd=cwd,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            continue
        lines = done.stdout.strip().splitlines()
        try:
            found = json.loads(lines[-1])
        except (IndexError, ValueError):
            found = {"error": f"its import exited with code {done.returncode}", "where": ""}
        error = " ".join(str(found["error"]).split())
        where = f" (at {found['where']})" if found["where"] else ""
        msg = (
            f"--module {module!r} fails on import: {error}{where}; nothing was "
            f"started: fix the module (`python -c 'import {module}'` shows the traceback), "
            "then run trident ui again"
        )
        raise ConfigError(msg)


LIVE_STOP_TIMEOUT_S = 120.0
"""How long a stopping ``trident ui --live`` waits for its live runs to end."""


def _end_live_runs(dagster_dir: Path, echo: Callable[[str], None], signals: list[int]) -> None:
    """Ask the live runs to end after the txids in hand and wait until they have.

    See :mod:`trident_assets.dagster.live_stop`. A further signal in ``signals`` (a second
    Ctrl-C) or :data:`LIVE_STOP_TIMEOUT_S` ends the wait: ``dagster dev``'s stop then
    interrupts a run still going, whose txid in flight the next live run replays.
    """
    echo(
        "Stopping trident ui: each live run ends after the txids in hand (Ctrl-C again to stop "
        "at once; a txid in flight is then replayed at the next start)"
    )
    sys.stdout.flush()
    request_stop(dagster_dir, "trident ui is stopping")
    left = wait_live_runs_ended(dagster_dir, LIVE_STOP_TIMEOUT_S, lambda: len(signals) > 1)
    if left:
        echo(
            f"live runs {', '.join(left)} still run: they stop with dagster dev; the next "
            "live run replays their txid in flight"
        )


def check_port(port: int, host: str = "127.0.0.1") -> None:
    """Refuse ``port`` of ``host`` if a server listens there (as ``dagster dev`` would fail to).

    Raises:
        ConfigError: the port is in use (or cannot be bound); the message says ``--port N``.
    """
    import errno

    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the webserver binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                msg = (
                    f"port {port} on {host} is in use (another `trident ui` or `dagster dev`?): "
                    "stop the process listening on it, or pass --port N with a free port"
                )
            else:
                msg = f"cannot listen on {host}:{port} ({exc.strerror}): pass --port N"
            raise ConfigError(msg) from None

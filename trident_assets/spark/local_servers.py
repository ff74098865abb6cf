"""Spark servers on 127.0.0.1 from the pip ``pyspark`` distribution: Spark Connect, standalone.

For tests, benchmarks and trying a cluster setup on one machine. Each server runs in its own
process group and is stopped by PID (:meth:`SparkServer.stop`).

Example (a shell)::

    python -m trident_assets.spark.local_servers connect      # prints sc://127.0.0.1:PORT
    python -m trident_assets.spark.local_servers standalone   # prints spark://127.0.0.1:PORT
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from trident_assets.errors import TridentError
from trident_assets.local_ports import free_port
from trident_assets.spark.session import JAVA_OPTIONS, driver_java_options, local_daemon_conf

__all__ = [
    "SparkServer",
    "StandaloneCluster",
    "die_with_parent",
    "start_connect_server",
    "start_standalone",
    "stop_process_group",
]

START_TIMEOUT_S = 120.0
STRAGGLER_SIGNAL_S = 2.0
"""After a stopped group's leader exited: seconds between repeats of the stop signal."""


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class SparkServer:
    """A running server: its process, URL and log file."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    started_s: float
    """Seconds until it accepted connections."""
    _log: IO[bytes] | None = None

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the server's whole process group (the JVM and its Python workers) by PID."""
        stop_process_group(self.process, timeout_s=timeout_s)
        if self._log is not None:
            self._log.close()
            self._log = None


def stop_process_group(
    proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout_s: float = 60.0
) -> None:
    """Stop ``proc`` (leader of its own process group) and wait until nothing of the group runs.

    ``sig`` goes to the group unless the leader has exited already; whatever still runs after
    ``timeout_s`` gets SIGKILL. ``dagster dev`` exits before its webserver, daemon and code
    servers have: they are in its group. Once the leader has exited, ``sig`` goes to the group
    again every :data:`STRAGGLER_SIGNAL_S`: a process started after the first signal (``dagster
    dev`` may restart a code server while it shuts down) never got it, and would otherwise run
    until its own heartbeat times out.
    """
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    deadline = time.monotonic() + timeout_s
    resignal = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            now = time.monotonic()
            if resignal is None:
                resignal = now + STRAGGLER_SIGNAL_S
            elif now >= resignal:
                resignal = now + STRAGGLER_SIGNAL_S
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(30)


def die_with_parent() -> None:
    """In a child before exec: the kernel sends it SIGTERM when its parent dies (Linux).

    For servers a supervisor starts in their own process group: they stop with it even when
    it is killed with SIGKILL and cannot stop them itself. SIGTERM is first made deliverable
    (default action, unblocked): an ignored or blocked SIGTERM is inherited across ``exec``,
    and a JVM keeps a SIGTERM its parent ignored. A no-op where ``prctl`` is missing.
    """
    import ctypes

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _start(
    cmd: Sequence[str],
    port: int,
    url: str,
    log_path: Path,
    env: Mapping[str, str],
    *,
    with_parent: bool = False,
) -> SparkServer:
    log = log_path.open("wb")
    started = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd),
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(env),
        cwd=log_path.parent,  # workers start here: nothing of the caller's directory leaks in
        start_new_session=True,
        preexec_fn=die_with_parent if with_parent else None,
    )
    server = SparkServer(proc, url, log_path, 0.0, log)
    while time.perf_counter() - started < START_TIMEOUT_S:
        if proc.poll() is not None:
            server.stop()
            msg = f"Spark server exited with {proc.returncode} before listening; see {log_path}"
            raise TridentError(msg)
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                server.started_s = time.perf_counter() - started
                return server
        time.sleep(0.5)
    server.stop()
    msg = f"Spark server did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S:.0f} s"
    raise TridentError(msg)


def start_connect_server(
    log_path: Path,
    *,
    master: str = "local[2]",
    worker_python: str | None = None,
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    with_parent: bool = False,
) -> SparkServer:
    """Start a Spark Connect server on 127.0.0.1 and wait until it listens.

    ``worker_python``: the interpreter of its Python workers (default: this one).
    ``with_parent``: the server gets SIGTERM when this process dies (:func:`die_with_parent`).

    Raises:
        TridentError: the server exited or did not listen within two minutes.
    """
    home = spark_home()
    port = free_port()
    python = worker_python or sys.executable
    settings = {
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.pyspark.python": python,
        **(conf or {}),
    }
    settings[JAVA_OPTIONS] = driver_java_options(
        {"spark.master": master, **settings},
        quiet_log=False,
        environ=os.environ if env is None else env,
    )
    settings.update(local_daemon_conf({"spark.master": master, **settings}, same_cwd=False))
    cmd = [
        str(home / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        master,
        "--driver-memory",
        "2g",
        *[arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")],
        "spark-internal",
    ]
    full_env = {
        **(os.environ if env is None else env),
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": python,
    }
    return _start(cmd, port, f"sc://127.0.0.1:{port}", log_path, full_env, with_parent=with_parent)


@dataclass
class StandaloneCluster:
    """A standalone master and one worker on 127.0.0.1."""

    master: SparkServer
    worker: SparkServer

    @property
    def url(self) -> str:
        """The master URL (``spark://127.0.0.1:PORT``) to give ``spark.master``."""
        return self.master.url

    def stop(self) -> None:
        """Stop the worker (and its executors), then the master, by PID."""
        self.worker.stop()
        self.master.stop()


def start_standalone(
    directory: Path,
    *,
    cores: int = 2,
    memory: str = "2g",
    env: Mapping[str, str] | None = None,
    worker_prefix: Sequence[str] = (),
) -> StandaloneCluster:
    """Start a standalone master and one worker on 127.0.0.1 (logs and work dir in ``directory``).

    The executors run in the worker's work directory: they see the driver's files only by
    path (one machine), and import nothing from the driver's working directory. Master,
    worker and executors start from the class archive when there is one.
    ``worker_prefix``: a command the worker runs under (e.g. ``unshare``: executors with a
    filesystem view of their own).

    Raises:
        TridentError: a server exited or did not listen within two minutes.
    """
    home = spark_home()
    directory.mkdir(parents=True, exist_ok=True)
    full_env = {
        **(os.environ if env is None else env),
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(directory),
        "SPARK_WORKER_DIR": str(directory / "work"),
    }
    tool_options = _with_archive(full_env.get("JAVA_TOOL_OPTIONS", ""))
    if tool_options:
        full_env["JAVA_TOOL_OPTIONS"] = tool_options
    spark_class = str(home / "bin" / "spark-class")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    master_cmd = [
        spark_class, "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
    ]  # fmt: skip
    master = _start(master_cmd, port, url, directory / "master.log", full_env)
    worker_port = free_port()
    worker_cmd = [
        *worker_prefix, spark_class, "org.apache.spark.deploy.worker.Worker", url,
        "--host", "127.0.0.1", "--port", str(worker_port), "--webui-port", str(free_port()),
        "--cores", str(cores), "--memory", memory, "--work-dir", str(directory / "work"),
    ]  # fmt: skip
    try:
        worker = _start(worker_cmd, worker_port, url, directory / "worker.log", full_env)
    except TridentError:
        master.stop()
        raise
    return StandaloneCluster(master, worker)


def _with_archive(options: str) -> str:
    """``JAVA_TOOL_OPTIONS`` for a local cluster's JVMs: the class archive added when there is one.

    Every JVM of the cluster (master, worker and the executors the worker forks, which
    inherit its environment) then starts from the archive of this Spark install
    (:mod:`~trident_assets.spark.class_cache`); each notes "Picked up JAVA_TOOL_OPTIONS" in
    its own log. Options that already name an archive are kept as they are.
    """
    from trident_assets.spark.class_cache import archive_options

    if "SharedArchiveFile=" in options or "ArchiveClassesAtExit=" in options:
        return options
    return " ".join(p for p in (options.strip(), archive_options()) if p)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m trident_assets.spark.local_servers connect|standalone``: run until interrupted.

    Prints the URL to give ``spark_remote`` (``sc://...``) or ``spark.master``
    (``spark://...``); logs go to the current directory.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["connect"]:
        server = start_connect_server(Path("spark-connect.log").resolve())
        print(server.url, flush=True)
        stop, wait = server.stop, server.process.wait
    elif args[:1] == ["standalone"]:
        cluster = start_standalone(Path("spark-standalone").resolve())
        print(cluster.url, flush=True)
        stop, wait = cluster.stop, cluster.worker.process.wait
    else:
        print(
            "usage: python -m trident_assets.spark.local_servers connect|standalone",
            file=sys.stderr,
        )
        raise SystemExit(2)
    try:
        wait()
    except KeyboardInterrupt:
        stop()


if __name__ == "__main__":
    main()

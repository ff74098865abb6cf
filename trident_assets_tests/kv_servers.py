"""Local key-value servers on 127.0.0.1: memcached servers and a Redis Cluster, under a directory.

For tests and benchmarks, as :mod:`trident_assets.backends.postgres_server` is for PostgreSQL
(and :mod:`trident_assets_tests.kafka_broker` for Kafka).
:class:`MemcachedServers` starts ``n`` memcached processes; :class:`RedisClusterServers`
starts ``masters * (1 + replicas)`` ``redis-server --cluster-enabled yes`` processes (AOF on,
no RDB), gives each master an equal range of the 16384 hash slots and makes the other nodes
their replicas (``CLUSTER ADDSLOTSRANGE``/``MEET``/``REPLICATE``: one master works too, which
``redis-cli --cluster create`` refuses). Both use free ports, keep every file under the given
directory, and stop their processes by PID (:meth:`stop`; both are context managers). The
Debian packages ``memcached`` and ``redis-server`` (7.0 or later) provide the binaries
(``scripts/setup.sh``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Self

__all__ = ["MemcachedServers", "RedisClusterServers", "free_port", "servers_installed"]

NODE_TIMEOUT_MS = 1000
"""The cluster's node timeout: a killed master's replica takes over about a second later."""
SLOTS = 16384


def servers_installed() -> bool:
    """True when memcached, redis-server and redis-cli are on PATH."""
    return all(shutil.which(b) for b in ("memcached", "redis-server", "redis-cli"))


def free_port(below: int = 55000) -> int:
    """A free 127.0.0.1 port under ``below`` (a cluster node also uses port + 10000)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < below:
            return port


class PortTakenError(RuntimeError):
    """The server exited before answering: most often its free port was taken meanwhile."""


STARTS = 5
"""Tries to start a new server, each on another free port (a port can be taken between
:func:`free_port` and the server's bind)."""


def _wait_port(port: int, proc: subprocess.Popen[bytes], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None:
            msg = f"the server on 127.0.0.1:{port} exited with {proc.returncode} before answering"
            raise PortTakenError(msg)
        time.sleep(0.02)
    msg = f"no server answered on 127.0.0.1:{port} within {seconds} s"
    raise TimeoutError(msg)


def _on_free_port(start: Any) -> int:
    """Call ``start(port)`` on a free port, another one if the server exits first; the port."""
    for attempt in range(STARTS):
        port = free_port()
        try:
            start(port)
        except PortTakenError:
            if attempt == STARTS - 1:
                raise
            continue
        return port
    msg = "unreachable"
    raise AssertionError(msg)


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)


class _Stopped(ABC):
    """Servers used as a context manager: stopped by PID on the way out."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @abstractmethod
    def stop(self) -> None:
        """Stop every server by PID."""


class MemcachedServers(_Stopped):
    """``n`` memcached servers (``memory_mb`` each)."""

    def __init__(self, root: Path, n: int = 3, memory_mb: int = 64) -> None:
        """Start them (logs under ``root``)."""
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.memory_mb = memory_mb
        self.ports = [0] * n
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * n
        try:
            for i in range(n):
                self.ports[i] = _on_free_port(lambda port, i=i: self._start_on(i, port))
        except BaseException:
            self.stop()
            raise

    @property
    def servers(self) -> list[str]:
        """``host:port`` of each server."""
        return [f"127.0.0.1:{p}" for p in self.ports]

    def start(self, i: int) -> None:
        """Start server ``i`` (empty) on its port."""
        self._start_on(i, self.ports[i])

    def _start_on(self, i: int, port: int) -> None:
        log = (self.root / f"memcached-{i}.log").open("ab")
        self.procs[i] = subprocess.Popen(
            ["memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(port),
             "-m", str(self.memory_mb)],
            stdout=log,
            stderr=log,
        )  # fmt: skip
        _wait_port(port, self.procs[i])

    def restart(self, i: int) -> None:
        """Stop server ``i`` and start it again: it comes back with no keys."""
        _stop(self.procs[i])
        self.start(i)

    def stop(self) -> None:
        """Stop every server by PID."""
        for proc in self.procs:
            _stop(proc)


class RedisClusterServers(_Stopped):
    """A Redis Cluster of ``masters`` masters with ``replicas`` replicas each."""

    def __init__(
        self,
        root: Path,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = NODE_TIMEOUT_MS,
    ) -> None:
        """Start the nodes (files under ``root``) and form the cluster; wait until it is ok.

        The first ``masters`` ports are the masters, in slot order; node ``masters + i`` is
        a replica of master ``i % masters``. ``node_timeout_ms``: how long a master may not
        answer before its replica takes over (Redis's default is 15000; a loaded machine
        holding millions of keys needs more than the tests' 1 s).
        """
        if masters < 1 or replicas < 0:
            msg = f"need masters >= 1 and replicas >= 0, got {masters} and {replicas}"
            raise ValueError(msg)
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.n_masters = masters
        self.node_timeout_ms = node_timeout_ms
        self.ports: list[int] = []
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        try:
            for _ in range(masters * (1 + replicas)):
                self.ports.append(_on_free_port(self.start_node))
            self._form()
            self.wait_ok()
            self.wait_synced()
        except BaseException:
            self.stop()
            raise

    def _form(self) -> None:
        """Assign the slots, join every node, make the replicas replicate their masters."""
        masters = self.ports[: self.n_masters]
        for i, port in enumerate(masters):
            first, last = SLOTS * i // len(masters), SLOTS * (i + 1) // len(masters) - 1
            self._ok(port, "cluster", "addslotsrange", str(first), str(last))
        for port in self.ports[1:]:
            self._ok(port, "cluster", "meet", "127.0.0.1", str(self.ports[0]))
        ids = {p: self.cli(p, "cluster", "myid").strip() for p in masters}
        deadline = time.monotonic() + 30
        for i, port in enumerate(self.ports[self.n_masters :]):
            master_id = ids[masters[i % len(masters)]]
            while True:  # the replica must know the master's node before replicating it
                if self.cli(port, "cluster", "replicate", master_id).strip() == "OK":
                    break
                if time.monotonic() > deadline:
                    msg = f"node 127.0.0.1:{port} could not replicate {master_id}"
                    raise TimeoutError(msg)
                time.sleep(0.05)

    def _ok(self, port: int, *args: str) -> None:
        reply = self.cli(port, *args).strip()
        if reply != "OK":
            msg = f"redis-cli -p {port} {' '.join(args)} answered {reply!r}"
            raise RuntimeError(msg)

    @property
    def servers(self) -> list[str]:
        """``host:port`` of every node (the state's startup nodes)."""
        return [f"127.0.0.1:{p}" for p in self.ports]

    def start_node(self, port: int) -> None:
        """Start (or restart) the node on ``port`` from its directory."""
        node_dir = self.root / str(port)
        node_dir.mkdir(exist_ok=True)
        log = (node_dir / "redis.log").open("ab")
        options = {
            "port": port,
            "bind": "127.0.0.1",
            "cluster-enabled": "yes",
            "cluster-config-file": node_dir / "nodes.conf",
            "cluster-node-timeout": self.node_timeout_ms,
            "dir": node_dir,
            "save": "",
            "appendonly": "yes",
            "repl-diskless-sync-delay": 0,
            "protected-mode": "no",
        }
        args = [arg for name, value in options.items() for arg in (f"--{name}", str(value))]
        self.procs[port] = subprocess.Popen(["redis-server", *args], stdout=log, stderr=log)
        _wait_port(port, self.procs[port])

    def cli(self, port: int, *args: str) -> str:
        """``redis-cli -p PORT ARGS``'s output."""
        done = subprocess.run(
            ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=30
        )
        return done.stdout

    def masters(self) -> list[int]:
        """Ports of the nodes that are masters now (as a live node sees the cluster)."""
        live = next(p for p in self.ports if self.procs[p].poll() is None)
        found = []
        for line in self.cli(live, "cluster", "nodes").splitlines():
            parts = line.split()
            flags = parts[2].split(",")
            if "master" in flags and "fail" not in flags and "fail?" not in flags:
                found.append(int(parts[1].split("@")[0].rsplit(":", 1)[1]))
        return sorted(found)

    def wait_ok(self, seconds: float = 30) -> None:
        """Wait until every live node reports ``cluster_state:ok`` with all masters live."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            live = [p for p in self.ports if self.procs[p].poll() is None]
            if (
                all("cluster_state:ok" in self.cli(p, "cluster", "info") for p in live)
                and len(self.masters()) == self.n_masters
            ):
                return
            time.sleep(0.1)
        msg = f"the Redis Cluster under {self.root} did not become ok within {seconds} s"
        raise TimeoutError(msg)

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port`` (by PID)."""
        proc = self.procs[port]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)

    def wait_promoted(self, victim: int, seconds: float = 30) -> None:
        """Wait until the master on ``victim`` is failed over: its replica is master."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            masters = self.masters()
            if victim not in masters and len(masters) == self.n_masters:
                self.wait_ok(seconds)
                return
            time.sleep(0.1)
        msg = f"no replica of 127.0.0.1:{victim} took over within {seconds} s"
        raise TimeoutError(msg)

    def wait_synced(self, seconds: float = 30) -> None:
        """Wait until every live replica reports its link to its master up."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            live = [p for p in self.ports if self.procs[p].poll() is None]
            replicas = [p for p in live if "role:slave" in self.cli(p, "info", "replication")]
            if (
                all("master_link_status:up" in self.cli(p, "info", "replication") for p in replicas)
                and len(replicas) == len(live) - self.n_masters
            ):
                return
            time.sleep(0.1)
        msg = f"the replicas of the Redis Cluster under {self.root} did not sync in {seconds} s"
        raise TimeoutError(msg)

    def describe(self) -> dict[str, Any]:
        """Masters, replicas per master and node timeout (for reports)."""
        return {
            "masters": self.n_masters,
            "replicas_per_master": len(self.ports) // self.n_masters - 1,
            "node_timeout_ms": self.node_timeout_ms,
            "persistence": "AOF (appendfsync everysec), no RDB",
        }

    def stop(self) -> None:
        """Stop every node by PID."""
        for proc in self.procs.values():
            _stop(proc)

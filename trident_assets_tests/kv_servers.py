"""Key-value servers for tests: memcached servers and a Redis Cluster on 127.0.0.1, under tmp.

:class:`MemcachedServers` starts ``n`` memcached processes; :class:`RedisClusterServers`
starts ``masters * 2`` ``redis-server --cluster-enabled yes`` processes (AOF on, no RDB) and
joins them with ``redis-cli --cluster create ... --cluster-replicas 1``. Both use free ports,
keep every file under the given directory, and stop their processes by PID (:meth:`stop`).
The Debian packages ``memcached`` and ``redis-server`` provide the binaries
(``scripts/setup.sh``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["MemcachedServers", "RedisClusterServers", "free_port", "servers_installed"]

NODE_TIMEOUT_MS = 1000
"""The cluster's node timeout: a killed master's replica takes over about a second later."""


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


def _wait_port(port: int, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    msg = f"no server answered on 127.0.0.1:{port} within {seconds} s"
    raise TimeoutError(msg)


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)


class MemcachedServers:
    """``n`` memcached servers (64 MB each)."""

    def __init__(self, root: Path, n: int = 3) -> None:
        """Start them (logs under ``root``)."""
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.ports = [free_port() for _ in range(n)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * n
        for i in range(n):
            self.start(i)

    @property
    def servers(self) -> list[str]:
        """``host:port`` of each server."""
        return [f"127.0.0.1:{p}" for p in self.ports]

    def start(self, i: int) -> None:
        """Start server ``i`` (empty)."""
        log = (self.root / f"memcached-{i}.log").open("ab")
        self.procs[i] = subprocess.Popen(
            ["memcached", "-u", "root", "-l", "127.0.0.1", "-p", str(self.ports[i]), "-m", "64"],
            stdout=log,
            stderr=log,
        )
        _wait_port(self.ports[i])

    def restart(self, i: int) -> None:
        """Stop server ``i`` and start it again: it comes back with no keys."""
        _stop(self.procs[i])
        self.start(i)

    def stop(self) -> None:
        """Stop every server by PID."""
        for proc in self.procs:
            _stop(proc)


class RedisClusterServers:
    """A Redis Cluster of ``masters`` masters with one replica each."""

    def __init__(self, root: Path, masters: int = 3) -> None:
        """Start the nodes (files under ``root``) and create the cluster."""
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.ports = [free_port() for _ in range(masters * 2)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        for port in self.ports:
            self.start_node(port)
        nodes = [f"127.0.0.1:{p}" for p in self.ports]
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *nodes,
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_ok()
        self.wait_synced()

    @property
    def servers(self) -> list[str]:
        """``host:port`` of every node (the state's startup nodes)."""
        return [f"127.0.0.1:{p}" for p in self.ports]

    def start_node(self, port: int) -> None:
        """Start (or restart) the node on ``port`` from its directory."""
        node_dir = self.root / str(port)
        node_dir.mkdir(exist_ok=True)
        log = (node_dir / "redis.log").open("ab")
        self.procs[port] = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(node_dir / "nodes.conf"),
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                "--dir",
                str(node_dir),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--repl-diskless-sync-delay",
                "0",
                "--protected-mode",
                "no",
            ],
            stdout=log,
            stderr=log,
        )
        _wait_port(port)

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
        """Wait until every live node reports ``cluster_state:ok`` with 3 live masters."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            live = [p for p in self.ports if self.procs[p].poll() is None]
            if (
                all("cluster_state:ok" in self.cli(p, "cluster", "info") for p in live)
                and len(self.masters()) == len(self.ports) // 2
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
            if victim not in masters and len(masters) == len(self.ports) // 2:
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
                and len(replicas) == len(live) - len(self.ports) // 2
            ):
                return
            time.sleep(0.1)
        msg = f"the replicas of the Redis Cluster under {self.root} did not sync in {seconds} s"
        raise TimeoutError(msg)

    def stop(self) -> None:
        """Stop every node by PID."""
        for proc in self.procs.values():
            _stop(proc)

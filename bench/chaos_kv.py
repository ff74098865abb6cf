"""The chaos soak's Redis Cluster mode (``python -m bench.chaos_soak --store redis-cluster``).

The word counts of both soak topologies live in a Redis Cluster the soak starts (3 masters, one
replica each, under ``<root>/redis``, stopped by PID at the end); the commit marker and the
spouts' ranges stay in the DuckDB file. The comparison reads the counts from the cluster
(``SCAN`` by the state's prefix on each master). ``--kill-master`` also SIGKILLs one master
once, mid-soak: its replica takes over; batches writing to it are refused (``WAIT`` finds no
replica) until the killed node is started again and rejoins as the new master's replica,
then the refused txids run again.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MASTERS", "MasterKill", "read_counts", "start_cluster", "state_spec"]

MASTERS = 3
REFUSALS_BEFORE_REJOIN = 2
"""Refused batch attempts seen (or attempts made) before the killed node is started again."""


def state_spec(servers: Sequence[str]) -> Any:
    """The soak topologies' counts state: opaque, in the Redis Cluster at ``servers``."""
    import trident_assets as ta

    return ta.RedisClusterState.opaque("word_counts", list(servers))


def start_cluster(root: Path) -> Any:
    """A 3-master Redis Cluster with a replica each under ``root`` (a context manager)."""
    from trident_assets_tests.kv_servers import RedisClusterServers

    return RedisClusterServers(root, MASTERS, replicas=1)


def read_counts(topology: str, servers: Sequence[str]) -> Any:
    """``topology``'s counts as an Arrow table ``(word, n)``, read from the cluster."""
    from trident_assets.examples.word_count import build_word_count
    from trident_assets.spark.kv_state import read_kv_state

    topo = build_word_count(topology, state=state_spec(servers))
    table = read_kv_state(topo.states["word_counts"])
    return table.rename_columns(["word", "n"])


@dataclass
class MasterKill:
    """One master killed mid-soak and restarted once batches were refused; what happened."""

    cluster: Any
    victim: int | None = None
    promoted_s: float = 0.0
    refused: int = 0
    attempts_while_down: int = 0
    rejoined_s: float = 0.0
    done: bool = False
    refusals: list[str] = field(default_factory=list)

    def kill(self) -> None:
        """SIGKILL the first master (by PID); wait until its replica is the master."""
        self.victim = self.cluster.masters()[0]
        started = time.monotonic()
        self.cluster.kill(self.victim)
        self.cluster.wait_promoted(self.victim)
        self.promoted_s = round(time.monotonic() - started, 2)

    @property
    def down(self) -> bool:
        """True between the kill and the restart."""
        return self.victim is not None and not self.done

    def after_attempt(self, refused: list[str]) -> None:
        """Count an attempt made while the node is down; restart it after enough of them."""
        self.attempts_while_down += 1
        self.refused += len(refused)
        self.refusals += refused
        if self.refused >= REFUSALS_BEFORE_REJOIN or self.attempts_while_down >= 6:
            started = time.monotonic()
            self.cluster.start_node(self.victim)  # rejoins as the new master's replica
            self.cluster.wait_ok()
            self.cluster.wait_synced()
            self.rejoined_s = round(time.monotonic() - started, 2)
            self.done = True

    def figures(self) -> dict[str, Any]:
        """What the report shows."""
        return {
            "victim": f"127.0.0.1:{self.victim}",
            "replica_promoted_s": self.promoted_s,
            "attempts_while_down": self.attempts_while_down,
            "batches_refused": self.refused,
            "rejoined_as_replica_s": self.rejoined_s,
            "first_refusal": self.refusals[0][:300] if self.refusals else None,
        }

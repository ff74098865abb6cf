"""A chunk's dead letters per spout: counted in one place, fetched only when there are any.

:class:`SpoutDeadLetters` is the part of the frame builder
(:class:`~trident_assets.spark.batch_run.BatchRun`) that finds each spout's dead letters
for every txid of a chunk, in this order: none where the spout read nothing; a state's job
that collected them along (a chunk of one: :meth:`~SpoutDeadLetters.fold_dead`); none
where an Arrow kernel counted none, or where the ``Observation`` on the spout's decode saw
none; otherwise a job of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.spark.node_frames import NodeFrames
from trident_assets.spark.observation import observed_metrics
from trident_assets.spark.scheme_base import DEAD_LETTER_COLUMNS

if TYPE_CHECKING:
    from trident_assets.stream.graph import Node

__all__ = ["SpoutDeadLetters"]


class SpoutDeadLetters(NodeFrames):
    """Each spout's dead letters for a chunk of txids (a base of the frame builder)."""

    txid: int
    txids: list[int]
    live: set[str]
    dead: dict[str, tuple[Any, Any]]
    counted_dead: dict[str, int]
    folded_dead: dict[str, pa.Table]
    dead_collected: bool
    first: Any  # the chunk's first txid as a chunk of one
    per_txid: Callable[[pa.Table], dict[int, pa.Table]]

    def empty_dead_letters(self, sid: str) -> pa.Table:
        """An empty table of the spout's dead letters, with their schema.

        Found once per runner: planning a decode costs JVM analysis (a strict JSON
        scheme's about 0.1 s a batch).
        """

        def dead() -> Any:
            first = self.first  # untagged
            first.frame(first.runner.topology.spouts[sid])
            return first.dead[sid][0]

        return self.runner.empty_tables.get(("dead letters", sid), dead)

    def fold_dead(self, node: Node) -> tuple[str, Any] | None:
        """``(spout id, dead letters frame)`` a state's job over ``node`` may collect, or None.

        Only in a chunk of one, for the one spout upstream of ``node`` (through its parents),
        in the batch phase before the dead letters are collected, when the spout read
        records, no Arrow kernel counted them and no other job collected them. The collector
        leaves the table (with the frame's Arrow schema) in :attr:`folded_dead`, saving
        their own Spark job.
        """
        sid = self.uncounted_spout(node)
        if sid is None or tuple(self.empty_dead_letters(sid).column_names) != DEAD_LETTER_COLUMNS:
            return None
        return sid, self.dead[sid][0]

    def uncounted_spout(self, node: Node) -> str | None:
        """The one spout upstream of ``node`` whose dead letters are still to collect, or None.

        In a chunk of one's batch phase (before the dead letters are collected), when the
        spout read records, was decoded, and no job collected or counted its dead letters.
        """
        spouts: set[str] = set()
        todo = [node]
        while todo:
            current = todo.pop()
            if current.kind == "spout":
                spouts.add(current.args["spout_id"])
            todo.extend(current.parents)
        if not self.mode.folds_dead or self.dead_collected or len(spouts) != 1:
            return None
        (sid,) = spouts
        if (
            sid not in self.dead
            or sid in self.folded_dead
            or sid in self.counted_dead
            or sid not in self.live
        ):
            return None
        return sid

    def _dead_letters_job(self, sid: str) -> Callable[[int | None], dict[int, pa.Table]]:
        """The spout's dead letters per txid; the call takes those a job counted (or None).

        No Spark job where the spout read nothing, where a job counted none, where the
        decode's observation saw none (a chunk of several), or where a state's job collected
        them (a chunk of one). A chunk of one's decode carries no observation: its states'
        jobs may run later, in the commit, and an observation read before its action ran
        would wait for it.
        """
        if sid not in self.live:
            table = self.empty_dead_letters(sid)
            return lambda counted: dict.fromkeys(self.txids, table)
        spout = self.runner.topology.spouts[sid]
        # a chunk of several decodes on the planning thread, and every job of its work runs
        # before this one: an observation on a decode built by then has seen its records
        observed = self.dead.get(sid, (None, None))[1] is not None
        self.mode.plan_frame(self, spout)

        def run(counted: int | None) -> dict[int, pa.Table]:
            if sid in self.folded_dead:
                return {self.txid: self.folded_dead[sid]}
            if counted == 0:  # an Arrow kernel decoded all of the spout's records
                return dict.fromkeys(self.txids, self.empty_dead_letters(sid))
            self.frame(spout)
            dead, observation = self.dead[sid]
            if observed and counted is None:
                metrics = observed_metrics(observation)  # None: unknown, fetched below
                if metrics is not None and metrics["dead"] == 0:
                    return dict.fromkeys(self.txids, self.empty_dead_letters(sid))
            return self.per_txid(self.to_arrow(f"dead letters:{sid}", dead))

        return run

"""A chunk's dead letters per spout: counted in one place, fetched only when there are any.

:class:`SpoutDeadLetters` is the part of the frame builder
(:class:`~trident_assets.spark.batch_run.BatchRun`) that finds each spout's dead letters
for every txid of a chunk, in this order: none where the spout read nothing; a state's job
that collected them along (a chunk of one: :meth:`~SpoutDeadLetters.fold_dead`); none
where an Arrow kernel counted none, or where the ``Observation`` on the spout's decode saw
none; otherwise a job of their own.

On a small batch a job of their own costs about as much as the state's (a round trip,
planning, scheduling), so a chunk of one folds them into the state's job:
:func:`with_spout_dead` appends them to the job's rows, marked ``__kind = SPOUT_DEAD``, and
:func:`take_spout_dead` splits the collected table again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.spark.column_cache import reuse
from trident_assets.spark.node_frames import NodeFrames
from trident_assets.spark.observation import observed_metrics
from trident_assets.spark.scheme_base import DEAD_LETTER_COLUMNS
from trident_assets.spark.window_columns import KIND, REASON, SPOUT_DEAD, SPOUT_DEAD_COLUMNS, VALUE

if TYPE_CHECKING:
    from trident_assets.stream.graph import Node

__all__ = ["SpoutDeadLetters", "take_spout_dead", "with_spout_dead"]


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


def with_spout_dead(df: Any, dead: Any, owner: Any) -> Any:
    """``df``'s rows, then the spout's ``dead`` letters as rows of the same job.

    Columns of one missing from the other are null there (``unionByName``). ``owner`` (the
    state) keeps the select list's expressions from one txid to the next.
    """
    rows = dead.select(*reuse(owner, "spout_dead", None, dead, _spout_dead_rows))
    return df.unionByName(rows, allowMissingColumns=True)


def _spout_dead_rows() -> list[Any]:
    """Select list of a spout dead letter's row in the job's table."""
    from pyspark.sql import functions as F

    return [
        F.lit(SPOUT_DEAD).alias(KIND),
        *[F.col(name).alias(alias) for name, alias in SPOUT_DEAD_COLUMNS.items()],
        F.col("reason").alias(REASON),
        F.col("value").alias(VALUE),
    ]


def take_spout_dead(
    schema: pa.Schema, table: pa.Table, drop: Sequence[str] = ()
) -> tuple[pa.Table, pa.Table]:
    """``(the job's own rows, the spout's dead letters)`` of a folded job's ``table``.

    ``schema``: the dead letters' Arrow schema (what their own job's ``toArrow`` gives).
    The own rows lose the spout dead letters' columns and ``drop``.
    """
    mine = pc.fill_null(pc.equal(table.column(KIND), SPOUT_DEAD), False)
    rows = table.filter(mine)
    source = {**SPOUT_DEAD_COLUMNS, "reason": REASON, "value": VALUE}
    columns = [rows.column(source[f.name]).cast(f.type) for f in schema]
    dead = pa.Table.from_arrays(columns, schema=schema)
    gone = [*SPOUT_DEAD_COLUMNS.values(), *drop]
    return table.filter(pc.invert(mine)).drop_columns(gone), dead

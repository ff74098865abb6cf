"""How a chunk's frames are read: a txid alone, or a chunk of several tagged by batch.

The frame builder (:class:`~trident_assets.spark.batch_run.BatchRun`) chooses its mode once
(:func:`read_mode`). A mode reads the run through its :class:`~.batch_context.BatchContext`
and never writes into it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from trident_assets.planner import chunk_pipelinable, is_live, partition_free
from trident_assets.spark.batch_context import ChunkPartials
from trident_assets.spark.state_engines import engine_for
from trident_assets.spark.txid_tags import TXID_COLUMN, split_by_txid, tag_first, tagged_read

if TYPE_CHECKING:
    import pyarrow as pa

    from trident_assets.spark.batch_context import BatchContext
    from trident_assets.stream.graph import Node
    from trident_assets.stream.streams import TridentState

__all__ = ["ReadMode", "read_mode"]

R = TypeVar("R", bound="BatchContext")


class _Alone:
    """How a chunk of one reads its frames: untagged, every tuple is its txid's.

    No ``Observation`` on a decode (its states' jobs may run in the commit, later); a state's
    job may collect its spout's dead letters; its states and outputs are built in the call.
    """

    keep: tuple[str, ...] = ()
    folds_dead = True

    def observation(self, sid: str) -> Any:
        return None

    def read(self, run: BatchContext, sid: str, spout: Any) -> tuple[Any, dict[str, str]]:
        inline = partition_free(run.runner.topology)
        log, plan = run.runner.log, run.plans[sid]
        conf = spout.read_conf(log, [(0, plan)]) if hasattr(spout, "read_conf") else {}
        return spout.read(run.spark, log, plan, inline=inline), conf

    def decode(
        self, run: BatchContext, sid: str, spout: Any, observation: Any
    ) -> tuple[Any, Any] | None:
        return None

    def tag(self, frame: Any) -> Any:
        return tag_first(frame)

    def split(self, table: pa.Table, txids: list[int]) -> dict[int, pa.Table]:
        return dict.fromkeys(txids, table)

    def home(self, run: R, node: Node) -> R:
        return run

    def txid_run(self, run: R, txid: int) -> R:
        return run

    def check_builds(self, node: Node) -> None: ...

    def plan_frame(self, run: BatchContext, node: Node) -> None: ...

    def state_job(self, run: BatchContext, state: TridentState) -> Callable[[], ChunkPartials]:
        chunk = engine_for(state).chunk
        shares = run.runner.pipelinable and chunk_pipelinable(run.runner.topology, run.live)
        if chunk is not None and shares:
            # a chunk of one the loop may start ahead: planned now, as a chunk of several's
            # (its job runs while earlier txids commit; its event-time bounds pass on)
            return run.planned(state, chunk(run, state))

        def alone() -> ChunkPartials:
            batch = run.state_input(state)
            nulls = run.nulls.get(state.spec.name)
            return ChunkPartials({run.txid: batch}, {} if nulls is None else {run.txid: nulls})

        return alone


class _Tagged:
    """How a chunk of several reads its frames: every tuple tagged with its batch.

    An ``Observation`` on each decode counts its dead letters; the frames are built now (the
    call touches only Spark); a node without tuples is the first txid's
    (:attr:`~.batch_context.BatchContext.first`).
    """

    keep = (TXID_COLUMN,)
    folds_dead = False

    def observation(self, sid: str) -> Any:
        from pyspark.sql import Observation

        return Observation(f"trident_dead_{sid}_{uuid.uuid4().hex}")

    def read(self, run: BatchContext, sid: str, spout: Any) -> tuple[Any, dict[str, str]]:
        mine = [plans[sid] for _, plans in run.batches]
        return tagged_read(spout, run.spark, run.runner.log, mine)

    def decode(
        self, run: BatchContext, sid: str, spout: Any, observation: Any
    ) -> tuple[Any, Any] | None:
        """The spout reader's own decode of the chunk (``decode_many``), if it has one.

        Its job settings join the chunk's (:attr:`~.batch_context.BatchContext.conf`).
        """
        many = getattr(spout, "decode_many", None)
        if many is None:
            return None
        log, mine = run.runner.log, [plans[sid] for _, plans in run.batches]
        decoded = many(run.spark, log, mine, TXID_COLUMN, observation)
        if decoded is None:
            return None
        good, dead, conf = decoded
        run.conf.update(conf)
        return good, dead

    def tag(self, frame: Any) -> Any:
        return frame

    def split(self, table: pa.Table, txids: list[int]) -> dict[int, pa.Table]:
        return split_by_txid(table, txids)

    def home(self, run: R, node: Node) -> R:
        return run if is_live(node, run.live) else run.first

    def txid_run(self, run: R, txid: int) -> R:
        return run.chunk_of_one(txid)

    def check_builds(self, node: Node) -> None:
        msg = f"node kind {node.kind!r} cannot share a Spark job with other txids"
        raise AssertionError(msg)

    def plan_frame(self, run: BatchContext, node: Node) -> None:
        run.frame(node)

    def state_job(self, run: BatchContext, state: TridentState) -> Callable[[], ChunkPartials]:
        chunk = engine_for(state).chunk
        assert chunk is not None  # the planner admits only kinds that share a job
        return run.planned(state, chunk(run, state))


ReadMode = _Alone | _Tagged


def read_mode(chunk_size: int) -> ReadMode:
    """How a chunk of ``chunk_size`` txids reads its frames: tagged when it holds several."""
    return _Tagged() if chunk_size > 1 else _Alone()

"""The planner: pure graph analysis of a declared topology, before anything runs.

Between what the user declares (:mod:`trident_assets.stream`) and how a batch runs
(:mod:`trident_assets.spark`): which nodes feed what, which node kinds work tuple by tuple,
which are certainly empty when their inputs are, and when consecutive batches may share one
Spark job (Trident's ``max.spout.pending``, see :mod:`trident_assets.spark.batch_run`).
Nothing here imports Spark, the state store or Dagster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from trident_assets.core.commit import decide_commit
from trident_assets.core.values import StateType
from trident_assets.errors import QuarantineError
from trident_assets.spouts.config import SpoutKind
from trident_assets.stream.graph import ROW_WISE
from trident_assets.stream.single_join import SINGLE_JOIN_EXPIRED
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.spouts.ranges import BatchPlan
    from trident_assets.stream.graph import Node
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "all_nodes",
    "check_quarantine",
    "chunk_pipelinable",
    "depends_on_new_values",
    "is_empty",
    "is_live",
    "live_spouts",
    "pipelinable",
    "readers_of",
    "recomputable",
]

EMPTY_KEEPING = frozenset(
    {"each", "filter", "project", "query", "map", "flat_map", "first_n", "merge", "join"}
    | {"peek", "repartition", "comparison"}
)
"""Node kinds whose output is empty when every input is."""
PURE_KINDS = frozenset({"spout", "each", "filter", "project", "map", "flat_map", "merge"})
"""Node kinds whose output depends on the batch's records only (not on state or batch cut)."""


PARTITION_FREE_KINDS = frozenset(
    {"spout", "each", "filter", "project", "map", "flat_map", "peek", "merge", "join"}
    | {"aggregate", "query", "persist", "new_values"}
)
"""Node kinds whose results do not depend on how a batch is cut into Spark partitions."""


def partition_free(topology: TridentTopology) -> bool:
    """True when no node of ``topology`` works per Spark partition or moves tuples.

    A batch may then reach Spark in any partitioning (e.g. inline, with the plan).
    """
    return all(node.kind in PARTITION_FREE_KINDS for node in all_nodes(topology))


def all_nodes(topology: TridentTopology) -> list[Node]:
    """Every node that feeds a state, an output or a state query of ``topology``."""
    roots = [s.node for s in topology.states.values()] + [s.node for s in topology.outputs.values()]
    return upstream([*roots, *(s.node for s in topology.queries)])


def upstream(roots: Iterable[Node]) -> list[Node]:
    """``roots`` and every node they read from, each once."""
    seen: dict[int, Node] = {}
    todo = list(roots)
    while todo:
        node = todo.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            todo.extend(node.parents)
    return list(seen.values())


def readers_of(topology: TridentTopology, name: str) -> list[str]:
    """The other states of ``topology`` computed from state ``name``'s values, sorted.

    A state reads another through a state query or its new-values stream; a state that reads
    such a reader is one too (its values came from them). Their values at past txids are not
    kept, so none of them can be recomputed from the log.
    """
    found: set[str] = set()
    todo = [name]
    while todo:
        source = todo.pop()
        for other, state in topology.states.items():
            if other == name or other in found:
                continue
            if any(_reads_state(node, source) for node in upstream([state.node])):
                found.add(other)
                todo.append(other)
    return sorted(found)


def _reads_state(node: Node, name: str) -> bool:
    """True when ``node`` reads state ``name`` (a state query or its new-values stream)."""
    if node.kind not in ("query", "new_values"):
        return False
    state = node.args.get("state")
    spec = getattr(state, "spec", None)
    return getattr(spec, "name", None) == name


def depends_on_new_values(node: Node) -> bool:
    """True when ``node`` reads what this batch's commit writes (new values, expired halves)."""
    return node.kind in ("new_values", SINGLE_JOIN_EXPIRED) or any(
        depends_on_new_values(p) for p in node.parents
    )


def live_spouts(plans: Mapping[str, BatchPlan]) -> set[str]:
    """The spouts of a batch that have at least one record."""
    return {sid for sid, plan in plans.items() if plan.record_count > 0}


def is_live(node: Node, live: set[str]) -> bool:
    """True when ``node`` receives tuples from a spout in ``live``."""
    if node.kind == "spout":
        return node.args["spout_id"] in live
    return any(is_live(p, live) for p in node.parents)


def is_empty(node: Node, live: set[str], known_empty: Callable[[Node], bool] | None = None) -> bool:
    """True when ``node`` certainly has no tuples when only the ``live`` spouts read records.

    ``known_empty``: further nodes known to have no tuples (e.g. a new-values stream that
    the batch's commit left empty).
    """
    if node.kind == "spout":
        return node.args["spout_id"] not in live
    if known_empty is not None and known_empty(node):
        return True
    if node.kind == "aggregate" and node.args["group"]:
        return is_empty(node.parents[0], live, known_empty)
    return node.kind in EMPTY_KEEPING and all(is_empty(p, live, known_empty) for p in node.parents)


def pipelinable(topology: TridentTopology) -> bool:
    """True when the topology's batches can ever share a Spark job.

    Every state's kind must share one (a SQL combiner, an event-time window over record
    timestamps), and nothing may read this batch's new values (those run batch by batch).
    """
    if not all(state_kind(s.node).shares_chunk_job() for s in topology.states.values()):
        return False
    return not any(n.kind in ("new_values", SINGLE_JOIN_EXPIRED) for n in all_nodes(topology))


def quarantine_refusal(topology: TridentTopology) -> str | None:
    """Why a txid of ``topology`` cannot be quarantined soundly (None: it can).

    A quarantined txid's records are processed later, after txids that came after them. That
    keeps exactly-once only when every state is a combiner aggregate (order does not matter)
    and every spout can re-read its ranges (transactional or opaque).
    """
    for spout_id, node in topology.spouts.items():
        kind = node.args["spout"].config.kind
        if kind is SpoutKind.NON_TRANSACTIONAL:
            return (
                f"spout {spout_id!r} is non-transactional: its ranges carry no replay "
                "guarantee, so its records could not be reprocessed exactly once"
            )
    for name, state in topology.states.items():
        refusal = state_kind(state.node).order_refusal
        if refusal is not None:
            return f"state {name!r} {refusal}"
    return None


def check_quarantine(topology: TridentTopology, last_committed: int | None, txid: int) -> None:
    """Refuse quarantining ``txid`` of ``topology``, whose last committed txid is given.

    Needs only the declaration and the stored last txid, so a refusal comes before any Spark
    job or state write.

    Raises:
        QuarantineError: the topology cannot be quarantined soundly (:func:`quarantine_refusal`)
            or ``txid`` has committed.
        OutOfOrderCommitError: ``txid`` is not the txid after ``last_committed``.
    """
    refusal = quarantine_refusal(topology)
    if refusal is not None:
        msg = (
            f"cannot quarantine txid {txid} of topology {topology.name!r}: {refusal}. Fix the "
            "cause and re-run the txid instead"
        )
        raise QuarantineError(msg)
    if last_committed is not None and txid <= last_committed:
        msg = (
            f"txid {txid} of topology {topology.name!r} has committed (last committed: "
            f"{last_committed}); only the txid after it can be quarantined"
        )
        raise QuarantineError(msg)
    decide_commit(topology.name, last_committed, txid)


def _row_wise(node: Node, live: set[str]) -> bool:
    if not is_live(node, live):
        return True
    return node.kind in ROW_WISE and all(_row_wise(p, live) for p in node.parents)


def chunk_pipelinable(topology: TridentTopology, live: set[str]) -> bool:
    """True when every node fed by the ``live`` spouts is row-wise up to its state or output."""
    return all(_row_wise(s.node.parents[0], live) for s in topology.states.values()) and all(
        _row_wise(s.node, live) for s in topology.outputs.values()
    )


def _pure(node: Node) -> bool:
    return node.kind in PURE_KINDS and all(_pure(p) for p in node.parents)


def recomputable(state: TridentState) -> bool:
    """True for exactly-once count/sum states whose stream reads only spouts and functions.

    Non-transactional states count replays by design; states fed by queries, joins or
    per-batch aggregates depend on more than the records, so they cannot be recomputed.
    """
    return (
        state_kind(state.node).recomputable
        and state.spec.state_type is not StateType.NON_TRANSACTIONAL
        and _pure(state.node.parents[0])
    )

"""Recomputing a count/sum state from the source records of its committed batches.

The exactly-once check asks: does the state equal the aggregate of every record the
committed batches read, computed from scratch as ONE batch? It reruns the state's stream
(spout -> functions -> filters) on Spark over the union of the committed offset ranges,
combines per key, and compares the result with the stored values in one DuckDB join.
It does not share the txid logic it verifies (no maps, no merge statement). Which states
qualify is :func:`~trident_assets.planner.recomputable`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends.map_layout import log_table, quote_ident
from trident_assets.backends.verified import values_table
from trident_assets.errors import StateLayoutError
from trident_assets.runtime.outcomes import GLOBAL_COLUMN
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spouts.ranges import BatchPlan, PartitionRange

if TYPE_CHECKING:
    from trident_assets.spark.executor import TopologyRunner

__all__ = ["StateComparison", "verify_increment", "verify_state"]


@dataclass(frozen=True, slots=True)
class StateComparison:
    """The state against its recomputation: key counts and the first mismatches."""

    keys_in_state: int
    """Every key the state holds (in both comparisons, full and incremental)."""
    keys_expected: int
    """The keys the recomputation yields (incremental: of the compared keys)."""
    mismatches: int
    sample: list[dict[str, object]]
    verified: pa.Table | None = field(default=None, compare=False, repr=False)
    """The recomputed value of every compared key (key columns and ``value``; keys whose
    recomputed value is none are left out): what a checkpoint records once the check passed."""

    @property
    def passed(self) -> bool:
        """True when every key has exactly the recomputed value."""
        return self.mismatches == 0


def verify_state(
    runner: TopologyRunner,
    state_name: str,
    ranges: Mapping[str, Sequence[PartitionRange]],
    sample_size: int = 10,
) -> StateComparison:
    """Compare state ``state_name`` with its recomputation over ``ranges`` (per spout).

    ``ranges`` are the committed batches' offset ranges merged per partition (several
    disjoint ranges of a partition are allowed). Call between batches.

    Raises:
        BatchUnavailableError: some of the records are no longer in the source (retention).
    """
    expected = _recompute(runner, state_name, ranges)
    state = runner.topology.states[state_name]
    keys = list(state.group) or [GLOBAL_COLUMN]
    out = state.node.args["output"]
    store = runner.store
    if store.layout(state.table) is None:
        stored = expected.select(keys).slice(0, 0).append_column("value", pa.array([], pa.int64()))
    else:
        stored = store.scan(state.table, "value")
    key_list = ", ".join(quote_ident(k) for k in keys)
    value = quote_ident(out)
    pick = store.dialect.any_value
    with store.staged(stored) as s_name, store.staged(expected) as e_name:
        # a full outer join on keys that may be NULL, as a union (PostgreSQL cannot FULL JOIN
        # on IS NOT DISTINCT FROM): GROUP BY matches NULL keys
        both = (
            f'SELECT {key_list}, 0 AS side, value AS v FROM "{s_name}" UNION ALL '
            f'SELECT {key_list}, 1 AS side, {value} AS v FROM "{e_name}"'
        )
        stored_v, expected_v = pick("v", "side = 0"), pick("v", "side = 1")
        diff = (
            f"SELECT {key_list}, stored, expected FROM (SELECT {key_list}, {stored_v} AS stored, "
            f"{expected_v} AS expected FROM ({both}) AS b GROUP BY {key_list}) AS g "
            "WHERE stored IS DISTINCT FROM expected"
        )
        count = int(store.fetch_rows(f"SELECT count(*) FROM ({diff}) AS d")[0][0])
        rows = store.fetch_arrow(f"{diff} LIMIT {int(sample_size)}").to_pylist()
    sample = [{k: _plain(v) for k, v in row.items()} for row in rows]
    verified = expected.select([*keys, out]).rename_columns([*keys, "value"])
    return StateComparison(stored.num_rows, expected.num_rows, count, sample, verified)


def _recompute(
    runner: TopologyRunner, state_name: str, ranges: Mapping[str, Sequence[PartitionRange]]
) -> pa.Table:
    """The state's stream rerun as ONE batch over ``ranges``: its value per key."""
    topo = runner.topology
    state = topo.states[state_name]
    plans = {
        sid: BatchPlan.of(
            topo.name, sid, 0, node.args["spout"].config.kind, ranges.get(sid, ()), replay=True
        )
        for sid, node in topo.spouts.items()
    }
    return BatchRun.alone(runner, 0, plans).state_input(state)


def verify_increment(
    runner: TopologyRunner,
    state_name: str,
    ranges: Mapping[str, Sequence[PartitionRange]],
    since_txid: int,
    sample_size: int = 10,
) -> StateComparison:
    """Compare the keys state ``state_name`` changed since ``since_txid`` with their checkpoint.

    ``ranges`` are the source ranges of exactly the txids committed after ``since_txid``
    (merged per partition). The compared keys are those the records of ``ranges`` feed and
    those the state stored a version of after ``since_txid``; each must hold exactly its
    verified value in the checkpoint (:mod:`trident_assets.backends.verified`, none: 0) plus
    the recomputed aggregate of those records (a key in neither must not be stored). The
    other keys are not read. Call between batches.

    Raises:
        BatchUnavailableError: some of the records are no longer in the source (retention).
        StateLayoutError: the state or its checkpoint table does not exist.
    """
    delta = _recompute(runner, state_name, ranges)
    state = runner.topology.states[state_name]
    store = runner.store
    layout = store.layout(state.table)
    checkpoint = values_table(state.table)
    if layout is None or not store.has_table(checkpoint):
        msg = f"state {state_name!r} has no stored table or verified checkpoint to compare"
        raise StateLayoutError(msg)
    keys = list(layout.key_columns)
    key_list = ", ".join(quote_ident(k) for k in keys)
    pick = store.dialect.any_value
    changed = delta.select([*keys, state.node.args["output"]]).rename_columns([*keys, "dv"])
    not_null = " AND ".join(f"{quote_ident(k)} IS NOT NULL" for k in keys)
    with store.staged(changed) as d_name:
        touched = store.fetch_arrow(
            f'SELECT {key_list} FROM "{d_name}" WHERE {not_null} UNION '
            f"SELECT {key_list} FROM {log_table(state.table)} WHERE txid > ?",
            [since_txid],
        )
        with store.staged(touched) as t_name:
            stored = store.latest_sql(layout, f'"{t_name}"')
            on = " AND ".join(f"c.{quote_ident(k)} = t.{quote_ident(k)}" for k in keys)
            c_keys = ", ".join(f"c.{quote_ident(k)}" for k in keys)
            both = (
                f"SELECT {key_list}, 0 AS side, curr AS v FROM "
                f"({stored}) AS s UNION ALL "
                f"SELECT {c_keys}, 1 AS side, c.value AS v FROM {quote_ident(checkpoint)} c "
                f'JOIN "{t_name}" t ON {on} UNION ALL '
                f'SELECT {key_list}, 2 AS side, dv AS v FROM "{d_name}"'
            )
            grouped = (
                f"SELECT {key_list}, {pick('v', 'side = 0')} AS stored, "
                f"{pick('v', 'side = 1')} AS verified, {pick('v', 'side = 2')} AS delta "
                f"FROM ({both}) AS b GROUP BY {key_list}"
            )
            result = store.fetch_arrow(
                f"SELECT {key_list}, stored, expected, stored IS DISTINCT FROM expected AS differs "
                f"FROM (SELECT {key_list}, stored, CASE WHEN verified IS NULL AND delta IS NULL "
                "THEN NULL ELSE COALESCE(verified, 0) + COALESCE(delta, 0) END AS expected "
                f"FROM ({grouped}) AS g) AS e ORDER BY {key_list}"
            )
    differs = result.filter(result["differs"])
    rows = differs.select([*keys, "stored", "expected"]).slice(0, sample_size).to_pylist()
    sample = [{k: _plain(v) for k, v in row.items()} for row in rows]
    has_expected = pc.is_valid(result["expected"])
    verified = (
        result.filter(has_expected).select([*keys, "expected"]).rename_columns([*keys, "value"])
    )
    # every key of the state, not only the compared ones (as the full comparison reports)
    return StateComparison(
        store.size(state.table), verified.num_rows, differs.num_rows, sample, verified
    )


def _plain(value: object) -> object:
    """A JSON-able form of a key or value (for check metadata)."""
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)

"""Recomputing a count/sum state from the source records of its committed batches.

The exactly-once check asks: does the state equal the aggregate of every record the
committed batches read, computed from scratch as ONE batch? It reruns the state's stream
(spout -> functions -> filters) on Spark over the union of the committed offset ranges,
combines per key, and compares the result with the stored values in one DuckDB join.
It does not share the txid logic it verifies (no maps, no merge statement). Which states
qualify is :func:`~trident_assets.planner.recomputable` (re-exported here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident
from trident_assets.planner import recomputable
from trident_assets.spark.batch_run import BatchRun
from trident_assets.spark.outcomes import GLOBAL_COLUMN
from trident_assets.spouts.ranges import BatchPlan, PartitionRange

if TYPE_CHECKING:
    from trident_assets.spark.executor import TopologyRunner

__all__ = ["StateComparison", "recomputable", "verify_state"]


@dataclass(frozen=True, slots=True)
class StateComparison:
    """The state against its recomputation: key counts and the first mismatches."""

    keys_in_state: int
    keys_expected: int
    mismatches: int
    sample: list[dict[str, object]]

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
    topo = runner.topology
    state = topo.states[state_name]
    plans = {
        sid: BatchPlan.of(
            topo.name, sid, 0, node.args["spout"].config.kind, ranges.get(sid, ()), replay=True
        )
        for sid, node in topo.spouts.items()
    }
    expected = BatchRun(runner, 0, plans).state_input(state)
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
    return StateComparison(stored.num_rows, expected.num_rows, count, sample)


def _plain(value: object) -> object:
    """A JSON-able form of a key or value (for check metadata)."""
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)

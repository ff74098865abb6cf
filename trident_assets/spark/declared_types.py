"""The value types a declaration yields, checked against the stored states before a batch runs.

A Sum, Min or Max state's value type is its input field's (Spark's aggregate of it), so its
contract leaves the value type open (:meth:`TridentState.contract`). A redeploy whose input
field changed type (a bigint field that became a string or a double) would only meet the
stored value column when the first batch commits, after its Spark jobs. Here the declared
partials are typed from an empty batch (DataFrame analysis only: no Spark job, nothing
read or written) and compared with the stored map table's value column.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trident_assets.backends.merge_checks import arrow_to_sql_type, value_fits
from trident_assets.backends.state_contracts import refuse_value_type
from trident_assets.planner import depends_on_new_values
from trident_assets.spouts.ranges import BatchPlan
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.spark.batch_context import RunContext

__all__ = ["check_value_types"]


def check_value_types(runner: RunContext) -> None:
    """Refuse a stored Sum/Min/Max state whose declared values its value column cannot hold.

    Only states whose map table exists are typed (one DataFrame analysis each, no Spark
    job). Nothing is written.

    Raises:
        StateContractError: naming the state, the stored and the declared value types, the
            input field and its type, and the ways out.
    """
    from trident_assets.spark.batch_run import BatchRun

    topo = runner.topology
    run: BatchRun | None = None
    for state in topo.states.values():
        # a Sum/Min/Max state whose value type comes from its input field
        if not state_kind(state.node).typed_by_input or depends_on_new_values(state.node):
            continue
        stored = runner.store.layout(state.table)
        if stored is None:
            continue
        if run is None:
            plans = {
                sid: BatchPlan.of(
                    topo.name, sid, 0, node.args["spout"].config.kind, (), replay=True
                )
                for sid, node in topo.spouts.items()
            }
            run = BatchRun.alone(runner, 0, plans)
        a = state.node.args
        partials = run.state_input(state)  # empty: typed without a Spark job
        declared = arrow_to_sql_type(partials.schema.field(a["output"]).type, for_key=False)
        if declared is not None and value_fits(declared, stored.value_type):
            continue
        field = a["inputs"][0]
        input_type = run.frame(state.node.parents[0]).schema[field].dataType.simpleString()
        source = f"{type(a['agg']).__name__} over field {field!r}, which is {input_type}"
        refuse_value_type(state.contract(), stored.value_type, str(declared), source)

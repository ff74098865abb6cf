"""The asset graph of a topology: which assets it has, their tables, and lineage as data flows.

Per topology (the group), one partition per txid:

* ``<spout>_batch``: the offset ranges a spout's batch reads;
* ``<state>_partials`` (grouped aggregation): a combiner state's per-key partials of the txid;
* ``<state>``: the persisted state after the txid (loadable as of a txid);
* ``<state>_new_values``: the (key..., new value) rows the txid produced;
* ``<output>``: an output stream's rows of the txid.

Each asset's lineage is computed from the declared graph: an asset depends on the spouts its
tuples come from, on the states its queries read, and on the new values it consumes, so no
edge is drawn where no data flows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from trident_assets.backends.kv_target import target_of
from trident_assets.dagster.io_manager import KIND_KV_STATE, KIND_ROWS, KIND_STATE
from trident_assets.stream.single_join import SINGLE_JOIN_EXPIRED
from trident_assets.stream.state_kinds import state_kind
from trident_assets.stream.topology import Node, TridentTopology

__all__ = ["IO_MANAGER_KEY", "AssetNode", "asset_keys", "topology_graph"]

IO_MANAGER_KEY = "trident_io_manager"
"""Resource key of the TridentIOManager that loads trident assets downstream."""


@dataclass(frozen=True)
class AssetNode:
    """One asset of a topology."""

    key: dg.AssetKey
    role: str
    """``spout``, ``partials``, ``state``, ``new_values`` or ``output``."""
    name: str
    description: str
    deps: tuple[dg.AssetKey, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def loadable(self) -> bool:
        """True when the TridentIOManager can load it downstream."""
        return self.metadata.get("trident/kind") in (KIND_STATE, KIND_ROWS, KIND_KV_STATE)


def _rows_meta(topology: TridentTopology, table: str) -> dict[str, Any]:
    return {
        "trident/kind": KIND_ROWS,
        "trident/table": table,
        "trident/scope": topology.name,
        "dagster/table_name": table,
    }


def topology_graph(topology: TridentTopology) -> dict[str, AssetNode]:
    """Every asset of ``topology`` keyed ``<role>:<name>``, in a stable order."""
    name = topology.name

    def key(suffix: str) -> dg.AssetKey:
        return dg.AssetKey([name, suffix])

    keys: dict[str, dg.AssetKey] = {f"spout:{s}": key(f"{s}_batch") for s in topology.spouts}
    for state_name, state in topology.states.items():
        if state_kind(state.node).keeps_partials:  # combiners, distinct counts
            keys[f"partials:{state_name}"] = key(f"{state_name}_partials")
        keys[f"state:{state_name}"] = key(state_name)
        keys[f"new_values:{state_name}"] = key(f"{state_name}_new_values")
    keys |= {f"output:{o}": key(o) for o in topology.outputs}

    def upstream(node: Node) -> tuple[dg.AssetKey, ...]:
        found: dict[dg.AssetKey, None] = {}
        stack, seen = [node], set()
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            kind, args = current.kind, current.args
            if kind == "spout":
                found[keys[f"spout:{args['spout_id']}"]] = None
            elif kind == "new_values":
                found[keys[f"new_values:{args['state'].spec.name}"]] = None
            elif kind in (SINGLE_JOIN_EXPIRED, "query"):
                state_key = keys.get(f"state:{args['state'].spec.name}")  # static: no asset
                if state_key is not None:
                    found[state_key] = None
            stack.extend(current.parents)
        return tuple(sorted(found, key=lambda k: k.to_user_string()))

    nodes: dict[str, AssetNode] = {}
    for sid, spout in topology.spouts.items():
        kind = spout.args["spout"].config.kind.value
        nodes[f"spout:{sid}"] = AssetNode(
            keys[f"spout:{sid}"],
            "spout",
            sid,
            f"Batch of spout `{sid}` ({kind}): the offset ranges txid N reads, fixed as "
            "Trident fixes them.",
        )
    for state_name, state in topology.states.items():
        sources = upstream(state.node)
        fields = list(state.node.fields)
        if f"partials:{state_name}" in keys:
            table = state.partials_table
            nodes[f"partials:{state_name}"] = AssetNode(
                keys[f"partials:{state_name}"],
                "partials",
                state_name,
                f"Grouped aggregation feeding `{state_name}`: the per-key partials of txid N "
                f"({', '.join(fields)}), combined in Spark before the state is touched.",
                sources,
                _rows_meta(topology, table),
            )
            sources = (keys[f"partials:{state_name}"],)
        meta: dict[str, Any] = {"dagster/table_name": state.table, "trident/table": state.table}
        if state_kind(state.node).in_key_value_store:  # read from its servers
            meta |= {
                "trident/kind": KIND_KV_STATE,
                "trident/kv": target_of(state).to_json(),
                "trident/key_fields": list(state.group),
                "trident/value_field": state.value_field,
            }
        if state_kind(state.node).map_state:  # readable as of a txid
            meta |= {
                "trident/kind": KIND_STATE,
                "trident/scope": name,
                "trident/value_field": state.value_field,
                "trident/global": not state.group,
            }
        nodes[f"state:{state_name}"] = AssetNode(
            keys[f"state:{state_name}"],
            "state",
            state_name,
            f"**{state.spec.state_type.value}** state `{state_name}` after txid N "
            f"({', '.join(fields) or 'its own tables'}).",
            sources,
            meta,
        )
        nodes[f"new_values:{state_name}"] = AssetNode(
            keys[f"new_values:{state_name}"],
            "new_values",
            state_name,
            f"New values of `{state_name}`: the rows txid N produced "
            f"({', '.join(fields) or 'what its updater returns'}), Trident's new values stream.",
            (keys[f"state:{state_name}"],),
            _rows_meta(topology, state.new_values_table),
        )
    for output, stream in topology.outputs.items():
        table = topology.output_table(output)
        nodes[f"output:{output}"] = AssetNode(
            keys[f"output:{output}"],
            "output",
            output,
            f"Tuples of output stream `{output}` per txid ({', '.join(stream.fields)}).",
            upstream(stream.node),
            _rows_meta(topology, table),
        )
    return nodes


def asset_keys(topology: TridentTopology) -> dict[str, dg.AssetKey]:
    """The asset key of each asset of ``topology`` (``spout:<id>``, ``state:<name>``, ...)."""
    return {role: node.key for role, node in topology_graph(topology).items()}

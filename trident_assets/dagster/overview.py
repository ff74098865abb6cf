"""The topology's overview asset, ``<topology>/overview``: the page to open first in the UI.

A non-executable asset (nothing computes it on its own): every run of the topology's txids
that committed a txid, or failed one, ends with a materialization of it whose metadata is the
topology at that moment (:func:`~trident_assets.overview.topology_overview`): each figure
(the last committed txid, the backlog, the txids per minute, the last failure, the
quarantined txids, the dead letters; numbers are drawn over time in the Plots tab), then the
dead letters per txid (a bar chart and their reasons) and the txids committed per minute (a
bar chart). The asset page opens on the latest materialization.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

from trident_assets.dagster.graph import asset_keys
from trident_assets.errors import ConfigError
from trident_assets.overview import topology_overview
from trident_assets.stream.topology import TridentTopology

__all__ = ["COMMIT_TIMES", "overview_event", "overview_key", "overview_spec"]

COMMIT_TIMES = 60
"""How many of the latest commits the txids per minute are computed from."""


def overview_key(topology: TridentTopology) -> dg.AssetKey:
    """``<topology>/overview``."""
    return dg.AssetKey([topology.name, "overview"])


def overview_spec(topology: TridentTopology) -> dg.AssetSpec:
    """The overview asset's spec (grouped with the topology's assets).

    Raises:
        ConfigError: the topology has an asset named ``overview`` (a state or an output).
    """
    key = overview_key(topology)
    if key in asset_keys(topology).values():
        msg = (
            f"topology {topology.name!r} has a state or output named 'overview', the name of "
            "its overview asset: rename it"
        )
        raise ConfigError(msg)
    return dg.AssetSpec(
        key,
        description=(
            f"**Start here: `{topology.name}` at a glance**, as of its latest run: "
            "the last committed txid, the backlog (records waiting per partition), the txids "
            "committed per minute, the last failure, the quarantined txids and the dead "
            "letters per txid with their reasons (`trident dead-letters` lists the records). "
            "The Plots tab draws each figure over time."
        ),
        group_name=topology.name,
        kinds={"trident"},
        owners=["team:streaming"],
        metadata={"trident/kind": "overview", "trident/scope": topology.name},
    )


def _commit_times(instance: dg.DagsterInstance, topology: TridentTopology) -> list[datetime]:
    """When the latest txids committed: their spout batch materializations (one per txid)."""
    spout_keys = [k for name, k in asset_keys(topology).items() if name.startswith("spout:")]
    if not spout_keys:
        return []
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=spout_keys[0]), limit=COMMIT_TIMES, ascending=False
    ).records
    return [datetime.fromtimestamp(r.timestamp, UTC) for r in records]


def overview_event(
    instance: dg.DagsterInstance, home: str | Path, store: Any, topology: TridentTopology
) -> dg.AssetMaterialization:
    """The overview of ``topology`` now, as a materialization of its overview asset.

    Each figure is an entry of its own (numbers as numbers, drawn in the Plots tab); the dead
    letters per txid and the txids committed per minute are bar charts, the dead letters'
    reasons a table (Markdown).
    """
    overview = topology_overview(
        Path(home), store, topology.name, _commit_times(instance, topology)
    )
    metadata: dict[str, Any] = {
        "last committed txid": dg.MetadataValue.int(overview.last_txid or 0),
        "backlog (records waiting)": (
            dg.MetadataValue.text("unknown")
            if overview.backlog is None
            else dg.MetadataValue.int(overview.backlog)
        ),
        "lag by partition": dg.MetadataValue.text(overview.lag_by_partition or "none"),
        "txids per minute": dg.MetadataValue.float(overview.txids_per_minute or 0.0),
        "last failure": dg.MetadataValue.text(overview.last_failure or "none"),
        "quarantined": dg.MetadataValue.text(overview.quarantined),
        "quarantined records": dg.MetadataValue.int(overview.quarantined_records),
        "dead letters": dg.MetadataValue.int(sum(n for _, n, _ in overview.dead_letters)),
        "dead letters per txid": dg.MetadataValue.md(overview.dead_letters_markdown()),
        "dead letter reasons": dg.MetadataValue.md(overview.reasons_markdown()),
        "txids committed per minute": dg.MetadataValue.md(overview.commits_markdown()),
    }
    return dg.AssetMaterialization(asset_key=overview_key(topology), metadata=metadata)

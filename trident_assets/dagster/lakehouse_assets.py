"""The lakehouse tables a topology publishes, as Dagster assets downstream of their sources.

Each publication (``state.publish(ta.DeltaTable(...))``) is an asset ``<topology>/<name>_delta``
(or ``_iceberg``) of kind ``delta``/``iceberg``, downstream of its state or output. It is not
partitioned: the table is one table, and each txid published to it is one materialization
whose metadata names the txid and the table version (Delta) or snapshot id (Iceberg) holding
the table as of it. Downstream assets load it with Dagster's own IO managers
(``dagster-deltalake``, ``dagster-iceberg``): give :func:`table_specs` their resource key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dagster as dg

from trident_assets.stream.topology import TridentTopology

__all__ = ["table_events", "table_key", "table_specs"]


def table_key(topology: TridentTopology, asset: str) -> dg.AssetKey:
    """The asset key of a published table (``asset``: ``<name>_<format>``)."""
    return dg.AssetKey([topology.name, asset])


def _location(table: Any) -> str:
    return str(table.path if table.format == "delta" else table.identifier)


def table_specs(
    topology: TridentTopology, io_manager_keys: dict[str, str] | None = None
) -> list[dg.AssetSpec]:
    """One asset spec per published table; ``io_manager_keys``: per format, the loading one."""
    specs = []
    for pub in topology.publications:
        spec = dg.AssetSpec(
            table_key(topology, pub.asset),
            deps=[dg.AssetKey([topology.name, pub.name])],
            description=(
                f"{pub.table.describe()}: {pub.source} `{pub.name}` published after each "
                f"committed txid ({pub.mode}), one table commit per txid."
            ),
            kinds={pub.table.format},
            group_name=topology.name,
            metadata={
                "trident/table_format": pub.table.format,
                "trident/table": _location(pub.table),
                "trident/mode": pub.mode,
                "trident/app_id": pub.app_id,
            },
        )
        key = (io_manager_keys or {}).get(pub.table.format)
        specs.append(spec.with_io_manager_key(key) if key else spec)
    return specs


def table_events(
    topology: TridentTopology, tables: list[Any], published: dict[str, list[int]]
) -> Iterator[dg.AssetMaterialization]:
    """A materialization per txid published to each table (``outcome.published``)."""
    for publisher in tables:
        pub = publisher.publication
        txids = published.get(pub.asset) or []
        if not txids:
            continue
        versions = publisher.writer.versions()
        what = "version" if pub.table.format == "delta" else "snapshot_id"
        for txid in txids:
            yield dg.AssetMaterialization(
                asset_key=table_key(topology, pub.asset),
                metadata={
                    "txid": dg.MetadataValue.int(txid),
                    what: dg.MetadataValue.int(int(versions[txid])),
                    "table": dg.MetadataValue.text(_location(pub.table)),
                },
            )

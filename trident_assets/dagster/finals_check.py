"""The ``finals_unchanged`` check of a finals asset, and the sensor that runs it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from trident_assets.backends.map_layout import quote_ident
from trident_assets.dagster.finals_asset import FinalsAsset, finals_rows, fingerprint
from trident_assets.dagster.resources import TridentResource

__all__ = ["FINALS_CHECKS_SENSOR", "finals_check", "finals_checks_sensor"]

FINALS_CHECKS_SENSOR = "trident_finals_checks"
"""The sensor that runs the finals checks after new finals partitions."""


def finals_check(fa: FinalsAsset, pool: str | None = None) -> dg.AssetChecksDefinition:
    """The check of a finals asset: each window emitted once, no closed partition changed.

    Fails (with the offending partitions and windows as metadata) when a time partition was
    materialized more than once, when the finals of a materialized partition no longer match
    the fingerprint its materialization recorded, or when a (key, window_start, window_end)
    appears twice in the finals table. Requested by :func:`finals_checks_sensor` whenever
    the asset got new partitions (``AutomationCondition.any_deps_updated``); ``pool``: the
    topology's batches pool, so that its run reads the store between batch runs.
    """
    from trident_assets.backends.postgres_config import is_postgres_dsn
    from trident_assets.backends.state_store import open_state_store

    @dg.asset_check(
        asset=fa.key,
        name="finals_unchanged",
        automation_condition=dg.AutomationCondition.any_deps_updated(),
        pool=pool,
        description=(
            "Each window emitted once; the finals of every materialized partition still match "
            "the fingerprint recorded when it was materialized."
        ),
    )
    def _check(
        context,  # unannotated: dagster refuses a string annotation here
        trident: TridentResource,
    ) -> Any:
        recorded: dict[str, list[dict[str, Any]]] = {}
        cursor = None
        while True:
            page = context.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=fa.key), limit=1000, cursor=cursor, ascending=True
            )
            for record in page.records:
                mat = record.asset_materialization
                if mat is not None and mat.partition is not None:
                    recorded.setdefault(mat.partition, []).append(
                        {k: v.value for k, v in mat.metadata.items()}
                    )
            if not page.has_more:
                break
            cursor = page.cursor
        location = trident.state_location
        if not is_postgres_dsn(location) and not Path(location).exists():
            # no txid committed yet (a run's first batches still to come): nothing emitted,
            # unless partitions were recorded, whose finals are then gone
            return dg.AssetCheckResult(
                passed=not recorded,
                metadata={
                    "partitions_checked": dg.MetadataValue.int(len(recorded)),
                    "state": dg.MetadataValue.text(f"no state store at {location} yet"),
                },
            )
        keys = ", ".join(quote_ident(k) for k in fa.key_fields)
        sep = ", " if keys else ""
        with open_state_store(location, read_only=True) as store:
            duplicates: list[str] = []
            if store.has_table(fa.state.finals_table):
                rows = store.fetch_rows(
                    f"SELECT {keys}{sep}window_start, window_end, count(*) FROM "
                    f"{quote_ident(fa.state.finals_table)} GROUP BY {keys}{sep}window_start, "
                    f"window_end HAVING count(*) > 1 ORDER BY {keys}{sep}window_start"
                )
                duplicates = [" ".join(str(v) for v in r[:-1]) + f" x{r[-1]}" for r in rows]
            changed: dict[str, Any] = {}
            for partition in sorted(recorded):
                tw = fa.partitions_def.time_window_for_partition_key(partition)
                now = fingerprint(
                    finals_rows(store, fa.state, tw.start, tw.end), fa.key_fields, fa.value_field
                )
                then = recorded[partition][-1]
                if now["hash"] != then.get("fingerprint"):
                    changed[partition] = {
                        "recorded": {
                            "windows": then.get("windows"),
                            "total": then.get("total"),
                            "fingerprint": then.get("fingerprint"),
                        },
                        "now": {
                            "windows": now["windows"],
                            "total": float(now["total"]),
                            "fingerprint": now["hash"],
                        },
                    }
        twice = sorted(p for p, events in recorded.items() if len(events) > 1)
        return dg.AssetCheckResult(
            passed=not (duplicates or changed or twice),
            metadata={
                "partitions_checked": dg.MetadataValue.int(len(recorded)),
                "materialized_twice": dg.MetadataValue.json(twice),
                "changed_partitions": dg.MetadataValue.json(changed),
                "duplicate_windows": dg.MetadataValue.json(duplicates),
            },
        )

    return _check


def finals_checks_sensor(checks: Sequence[dg.AssetChecksDefinition]) -> dg.SensorDefinition:
    """The sensor (running by default, every 15 s) that runs the finals checks.

    It requests each check whose asset got new partitions since its last tick: a check runs
    once after the batch run that materialized them, never while nothing changed.
    """
    return dg.AutomationConditionSensorDefinition(
        FINALS_CHECKS_SENSOR,
        target=dg.AssetSelection.checks(*checks),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=15,
        description="Runs each finals asset's finals_unchanged check after new finals partitions.",
    )

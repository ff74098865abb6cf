"""Final window results as a time-partitioned Dagster asset, one per event-window state.

For each tumbling or sliding ``window_aggregate`` state, :func:`finals_assets` declares
``<topology>/<state>_finals``, partitioned by time (a ``TimeWindowPartitionsDefinition``:
hourly by default when the window's slide divides an hour, daily when it divides a day, or
the one given to ``trident_definitions(window_partitions=...)``).

* **Which windows a partition holds:** those whose ``window_start`` lies in ``[p_start,
  p_end)``. A sliding window starting near the end of the partition ends up to
  ``size - slide`` after it; session windows get no such asset (a session may grow without
  bound). See :mod:`trident_assets.core.window_partitions`.
* **Completion:** a partition is complete when the watermark reaches
  :func:`~trident_assets.core.window_partitions.completion_time` (``p_end`` for tumbling
  windows aligned to the partitions, ``p_end - slide + size`` for sliding ones): every
  window that can start in it is final, so its rows never change again.
* **Materialized exactly once, by the batch run that completes it.** The finals asset is a
  non-executable ``AssetSpec`` (nothing computes it on its own); the topology's multi-asset
  step, after committing txid T, yields an ``AssetMaterialization`` for each time partition
  T's watermark completed and the previous txid's did not (Dagster accepts events for other
  assets and other partitions definitions in a step, attributed to the run). A re-run of a
  committed txid yields only the partitions it completed that the instance has no
  materialization of (its first run stopped between the commit and the events), so a
  replay after a reported commit yields nothing. Partitions before the state's
  first window, and partitions not existing yet in the definition (before its start, in the
  future), are not reported.
* **Loading:** the ``TridentIOManager`` loads a partition range as the finals rows with
  ``window_start`` in the input's time window, from the read replica
  (:func:`~trident_assets.dagster.finals_reader.read_published_finals`: no lock, so a rollup
  runs while a batch commits), so a downstream
  asset with a coarser time partitioning (e.g. daily, with ``TimeWindowPartitionMapping``)
  gets all the finals of its day.
* **Check** (:func:`finals_check`): each partition's materialization records a fingerprint
  (windows, total, hash); the check recomputes it from the finals table in the state store
  (:func:`read_finals_range`) and fails when a
  partition was materialized twice, its windows changed, or a window is in the finals twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident
from trident_assets.backends.window_store import WATERMARKS
from trident_assets.core.event_windows import MICROS
from trident_assets.core.window_partitions import has_time_partitions, newly_complete
from trident_assets.dagster.finals_reader import naive_utc, read_finals_range
from trident_assets.dagster.graph import IO_MANAGER_KEY
from trident_assets.dagster.previews import preview_metadata
from trident_assets.dagster.resources import TridentResource
from trident_assets.errors import ConfigError
from trident_assets.names import DEAD_LETTERS_TABLE
from trident_assets.runtime.outcomes import PREVIEW_ROWS
from trident_assets.stream.event_windows import WindowedState

if TYPE_CHECKING:
    from trident_assets.runtime.outcomes import BatchOutcome
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "DEFAULT_START",
    "FINALS_CHECKS_SENSOR",
    "KIND_FINALS",
    "FinalsAsset",
    "check_partition_names",
    "completed_partitions",
    "default_finals_partitions",
    "finals_assets",
    "finals_check",
    "finals_checks_sensor",
    "finals_events",
    "fingerprint",
    "read_finals_range",
]

KIND_FINALS = "window_finals"
"""``trident/kind`` of a finals asset: loaded by the time window of the input."""
DEFAULT_START = "2026-01-01"
"""The first time partition of a finals asset when none is given."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DEAD_LETTERS = DEAD_LETTERS_TABLE


@dataclass(frozen=True)
class FinalsAsset:
    """The time-partitioned finals asset of one windowed state."""

    topology: TridentTopology
    state: WindowedState
    partitions_def: dg.TimeWindowPartitionsDefinition

    @property
    def key(self) -> dg.AssetKey:
        """``<topology>/<state>_finals``."""
        return dg.AssetKey([self.topology.name, f"{self.state.spec.name}_finals"])

    @property
    def value_field(self) -> str:
        """The windowed aggregation's output field."""
        return self.state.windowed.output

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The group fields of the windows."""
        return tuple(self.state.windowed.group)

    def spec(self) -> dg.AssetSpec:
        """The asset's spec: time partitions, lineage from the state, loadable by time range."""
        state = self.state
        return dg.AssetSpec(
            self.key,
            deps=[dg.AssetKey([self.topology.name, state.spec.name])],
            description=(
                f"Final windows of `{state.spec.name}` by window start. A partition is "
                "materialized once, by the batch run whose watermark completes it (every "
                "window starting in it is final)."
            ),
            kinds={"duckdb"},
            owners=["team:streaming"],
            group_name=self.topology.name,
            partitions_def=self.partitions_def,
            metadata={
                "trident/kind": KIND_FINALS,
                "trident/table": state.finals_table,
                "trident/scope": self.topology.name,
                "trident/key_fields": list(self.key_fields),
                "trident/value_field": self.value_field,
                "dagster/table_name": state.finals_table,
            },
        ).with_io_manager_key(IO_MANAGER_KEY)


def default_finals_partitions(
    state: WindowedState, start: str = DEFAULT_START
) -> dg.TimeWindowPartitionsDefinition:
    """Hourly partitions when the window's slide divides an hour, daily when it divides a day.

    Raises:
        ConfigError: the slide divides neither (give the partitions in ``window_partitions``).
    """
    slide = state.windowed.window.slide_us
    if MICROS["h"] % slide == 0:
        return dg.HourlyPartitionsDefinition(start_date=f"{start}-00:00")
    if MICROS["d"] % slide == 0:
        return dg.DailyPartitionsDefinition(start_date=start)
    msg = (
        f"windowed state {state.spec.name!r}: its windows ({slide} us apart) divide neither an "
        "hour nor a day; give its time partitions, e.g. trident_definitions(..., "
        f"window_partitions={{'{state.spec.name}': dg.TimeWindowPartitionsDefinition(...)}})"
    )
    raise ConfigError(msg)


def finals_assets(
    topology: TridentTopology,
    partitions: Mapping[str, dg.TimeWindowPartitionsDefinition] | None = None,
    start: str = DEFAULT_START,
) -> list[FinalsAsset]:
    """The finals assets of ``topology``'s tumbling and sliding window states.

    ``partitions`` maps a state name (or ``<topology>/<state>``) to its time partitions;
    :func:`check_partition_names` refuses names that match no finals asset.
    """
    given = dict(partitions or {})
    found = []
    for name, state in topology.states.items():
        if not isinstance(state, WindowedState) or not has_time_partitions(state.windowed.window):
            continue
        chosen = given.get(f"{topology.name}/{name}") or given.get(name)
        found.append(
            FinalsAsset(topology, state, chosen or default_finals_partitions(state, start))
        )
    return found


def check_partition_names(names: Sequence[str], finals: Sequence[FinalsAsset]) -> None:
    """Refuse ``window_partitions`` names that are no tumbling or sliding window state.

    Raises:
        ConfigError: naming the unknown name and the window states there are.
    """
    known = {f.state.spec.name for f in finals} | {
        f"{f.topology.name}/{f.state.spec.name}" for f in finals
    }
    for name in names:
        if name not in known:
            msg = (
                f"window_partitions names {name!r}: no tumbling or sliding window state of "
                f"that name (window states: {sorted(known)})"
            )
            raise ConfigError(msg)


def _us(value: datetime) -> int:
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    delta = aware - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _time(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def finals_rows(store: Any, state: WindowedState, start: datetime, end: datetime) -> pa.Table:
    """The finals of ``state`` with ``start <= window_start < end``, ordered by key, window."""
    if not store.has_table(state.finals_table):
        return pa.table({})
    keys = "".join(f"{quote_ident(k)}, " for k in state.windowed.group)
    return store.fetch_arrow(
        f"SELECT * FROM {quote_ident(state.finals_table)} WHERE window_start >= ? AND "
        f"window_start < ? ORDER BY {keys}window_start, window_end",
        [naive_utc(start), naive_utc(end)],
    )


def fingerprint(rows: pa.Table, key_fields: Sequence[str], value: str) -> dict[str, Any]:
    """``windows`` (count), ``total`` (sum of values) and ``hash`` of a partition's finals.

    The hash covers each window's key, start, end and value in a canonical order, so any
    change (a window added, removed or changed) changes it.
    """
    if rows.num_rows == 0:
        return {"windows": 0, "total": 0, "hash": hashlib.sha256(b"").hexdigest()[:16]}
    cols = [*key_fields, "window_start", "window_end", value]
    lines = sorted(json.dumps([r[c] for c in cols], default=str) for r in rows.to_pylist())
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    values = [v for v in rows.column(value).to_pylist() if v is not None]
    return {"windows": rows.num_rows, "total": sum(values), "hash": digest}


def _watermarks(store: Any, fa: FinalsAsset, txid: int) -> tuple[int | None, int | None]:
    """``(watermark before txid, watermark after txid)`` in epoch microseconds."""
    rows = store.fetch_rows(
        f"SELECT txid, {store.dialect.micros_of('watermark')} FROM {WATERMARKS} "
        "WHERE topology = ? AND state = ? "
        "AND txid <= ? ORDER BY txid DESC LIMIT 2",
        [fa.topology.name, fa.state.spec.name, txid],
    )
    after = rows[0][1] if rows and rows[0][0] == txid else None
    before = rows[1][1] if len(rows) > 1 else None
    return (None if before is None else int(before)), (None if after is None else int(after))


def _first_start(store: Any, state: WindowedState) -> int | None:
    """The earliest window start the state holds (final or open), epoch microseconds."""
    rows = store.fetch_rows(
        f"SELECT {store.dialect.micros_of('min(window_start)')} FROM (SELECT window_start FROM "
        f"{quote_ident(state.finals_table)} UNION ALL SELECT window_start FROM "
        f"{quote_ident(state.open_table)}) AS w"
    )
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def _late_records(store: Any, fa: FinalsAsset) -> int:
    """Dead letters of the state (spout ``window:<state>``) over all committed txids."""
    if not store.has_table(_DEAD_LETTERS):
        return 0
    rows = store.fetch_rows(
        f"SELECT count(*) FROM {_DEAD_LETTERS} WHERE topology = ? AND spout = ?",
        [fa.topology.name, f"window:{fa.state.spec.name}"],
    )
    return int(rows[0][0])


def completed_partitions(store: Any, fa: FinalsAsset, txid: int) -> list[tuple[str, dg.TimeWindow]]:
    """The time partitions txid ``txid`` completed (its watermark did, the previous did not)."""
    before, after = _watermarks(store, fa, txid)
    if after is None or (before is not None and after <= before):
        return []
    window = fa.state.windowed.window
    if before is None:
        first = _first_start(store, fa.state)
        if first is None:
            return []
        lo = first
    else:
        lo = before - window.size_us
    pdef = fa.partitions_def
    first_window = pdef.get_first_partition_window()
    last_window = pdef.get_last_partition_window()
    if first_window is None or last_window is None:
        return []
    lo_dt = max(_time(lo), first_window.start)
    hi_dt = min(_time(after), last_window.end)
    if lo_dt >= hi_dt:
        return []
    windows = {}
    key: str | None = pdef.get_partition_key_for_timestamp(lo_dt.timestamp())
    while key is not None:
        tw = pdef.time_window_for_partition_key(key)
        if tw.start >= hi_dt:
            break
        if tw.start >= first_window.start and tw.end <= last_window.end:
            windows[(_us(tw.start), _us(tw.end))] = (key, tw)
        key = pdef.get_next_partition_key(key)
    done = newly_complete(window, sorted(windows), before, after)
    return [windows[r] for r in done]


def finals_events(
    finals: Sequence[FinalsAsset],
    store: Any,
    outcome: BatchOutcome,
    instance: dg.DagsterInstance | None = None,
) -> Iterator[dg.AssetMaterialization]:
    """The materializations of the time partitions ``outcome``'s txid completed.

    Called in the multi-asset's step right after the txid committed. A re-run of a committed
    txid (not applied) yields only the partitions it completed that ``instance`` has no
    materialization of (the run that committed it stopped before reporting them), so a
    replay after a reported commit yields nothing. One finals query per state and txid.
    """
    for fa in finals:
        done = completed_partitions(store, fa, outcome.txid)
        if not outcome.applied:
            known = set() if instance is None else instance.get_materialized_partitions(fa.key)
            done = [(k, tw) for k, tw in done if instance is not None and k not in known]
        if not done:
            continue
        rows = finals_rows(store, fa.state, done[0][1].start, done[-1][1].end)
        starts = [_us(v) for v in rows.column("window_start").to_pylist()] if rows.num_rows else []
        late = _late_records(store, fa)
        watermark = _time(_watermarks(store, fa, outcome.txid)[1] or 0).replace(tzinfo=None)
        for key, tw in done:
            lo, hi = _us(tw.start), _us(tw.end)
            mask = pa.array([lo <= s < hi for s in starts], pa.bool_())
            part = rows.filter(mask) if rows.num_rows else rows
            fp = fingerprint(part, fa.key_fields, fa.value_field)
            txids = sorted(set(part.column("final_txid").to_pylist())) if part.num_rows else []
            yield dg.AssetMaterialization(
                asset_key=fa.key,
                partition=key,
                metadata={
                    "windows": dg.MetadataValue.int(fp["windows"]),
                    "reported_late": dg.MetadataValue.bool(not outcome.applied),
                    "total": dg.MetadataValue.float(float(fp["total"])),
                    "fingerprint": dg.MetadataValue.text(fp["hash"]),
                    "final_txids": dg.MetadataValue.json(txids),
                    "txid": dg.MetadataValue.int(outcome.txid),
                    "watermark": dg.MetadataValue.text(str(watermark)),
                    "late_records": dg.MetadataValue.int(late),
                    "dagster/row_count": dg.MetadataValue.int(fp["windows"]),
                    # the partition's first windows (by key, window_start), as on a state's
                    **preview_metadata(part.slice(0, PREVIEW_ROWS), part.num_rows),
                },
            )


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

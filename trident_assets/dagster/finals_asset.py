"""The finals asset of an event-window state: its declaration, its rows, their fingerprint.

See :mod:`.window_assets` for what it holds and when it is materialized.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import dagster as dg
import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident
from trident_assets.core.event_windows import MICROS
from trident_assets.core.window_partitions import has_time_partitions
from trident_assets.dagster.finals_reader import naive_utc
from trident_assets.dagster.graph import IO_MANAGER_KEY
from trident_assets.errors import ConfigError
from trident_assets.stream.event_windows import WindowedState

if TYPE_CHECKING:
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "DEFAULT_START",
    "FinalsAsset",
    "check_partition_names",
    "finals_assets",
    "finals_rows",
    "fingerprint",
    "partitions_end",
]

KIND_FINALS = "window_finals"
"""``trident/kind`` of a finals asset: loaded by the time window of the input."""
DEFAULT_START = "2026-01-01"
"""The first time partition of a finals asset when none is given."""


@dataclass(frozen=True)
class FinalsAsset:
    """The time-partitioned finals asset of one windowed state."""

    topology: TridentTopology
    state: WindowedState
    partitions_def: dg.TimeWindowPartitionsDefinition
    reported_def: dg.TimeWindowPartitionsDefinition | None = None
    """The partitions whose completion a txid reports (default: ``partitions_def``): default
    partitions without the end they had when the definitions loaded, so a partition closed
    later is materialized too (the UI lists it once the code location reloads)."""

    @property
    def reported(self) -> dg.TimeWindowPartitionsDefinition:
        """The partitions whose completion a txid reports."""
        return self.reported_def or self.partitions_def

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
    state: WindowedState, start: str = DEFAULT_START, end: datetime | None = None
) -> dg.TimeWindowPartitionsDefinition:
    """Hourly partitions when the window's slide divides an hour, daily when it divides a day.

    ``end``: where they end (exclusive; default: they follow the clock).

    Raises:
        ConfigError: the slide divides neither (give the partitions in ``window_partitions``).
    """
    slide = state.windowed.window.slide_us
    if MICROS["h"] % slide == 0:
        return dg.HourlyPartitionsDefinition(start_date=f"{start}-00:00", end_date=end)
    if MICROS["d"] % slide == 0:
        return dg.DailyPartitionsDefinition(start_date=start, end_date=end)
    msg = (
        f"windowed state {state.spec.name!r}: its windows ({slide} us apart) divide neither an "
        "hour nor a day; give its time partitions, e.g. trident_definitions(..., "
        f"window_partitions={{'{state.spec.name}': dg.TimeWindowPartitionsDefinition(...)}})"
    )
    raise ConfigError(msg)


def partitions_end(
    partitions: dg.TimeWindowPartitionsDefinition,
    watermark: datetime | None,
    now: datetime | None = None,
) -> datetime | None:
    """Where finals partitions end: at the start of the partition the watermark is in.

    So the partitions are those the watermark has passed (complete, or for sliding windows
    nearly so). None (the partitions follow the clock, as Dagster's do) before any
    watermark, or when the watermark lies in the current or the previous partition by
    ``now`` (the data is current: a live topology's next partitions close as the clock
    moves).
    """
    if watermark is None:
        return None
    clock = (now or datetime.now(UTC)).timestamp()
    at = partitions.time_window_for_partition_key(
        partitions.get_partition_key_for_timestamp(watermark.timestamp())
    )
    current = partitions.time_window_for_partition_key(
        partitions.get_partition_key_for_timestamp(clock)
    )
    previous = partitions.get_partition_key_for_timestamp(current.start.timestamp() - 1)
    if at.start >= partitions.time_window_for_partition_key(previous).start:
        return None
    return at.start


def finals_assets(
    topology: TridentTopology,
    partitions: Mapping[str, dg.TimeWindowPartitionsDefinition] | None = None,
    start: str = DEFAULT_START,
    watermarks: Mapping[str, datetime] | None = None,
) -> list[FinalsAsset]:
    """The finals assets of ``topology``'s tumbling and sliding window states.

    ``partitions`` maps a state name (or ``<topology>/<state>``) to its time partitions;
    :func:`check_partition_names` refuses names that match no finals asset. Default
    partitions end where the state's committed watermark (in ``watermarks``, by
    ``<topology>/<state>``: :func:`~.finals_reader.committed_watermarks`) was when the
    definitions loaded (:func:`partitions_end`), so they do not run ahead of the data.
    """
    given = dict(partitions or {})
    found = []
    for name, state in topology.states.items():
        if not isinstance(state, WindowedState) or not has_time_partitions(state.windowed.window):
            continue
        chosen = given.get(f"{topology.name}/{name}") or given.get(name)
        if chosen is not None:
            found.append(FinalsAsset(topology, state, chosen))
            continue
        unbounded = default_finals_partitions(state, start)
        end = partitions_end(unbounded, (watermarks or {}).get(f"{topology.name}/{name}"))
        bounded = unbounded if end is None else default_finals_partitions(state, start, end)
        found.append(FinalsAsset(topology, state, bounded, unbounded))
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

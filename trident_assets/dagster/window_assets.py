"""Final window results as a time-partitioned Dagster asset, one per event-window state.

For each tumbling or sliding ``window_aggregate`` state, :func:`~.finals_asset.finals_assets`
declares ``<topology>/<state>_finals``, partitioned by time (a ``TimeWindowPartitionsDefinition``:
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
  first window, and partitions before the definition's start or in the future, are not
  reported. Those that have windows are reported after those that have none, so the asset's
  page (which opens on its latest materialization) shows windows.
* **Partitions do not run ahead of the watermark.** Default partitions end at the start of
  the partition the state's committed watermark was in when the definitions loaded
  (:func:`~.finals_asset.partitions_end`; read from the store without waiting, a store a
  batch holds gives no end), unless the watermark is in the current or the previous
  partition by the clock: then they follow the clock. A partition completed after the
  definitions loaded is materialized all the same, and listed once the code location
  reloads.
* **Loading:** the ``TridentIOManager`` loads a partition range as the finals rows with
  ``window_start`` in the input's time window, from the read replica
  (:func:`~trident_assets.dagster.finals_reader.read_published_finals`: no lock, so a rollup
  runs while a batch commits), so a downstream
  asset with a coarser time partitioning (e.g. daily, with ``TimeWindowPartitionMapping``)
  gets all the finals of its day.
* **Check** (:func:`~.finals_check.finals_check`): each partition's materialization records a
  fingerprint (windows, total, hash); the check recomputes it from the finals table in the
  state store (:func:`~.finals_asset.finals_rows`) and fails when a partition was
  materialized twice, its windows changed, or a window is in the finals twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import dagster as dg
import pyarrow as pa

from trident_assets.backends.map_layout import quote_ident
from trident_assets.backends.window_store import WATERMARKS
from trident_assets.core.window_partitions import newly_complete
from trident_assets.dagster.finals_asset import FinalsAsset, finals_rows, fingerprint
from trident_assets.dagster.previews import preview_metadata
from trident_assets.names import DEAD_LETTERS_TABLE
from trident_assets.runtime.outcomes import PREVIEW_ROWS
from trident_assets.stream.event_windows import WindowedState

if TYPE_CHECKING:
    from trident_assets.runtime.outcomes import BatchOutcome

__all__ = ["FinalsAsset", "finals_events"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(value: datetime) -> int:
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    delta = aware - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _time(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


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


def _late_records(store: Any, fa: FinalsAsset) -> tuple[int, int]:
    """``(late, unreadable)``: the state's dead letters over all committed txids, by reason.

    Late records, and records whose event time is null or unparseable (spout
    ``window:<state>``).
    """
    if not store.has_table(DEAD_LETTERS_TABLE):
        return 0, 0
    rows = store.fetch_rows(
        "SELECT coalesce(sum(CASE WHEN reason LIKE ? THEN 1 ELSE 0 END), 0), count(*) "
        f"FROM {DEAD_LETTERS_TABLE} WHERE topology = ? AND spout = ?",
        ["late record%", fa.topology.name, f"window:{fa.state.spec.name}"],
    )
    late, total = int(rows[0][0]), int(rows[0][1])
    return late, total - late


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
    pdef = fa.reported
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
    The partitions without windows come first, then those with windows, each in time order.
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
        late, unreadable = _late_records(store, fa)
        watermark = _time(_watermarks(store, fa, outcome.txid)[1] or 0).replace(tzinfo=None)
        parts = []
        for key, tw in done:
            lo, hi = _us(tw.start), _us(tw.end)
            mask = pa.array([lo <= s < hi for s in starts], pa.bool_())
            parts.append((key, rows.filter(mask) if rows.num_rows else rows))
        # empty partitions first: the asset's page opens on its latest event, a partition
        # with windows when the txid completed any
        for key, part in sorted(parts, key=lambda kp: kp[1].num_rows > 0):
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
                    "unreadable_records": dg.MetadataValue.int(unreadable),
                    "dagster/row_count": dg.MetadataValue.int(fp["windows"]),
                    # the partition's first windows (by key, window_start), as on a state's
                    **preview_metadata(part.slice(0, PREVIEW_ROWS), part.num_rows),
                },
            )

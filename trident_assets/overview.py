"""A topology at a glance: the figures of its overview page, as Markdown with bar charts.

:func:`topology_overview` gathers, from the state store, what ``trident status`` prints
(:func:`~trident_assets.status.status_rows`: last committed txid, records waiting per
partition, records held in quarantine, the last failure), the quarantined txids, the dead
letters of the latest txids that had any (per txid, with their reasons), and the txids
committed per minute (from commit times the caller gives: the Dagster layer reads them from
its event log). The dead letters per txid
and the txids per minute are bar charts (:func:`bars_markdown`: Markdown tables of blocks,
short enough to be shown inline). No Dagster here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from trident_assets.names import DEAD_LETTERS_TABLE, validate_identifier
from trident_assets.status import status_rows

__all__ = ["DEAD_LETTER_TXIDS", "Overview", "bars_markdown", "markdown_cell", "topology_overview"]

DEAD_LETTER_TXIDS = 20
"""How many of the latest txids with dead letters the overview shows."""
REASONS_SHOWN = 3
"""Distinct reasons shown per txid (the most frequent)."""
REASON_CHARS = 90
"""Characters of a reason shown (longer ones are cut with ``…``)."""
CHART_ROWS = 20
"""Rows (txids, minutes) of a bar chart."""
BAR_BLOCKS = 16
"""Blocks of the longest bar."""


@dataclass(frozen=True)
class Overview:
    """What a topology's overview page shows."""

    topology: str
    last_txid: int | None
    backlog: int | None
    """Records waiting in all the topology's partitions (None: a partition's is unknown)."""
    lag_by_partition: str
    quarantined_txids: list[int]
    quarantined_records: int
    last_failure: str | None
    dead_letters: list[tuple[int, int, list[tuple[str, int]]]]
    """Per txid (latest first): the txid, its dead letters, its reasons with their counts."""
    commits_per_minute: list[tuple[datetime, int]] = field(default_factory=list)
    """Txids committed in each minute from the first of the given commit times to the last."""

    @property
    def txids_per_minute(self) -> float | None:
        """Txids committed per minute over the given commit times (None: fewer than 2)."""
        total = sum(n for _, n in self.commits_per_minute)
        if total < 2:
            return None
        return round(total / len(self.commits_per_minute), 2)

    @property
    def quarantined(self) -> str:
        """The quarantined txids and their records, in words."""
        if not self.quarantined_txids:
            return "none"
        txids = ", ".join(str(t) for t in self.quarantined_txids)
        return f"txids {txids} ({self.quarantined_records:,} records set aside)"

    def dead_letters_markdown(self) -> str:
        """A bar chart of the dead letters per txid (Markdown; oldest txid first)."""
        if not self.dead_letters:
            return "_no dead letters_"
        ordered = sorted(self.dead_letters)
        return bars_markdown("txid", "dead letters", [(str(t), n) for t, n, _ in ordered])

    def reasons_markdown(self) -> str:
        """Each txid's dead letters by reason (Markdown; latest txid first)."""
        if not self.dead_letters:
            return "_no dead letters_"
        lines = ["| txid | reasons (how many) |", "|---|---|"]
        for txid, _, reasons in self.dead_letters:
            said = "; ".join(f"{markdown_cell(r)} ({n})" for r, n in reasons)
            lines.append(f"| {txid} | {said} |")
        return "\n".join(lines)

    def commits_markdown(self) -> str:
        """A bar chart of the txids committed per minute, the latest minutes (Markdown)."""
        if not self.commits_per_minute:
            return "_no txid committed yet_"
        minutes = self.commits_per_minute[-CHART_ROWS:]
        return bars_markdown(
            "minute (UTC)", "txids committed", [(m.strftime("%H:%M"), n) for m, n in minutes]
        )


def topology_overview(
    home: Path, store: Any, topology: str, commit_times: Sequence[datetime] = ()
) -> Overview:
    """The overview of ``topology`` from ``store`` (and ``home``'s log and status files).

    ``commit_times``: when its latest txids committed (any order), for the txids per minute.
    """
    from trident_assets.backends.quarantine import entries

    validate_identifier(topology, "topology")
    row = next((r for r in status_rows(home, store) if r["topology"] == topology), None)
    held = entries(store, topology, pending_only=True)
    return Overview(
        topology=topology,
        last_txid=None if row is None else row["last_txid"],
        backlog=None if row is None else row["lag"],
        lag_by_partition="" if row is None else row["lag_by_partition"],
        quarantined_txids=sorted({e.txid for e in held}),
        quarantined_records=sum(e.records for e in held),
        last_failure=None if row is None else row["last_error"],
        dead_letters=_dead_letters(store, topology),
        commits_per_minute=_per_minute(commit_times),
    )


def _dead_letters(store: Any, topology: str) -> list[tuple[int, int, list[tuple[str, int]]]]:
    """Per txid with dead letters (the latest :data:`DEAD_LETTER_TXIDS`): count and reasons."""
    if not store.has_table(DEAD_LETTERS_TABLE):
        return []
    rows = store.fetch_rows(
        f"SELECT txid, reason, count(*) FROM {DEAD_LETTERS_TABLE} WHERE topology = ? AND txid "
        f"IN (SELECT DISTINCT txid FROM {DEAD_LETTERS_TABLE} WHERE topology = ? ORDER BY txid "
        "DESC LIMIT ?) GROUP BY txid, reason",
        [topology, topology, DEAD_LETTER_TXIDS],
    )
    by_txid: dict[int, Counter[str]] = {}
    for txid, reason, count in rows:
        by_txid.setdefault(int(txid), Counter())[str(reason)] += int(count)
    return [
        (
            txid,
            sum(reasons.values()),
            sorted(reasons.items(), key=lambda rc: (-rc[1], rc[0]))[:REASONS_SHOWN],
        )
        for txid, reasons in sorted(by_txid.items(), reverse=True)
    ]


def _per_minute(times: Sequence[datetime]) -> list[tuple[datetime, int]]:
    """Commits per minute from the first time's minute to the last's (empty minutes too)."""
    if not times:
        return []
    minutes = Counter(t.replace(second=0, microsecond=0) for t in times)
    first, last = min(minutes), max(minutes)
    span = int((last - first).total_seconds() // 60)
    return [
        (first + timedelta(minutes=i), minutes.get(first + timedelta(minutes=i), 0))
        for i in range(span + 1)
    ]


def markdown_cell(value: Any, limit: int = REASON_CHARS) -> str:
    """``value`` as the text of a Markdown table cell, cut to ``limit`` characters with ``…``."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    text = "" if value is None else str(value)
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def bars_markdown(label: str, value: str, rows: Sequence[tuple[str, int]]) -> str:
    """A horizontal bar chart as a Markdown table: a row per label, a bar of blocks per value.

    Short enough for the Dagster UI to show inline (it folds Markdown of 1,000 characters or
    more behind a button) for up to :data:`CHART_ROWS` rows.

    Example:
        >>> print(bars_markdown("txid", "dead letters", [("1", 4), ("2", 1)]))
        | txid | dead letters |
        |---|---|
        | 1 | ████████████████ 4 |
        | 2 | ████ 1 |
    """
    peak = max((n for _, n in rows), default=0)
    lines = [f"| {label} | {value} |", "|---|---|"]
    for name, n in rows:
        blocks = 0 if peak == 0 else max(1 if n else 0, round(BAR_BLOCKS * n / peak))
        lines.append(f"| {name} | {'█' * blocks} {n} |")
    return "\n".join(lines)

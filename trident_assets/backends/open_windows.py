"""The open windows of a tumbling or sliding window, held in memory between commits.

A windowed state's open windows live in the store (the durable copy, read by every reader);
the process that commits its txids also holds them as an Arrow table, as its last commit
left them, so a txid's commit merges its partials in memory instead of reading the open
windows back, and writes only the windows it changed. The copy is used only when it is the
store's: the store's last watermark row is for the txid it was left by, and the store holds
as many open windows. Otherwise (a new process, another writer, a commit that rolled back
after the copy moved on) it is read again from the store, once.

Held per store connection object (a runner holds one) and open-window table; only for
Count/Sum/Min/Max over integer or floating values, whose merge is exact in Arrow.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.backends.map_layout import quote_ident

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore
    from trident_assets.stream.event_windows import WindowedState

__all__ = ["HeldWindows", "held_windows"]

WS, WE = "__ws", "__we"
_COMBINE = {"sum": "sum", "min": "min", "max": "max"}
_HELD: weakref.WeakKeyDictionary[StateStore, dict[str, tuple[int, pa.Table] | None]] = (
    weakref.WeakKeyDictionary()
)
"""Per store and open-window table: the held windows and the txid that left them, or None
once its types proved not to merge in Arrow (the store merges them from then on)."""


@dataclass(frozen=True)
class HeldWindows:
    """One state's open windows as the store holds them: keys, ``__ws``, ``__we``, value."""

    store: StateStore
    state: WindowedState
    rows: pa.Table

    def merge(self, partials: pa.Table) -> tuple[pa.Table, HeldWindows] | None:
        """``(the windows the partials changed, every open window after them)``.

        None when the partials' key or value types are not the held ones (the store merges).
        """
        spec = self.state.windowed
        names = [*spec.group, WS, WE, spec.output]
        schema = self.rows.schema
        if any(partials.schema.field(n).type != schema.field(n).type for n in names[:-1]):
            _HELD.setdefault(self.store, {})[self.state.open_table] = None
            return None
        fresh = partials.select(names).cast(schema)
        both = pa.concat_tables(
            [
                self.rows.append_column("__new", pa.array(np.zeros(self.rows.num_rows, bool))),
                fresh.append_column("__new", pa.array(np.ones(fresh.num_rows, bool))),
            ]
        )
        how = _COMBINE[spec.agg.sql_combine or ""]
        merged = both.group_by(names[:-1], use_threads=False).aggregate(
            [(spec.output, how), ("__new", "any")]
        )
        rename = {f"{spec.output}_{how}": spec.output, "__new_any": "__new"}
        merged = merged.rename_columns([rename.get(c, c) for c in merged.column_names])
        rows = merged.select(names).cast(schema)
        changed = rows.filter(merged.column("__new"))
        return changed, HeldWindows(self.store, self.state, rows)

    def close(self, watermark: int | None) -> HeldWindows:
        """Without the windows final at ``watermark`` (``__we <= watermark``)."""
        if watermark is None:
            return self
        open_ = self.rows.filter(pc.greater(self.rows.column(WE), watermark))
        return HeldWindows(self.store, self.state, open_)

    def keep(self, txid: int) -> None:
        """Hold these windows as the ones ``txid``'s commit leaves."""
        _HELD.setdefault(self.store, {})[self.state.open_table] = (txid, self.rows)


def held_windows(store: StateStore, state: WindowedState, last: int | None) -> HeldWindows | None:
    """The open windows of ``state`` after committed txid ``last`` (its last watermark row).

    The held copy if it is the store's, else read from the store (its table exists). None
    when the state's aggregator does not merge exactly in Arrow (the store merges).
    """
    spec = state.windowed
    if spec.window.kind == "session" or spec.agg.sql_combine not in _COMBINE:
        return None
    known = _HELD.setdefault(store, {})
    if state.open_table in known and known[state.open_table] is None:
        return None
    table = quote_ident(state.open_table)
    size = int(store.fetch_rows(f"SELECT count(*) FROM {table}")[0][0])
    held = known.get(state.open_table)
    if held is not None and held[0] == last and held[1].num_rows == size:
        rows = held[1]
    else:
        micros = store.dialect.micros_of
        keys = "".join(f"{quote_ident(k)}, " for k in spec.group)
        rows = store.fetch_arrow(
            f"SELECT {keys}{micros('window_start')} AS {WS}, {micros('window_end')} AS {WE}, "
            f"{quote_ident(spec.output)} FROM {table}"
        )
    value = rows.schema.field(spec.output).type
    if not (pa.types.is_integer(value) or pa.types.is_floating(value)):
        known[state.open_table] = None
        return None
    return HeldWindows(store, state, rows)

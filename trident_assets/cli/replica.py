"""What the read commands read: the lock-free replica of a home, else the state file.

A batch that commits holds the DuckDB state file's lock; a reader opening the file then fails
(or, while it has the file open, makes the batch wait). The replica (``<home>/replica``,
:mod:`trident_assets.backends.replica`) is published after every commit and read without any
lock, with the IO manager's as-of rules: a txid is readable once it is published, and as of
any txid from the oldest one the replica's compaction kept. ``trident state scan/get``,
``trident outputs`` and ``trident dead-letters`` read it whenever the home has one and no
other ``--database`` is given; otherwise they open the state store read-only, whose states
they name by topology and state name (:func:`topologies`, :class:`StateRef`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from trident_assets.core.caching import GLOBAL_KEY
from trident_assets.errors import ConfigError, HistoryUnavailableError, StateLayoutError
from trident_assets.names import check_topology, find_named, validate_identifier

if TYPE_CHECKING:
    from trident_assets.backends.map_layout import MapLayout
    from trident_assets.backends.replica import Replica
    from trident_assets.backends.state_store import StateStore

__all__ = [
    "OUTPUT_INFIX",
    "PublishedState",
    "StateRef",
    "check_txid",
    "find_state_or_none",
    "home_replica",
    "read_state",
    "topologies",
    "value_name",
]

OUTPUT_INFIX = "__out_"


def home_replica(home: Path, database: str | None) -> Replica | None:
    """The replica of ``home``'s own state file, or None (no replica, or another --database)."""
    if database is not None:
        own = home / "state.duckdb"
        if not (own.exists() and Path(database).resolve() == own.resolve()):
            return None
    from trident_assets.backends.replica import Replica

    replica = Replica(home / "replica")
    return replica if replica.scopes() else None


@dataclass(frozen=True)
class PublishedState:
    """One map state in the replica, with the names users know it by."""

    topology: str
    state: str
    table: str
    kind: str
    key_columns: tuple[str, ...]
    value_type: str | None
    value_field: str
    is_global: bool

    @property
    def arity(self) -> int:
        """How many key columns a key has."""
        return len(self.key_columns)


def published_states(replica: Replica) -> dict[str, dict[str, PublishedState]]:
    """Per published topology, its map states (empty for a topology with none)."""
    from trident_assets.backends.state_drop import table_owner

    scopes = replica.scopes()
    found: dict[str, dict[str, PublishedState]] = {name: {} for name in scopes}
    for table in replica.tables():
        layout = replica.layout(table)
        owned = table_owner(table, scopes)
        if layout is None or owned is None or owned[0] not in found:
            continue
        owner, state = owned
        found[owner][state] = PublishedState(
            topology=owner,
            state=state,
            table=table,
            kind=str(layout["kind"]),
            key_columns=tuple(layout["key_columns"]),
            value_type=layout.get("value_type"),
            value_field=str(layout.get("value_field") or "value"),
            is_global=bool(layout.get("global", False)),
        )
    return found


def value_name(replica: Replica | None, table: str) -> str:
    """The value field of map ``table`` as published (``value`` when unknown)."""
    layout = replica.layout(table) if replica is not None else None
    return str((layout or {}).get("value_field") or "value")


def read_state(
    replica: Replica, ref: PublishedState, as_of: int | None, key: list[str] | None = None
) -> tuple[pa.Table, int | None]:
    """``ref`` as of txid ``as_of`` (default: the last published) and the txid read at.

    Columns: the key columns and the state's value field (a global state: the value only).

    Raises:
        ConfigError: ``as_of`` is not committed (published) yet, or ``key`` has the wrong
            number of values.
        StateLayoutError: ``as_of`` of a non-transactional state (it stores no txids).
        HistoryUnavailableError: compaction removed the versions ``as_of`` needs.
    """
    last = replica.latest(ref.topology)
    oldest = lambda: replica.oldest_readable(ref.table)  # noqa: E731
    check_as_of(ref.topology, ref.state, as_of, last, plain=ref.kind == "plain", oldest=oldest)
    if key is not None:
        check_key(ref.topology, ref.state, ref.key_columns, key)
    data = replica.read_map(ref.table, scope=ref.topology, as_of=as_of, value_name="value")
    if key is not None:
        for column, wanted in zip(ref.key_columns, key, strict=True):
            values = pc.cast(data.column(column), pa.string())
            data = data.filter(pc.equal(values, wanted))
    if ref.value_type == "JSON" and data.num_rows:
        decoded = [
            json.loads(v) if isinstance(v, str) else v for v in data.column("value").to_pylist()
        ]
        data = data.set_column(data.column_names.index("value"), "value", pa.array(decoded))
    return data, as_of if as_of is not None else last


def check_as_of(
    topology: str,
    state: str,
    txid: int | None,
    last: int | None,
    *,
    plain: bool,
    oldest: Callable[[], int | None],
) -> None:
    """Refuse to read ``state`` as of ``txid`` (None: now) where no exact answer exists.

    ``last``: the topology's last committed txid; ``plain``: the state stores no txids;
    ``oldest()``: the oldest txid compaction kept readable (None: every one).

    Raises:
        ConfigError: ``txid`` is not committed (published) yet.
        StateLayoutError: ``txid`` of a non-transactional state.
        HistoryUnavailableError: compaction removed the versions ``txid`` needs.
    """
    if txid is None:
        return
    if last is None or txid > last:
        done = "nothing is committed yet" if last is None else f"the last committed txid is {last}"
        msg = f"txid {txid} of topology {topology!r} is not committed: {done}"
        raise ConfigError(msg)
    if plain:
        msg = (
            f"state {state!r} of {topology!r} is non-transactional: it stores no "
            "txids, so it cannot be read as of a txid (drop --txid)"
        )
        raise StateLayoutError(msg)
    first = oldest()
    if first is not None and txid < first:
        msg = (
            f"state {state!r} of {topology!r} cannot be read as of txid {txid}: "
            f"compaction removed the versions it needs; the oldest txid that can still be "
            f"read is {first}"
        )
        raise HistoryUnavailableError(msg)


def check_key(topology: str, state: str, key_columns: Sequence[str], key: list[str]) -> None:
    """Refuse a ``key`` without one value per key column of ``state``.

    Raises:
        ConfigError: naming the key columns and the values given.
    """
    if len(key) != len(key_columns):
        msg = (
            f"state {state!r} of {topology!r} has {len(key_columns)} key column(s) "
            f"({', '.join(key_columns)}); got {len(key)} value(s): {key}"
        )
        raise ConfigError(msg)


def hide_global_key(rows: list[dict[str, Any]], key_columns: list[str]) -> list[str]:
    """The columns to show: without the key column of a global state (its internal key)."""
    if len(key_columns) == 1 and rows and all(r[key_columns[0]] == GLOBAL_KEY[0] for r in rows):
        return key_columns[1:]
    return key_columns


def output_rows(
    replica: Replica, topology: str, output: str, txid: int | None
) -> tuple[pa.Table, int | None, int | None]:
    """The published rows of ``topology``'s ``output`` (``txid``'s, else every kept txid).

    Returns the rows (with ``txid``, ordered by every column) and the lowest and highest txid
    kept.

    Raises:
        ConfigError: no such topology or output, or ``txid`` is not committed or not kept.
    """
    validate_identifier(topology, "topology")
    validate_identifier(output, "output")
    scopes = replica.scopes()
    check_topology(topology, scopes, str(replica.root))
    prefix = f"{topology}{OUTPUT_INFIX}"
    table = f"{prefix}{output}"
    tables = replica.tables()
    last = scopes[topology]
    files = replica.row_files(table, last) if table in tables else {}
    if not files:
        raise no_output(
            topology, output, [t[len(prefix) :] for t in tables if t.startswith(prefix)]
        )
    low, high = min(files), max(files)
    check_kept(topology, output, txid, last, low, high)
    chosen = [files[txid]] if txid is not None and txid in files else []
    if txid is None:
        chosen = list(files.values())
    if not chosen:
        import pyarrow.parquet as pq

        return pq.read_schema(files[high]).empty_table(), low, high
    from trident_assets.backends.duckdb_open import quiet_connect

    with quiet_connect() as conn:
        data = conn.sql(
            "SELECT * FROM read_parquet(?, union_by_name = true) ORDER BY ALL",
            params=[[str(f) for f in chosen]],
        ).to_arrow_table()
    return data, low, high


def no_output(topology: str, output: str, outputs: list[str]) -> ConfigError:
    """The error for an ``output`` that ``topology`` does not have (yet), listing ``outputs``."""
    msg = (
        f"topology {topology!r} has no output {output!r} (or no batch produced it yet); "
        f"its outputs: {', '.join(outputs) or 'none yet'}"
    )
    return ConfigError(msg)


def check_kept(
    topology: str, output: str, txid: int | None, last: int | None, low: Any, high: Any
) -> None:
    """Refuse ``txid`` (None: every kept one) of an output keeping txids ``low``..``high``.

    Raises:
        ConfigError: ``txid`` is not committed (the last is ``last``), or no longer kept.
    """
    check_as_of(topology, output, txid, last, plain=False, oldest=lambda: None)
    if txid is not None and low is not None and txid < low:
        msg = (
            f"output {output!r} of {topology!r} keeps the rows of txids {low}..{high} "
            f"(older txids are dropped as batches commit); txid {txid} is gone"
        )
        raise ConfigError(msg)


def dead_letter_rows(
    replica: Replica, topology: str | None, n: int
) -> tuple[list[dict[str, Any]], int]:
    """The latest ``n`` published dead letters (of ``topology``, or all) and how many there are.

    Each with its record's bytes (``value``).

    Raises:
        ConfigError: ``topology`` is not a published topology.
    """
    scopes = replica.scopes()
    if topology is not None:
        validate_identifier(topology, "topology")
        check_topology(topology, scopes, str(replica.root))
    files = []
    for scope, last in scopes.items():
        if topology is not None and scope != topology:
            continue
        folder = replica.dead_letters_dir(scope)
        if folder.is_dir():
            files += [f for f in sorted(folder.glob("*.parquet")) if int(f.stem) <= last]
    if not files:
        return [], 0
    from trident_assets.backends.duckdb_open import quiet_connect

    with quiet_connect() as conn:
        conn.register(
            "dead",
            conn.sql(
                "SELECT * FROM read_parquet(?, union_by_name = true)",
                params=[[str(f) for f in files]],
            ).to_arrow_table(),
        )
        total = conn.sql("SELECT count(*) FROM dead").fetchall()[0][0]
        rows = conn.sql(
            'SELECT topology, txid, spout, topic, partition, "offset", reason, value FROM dead '
            'ORDER BY txid DESC, topic, partition, "offset" DESC LIMIT ?',
            params=[n],
        ).to_arrow_table()
    return rows.to_pylist(), int(total)


@dataclass(frozen=True)
class StateRef:
    """One state of a topology, as stored."""

    topology: str
    state: str
    layout: MapLayout


def topologies(store: StateStore) -> dict[str, dict[str, StateRef]]:
    """Return the topologies of a store (commit scopes and map owners) and their states.

    A map table is ``<topology>__<state>``; the longest committed topology name that prefixes
    it owns it, else the part before the first ``__``. A state written through the IO manager
    is its own commit scope: table ``<state>``, listed as topology ``<state>``, state ``<state>``.
    """
    from trident_assets.backends.state_drop import table_owner

    scopes = store.scopes()
    found: dict[str, dict[str, StateRef]] = {name: {} for name in sorted(scopes)}
    for table in store.tables():
        owned, layout = table_owner(table, scopes), store.layout(table)
        if owned is not None and layout is not None:
            found.setdefault(owned[0], {})[owned[1]] = StateRef(*owned, layout)
    return found


def check_txid(store: StateStore, ref: StateRef, txid: int | None) -> None:
    """Refuse reading ``ref`` as of ``txid`` where the store has no exact answer (None: now).

    Raises:
        ConfigError, StateLayoutError, HistoryUnavailableError: see
            :func:`check_as_of`.
    """
    if txid is not None:
        last, plain = store.last_committed(ref.topology), ref.layout.kind == "plain"
        oldest = lambda: store.oldest_readable_txid(ref.layout.table)  # noqa: E731
        check_as_of(ref.topology, ref.state, txid, last, plain=plain, oldest=oldest)


def find_state_or_none(store: StateStore, topology: str, state: str) -> StateRef | None:
    """``topology``'s ``state``, or None when the store holds an event-window ``state`` instead.

    Raises:
        ConfigError: an invalid name, or no such topology or state (the message lists those
            that exist).
    """
    from trident_assets.backends.window_store import stored_windows

    try:
        return find_named(topologies(store), topology, state, f"state file {store.path}")
    except ConfigError:
        if any((w.topology, w.state) == (topology, state) for w in stored_windows(store)):
            return None
        raise

"""Identifier validation shared by every layer: table, state, spout, topology and field names."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import TypeVar

from trident_assets.errors import ConfigError

__all__ = [
    "IDENTIFIER_RE",
    "LIVE_ENV",
    "MAP_LOG_PREFIX",
    "MAP_SEQ_PREFIX",
    "MAX_IDENTIFIER_LENGTH",
    "OUTPUT_COLUMNS",
    "RESERVED_COLUMNS",
    "RESERVED_PREFIX",
    "SPARK_REMOTE_ENV",
    "check_output_columns",
    "check_state_columns",
    "check_topology",
    "find_named",
    "validate_identifier",
]

LIVE_ENV = "TRIDENT_LIVE"
"""The environment variable naming the topologies that run live (``all`` or names separated
by commas; see :mod:`trident_assets.dagster.live`): ``trident ui --live`` sets ``all``."""

SPARK_REMOTE_ENV = "TRIDENT_SPARK_REMOTE"
"""The environment variable of the Spark Connect URL runs use when their ``TridentResource``
sets no ``spark_remote`` (the shipped code location's and a user's alike; local Spark per run
if unset)."""

IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
"""Names safe as SQL identifiers, asset key parts and file names."""

MAX_IDENTIFIER_LENGTH = 63
"""The longest identifier (PostgreSQL's limit, in bytes; names are ASCII)."""

RESERVED_COLUMNS = ("txid", "curr", "prev")
"""Columns every state table has besides its keys (compared case-insensitively)."""

OUTPUT_COLUMNS = ("txid",)
"""Columns every per-txid rows table (an output's, a state's new values) has besides the
stream's fields (compared case-insensitively)."""

RESERVED_PREFIX = "_trident"
"""Prefix of the store's internal tables and columns (compared case-insensitively)."""

MAP_LOG_PREFIX = "_trident_log_"
"""Prefix of the append-only log table behind a map table."""

MAP_SEQ_PREFIX = "_trident_seq_"
"""Prefix of the sequence numbering a map table's writes."""

# The store's internal tables and columns, named here once.
DEAD_LETTERS_TABLE = "_trident_dead_letters"
"""Records a spout's scheme could not decode, with their reason (all topologies)."""
COMMITS_TABLE = "_trident_commits"
"""Each topology's last committed txid (its commit marker)."""
CATALOG_TABLE = "_trident_maps"
"""The catalog of map tables: layout, kind and value type of each."""
COMPACTIONS_TABLE = "_trident_compactions"
"""The compactions of each map table's log."""
SPOUT_RANGES_TABLE = "_trident_spout_ranges"
"""The offset ranges each spout emitted per txid (the batch metadata)."""
SPOUT_HISTORY_TABLE = "_trident_spout_history"
"""The ranges of txids past the recent window kept for replays."""
JOIN_META_TABLE = "_trident_join_meta"
"""Single joins' pending halves metadata."""
KV_JOIN_CLOCK_TABLE = "_trident_kv_join_clock"
"""Single joins kept in a key-value store: each live arrival txid's event time."""
QUARANTINE_TABLE = "_trident_quarantine"
"""Txids set aside and the records they hold."""
TOTALS_TABLE = "_trident_totals"
"""Each Count/Sum state's total."""
CONTRACTS_TABLE = "_trident_state_contracts"
"""Each state's contract (what its values mean)."""
STATES_LEFT_TABLE = "_trident_states_left"
"""States removed from their topology and the txid they stopped at."""
VERIFIED_TABLE = "_trident_verified"
"""The verified recomputations of states."""
WATERMARKS_TABLE = "_trident_window_watermarks"
"""Each event-time window state's watermark."""
WINDOWS_TABLE = "_trident_windows"
"""Trident windows' metadata."""
BACKFILLS_TABLE = "_trident_backfills"
"""The progress of each state being built from the log."""
SEQ_COLUMN = "_trident_seq"
"""The write sequence column of a map table's log rows."""


def validate_identifier(name: object, what: str) -> str:
    """Return ``name`` if it is a safe identifier (1-63 letters, digits, underscores).

    Raises:
        ConfigError: naming what the name was for and the rule it breaks.
    """
    if not isinstance(name, str) or not IDENTIFIER_RE.fullmatch(name):
        msg = (
            f"invalid {what} name {name!r}: use 1-63 letters, digits or underscores, "
            "starting with a letter or underscore (e.g. 'word_count')"
        )
        raise ConfigError(msg)
    return name


def check_topology(topology: str, known: Collection[str], where: str) -> None:
    """Refuse a ``topology`` not in ``known`` (those of ``where``, e.g. ``state file PATH``).

    Raises:
        ConfigError: naming ``where`` and listing the topologies it has.
    """
    if topology not in known:
        names = ", ".join(sorted(known)) or "none yet"
        msg = f"no topology {topology!r} in {where}; topologies: {names}"
        raise ConfigError(msg)


Found = TypeVar("Found")


def find_named(
    known: Mapping[str, Mapping[str, Found]], topology: str, state: str, where: str
) -> Found:
    """``known[topology][state]`` (``known``: each topology of ``where``, its states by name).

    Raises:
        ConfigError: an invalid name, or no such topology or state (the message lists those
            that exist).
    """
    validate_identifier(topology, "topology")
    validate_identifier(state, "state")
    check_topology(topology, known, where)
    if state not in known[topology]:
        names = ", ".join(sorted(known[topology])) or "none"
        msg = f"topology {topology!r} has no state {state!r}; its states: {names}"
        raise ConfigError(msg)
    return known[topology][state]


def check_state_columns(
    state: str, role: str, names: Sequence[str], *, extra: tuple[str, ...] = ()
) -> None:
    """Refuse a field that would land in a state table under a reserved column name.

    ``txid``, ``curr``, ``prev`` (and ``extra``) and names starting with ``_trident`` are the
    store's own columns of a state table, its new-values and partials tables.

    Raises:
        ConfigError: naming the state, the role of the field (e.g. ``key field``) and the rule.
    """
    taken = (*RESERVED_COLUMNS, *extra)
    for name in names:
        low = name.lower()
        if low in taken or low.startswith(RESERVED_PREFIX):
            msg = (
                f"state {state!r}: {role} {name!r} is reserved for the store's own columns "
                f"({', '.join(taken)} and names starting with {RESERVED_PREFIX!r}); "
                "give the field another name where it is made (its scheme or function)"
            )
            raise ConfigError(msg)


def check_output_columns(owner: str, names: Sequence[str]) -> None:
    """Refuse a field that would land in a per-txid rows table under its ``txid`` column.

    An output's table (and a state's new-values table) holds each row's batch txid in column
    ``txid`` beside the stream's fields. ``owner`` names the declaration, e.g. ``output 'o'``.

    Raises:
        ConfigError: naming the owner, the field, the reserved names and the fix.
    """
    for name in names:
        if name.lower() in OUTPUT_COLUMNS:
            msg = (
                f"{owner}: field {name!r} is reserved for the column holding each row's batch "
                f"txid ({', '.join(OUTPUT_COLUMNS)}; names starting with {RESERVED_PREFIX!r} "
                "are the store's too); give the field another name where it is made (its "
                "scheme or function), or leave it out with project(...) before the output"
            )
            raise ConfigError(msg)

"""The demo's home: what the demo wrote there, and whether it may start over in it.

The demo writes :data:`DEMO_ENTRIES` into its home and, when it ends (however it ends), the
marker file :data:`DEMO_MARKER`: a JSON record of what it left, the end offsets of its topics
(``sentences``, ``word_queries``) and the last committed txid of its topology. A new demo
replaces those entries only when they hold nothing else (:func:`foreign_data`): no other
topic, no records the demo did not produce, no other topology or state, no txid it did not
run (live mode, the UI, the documented commands). Anything else is refused, naming what was
found, unless the user asks for it to be moved aside (``trident demo --force``): then it is
moved to a sibling directory, never deleted.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from trident_assets.errors import ConfigError
from trident_assets.home_lock import LOCK_FILE

__all__ = [
    "DEMO_MARKER",
    "check_home",
    "prepare_home",
    "record_home",
]

DEMO_MARKER = ".trident-demo"
"""A file in a home the demo wrote: what the demo left there (JSON)."""
DEMO_TOPOLOGY = "word_count"
"""The demo's topology (its commit scope)."""
DEMO_TOPICS = ("sentences", "word_queries")
"""The topics the demo produces into."""
DEMO_ENTRIES = (
    "log",
    "state.duckdb",
    "state.duckdb.wal",
    "state.duckdb.commits",
    "replica",
    "status",
    "dagster",
    "demo.log",
    "cli.log",
    "spark-connect.log",
    "demo",
)
"""What the demo (and what runs over its home) writes: replaced by a new demo."""


def _inventory(home: Path) -> dict[str, Any]:
    """The home's topics (end offset per partition), commit scopes and map tables."""
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.log.store import PartitionedLog

    topics: dict[str, list[int]] = {}
    if (home / "log").is_dir():
        log = PartitionedLog(home / "log")
        for topic in log.topics():
            parts = range(log.partitions(topic))
            topics[topic] = [log.latest_offset(topic, p) for p in parts]
    scopes: dict[str, int] = {}
    tables: list[str] = []
    if (home / "state.duckdb").is_file():
        with DuckDBStore(home / "state.duckdb", read_only=True, verify_commits=False) as store:
            scopes = dict(store.scopes())
            tables = list(store.tables())
    return {"topics": topics, "scopes": scopes, "tables": tables}


def record_home(home: Path) -> None:
    """Write the marker file: what the demo left in ``home`` (call when it ends)."""
    body = {"written_by": "trident demo", **_inventory(home)}
    body.pop("tables")
    tmp = home / f".{DEMO_MARKER}.tmp"
    tmp.write_text(json.dumps(body, sort_keys=True) + "\n")
    os.replace(tmp, home / DEMO_MARKER)


def _recorded(home: Path) -> dict[str, Any] | None:
    """What the demo recorded it left (None: an older or interrupted demo's marker)."""
    try:
        body = json.loads((home / DEMO_MARKER).read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and "scopes" in body else None


def foreign_data(home: Path, read_data: bool = True) -> list[str]:
    """What ``home`` holds that the demo did not write, in words (empty: nothing).

    Without the demo's marker file: every entry but the lock file. With it (and
    ``read_data``; the state file is read, so hold the home's lock): other topics, records
    added to the demo's topics, other topologies and states, and txids of the demo's
    topology after those it ran (as far as its marker recorded them).
    """
    if not (home / DEMO_MARKER).exists():
        return sorted(p.name for p in home.iterdir() if p.name not in ("demo", LOCK_FILE))
    if not read_data:
        return []
    now, then = _inventory(home), _recorded(home)
    found = [f"topic {t}" for t in now["topics"] if t not in DEMO_TOPICS]
    for topic, ends in now["topics"].items():
        before = (then or {}).get("topics", {}).get(topic)
        if topic in DEMO_TOPICS and before is not None and sum(ends) > sum(before):
            found.append(f"{sum(ends) - sum(before)} records added to topic {topic}")
    for scope, txid in now["scopes"].items():
        if scope != DEMO_TOPOLOGY:
            kind = "state" if scope in now["tables"] else "topology"
            found.append(f"{kind} {scope} (txid {txid})")
            continue
        last = (then or {}).get("scopes", {}).get(scope)
        if last is not None and txid > last:
            txids = f"txid {txid}" if txid == last + 1 else f"txids {last + 1}..{txid}"
            found.append(f"{scope} {txids} (run after the demo)")
    owners = [*now["scopes"], DEMO_TOPOLOGY]
    found += [
        f"state table {t}"
        for t in now["tables"]
        if not any(t == s or t.startswith(f"{s}__") for s in owners)
    ]
    return found


def check_home(home: Path, force: bool, forced: str, read_data: bool = True) -> list[str]:
    """Refuse a ``home`` holding data the demo did not write, unless ``force``; read only.

    Returns what was found (to be moved aside: ``force``). ``forced``: the command that runs
    the demo with ``--force`` (named in the refusal). ``read_data``: see :func:`foreign_data`
    (False: only what needs no lock, e.g. before the home's lock is taken).

    Raises:
        ConfigError: ``home`` is a file, or holds data the demo did not write (without
            ``force``), naming it and the ways on.
    """
    if home.exists() and not home.is_dir():
        msg = f"trident home {home} is a file; pass --home DIR"
        raise ConfigError(msg)
    found = foreign_data(home, read_data) if home.is_dir() else []
    if found and not force:
        way = "remove this one"
        if (home / DEMO_MARKER).exists():
            way = f"run `{forced}` to move its log, state and Dagster instance aside (kept)"
        msg = (
            f"trident home {home} holds data the demo did not write ({', '.join(found)}); the "
            "demo replaces its home's log, state and Dagster instance: pass --home with "
            f"another directory, or {way}"
        )
        raise ConfigError(msg)
    return found


def prepare_home(home: Path, found: list[str]) -> Path | None:
    """Empty the demo's entries of ``home`` (its lock held); returns where they were moved.

    ``found``: what :func:`check_home` found the demo did not write: the entries are then
    moved to a sibling directory ``<home>.before-demo-<time>`` (returned), never deleted.
    Otherwise they are only the demo's own, and removed.
    """
    aside = None
    if found and any((home / name).exists() for name in DEMO_ENTRIES):
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = home.with_name(f"{home.name}.before-demo-{stamp}")
        aside.mkdir()
    for name in DEMO_ENTRIES:
        path = home / name
        if aside is not None and (path.exists() or path.is_symlink()):
            os.replace(path, aside / name)
        elif path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    home.mkdir(parents=True, exist_ok=True)
    (home / DEMO_MARKER).write_text("written by `trident demo`; it may replace this home\n")
    return aside

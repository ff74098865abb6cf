"""The chaos soak's lakehouse tables (``--publish delta|iceberg``): declared, then checked.

Each word-count topology's counts are published as a table (``mode="table"``) to a Delta table
``<root>/lake/<topology>`` or an Iceberg table ``lake.<topology>`` (the SQL catalog beside the
DuckDB state file, or the PostgreSQL store's database; files under ``<root>/iceberg``). At the
end of the soak, :func:`check_table` compares the table with the state key by key and checks
that every committed txid was published exactly once (one table commit each, none twice).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

__all__ = ["FORMATS", "check_table", "publish_counts"]

FORMATS = ("delta", "iceberg")


def _table(fmt: str, root: Path, name: str) -> Any:
    import trident_assets as ta

    if fmt == "delta":
        return ta.DeltaTable(root / "lake" / name)
    return ta.IcebergTable(f"lake.{name}", warehouse=root / "iceberg")


def publish_counts(topology: Any, fmt: str, root: Path) -> None:
    """Publish ``topology``'s ``word_counts`` to a ``fmt`` table under ``root``."""
    topology.states["word_counts"].publish(_table(fmt, root, topology.name))


def check_table(
    fmt: str, root: Path, store: Any, name: str, state: pa.Table, last: int | None
) -> tuple[int, str]:
    """Keys whose value in the table differs from ``state`` (word, n), and a txid problem.

    The problem is empty when the table's commits are txids ``1..last``, each exactly once.
    """
    from trident_assets.lakehouse.publisher import open_publisher

    topology = next(p for p in _publications(name, fmt, root))
    writer = open_publisher(topology, store, 1).writer
    if fmt == "delta":
        from deltalake import DeltaTable

        delta = DeltaTable(str(root / "lake" / name))
        rows = delta.to_pyarrow_table()
        stamped = [int(h["trident.txid"]) for h in delta.history() if "trident.txid" in h]
    else:
        table = writer.catalog.load_table(f"lake.{name}")  # type: ignore[attr-defined]
        rows = table.scan().to_arrow()
        stamped = sorted(writer.versions())  # an Iceberg merge is one commit, two snapshots
    have = {r["word"]: r["count"] for r in rows.select(["word", "count"]).to_pylist()}
    want = {r["word"]: r["n"] for r in state.to_pylist()}
    mismatched = sum(have.get(k) != want.get(k) for k in have.keys() | want.keys())
    twice = sorted(t for t, n in Counter(stamped).items() if n > 1)
    expected = list(range(1, (last or 0) + 1))
    problem = ""
    if twice:
        problem = f"txids {twice[:10]} published twice"
    elif sorted(stamped) != expected:
        missing = sorted(set(expected) - set(stamped))[:10]
        problem = f"table txids {sorted(stamped)[:5]}...: missing {missing}"
    return mismatched, problem


def _publications(name: str, fmt: str, root: Path) -> list[Any]:
    import trident_assets as ta

    topo = ta.TridentTopology(name)
    counts = (
        topo.new_stream("sentences", ta.LogSpout("sentences", ta.StringScheme("sentence")))
        .each("sentence", ta.Split(), "word")
        .group_by("word")
        .persistent_aggregate(ta.StateSpec.opaque("word_counts"), "word", ta.Count(), "count")
    )
    counts.publish(_table(fmt, root, name))
    return topo.publications

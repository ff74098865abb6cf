"""Helpers of the lakehouse tests: a word count published to Delta or Iceberg, and readers."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

import trident_assets as ta
from trident_assets.log.store import PartitionedLog

__all__ = [
    "SENTENCES",
    "delta_rows",
    "iceberg_catalog",
    "iceberg_rows",
    "make_log",
    "published_topology",
    "send",
    "state_of",
    "table_of",
    "truth",
]

SENTENCES = (
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
)


def make_log(root: Path) -> PartitionedLog:
    """A log with topic ``sentences`` (2 partitions)."""
    log = PartitionedLog(root / "log")
    log.create_topic("sentences", 2)
    return log


def send(log: PartitionedLog, values: Sequence[str]) -> None:
    """Append ``values`` to ``sentences``, round robin."""
    producer = log.producer("sentences", partitioner="round_robin")
    for v in values:
        producer.send(v.encode())
    producer.flush()


def truth(log: PartitionedLog) -> dict[str, int]:
    """The word counts of every record in the log."""
    counts: Counter[str] = Counter()
    for p in range(log.partitions("sentences")):
        end = log.latest_offset("sentences", p)
        if end:
            for value in log.read("sentences", p, 0, end - 1).column("value").to_pylist():
                with contextlib.suppress(UnicodeDecodeError):
                    counts.update(w for w in value.decode().split(" ") if w)
    return dict(counts)


def table_of(fmt: str, root: Path, mode: str | None = None, name: str = "counts") -> Any:
    """A DeltaTable under ``root`` or an IcebergTable ``lake.<name>`` (catalog beside the store)."""
    if fmt == "delta":
        return ta.DeltaTable(root / "lake" / name, mode=mode)  # type: ignore[arg-type]
    return ta.IcebergTable(f"lake.{name}", mode=mode, warehouse=root / "warehouse")  # type: ignore[arg-type]


def published_topology(
    name: str, fmt: str, root: Path, *, mode: str | None = None, output: bool = False
) -> ta.TridentTopology:
    """A word count whose counts are published to ``fmt`` (and its words as an output)."""
    topo = ta.TridentTopology(name)
    config = ta.SpoutConfig(kind=ta.SpoutKind.OPAQUE, max_batch_size=4)
    words = topo.new_stream(
        "sentences", ta.LogSpout("sentences", ta.StringScheme("sentence"), config)
    ).each("sentence", ta.Split(), "word")
    counts = words.group_by("word").persistent_aggregate(
        ta.StateSpec.opaque("counts"), "word", ta.Count(), "count"
    )
    counts.publish(table_of(fmt, root, mode))
    if output:
        words.as_output("words").publish(table_of(fmt, root, name="words"))
    return topo


def state_of(store: Any, topo: ta.TridentTopology, as_of: int | None = None) -> dict[str, int]:
    """The counts in the store (as of txid ``as_of``)."""
    table = f"{topo.name}__counts"
    if store.layout(table) is None:
        return {}
    return {r["word"]: r["value"] for r in store.scan(table, as_of=as_of).to_pylist()}


def delta_rows(path: Path, version: int | None = None) -> pa.Table:
    """The rows of the Delta table at ``path`` (at ``version``), read with Polars."""
    import polars as pl

    frame = pl.read_delta(str(path), version=version)
    return frame.to_arrow()


def iceberg_catalog(root: Path, store_location: str) -> Any:
    """The SQL catalog the tables of a test are registered in, as a reader opens it."""
    from pyiceberg.catalog.sql import SqlCatalog

    if store_location.startswith("postgresql://"):
        uri = "postgresql+psycopg2://" + store_location.partition("://")[2]
    else:
        uri = f"sqlite:///{Path(store_location).parent / 'iceberg_catalog.db'}"
    return SqlCatalog("trident", uri=uri, warehouse=(root / "warehouse").as_uri())


def iceberg_rows(catalog: Any, identifier: str, snapshot_id: int | None = None) -> pa.Table:
    """The rows of Iceberg table ``identifier`` (at ``snapshot_id``), read with pyiceberg."""
    return catalog.load_table(identifier).scan(snapshot_id=snapshot_id).to_arrow()

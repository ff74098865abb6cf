"""Spilled partials: the executors write a state's per-key partials as Parquet files.

Off by default. With ``trident.partials.spill=true`` (a Spark setting, like
``trident.partials.arrowKernel``), each grouped ``persistent_aggregate`` with a built-in
combiner (Count, Sum, Min, Max) whose new values nothing in the topology reads gets its
partials written by the executors, one directory per state per batch (per chunk when
batches are pipelined: one sub-directory per txid), instead of collected to the driver. The
commit transaction merges them from the files
(:mod:`~trident_assets.backends.parquet_partials`), writes the state's partials and new
values tables from them in SQL, and the directory is removed once the batch (the chunk)
has committed. So the driver's Python memory does not grow with the batch's keys.

Where: ``trident.partials.spillDir``, default ``<state file>.partials`` beside the DuckDB
state file (local Spark only: on a cluster, name a directory every executor and the driver
share). Only DuckDB state stores read partials from files.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trident_assets.backends.parquet_partials import ParquetPartials
from trident_assets.core.aggregators import is_sql_combiner
from trident_assets.errors import ConfigError
from trident_assets.planner import all_nodes
from trident_assets.spark.aggregation import NULLS_COLUMN, VALUES_COLUMN, skips_nulls
from trident_assets.spark.node_frames import empty_arrow
from trident_assets.spark.txid_tags import TXID_COLUMN
from trident_assets.stream.event_windows import EVENT_WINDOW
from trident_assets.stream.single_join import SINGLE_JOIN
from trident_assets.stream.trident_windows import TRIDENT_WINDOW

if TYPE_CHECKING:
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "SPILL_CONF",
    "SPILL_DIR_CONF",
    "drop_spilled",
    "new_spill_dir",
    "spill_root",
    "spillable",
    "write_partials",
]

SPILL_CONF = "trident.partials.spill"
"""``true``: executors write grouped SQL-combiner partials as Parquet (default ``false``)."""
SPILL_DIR_CONF = "trident.partials.spillDir"
"""Where they write them (default: ``<state file>.partials``)."""


def _conf(spark: Any, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # a remote session may refuse to read an unknown key
        return None
    return None if value is None else str(value).strip()


def spill_root(spark: Any, store: Any, scope: str) -> Path | None:
    """The directory the runner of topology ``scope`` spills partials to, or None when off.

    Emptied here: what is left in it belongs to batches that never committed (this runner
    is the topology's only writer: it holds the state file).

    Raises:
        ConfigError: ``trident.partials.spill`` is not ``true``/``false``; it is on with a
            store that cannot read Parquet files (PostgreSQL), or on a cluster with no
            ``trident.partials.spillDir``, or on an in-memory store with none.
    """
    value = (_conf(spark, SPILL_CONF) or "false").lower()
    if value not in ("true", "false"):
        msg = f"{SPILL_CONF} must be true or false, got {value!r}"
        raise ConfigError(msg)
    if value == "false":
        return None
    if not hasattr(store, "staged_files"):
        msg = (
            f"{SPILL_CONF}=true needs a DuckDB state store; {type(store).__name__} cannot read "
            f"partials from files. Set {SPILL_CONF} to false for this store"
        )
        raise ConfigError(msg)
    where = _conf(spark, SPILL_DIR_CONF)
    if not where:
        master = _conf(spark, "spark.master") or "local"
        if not master.startswith("local"):
            msg = (
                f"{SPILL_CONF}=true on master {master!r}: set {SPILL_DIR_CONF} to a directory "
                "the driver and every executor share"
            )
            raise ConfigError(msg)
        if store.path == ":memory:":
            msg = f"{SPILL_CONF}=true with an in-memory state store: set {SPILL_DIR_CONF}"
            raise ConfigError(msg)
        where = f"{store.path}.partials"
    root = Path(where).expanduser().resolve() / scope
    shutil.rmtree(root, ignore_errors=True)
    return root


def new_spill_dir(root: Path) -> Path:
    """A fresh directory under ``root`` for one batch's (or chunk's) partials."""
    path = root / uuid.uuid4().hex
    path.mkdir(parents=True)
    return path


def drop_spilled(paths: list[Path]) -> None:
    """Remove the directories of ``paths`` (their batches committed or were abandoned)."""
    while paths:
        shutil.rmtree(paths.pop(), ignore_errors=True)


def spillable(state: TridentState, topology: TridentTopology) -> bool:
    """True for a grouped built-in combiner state whose new values nothing reads."""
    a = state.node.args
    if any(k in a for k in (SINGLE_JOIN, TRIDENT_WINDOW, EVENT_WINDOW)) or "agg" not in a:
        return False
    if not a["group"] or not is_sql_combiner(a["agg"]):
        return False
    return not any(n.kind == "new_values" and n.args["state"] is state for n in all_nodes(topology))


def write_partials(df: Any, agg: Any, path: Path, tags: int | None = None) -> list[ParquetPartials]:
    """Run ``df`` (a state's partials, see :func:`.aggregation.state_partials`) into ``path``.

    One Spark job; the rows go from the executors to Parquet files. ``tags``: ``df`` holds a
    pipelined chunk of that many txids (its :data:`TXID_COLUMN`), written one directory per
    txid. Returns each txid's files, with the row count the job observed.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    schema = empty_arrow(df).schema
    counts = (
        [F.count(F.lit(1)).alias("r0")]
        if tags is None
        else [
            F.sum(F.when(F.col(TXID_COLUMN) == i, 1).otherwise(0)).alias(f"r{i}")
            for i in range(tags)
        ]
    )
    observation = Observation(f"trident_spill_{uuid.uuid4().hex}")
    writer = df.observe(observation, *counts).write.mode("errorifexists")
    target = path / "partials"
    if tags is None:
        writer.parquet(str(target))
        dirs = [target]
    else:
        writer.partitionBy(TXID_COLUMN).parquet(str(target))
        schema = schema.remove(schema.get_field_index(TXID_COLUMN))
        dirs = [target / f"{TXID_COLUMN}={i}" for i in range(tags)]
    rows = observation.get
    nulls = skips_nulls(agg)
    return [
        ParquetPartials(
            files=tuple(sorted(str(f) for f in d.glob("*.parquet"))),
            schema=schema,
            where=str(d),
            rows=int(rows.get(f"r{i}") or 0),
            keep_column=VALUES_COLUMN if nulls else None,
            nulls_column=NULLS_COLUMN if nulls else None,
        )
        for i, d in enumerate(dirs)
    ]

"""Spilled partials: the executors write a state's per-key partials where the store reads them.

Off by default. With ``trident.partials.spill=true`` (a Spark setting, like
``trident.partials.arrowKernel``), each grouped ``persistent_aggregate`` with a built-in
combiner (Count, Sum, Min, Max) whose new values nothing in the topology reads gets its
partials written by the executors instead of collected to the driver:

* DuckDB state: Parquet files, one directory per state per batch (per chunk when batches are
  pipelined: one sub-directory per txid) under ``trident.partials.spillDir`` (default
  ``<state file>.partials``; local Spark only unless that names a directory the driver and
  every executor share);
* PostgreSQL state: an unlogged staging table per state per txid, which every task fills by
  ``COPY`` over its own connection (the store's DSN must reach the server from the
  executors). A task attempt first deletes what an earlier attempt of its partition wrote,
  under an advisory lock, in the same transaction as its ``COPY``: a retried or speculative
  task never doubles rows.

The commit transaction merges them (:mod:`~trident_assets.backends.spilled_partials`) and
writes the state's partials and new-values tables from them in SQL; the files or tables are
removed once the batch (the chunk) has committed, and what a crashed attempt left is removed
when the topology's next runner starts. So the driver's Python memory does not grow with the
batch's keys.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.spilled_partials import SpilledPartials
from trident_assets.errors import ConfigError
from trident_assets.planner import all_nodes
from trident_assets.spark.aggregation import NULLS_COLUMN, VALUES_COLUMN, skips_nulls
from trident_assets.spark.frame_schemas import empty_arrow
from trident_assets.spark.observation import observed_metrics
from trident_assets.spark.scoped_conf import read_conf
from trident_assets.spark.txid_tags import TXID_COLUMN
from trident_assets.stream.state_kinds import state_kind

if TYPE_CHECKING:
    from trident_assets.stream.streams import TridentState
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "PART_COLUMN",
    "SPILL_CONF",
    "SPILL_DIR_CONF",
    "Cleanup",
    "Spill",
    "open_spill",
    "spillable",
]

SPILL_CONF = "trident.partials.spill"
"""``true``: executors write grouped SQL-combiner partials for the store (default ``false``)."""
SPILL_DIR_CONF = "trident.partials.spillDir"
"""Where they write Parquet files for a DuckDB store (default: ``<state file>.partials``)."""
PART_COLUMN = "__trident_part"
"""Column of a PostgreSQL staging table: the Spark partition that wrote the row."""
STAGING_PREFIX = "_trident_spill_"

Cleanup = Callable[[], None]
"""Removes what one batch (or chunk) spilled."""


def open_spill(spark: Any, store: Any, scope: str) -> Spill | None:
    """How the runner of topology ``scope`` spills partials, or None when it does not.

    What an earlier runner left (batches that never committed) is removed here: this runner
    is the topology's only writer.

    Raises:
        ConfigError: ``trident.partials.spill`` is not ``true``/``false``; or it is on with
            a DuckDB store on a cluster (or in memory) and no ``trident.partials.spillDir``,
            or with a store that can read neither files nor staging tables.
    """
    value = (read_conf(spark, SPILL_CONF) or "false").lower()
    if value not in ("true", "false"):
        msg = f"{SPILL_CONF} must be true or false, got {value!r}"
        raise ConfigError(msg)
    if value == "false":
        return None
    if getattr(getattr(store, "dialect", None), "is_postgres", False):
        spill = Spill(store, scope, None, store.dsn)
    elif hasattr(store, "staged_files"):
        spill = Spill(store, scope, _spill_dir(spark, store) / scope, None)
    else:
        msg = (
            f"{SPILL_CONF}=true needs a DuckDB or PostgreSQL state store, not "
            f"{type(store).__name__}. Set {SPILL_CONF} to false for this store"
        )
        raise ConfigError(msg)
    spill.drop_left()
    return spill


def _spill_dir(spark: Any, store: Any) -> Path:
    where = read_conf(spark, SPILL_DIR_CONF)
    if not where:
        master = read_conf(spark, "spark.master") or "local"
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
    return Path(where).expanduser().resolve()


def spillable(state: TridentState, topology: TridentTopology) -> bool:
    """True for a grouped built-in combiner state whose new values nothing reads."""
    if not state.group or not state_kind(state.node).sql_combiner:
        return False
    return not any(n.kind == "new_values" and n.args["state"] is state for n in all_nodes(topology))


class Spill:
    """Where one runner's executors write partials: files (``root``) or tables (``dsn``)."""

    def __init__(self, store: Any, scope: str, root: Path | None, dsn: str | None) -> None:
        """For topology ``scope`` of ``store``: Parquet under ``root``, or tables over ``dsn``."""
        self.store = store
        self.scope = scope
        self.root = root
        self.dsn = dsn
        self.prefix = f"{STAGING_PREFIX}{hashlib.sha1(scope.encode()).hexdigest()[:10]}_"
        """Staging tables of this topology start so (PostgreSQL names stay under 64 bytes)."""

    def drop_left(self) -> None:
        """Remove what batches that never committed left."""
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        found = self.store.fetch_rows(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND left(CAST(tablename AS TEXT), CAST(? AS INTEGER)) = ?",
            [len(self.prefix), self.prefix],
        )
        for (name,) in found:
            self._drop_table(str(name))

    def _drop_table(self, name: str) -> None:
        with contextlib.suppress(Exception):  # gone already, or the connection is closing
            self.store.execute(f'DROP TABLE IF EXISTS "{name}"')

    def plan(
        self, df: Any, agg: Any, tags: int | None
    ) -> tuple[Callable[[], list[SpilledPartials]], tuple[Cleanup, ...]] | None:
        """Prepare to write ``df`` (a state's partials); return the Spark job and its cleanups.

        Here (the thread that owns the store): the directory, or the staging tables, which
        the returned cleanups remove. The returned call runs the one Spark job (any thread).
        ``tags``: ``df`` holds a pipelined chunk of that many txids (:data:`TXID_COLUMN`),
        written per txid. None: not now (a PostgreSQL store inside a transaction, whose
        staging tables the executors could not see): collect the partials.
        """
        schema = empty_arrow(df).schema
        if tags is not None:
            schema = schema.remove(schema.get_field_index(TXID_COLUMN))
        nulls = skips_nulls(agg)
        shape = {
            "schema": schema,
            "keep_column": VALUES_COLUMN if nulls else None,
            "nulls_column": NULLS_COLUMN if nulls else None,
        }
        if self.root is not None:
            path = self.root / uuid.uuid4().hex
            path.mkdir(parents=True)
            remove = (lambda: shutil.rmtree(path, ignore_errors=True),)
            return lambda: _write_files(df, path, tags, shape), remove
        if self.store.in_transaction:
            return None
        token = uuid.uuid4().hex[:16]
        names = [f"{self.prefix}{token}_{i}" for i in range(tags or 1)]
        staged = schema.append(pa.field(PART_COLUMN, pa.int32()))
        drops = tuple(lambda name=name: self._drop_table(name) for name in names)
        try:
            for name in names:
                self.store.create_unlogged(name, staged)
        except BaseException:
            for drop in drops:
                drop()
            raise
        return lambda: _write_tables(df, self.dsn, names, tags, shape), drops


def _observed(df: Any, tags: int | None) -> tuple[Any, Any]:
    """``df`` observed: its rows per txid tag (one count when ``tags`` is None)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    counts = (
        [F.count(F.lit(1)).alias("r0")]
        if tags is None
        else [
            F.sum(F.when(F.col(TXID_COLUMN) == i, 1).otherwise(0)).alias(f"r{i}")
            for i in range(tags)
        ]
    )
    observation = Observation(f"trident_spill_{uuid.uuid4().hex}")
    return df.observe(observation, *counts), observation


def _write_files(
    df: Any, path: Path, tags: int | None, shape: dict[str, Any]
) -> list[SpilledPartials]:
    """The Spark job: the executors write Parquet under ``path``, one directory per txid."""
    observed, observation = _observed(df, tags)
    writer = observed.write.mode("errorifexists")
    target = path / "partials"
    if tags is None:
        writer.parquet(str(target))
        dirs = [target]
    else:
        writer.partitionBy(TXID_COLUMN).parquet(str(target))
        dirs = [target / f"{TXID_COLUMN}={i}" for i in range(tags)]
    # no metrics: adaptive execution dropped the observed node, as it does when df is empty
    rows = observed_metrics(observation) or {}
    return [
        SpilledPartials(
            files=tuple(sorted(str(f) for f in d.glob("*.parquet"))),
            where=str(d),
            rows=int(rows.get(f"r{i}") or 0),
            **shape,
        )
        for i, d in enumerate(dirs)
    ]


def _write_tables(
    df: Any, dsn: str, names: list[str], tags: int | None, shape: dict[str, Any]
) -> list[SpilledPartials]:
    """The Spark job: every task copies its rows into the staging tables (one per txid)."""
    counts = [0] * len(names)
    ordered = df if tags is None else df.sortWithinPartitions(TXID_COLUMN)
    written = ordered.mapInArrow(
        copy_into_staging(dsn, names, tags is not None), "tag int, n long"
    ).toArrow()
    tags, ns = written.column("tag").to_pylist(), written.column("n").to_pylist()
    for tag, n in zip(tags, ns, strict=True):
        counts[tag] += n
    return [
        SpilledPartials(files=(), where=f"staging table {name}", rows=n, table=name, **shape)
        for name, n in zip(names, counts, strict=True)
    ]


def copy_into_staging(
    dsn: str, names: list[str], tagged: bool
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task function: ``COPY`` a partition's rows into ``names`` (by txid tag if ``tagged``).

    One transaction per task attempt: an advisory lock on (table, partition), the rows an
    earlier attempt of the partition wrote deleted, then one ``COPY`` per txid. Yields the
    rows written per tag.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import itertools

        import adbc_driver_postgresql.dbapi as pg
        from pyspark import TaskContext

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        written = [0] * len(names)

        def runs() -> Iterator[tuple[int, pa.RecordBatch]]:
            for batch in batches:
                if not batch.num_rows:
                    continue
                if not tagged:
                    yield 0, batch
                    continue
                tags = batch.column(TXID_COLUMN).to_numpy()
                start = 0
                for end in range(1, len(tags) + 1):  # sorted by tag: a few runs per batch
                    if end == len(tags) or tags[end] != tags[start]:
                        yield int(tags[start]), batch.slice(start, end - start)
                        start = end

        with pg.connect(dsn, autocommit=False) as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT pg_advisory_xact_lock(hashtext($1), CAST($2 AS INTEGER))", (names[0], part)
            )
            for name in names:
                cur.execute(
                    f'DELETE FROM "{name}" WHERE "{PART_COLUMN}" = CAST($1 AS INTEGER)', (part,)
                )
            for tag, group in itertools.groupby(runs(), key=lambda r: r[0]):
                stream = _with_part((b for _, b in group), part, tagged, written, tag)
                head = next(stream)
                reader = pa.RecordBatchReader.from_batches(
                    head.schema, itertools.chain([head], stream)
                )
                cur.adbc_ingest(names[tag], reader, mode="append")
            conn.commit()
        yield pa.record_batch(
            [pa.array(range(len(names)), pa.int32()), pa.array(written, pa.int64())],
            names=["tag", "n"],
        )

    return run


def _with_part(
    batches: Iterator[pa.RecordBatch], part: int, tagged: bool, written: list[int], tag: int
) -> Iterator[pa.RecordBatch]:
    """``batches`` of one txid tag as the staging table holds them, counted in ``written``."""
    for batch in batches:
        if tagged:
            batch = batch.drop_columns([TXID_COLUMN])
        written[tag] += batch.num_rows
        yield batch.append_column(PART_COLUMN, pa.array([part] * batch.num_rows, pa.int32()))

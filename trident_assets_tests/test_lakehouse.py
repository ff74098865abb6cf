"""Lakehouse tables out: states and outputs published to Delta and Iceberg, one commit per txid.

Real tables (``deltalake``, ``pyiceberg`` with a SQLite or PostgreSQL catalog), real Spark
batches, DuckDB and PostgreSQL stores; exact values after every txid, after crashes at the
commit's fault points and after replays.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import trident_assets as ta
from trident_assets.errors import ConfigError, PublishError
from trident_assets.lakehouse.publisher import TablePublisher, open_publisher
from trident_assets.spark.executor import TopologyRunner
from trident_assets_tests.faults import Crash, crash_at
from trident_assets_tests.lakehouse_util import (
    SENTENCES,
    delta_rows,
    iceberg_catalog,
    iceberg_rows,
    make_log,
    published_topology,
    send,
    state_of,
    truth,
)

FORMATS = ("delta", "iceberg")


def _publisher(runner: TopologyRunner, asset: str) -> TablePublisher:
    return next(p for p in runner.tables if p.publication.asset == asset)


def _table(fmt: str, root: Path, location: str, name: str = "counts", at: Any = None) -> Any:
    """The published table's rows (at a version / snapshot), read with the user's tools."""
    if fmt == "delta":
        return delta_rows(root / "lake" / name, at)
    return iceberg_rows(iceberg_catalog(root, location), f"lake.{name}", at)


def _counts(rows: Any) -> dict[str, int]:
    return {r["word"]: r["count"] for r in rows.to_pylist()}


def _drain(runner: TopologyRunner) -> int:
    while runner.backlog() > 0:
        assert runner.run_batch((runner.last_committed() or 0) + 1).applied
    return runner.last_committed() or 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_state_published_as_a_table_equals_the_state_as_of_every_txid(
    spark: Any, tmp_path: Path, open_store: Any, fmt: str
) -> None:
    log = make_log(tmp_path)
    send(log, SENTENCES * 2)
    topo = published_topology("lh_table", fmt, tmp_path, output=True)
    store = open_store()
    runner = TopologyRunner(topo, spark, store, log)
    last = _drain(runner)
    assert last == 3  # 10 sentences, 4 per batch
    versions = _publisher(runner, "counts_" + fmt).writer.versions()
    assert sorted(versions) == [1, 2, 3]  # one table commit per txid
    for txid, version in versions.items():
        rows = _table(fmt, tmp_path, open_store.location, at=version)
        assert _counts(rows) == state_of(store, topo, as_of=txid)
        assert max(rows.column("txid").to_pylist()) == txid
    assert _counts(_table(fmt, tmp_path, open_store.location)) == truth(log)
    words = _table(fmt, tmp_path, open_store.location, "words")
    assert words.column_names == ["sentence", "word", "txid"]
    per_txid: dict[int, int] = {}
    for t in words.column("txid").to_pylist():
        per_txid[t] = per_txid.get(t, 0) + 1
    assert sum(per_txid.values()) == sum(truth(log).values())
    assert sorted(_publisher(runner, "words_" + fmt).writer.versions()) == [1, 2, 3]


@pytest.mark.parametrize("fmt", FORMATS)
def test_changelog_appends_each_txids_new_values(spark: Any, tmp_path: Path, fmt: str) -> None:
    log = make_log(tmp_path)
    send(log, SENTENCES)
    topo = published_topology("lh_log", fmt, tmp_path, mode="changelog")
    location = str(tmp_path / "state.duckdb")
    with ta.DuckDBStore(location) as store:
        runner = TopologyRunner(topo, spark, store, log)
        _drain(runner)
        rows = _table(fmt, tmp_path, location).to_pylist()
        for txid in (1, 2):
            news = store.fetch_rows(
                f'SELECT word, "count" FROM "{topo.name}__counts__new_values" WHERE txid = ?',
                [txid],
            )
            got = sorted((r["word"], r["count"]) for r in rows if r["txid"] == txid)
            assert got == sorted((str(w), int(c)) for w, c in news)
        assert {r["txid"] for r in rows} == {1, 2}


@pytest.mark.parametrize("point", ["after_commit", "after_table_commit"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_crash_after_the_marker_is_published_once_at_the_next_start(
    spark: Any, tmp_path: Path, fmt: str, point: str
) -> None:
    log = make_log(tmp_path)
    send(log, SENTENCES)
    topo = published_topology("lh_crash", fmt, tmp_path)
    location = str(tmp_path / "state.duckdb")
    with ta.DuckDBStore(location) as store:
        TopologyRunner(topo, spark, store, log).run_batch(1)
        with pytest.raises(Crash):
            TopologyRunner(topo, spark, store, log, fault=crash_at(point)).run_batch(2)
        assert store.last_committed(topo.name) == 2  # the marker moved: txid 2 is final
        runner = TopologyRunner(topo, spark, store, log)  # catches the table up, or not
        assert not runner.run_batch(2).applied  # a replay of a committed txid writes nothing
        versions = _publisher(runner, "counts_" + fmt).writer.versions()
        assert sorted(versions) == [1, 2]
        assert _counts(_table(fmt, tmp_path, location)) == state_of(store, topo) == truth(log)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_table_ahead_of_the_store_is_refused_naming_both_txids(
    spark: Any, tmp_path: Path, fmt: str
) -> None:
    log = make_log(tmp_path)
    send(log, SENTENCES)
    topo = published_topology("lh_ahead", fmt, tmp_path)
    location = tmp_path / "state.duckdb"
    with ta.DuckDBStore(location) as store:
        TopologyRunner(topo, spark, store, log).run_batch(1)
    backup = tmp_path / "backup"
    backup.mkdir()
    for part in tmp_path.glob("state.duckdb*"):  # the state file and its commit marker file
        shutil.copy(part, backup / part.name)
    with ta.DuckDBStore(location) as store:
        TopologyRunner(topo, spark, store, log).run_batch(2)
    for part in backup.iterdir():  # an older store restored
        shutil.copy(part, tmp_path / part.name)
    with ta.DuckDBStore(location) as store, pytest.raises(PublishError) as info:
        TopologyRunner(topo, spark, store, log)
    message = str(info.value)
    assert "the table has txid 2" in message
    assert "committed only up to txid 1" in message
    assert "Restore the store that matches the table, or delete the table" in message


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_table_behind_by_several_txids_gets_each_of_them(
    spark: Any, tmp_path: Path, fmt: str
) -> None:
    log = make_log(tmp_path)
    send(log, SENTENCES * 2)
    published = published_topology("lh_gap", fmt, tmp_path)
    plain = published_topology("lh_gap", fmt, tmp_path / "unused")
    plain.publications.clear()  # the same topology, declared without its table for a while
    location = str(tmp_path / "state.duckdb")
    with ta.DuckDBStore(location) as store:
        TopologyRunner(published, spark, store, log).run_batch(1)
        unpublished = TopologyRunner(plain, spark, store, log)
        assert unpublished.run_batch(2).applied
        assert unpublished.run_batch(3).applied
        runner = TopologyRunner(published, spark, store, log)
        assert sorted(_publisher(runner, "counts_" + fmt).writer.versions()) == [1, 2, 3]
        for txid, version in _publisher(runner, "counts_" + fmt).writer.versions().items():
            rows = _table(fmt, tmp_path, location, at=version)
            assert _counts(rows) == state_of(store, topo=published, as_of=txid)
        # a store that no longer keeps the rows of a missing txid refuses, naming them
        send(log, SENTENCES * 2)
        assert unpublished.run_batch(4).applied
        assert unpublished.run_batch(5).applied
        short = open_publisher(published.publications[0], store, kept=1)
        with pytest.raises(PublishError, match=r"txids 4\.\.4 cannot be published") as info:
            short.catch_up(store)
        assert "the table has txid 3" in str(info.value)
        assert "Delete the table" in str(info.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_reader_polling_while_txids_commit_sees_only_whole_txids(
    spark: Any, tmp_path: Path, fmt: str
) -> None:
    log = make_log(tmp_path)
    send(log, SENTENCES * 3)
    topo = published_topology("lh_reader", fmt, tmp_path)
    location = str(tmp_path / "state.duckdb")
    seen: list[dict[str, int]] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        catalog = iceberg_catalog(tmp_path, location) if fmt == "iceberg" else None
        delta = tmp_path / "lake" / "counts"
        while not stop.is_set():
            try:
                if fmt == "delta":
                    if (delta / "_delta_log").is_dir():
                        seen.append(_counts(delta_rows(delta)))
                elif catalog.table_exists("lake.counts"):
                    seen.append(_counts(iceberg_rows(catalog, "lake.counts")))
            except Exception as exc:
                errors.append(exc)

    with ta.DuckDBStore(location) as store:
        runner = TopologyRunner(topo, spark, store, log)
        reader = threading.Thread(target=read)
        reader.start()
        try:
            last = _drain(runner)
        finally:
            stop.set()
            reader.join()
        whole = [{}] + [state_of(store, topo, as_of=t) for t in range(1, last + 1)]  # {}: none yet
    assert not errors
    assert seen, "the reader read the table"
    assert [s for s in seen if s not in whole] == [], "every read is the state as of one txid"


def test_declarations_are_checked(tmp_path: Path) -> None:
    topo = published_topology("lh_decl", "delta", tmp_path)
    counts = topo.states["counts"]
    with pytest.raises(ConfigError, match="already published to that table"):
        counts.publish(ta.IcebergTable("lake.other", mode="changelog")).publish(
            ta.DeltaTable(tmp_path / "lake" / "counts")
        )
    with pytest.raises(ConfigError, match=r"call \.as_output\(name\) first"):
        topo.new_stream("more", ta.LogSpout("more", ta.StringScheme("s"))).publish(
            ta.DeltaTable(tmp_path / "x")
        )
    with pytest.raises(ConfigError, match="mode must be 'table' or 'changelog'"):
        ta.DeltaTable(tmp_path / "y", mode="merge")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"'namespace\.table'"):
        ta.IcebergTable("nonamespace")
    with pytest.raises(ConfigError, match=r"needs a ta\.DeltaTable or ta\.IcebergTable"):
        counts.publish("/tmp/table")  # type: ignore[arg-type]


def test_an_iceberg_merge_rewrites_the_table_only_when_many_keys_change(tmp_path: Path) -> None:
    """A merge of few keys is an overwrite-by-filter; of many, the table's content rewritten.

    Both give the same table: every key's latest value and the txid that last changed it.
    """
    import pyarrow as pa

    topo = published_topology("lh_rewrite", "iceberg", tmp_path)
    with ta.DuckDBStore(tmp_path / "state.duckdb") as store:
        writer = open_publisher(topo.publications[0], store, kept=50).writer

        def rows(txid: int, counts: dict[str, int]) -> pa.Table:
            return pa.table(
                {
                    "word": list(counts),
                    "count": pa.array(list(counts.values()), pa.int64()),
                    "txid": pa.array([txid] * len(counts), pa.int64()),
                }
            )

        writer.replace(1, rows(1, {f"w{i}": 1 for i in range(8)}))
        asked: list[int] = []

        def current_values(txid: int, table: pa.Table) -> Any:
            return lambda: asked.append(txid) or table

        # one key of eight changes: a filter on that key; the current values are not read
        writer.merge(2, rows(2, {"w3": 5}), ("word",), current_values(2, rows(2, {})))
        assert asked == []
        # three of eight (at least a quarter): the current values given replace the table
        after_3 = pa.concat_tables(
            [
                rows(1, {f"w{i}": 1 for i in (1, 2, 4, 6, 7)}),
                rows(2, {"w3": 5}),
                rows(3, {"w0": 2, "w5": 9, "new": 1}),
            ]
        )
        changed = rows(3, {"w0": 2, "w5": 9, "new": 1})
        writer.merge(3, changed, ("word",), current_values(3, after_3))
        assert asked == [3]
        versions = writer.versions()
        assert sorted(versions) == [1, 2, 3]
        catalog = iceberg_catalog(tmp_path, str(tmp_path / "state.duckdb"))
        latest = {
            r["word"]: (r["count"], r["txid"])
            for r in iceberg_rows(catalog, "lake.counts").to_pylist()
        }
        assert latest == {
            **{f"w{i}": (1, 1) for i in (1, 2, 4, 6, 7)},
            "w3": (5, 2),
            "w0": (2, 3),
            "w5": (9, 3),
            "new": (1, 3),
        }
        as_of_2 = iceberg_rows(catalog, "lake.counts", versions[2]).to_pylist()
        assert {r["word"]: (r["count"], r["txid"]) for r in as_of_2} == {
            **{f"w{i}": (1, 1) for i in range(8) if i != 3},
            "w3": (5, 2),
        }

"""The read replica: per-txid Parquet deltas, as-of reads, compaction, crash catch-up."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.replica import Replica
from trident_assets.backends.state_batches import StateTarget
from trident_assets.core.aggregators import Count, Sum
from trident_assets.core.values import StateType
from trident_assets.errors import HistoryUnavailableError, OutOfOrderCommitError, StateLayoutError
from trident_assets_tests.state_assets import commit_partials

BATCHES = {
    1: {"the": 2, "cow": 1},
    2: {"the": 1, "moon": 3},
    3: {"cow": 4},
    4: {"the": 5, "star": 1},
}


def _target(state_type: StateType = StateType.OPAQUE) -> StateTarget:
    return StateTarget("counts", ("word",), "n", state_type, Count())


def _partials(batch: dict[str, int]) -> pa.Table:
    return pa.table({"word": list(batch), "n": pa.array(list(batch.values()), pa.int64())})


def _as_dict(table: pa.Table) -> dict[str, int]:
    return dict(zip(table.column("word").to_pylist(), table.column("n").to_pylist(), strict=True))


def _expected(upto: int) -> dict[str, int]:
    total: dict[str, int] = {}
    for txid in range(1, upto + 1):
        for word, n in BATCHES[txid].items():
            total[word] = total.get(word, 0) + n
    return total


def _commit(store: DuckDBStore, replica: Replica, txid: int, target: StateTarget) -> None:
    result = commit_partials(store, "counts", target, _partials(BATCHES[txid]), txid)
    assert result.applied
    replica.publish(store, "counts", txid, [target.table], [])


@pytest.mark.parametrize("state_type", [StateType.OPAQUE, StateType.TRANSACTIONAL])
def test_as_of_reads_equal_the_state_after_each_txid(tmp_path: Path, state_type: StateType) -> None:
    replica = Replica(tmp_path / "replica")
    target = _target(state_type)
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        for txid in BATCHES:
            _commit(store, replica, txid, target)
    for txid in BATCHES:
        got = replica.read_map("counts", scope="counts", as_of=txid, value_name="n")
        assert _as_dict(got) == _expected(txid), f"as of txid {txid}"
    assert _as_dict(replica.read_map("counts", scope="counts", value_name="n")) == _expected(4)
    assert replica.latest("counts") == 4


def test_a_txid_is_visible_only_once_its_marker_is_written(tmp_path: Path) -> None:
    """A publish cut short (delta written, marker not) is invisible: no half batch."""
    replica = Replica(tmp_path / "replica")
    target = _target()
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        _commit(store, replica, 1, target)
        commit_partials(store, "counts", target, _partials(BATCHES[2]), 2)
        replica._write_delta("counts", 2, replica._map_rows(store, "counts", "opaque", 2))
        assert _as_dict(replica.read_map("counts", scope="counts", value_name="n")) == _expected(1)
        with pytest.raises(HistoryUnavailableError, match="txid 2 is not committed yet"):
            replica.read_map("counts", scope="counts", as_of=2, value_name="n")
        # the next writer catches the replica up from the store
        assert replica.publish_missing(store, "counts", ["counts"], []) == [2]
    assert _as_dict(replica.read_map("counts", scope="counts", value_name="n")) == _expected(2)


def test_compaction_keeps_the_last_txids_and_names_the_oldest(tmp_path: Path) -> None:
    replica = Replica(tmp_path / "replica")
    target = _target()
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        for txid in BATCHES:
            _commit(store, replica, txid, target)
    assert replica.compact("counts", keep_txids=2) == 2
    assert replica.oldest_readable("counts") == 2
    for txid in (2, 3, 4):
        got = replica.read_map("counts", scope="counts", as_of=txid, value_name="n")
        assert _as_dict(got) == _expected(txid)
    with pytest.raises(
        HistoryUnavailableError,
        match=r"counts: txid 1 can no longer be read; compaction kept txids 2 to 4",
    ):
        replica.read_map("counts", scope="counts", as_of=1, value_name="n")
    files = sorted(p.name for p in (tmp_path / "replica" / "counts").glob("*.parquet"))
    assert files == ["0000000003.parquet", "0000000004.parquet", "base-0000000002.parquet"]
    assert replica.compact("counts", keep_txids=2) is None, "nothing older left to fold"


def test_rows_tables_and_plain_maps(tmp_path: Path) -> None:
    replica = Replica(tmp_path / "replica")
    plain = StateTarget("plain", ("word",), "n", StateType.NON_TRANSACTIONAL, Sum())
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        store.conn.execute('CREATE TABLE "t__out_words" (txid BIGINT, word VARCHAR)')
        for txid in (1, 2):
            commit_partials(store, "plain", plain, _partials(BATCHES[txid]), txid)
            store.conn.execute(
                'INSERT INTO "t__out_words" VALUES (?, ?), (?, ?)',
                [txid, f"a{txid}", txid, f"b{txid}"],
            )
            replica.publish(store, "plain", txid, ["plain"], ["t__out_words"])
    assert replica.read_rows("t__out_words", 2).to_pylist() == [{"word": "a2"}, {"word": "b2"}]
    assert replica.read_rows("t__out_words", 9) is None
    assert _as_dict(replica.read_map("plain", scope="plain", as_of=1, value_name="n")) == (
        _expected(1)
    )
    assert _as_dict(replica.read_map("plain", scope="plain", value_name="n")) == _expected(2)
    assert replica.compact("t__out_words", keep_txids=1) == 2
    assert replica.read_rows("t__out_words", 1) is None


def _appended(replica: Replica, scope: str) -> list[tuple[str, int]]:
    import duckdb

    files = [str(f) for f in replica.appended_files("t__s__finals", scope)]
    with duckdb.connect() as conn:
        return conn.sql(
            "SELECT w, final_txid FROM read_parquet(?) ORDER BY final_txid, w", params=[files]
        ).fetchall()


def test_append_tables_publish_whole_keep_every_row_and_compact_by_concatenation(
    tmp_path: Path,
) -> None:
    """Finals-like tables: a home older than their publishing gets its rows published whole."""
    replica = Replica(tmp_path / "replica")
    plain = StateTarget("counts", ("word",), "n", StateType.NON_TRANSACTIONAL, Sum())
    appends = {"t__s__finals": "final_txid"}
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        store.conn.execute('CREATE TABLE "t__s__finals" (w VARCHAR, final_txid BIGINT)')
        for txid in (1, 2, 3):  # committed and published while the replica ignored finals
            commit_partials(store, "counts", plain, _partials(BATCHES[txid]), txid)
            store.conn.execute('INSERT INTO "t__s__finals" VALUES (?, ?)', [f"w{txid}", txid])
            replica.publish(store, "counts", txid, ["counts"], [])
        with pytest.raises(StateLayoutError, match=r"^t__s__finals is not published in the"):
            replica.appended_files("t__s__finals", "counts")
        assert replica.publish_missing(store, "counts", ["counts"], [], None, appends) == []
        assert _appended(replica, "counts") == [("w1", 1), ("w2", 2), ("w3", 3)]
        commit_partials(store, "counts", plain, _partials(BATCHES[4]), 4)
        store.conn.execute("""INSERT INTO "t__s__finals" VALUES ('x4', 4), ('y4', 4)""")
        replica.publish(store, "counts", 4, ["counts"], [], None, appends)
        for txid in (5, 6):  # txid 5 made nothing final: no file
            commit_partials(store, "counts", plain, _partials(BATCHES[4]), txid)
            if txid == 6:
                store.conn.execute("""INSERT INTO "t__s__finals" VALUES ('z6', 6)""")
            replica.publish(store, "counts", txid, ["counts"], [], None, appends)
    every = [("w1", 1), ("w2", 2), ("w3", 3), ("x4", 4), ("y4", 4), ("z6", 6)]
    assert _appended(replica, "counts") == every
    names = sorted(p.name for p in (tmp_path / "replica" / "t__s__finals").glob("*.parquet"))
    assert names == ["0000000004.parquet", "0000000006.parquet", "base-0000000003.parquet"]
    assert replica.compact("t__s__finals", keep_txids=1) == 4
    assert _appended(replica, "counts") == every, "compaction drops no row"
    names = sorted(p.name for p in (tmp_path / "replica" / "t__s__finals").glob("*.parquet"))
    assert names == ["0000000006.parquet", "base-0000000004.parquet"]


def test_errors(tmp_path: Path) -> None:
    replica = Replica(tmp_path / "replica")
    with pytest.raises(StateLayoutError, match="no published map 'nothing'"):
        replica.read_map("nothing", scope="x")
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        _commit(store, replica, 1, _target())
        with pytest.raises(OutOfOrderCommitError):
            commit_partials(store, "counts", _target(), _partials(BATCHES[3]), 3)
    assert _as_dict(replica.read_map("counts", scope="counts", value_name="n")) == _expected(1)

"""Spout kinds, start positions, deploy-only resets and batch metadata (pure, in memory)."""

from __future__ import annotations

import pytest

from trident_assets import BatchUnavailableError, ConfigError, OutOfOrderCommitError
from trident_assets.spouts.config import SpoutConfig, SpoutKind, StartPosition
from trident_assets.spouts.coordinator import BatchCoordinator, fair_split
from trident_assets.spouts.ranges import PartitionRange
from trident_assets.spouts.source import assign_round_robin
from trident_assets.testing import MemorySource
from trident_assets_tests.memory_meta import MemorySpoutMetaStore

META_FACTORY: list = [MemorySpoutMetaStore]


@pytest.fixture(autouse=True, params=["memory", "duckdb"])
def meta_backend(request, tmp_path):
    """Run every test against both metadata stores."""
    if request.param == "memory":
        META_FACTORY[0] = MemorySpoutMetaStore
        yield
        return
    from trident_assets.backends.duckdb_spout_meta import DuckDBSpoutMetaStore
    from trident_assets.backends.duckdb_store import DuckDBStore

    stores: list[DuckDBStore] = []

    def fresh() -> DuckDBSpoutMetaStore:
        stores.append(DuckDBStore(tmp_path / f"meta{len(stores)}.duckdb"))
        return DuckDBSpoutMetaStore(stores[-1])

    META_FACTORY[0] = fresh
    yield
    for store in stores:
        store.close()
    META_FACTORY[0] = MemorySpoutMetaStore


def new_meta():
    return META_FACTORY[0]()


def records(n: int, prefix: str = "r") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def make(kind: SpoutKind, source: MemorySource, meta=None, **cfg) -> BatchCoordinator:
    return BatchCoordinator(
        "wc", "sentences", source, SpoutConfig(kind=kind, **cfg), meta or new_meta()
    )


def spans(plan) -> dict[str, tuple[int, int]]:
    return {r.partition: (r.first_offset, r.next_offset) for r in plan.ranges}


def test_transactional_replay_is_identical_after_more_data_arrived() -> None:
    src = MemorySource()
    src.append("t@0", records(5))
    src.append("t@1", records(3))
    coord = make(SpoutKind.TRANSACTIONAL, src)
    first = coord.emit(1)
    assert spans(first) == {"t@0": (0, 5), "t@1": (0, 3)}
    assert not first.replay
    src.append("t@0", records(10, "late"))
    src.append("t@2", records(4))
    replay = coord.emit(1)
    assert replay.replay
    assert spans(replay) == spans(first), "a transactional txid is fixed at first emission"
    coord.commit(replay)
    second = coord.emit(2)
    assert spans(second) == {"t@0": (5, 15), "t@1": (3, 3), "t@2": (0, 4)}, "no overlap, no skip"


def test_transactional_replay_of_a_deleted_range_stops() -> None:
    src = MemorySource()
    src.append("t@0", records(5))
    coord = make(SpoutKind.TRANSACTIONAL, src)
    coord.emit(1)
    src.delete_before("t@0", 2)
    with pytest.raises(
        BatchUnavailableError, match=r"needs t@0 offsets 0\.\.4, but the log now holds 2\.\.4"
    ):
        coord.emit(1)
    src.remove_partition("t@0")
    with pytest.raises(BatchUnavailableError, match="no longer exists"):
        coord.emit(1)


def test_opaque_attempts_read_from_the_committed_end_and_may_differ() -> None:
    src = MemorySource()
    src.append("t@0", records(4))
    src.append("t@1", records(2))
    coord = make(SpoutKind.OPAQUE, src)
    one = coord.emit(1)
    coord.commit(one)
    src.append("t@0", records(3))
    failed = coord.emit(2)
    assert spans(failed) == {"t@0": (4, 7), "t@1": (2, 2)}
    src.append("t@1", records(5))
    src.remove_partition("t@0")
    retry = coord.emit(2)
    assert spans(retry) == {"t@1": (2, 7)}, "a vanished partition drops out; the new data is read"
    coord.commit(retry)
    src.add_partition("t@0")
    src.append("t@0", records(7 + 2))
    third = coord.emit(3)
    assert spans(third)["t@0"] == (4, 9), "a partition that comes back resumes at its last commit"
    assert coord.emit(2).replay, "a committed opaque txid is final"
    assert spans(coord.emit(2)) == {"t@1": (2, 7)}


def test_opaque_cannot_skip_a_txid() -> None:
    src = MemorySource()
    src.append("t@0", records(1))
    coord = make(SpoutKind.OPAQUE, src)
    with pytest.raises(OutOfOrderCommitError, match="txid 1 must commit first"):
        coord.emit(2)


def test_non_transactional_reads_past_a_failed_attempt() -> None:
    src = MemorySource()
    src.append("t@0", records(3))
    coord = make(SpoutKind.NON_TRANSACTIONAL, src)
    assert spans(coord.emit(1)) == {"t@0": (0, 3)}
    src.append("t@0", records(2))
    assert spans(coord.emit(1)) == {"t@0": (3, 5)}, "no replay guarantee: the lost attempt is gone"


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (StartPosition.EARLIEST, (2, 10)),
        (StartPosition.UNCOMMITTED_EARLIEST, (2, 10)),
        (StartPosition.LATEST, (10, 10)),
        (StartPosition.UNCOMMITTED_LATEST, (10, 10)),
        (StartPosition.TIMESTAMP, (5, 10)),
        (StartPosition.UNCOMMITTED_TIMESTAMP, (5, 10)),
    ],
)
def test_start_positions_on_a_fresh_topology(start, expected) -> None:
    src = MemorySource()
    src.append("t@0", records(5), timestamp_ms=100)
    src.append("t@0", records(5), timestamp_ms=200)
    src.delete_before("t@0", 2)
    coord = make(SpoutKind.OPAQUE, src, start=start, start_timestamp_ms=150)
    assert spans(coord.emit(1)) == {"t@0": expected}


def test_timestamp_past_the_end_starts_at_latest() -> None:
    src = MemorySource()
    src.append("t@0", records(3), timestamp_ms=100)
    coord = make(SpoutKind.OPAQUE, src, start=StartPosition.TIMESTAMP, start_timestamp_ms=999)
    assert spans(coord.emit(1)) == {"t@0": (3, 3)}


def deploy(src, meta, start, deployment, **cfg) -> BatchCoordinator:
    return BatchCoordinator(
        "wc",
        "sentences",
        src,
        SpoutConfig(kind=SpoutKind.OPAQUE, start=start, deployment_id=deployment, **cfg),
        meta,
    )


def test_deploy_only_positions_reset_on_a_new_deployment_only() -> None:
    src = MemorySource()
    src.append("t@0", records(4))
    meta = new_meta()
    first = deploy(src, meta, StartPosition.EARLIEST, "d1")
    one = first.emit(1)
    first.commit(one)
    src.append("t@0", records(2))
    same = deploy(src, meta, StartPosition.EARLIEST, "d1")
    assert spans(same.emit(2)) == {"t@0": (4, 6)}, "same deployment: stored offsets win"
    again = deploy(src, meta, StartPosition.EARLIEST, "d2")
    assert spans(again.emit(2)) == {"t@0": (0, 6)}, "new deployment: EARLIEST re-applies"
    latest = deploy(src, meta, StartPosition.LATEST, "d3")
    assert spans(latest.emit(2)) == {"t@0": (6, 6)}
    resumed = deploy(src, meta, StartPosition.UNCOMMITTED_EARLIEST, "d4")
    assert spans(resumed.emit(2)) == {"t@0": (4, 6)}, "UNCOMMITTED_* resumes across deployments"


def test_ignore_stored_offsets_on_a_new_deployment() -> None:
    src = MemorySource()
    src.append("t@0", records(4))
    meta = new_meta()
    first = deploy(src, meta, StartPosition.UNCOMMITTED_EARLIEST, "d1")
    first.commit(first.emit(1))
    ignoring = deploy(
        src, meta, StartPosition.UNCOMMITTED_EARLIEST, "d2", ignore_stored_offsets=True
    )
    assert spans(ignoring.emit(2)) == {"t@0": (0, 4)}
    same_deploy = deploy(
        src, meta, StartPosition.UNCOMMITTED_EARLIEST, "d1", ignore_stored_offsets=True
    )
    assert spans(same_deploy.emit(2)) == {"t@0": (4, 4)}, "only a new deployment ignores offsets"


def test_max_batch_size_is_split_fairly_and_empty_batches_are_valid() -> None:
    src = MemorySource()
    src.append("t@0", records(100))
    src.append("t@1", records(3))
    src.append("t@2", records(50))
    coord = make(SpoutKind.TRANSACTIONAL, src, max_batch_size=30)
    plan = coord.emit(1)
    assert spans(plan) == {"t@0": (0, 14), "t@1": (0, 3), "t@2": (0, 13)}
    assert plan.record_count == 30
    coord.commit(plan)
    empty_src = MemorySource()
    empty_src.add_partition("t@0")
    empty = make(SpoutKind.OPAQUE, empty_src).emit(1)
    assert empty.record_count == 0
    assert empty.offsets_metadata() == {"t@0": [0, -1]}, "Storm's (pos-1, pos-1) for an empty batch"


def test_fair_split_edge_cases() -> None:
    assert fair_split({"a@0": 5, "a@1": 5}, None) == {"a@0": 5, "a@1": 5}
    assert fair_split({"a@0": 5, "a@1": 5}, 3) == {"a@0": 2, "a@1": 1}
    assert fair_split({"a@0": 0, "a@1": 9}, 4) == {"a@0": 0, "a@1": 4}
    assert fair_split({"a@0": 2, "a@1": 2}, 100) == {"a@0": 2, "a@1": 2}


def test_round_robin_assignment() -> None:
    parts = [f"t@{i}" for i in range(10)]
    assert assign_round_robin(parts, 0, 2) == ["t@0", "t@2", "t@4", "t@6", "t@8"]
    assert assign_round_robin(parts, 1, 2) == ["t@1", "t@3", "t@5", "t@7", "t@9"]
    assert assign_round_robin([*parts, "t@10", "t@11"], 0, 2)[:5] == assign_round_robin(parts, 0, 2)
    assert assign_round_robin(["b@0", "a@10", "a@2"], 0, 1) == ["a@2", "a@10", "b@0"]
    with pytest.raises(ConfigError, match="task_index"):
        assign_round_robin(parts, 2, 2)


def test_cleanup_keeps_each_partitions_newest_range() -> None:
    src = MemorySource()
    src.append("t@0", records(2))
    src.append("t@1", records(2))
    meta = new_meta()
    coord = make(SpoutKind.OPAQUE, src, meta=meta)
    coord.commit(coord.emit(1))
    src.remove_partition("t@1")
    for txid in (2, 3):
        src.append("t@0", records(1))
        coord.commit(coord.emit(txid))
    assert meta.ranges("wc", "sentences", 1) == (
        [PartitionRange("t@1", 0, 2, "default")],
        True,
    ), "t@1's only range survives cleanup"
    assert meta.ranges("wc", "sentences", 2) is None


def test_config_is_validated_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match="needs start_timestamp_ms"):
        SpoutConfig(start=StartPosition.TIMESTAMP)
    with pytest.raises(ConfigError, match="max_batch_size must be >= 1"):
        SpoutConfig(max_batch_size=0)

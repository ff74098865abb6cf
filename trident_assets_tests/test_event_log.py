"""ReusingSqliteEventLogStorage: a Dagster instance configured with it stores and reads events
as Dagster's own SQLite event log, building one SQLAlchemy engine per database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from trident_assets.dagster import event_log
from trident_assets.dagster.event_log import KEPT_RUN_SHARDS, ReusingSqliteEventLogStorage

KEY = dg.AssetKey(["t", "a"])


def instance(tmp_path: Path) -> dg.DagsterInstance:
    home = tmp_path / "dg"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "event_log_storage:\n"
        "  module: trident_assets.dagster.event_log\n"
        "  class: ReusingSqliteEventLogStorage\n"
        f"  config:\n    base_dir: {home / 'history' / 'runs'}\n"
    )
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))


@pytest.fixture
def engines(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The connection strings of the engines the storage creates."""
    made: list[str] = []
    real = event_log.create_engine

    def counting(url: str, **kw: Any) -> Any:
        made.append(url)
        return real(url, **kw)

    monkeypatch.setattr(event_log, "create_engine", counting)
    return made


def test_events_of_several_runs_with_one_engine_per_database(
    tmp_path: Path, engines: list[str]
) -> None:
    inst = instance(tmp_path)
    assert isinstance(inst.event_log_storage, ReusingSqliteEventLogStorage)

    @dg.asset(partitions_def=dg.StaticPartitionsDefinition(["1", "2", "3"]))
    def a(context) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"key": context.partition_key})

    results = [
        dg.materialize([a], instance=inst, partition_key=p, raise_on_error=True)
        for p in ("1", "2", "3")
    ]
    assert all(r.success for r in results)
    records = inst.fetch_materializations(dg.AssetKey(["a"]), limit=10, ascending=True).records
    assert [r.asset_materialization.metadata["key"].value for r in records] == ["1", "2", "3"]
    assert inst.get_materialized_partitions(dg.AssetKey(["a"])) == {"1", "2", "3"}
    for r in results:
        assert inst.all_logs(r.run_id)[-1].dagster_event_type == dg.DagsterEventType.RUN_SUCCESS
    shards = sorted({u.rsplit("/", 1)[-1] for u in engines})
    assert shards == sorted(["index.db", *(f"{r.run_id}.db" for r in results)]), (
        "one engine per database, however many events each run wrote"
    )
    assert len(engines) == len(shards)
    inst.dispose()


def test_kept_engines_are_bounded_and_a_wipe_sets_the_databases_up_again(
    tmp_path: Path, engines: list[str]
) -> None:
    inst = instance(tmp_path)
    storage = inst.event_log_storage
    assert isinstance(storage, ReusingSqliteEventLogStorage)
    for i in range(KEPT_RUN_SHARDS + 3):
        with storage.run_connection(f"run{i}") as conn:
            assert conn is not None
    assert len(storage._engines) == KEPT_RUN_SHARDS
    assert list(storage._engines) == [f"run{i}" for i in range(3, KEPT_RUN_SHARDS + 3)]
    inst.report_runless_asset_event(dg.AssetMaterialization(KEY, metadata={"n": 1}))
    inst.wipe()
    assert inst.fetch_materializations(KEY, limit=5).records == []
    inst.report_runless_asset_event(dg.AssetMaterialization(KEY, metadata={"n": 2}))
    (record,) = inst.fetch_materializations(KEY, limit=5).records
    assert record.asset_materialization.metadata["n"].value == 2
    inst.dispose()
    assert storage._engines == {}

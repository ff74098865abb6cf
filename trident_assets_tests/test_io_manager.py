"""TridentIOManager with a user's own Dagster state asset: exactly-once, as-of loads, crashes.

The user asset returns per-txid partials; the IO manager applies them under the partition's
txid. Downstream assets load the state as of their txid (partitioned) or the latest
(unpartitioned), from the lock-free replica, also while another process holds the store.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pyarrow as pa
import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.postgres_store import PostgresStore
from trident_assets.dagster.io_manager import TridentIOManager, state_asset_metadata
from trident_assets.dagster.partitions import parse_txid, txid_key, txid_partitions

PARTIALS = {
    1: {"home": 3, "about": 1},
    2: {"home": 2, "pricing": 5},
    3: {"home": 1, "about": 4},
    4: {"blog": 7},
}
TXIDS = txid_partitions("clicks")
SEEN: dict[str, Any] = {}


def expected(upto: int) -> dict[str, int]:
    total: dict[str, int] = {}
    for txid in range(1, upto + 1):
        for page, n in PARTIALS[txid].items():
            total[page] = total.get(page, 0) + n
    return total


@dg.asset(
    partitions_def=TXIDS,
    metadata=state_asset_metadata("clicks", key_fields=["page"], value_field="n"),
    io_manager_key="trident_io_manager",
)
def clicks(context: dg.AssetExecutionContext) -> pd.DataFrame:
    """Per-txid partial click counts per page (a user's own state asset)."""
    batch = PARTIALS[parse_txid(context.partition_key)]
    return pd.DataFrame({"page": list(batch), "n": list(batch.values())})


@dg.asset(partitions_def=TXIDS)
def clicks_as_of(clicks: pd.DataFrame) -> None:
    """Downstream, same txids: the state as of the txid."""
    SEEN["as_of"] = dict(zip(clicks["page"], clicks["n"], strict=True))


@dg.asset
def clicks_latest(clicks: pa.Table) -> None:
    """Downstream, unpartitioned: the latest committed state, as Arrow."""
    SEEN["latest"] = dict(
        zip(clicks.column("page").to_pylist(), clicks.column("n").to_pylist(), strict=True)
    )


ASSETS = [clicks, clicks_as_of, clicks_latest]


def _resources(home: Path, state_dsn: str | None = None) -> dict[str, Any]:
    return {
        "trident_io_manager": TridentIOManager(home=str(home), state_dsn=state_dsn),
        "io_manager": dg.mem_io_manager,
    }


def _run(
    home: Path,
    instance: dg.DagsterInstance,
    txid: int,
    *selection: Any,
    state_dsn: str | None = None,
) -> Any:
    instance.add_dynamic_partitions(TXIDS.name, [txid_key(txid)])
    return dg.materialize(
        ASSETS,
        selection=list(selection) or [clicks],
        partition_key=txid_key(txid),
        instance=instance,
        resources=_resources(home, state_dsn),
        raise_on_error=False,
    )


def _state(home: Path) -> dict[str, int]:
    with DuckDBStore(home / "state.duckdb", read_only=True) as store:
        rows = store.scan("clicks", value_name="n").to_pylist()
    return {r["page"]: r["n"] for r in rows}


def _metadata(result: Any) -> dict[str, Any]:
    (mat,) = result.asset_materializations_for_node("clicks")
    return {k: v.value for k, v in mat.metadata.items()}


def test_user_state_asset_is_exactly_once_in_order(tmp_path: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance:
        for txid in (1, 2):
            result = _run(tmp_path, instance, txid)
            assert result.success
            assert _metadata(result)["already_committed"] is False
            assert _metadata(result)["total"] == sum(expected(txid).values())
        assert _state(tmp_path) == expected(2)
        replay = _run(tmp_path, instance, 1)
        assert replay.success
        meta = _metadata(replay)
        assert meta["already_committed"] is True, "a committed txid is final"
        assert meta["txid"] == 1
        assert _state(tmp_path) == expected(2), "a replay must not count twice"
        early = _run(tmp_path, instance, 4)
        assert not early.success
        (failure,) = early.get_step_failure_events()
        text = str(failure.event_specific_data.error)
        assert "OutOfOrderCommitError" in text
        assert "txid 4" in text
        assert _state(tmp_path) == expected(2), "an out-of-order txid changes nothing"


def test_a_state_asset_commits_through_the_one_commit_then_publishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the asset's op to the store: one function named commit in the runtime (and the
    core's commit protocol); the state applied in the open transaction, published after it."""
    import traceback

    from trident_assets.runtime import state_asset

    seen: list[tuple[list[tuple[str, str]], bool, int | None]] = []
    applied, replica = state_asset.apply_state_batch, TridentIOManager(home=str(tmp_path)).replica()

    def apply_state_batch(store: Any, *args: Any) -> Any:
        frames = [
            (Path(f.filename).parent.name, f.name)
            for f in traceback.extract_stack()
            if "/trident_assets/" in f.filename and "commit" in f.name.lower()
        ]
        seen.append((frames, store.in_transaction, replica.latest("clicks")))
        return applied(store, *args)

    monkeypatch.setattr(state_asset, "apply_state_batch", apply_state_batch)
    with dg.DagsterInstance.ephemeral() as instance:
        assert _run(tmp_path, instance, 1).success
        assert seen == [([("runtime", "commit"), ("core", "commit_batch")], True, None)]
        assert replica.latest("clicks") == 1, "published once committed"


def test_user_state_asset_in_postgresql_by_configuration(tmp_path: Path, pg_dsn: str) -> None:
    with dg.DagsterInstance.ephemeral() as instance:
        for txid, replayed in ((1, False), (2, False), (1, True)):
            result = _run(tmp_path, instance, txid, state_dsn=pg_dsn)
            assert result.success
            assert _metadata(result)["already_committed"] is replayed, "committed is final"
        with PostgresStore(pg_dsn, read_only=True) as store:
            rows = store.scan("clicks", value_name="n").to_pylist()
            assert store.last_committed("clicks") == 2
        assert {r["page"]: r["n"] for r in rows} == expected(2), "a replay must not count twice"
        assert not (tmp_path / "state.duckdb").exists(), "no DuckDB file when state_dsn is set"
        run = _run(tmp_path, instance, 2, clicks_as_of, clicks_latest, state_dsn=pg_dsn)
        assert run.success
        assert SEEN["as_of"] == expected(2)
        assert SEEN["latest"] == expected(2)


def test_a_state_dsn_that_is_not_postgresql_fails_before_any_write(tmp_path: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance:
        result = _run(tmp_path, instance, 1, state_dsn="mysql://db/state")
        assert not result.success
        (failure,) = result.get_step_failure_events()
        text = str(failure.event_specific_data.error)
        assert "ConfigError" in text
        assert "state_dsn 'mysql://db/state' is not a PostgreSQL URI" in text
        assert not (tmp_path / "state.duckdb").exists()
        assert not (tmp_path / "replica").exists(), "nothing was written"


def test_downstream_assets_load_as_of_their_txid_and_the_latest(tmp_path: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance:
        for txid in (1, 2, 3):
            assert _run(tmp_path, instance, txid).success
        for txid in (1, 2, 3):
            assert _run(tmp_path, instance, txid, clicks_as_of).success
            assert SEEN["as_of"] == expected(txid), f"as of txid {txid}"
        result = dg.materialize(
            ASSETS,
            selection=[clicks_latest],
            instance=instance,
            resources=_resources(tmp_path),
        )
        assert result.success
        assert SEEN["latest"] == expected(3)


def test_a_bad_partition_key_and_a_missing_declaration_are_refused(tmp_path: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(TXIDS.name, ["12"])
        result = dg.materialize(
            ASSETS,
            selection=[clicks],
            partition_key="12",
            instance=instance,
            resources=_resources(tmp_path),
            raise_on_error=False,
        )
        assert not result.success
        text = str(result.get_step_failure_events()[0].event_specific_data.error)
        assert "partition key '12' is not a txid key" in text
        assert not (tmp_path / "state.duckdb").exists(), "bad input fails before any write"

        @dg.asset(partitions_def=TXIDS, io_manager_key="trident_io_manager")
        def undeclared() -> pd.DataFrame:
            return pd.DataFrame({"page": ["x"], "n": [1]})

        instance.add_dynamic_partitions(TXIDS.name, [txid_key(1)])
        result = dg.materialize(
            [undeclared],
            partition_key=txid_key(1),
            instance=instance,
            resources=_resources(tmp_path),
            raise_on_error=False,
        )
        assert not result.success
        text = str(result.get_step_failure_events()[0].event_specific_data.error)
        assert "declares no state: add metadata=state_asset_metadata(...)" in text


CHILD = """
import os, signal, sys, time
from pathlib import Path
import dagster as dg
from trident_assets.backends import state_batches
from trident_assets_tests.test_io_manager import _run

mode, home, txid = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
applied = state_batches.apply_state_batch

def hooked(*args, **kwargs):
    result = applied(*args, **kwargs)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)  # written, not committed
    (home / "in_transaction").write_text("1")
    if mode == "hold":  # inside the transaction until the test has read (guard: 120 s)
        deadline = time.monotonic() + 120
        while not (home / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return result

state_batches.apply_state_batch = hooked
with dg.instance_for_test() as instance:
    assert _run(home, instance, txid).success
(home / "committed").write_text("1")
"""


def _child(tmp_path: Path, mode: str, txid: int) -> subprocess.Popen[str]:
    """Run txid ``txid`` in a child; ``kill``: SIGKILL after the state write, before the
    commit; ``hold``: stay inside the transaction until ``tmp_path / "release"`` exists."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return subprocess.Popen(
        [sys.executable, str(script), mode, str(tmp_path), str(txid)],
        cwd=Path(__file__).parent.parent,
        text=True,
    )


def test_sigkill_between_write_and_commit_leaves_the_old_state(tmp_path: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance:
        assert _run(tmp_path, instance, 1).success
        proc = _child(tmp_path, "kill", 2)
        assert proc.wait(timeout=120) == -signal.SIGKILL
        assert _state(tmp_path) == expected(1), "a crash before the commit changes nothing"
        replay = _run(tmp_path, instance, 2)
        assert replay.success
        assert _metadata(replay)["already_committed"] is False
        assert _state(tmp_path) == expected(2)


def test_readers_never_wait_for_a_writer_nor_see_half_a_batch(tmp_path: Path) -> None:
    """While another process holds the store inside txid 3's transaction, downstream loads
    return at once with the state of txid 2; once it commits, they see txid 3."""
    with dg.DagsterInstance.ephemeral() as instance:
        for txid in (1, 2):
            assert _run(tmp_path, instance, txid).success
        writer = _child(tmp_path, "hold", 3)
        try:
            deadline = time.monotonic() + 120
            while not (tmp_path / "in_transaction").exists():
                assert writer.poll() is None, "the writer died"
                assert time.monotonic() < deadline
                time.sleep(0.2)
            reads = []
            for _ in range(3):
                started = time.perf_counter()
                result = dg.materialize(
                    ASSETS,
                    selection=[clicks_latest],
                    instance=instance,
                    resources=_resources(tmp_path),
                )
                reads.append(time.perf_counter() - started)
                assert result.success
                assert SEEN["latest"] == expected(2), "no half of txid 3"
            assert not (tmp_path / "committed").exists(), "read while the writer held the lock"
            assert writer.poll() is None, "the writer still holds its transaction"
            print(json.dumps({"read_s_while_writer_holds_lock": reads}))
        finally:
            (tmp_path / "release").touch()
            assert writer.wait(timeout=180) == 0
        result = dg.materialize(
            ASSETS, selection=[clicks_latest], instance=instance, resources=_resources(tmp_path)
        )
        assert result.success
        assert SEEN["latest"] == expected(3)


@pytest.mark.parametrize("bad", [[1, 2], "text"])
def test_as_arrow_refuses_other_types(bad: Any) -> None:
    from trident_assets.dagster.io_manager import as_arrow
    from trident_assets.errors import ConfigError

    with pytest.raises(ConfigError, match="return a pandas DataFrame, a pyarrow Table"):
        as_arrow(bad, "state asset x")

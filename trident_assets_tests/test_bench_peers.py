"""The optional benchmark peers (PyFlink, Pathway) without their runtimes: the exactness check
refuses a wrong count, their outputs are read back exactly, and the flags parse."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from bench import event_windows, peer_env, peers, run_all
from bench.flink_wordcount import checkpoint_stats, read_changelog
from bench.pathway_wordcount import consolidate
from bench.peer_check import CountsDiffer, check_counts

TRUTH = pa.table({"word": ["w0", "w1", "w2"], "count": pa.array([5, 3, 1], pa.int64())})


def _counts(words: list[str], counts: list[int]) -> pa.Table:
    return pa.table({"word": words, "count": pa.array(counts, pa.int64())})


def test_check_counts_accepts_exact_counts_in_any_order() -> None:
    got = check_counts(TRUTH, _counts(["w2", "w0", "w1"], [1, 5, 3]), "PyFlink hashmap")
    assert got == {
        "identical": True,
        "keys": 3,
        "truth_keys": 3,
        "missing_or_different": 0,
        "unexpected": 0,
    }


@pytest.mark.parametrize(
    ("words", "counts", "fragment"),
    [
        (["w0", "w1", "w2"], [5, 4, 1], "1 truth rows missing or different, 1 unexpected rows"),
        (["w0", "w1"], [5, 3], "1 truth rows missing or different, 0 unexpected rows (2 keys"),
        (["w0", "w1", "w2", "w9"], [5, 3, 1, 1], "0 truth rows missing or different, 1 unexp"),
    ],
    ids=["one-count-off", "word-missing", "word-unexpected"],
)
def test_check_counts_refuses_a_wrong_count(words, counts, fragment) -> None:
    with pytest.raises(CountsDiffer, match=r"^Pathway: final counts differ from the ground") as e:
        check_counts(TRUTH, _counts(words, counts), "Pathway")
    assert fragment in str(e.value)
    assert str(e.value).endswith("the benchmark figures are void")


def test_peers_run_reports_a_wrong_count_loudly(tmp_path: Path, monkeypatch) -> None:
    """A peer whose counts differ is marked not exact and logged, and the run fails."""
    import pyarrow.parquet as pq

    wrong = tmp_path / "pathway-counts.parquet"
    pq.write_table(_counts(["w0", "w1", "w2"], [5, 3, 2]), wrong)

    def fake_run(python, files, work, *, counts, threads=2, timeout_s=0):
        return {"threads": 2, "sentences": 1, "wall_s": 1.0, "pathway_startup_s": 0.1}

    monkeypatch.setattr(
        peers, "peer_python", lambda peer: Path("/py") if peer == "pathway" else None
    )
    monkeypatch.setattr(peers.pathway_wordcount, "run_in_subprocess", fake_run)
    args = run_all.parse_args(["--skip-flink"])
    lines: list[str] = []
    results: dict = {}
    table: list = []
    peers.run(args, tmp_path, TRUTH, 8, tmp_path, results, table, {}, [], lines.append)
    assert table[0]["system"] == "Pathway"
    assert table[0]["exact"] is False
    assert lines[0].startswith("COUNTS DIFFER FROM THE GROUND TRUTH: Pathway: final counts")
    assert "1 truth rows missing or different, 1 unexpected rows" in lines[0]


def test_a_peer_not_installed_is_skipped_or_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(peers, "peer_python", lambda peer: None)
    lines: list[str] = []
    notes: list[str] = []
    table: list = []
    args = run_all.parse_args([])
    peers.run(args, tmp_path, TRUTH, 8, tmp_path, {}, table, {}, notes, lines.append)
    assert table == []
    assert lines == [
        "flink: skipped: not installed (python -m bench.peer_env install flink)",
        "pathway: skipped: not installed (python -m bench.peer_env install pathway)",
    ]
    assert notes == lines
    with pytest.raises(SystemExit, match=r"^--flink given but flink is not installed: run python"):
        peers.run(run_all.parse_args(["--flink"]), tmp_path, TRUTH, 8, tmp_path, {}, [], {}, [],
                  print)  # fmt: skip


def test_run_all_peer_flags_parse(capsys) -> None:
    default = run_all.parse_args([])
    assert (default.flink, default.pathway) == (None, None)
    assert default.flink_backends == "hashmap,rocksdb"
    assert (default.flink_checkpoint_interval_ms, default.flink_mini_batch_ms) == (1000, 1000)
    args = run_all.parse_args(["--skip-flink", "--pathway", "--flink-backends", "rocksdb"])
    assert (args.flink, args.pathway, args.flink_backends) == (False, True, "rocksdb")
    args = run_all.parse_args(["--flink", "--skip-pathway", "--flink-mini-batch-ms", "0"])
    assert (args.flink, args.pathway, args.flink_mini_batch_ms) == (True, False, 0)
    with pytest.raises(SystemExit):
        run_all.parse_args(["--flink", "--skip-flink"])
    assert "not allowed with argument --flink" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="unknown state backend 'memory'; use hashmap, rocksdb"):
        run_all.parse_args(["--flink-backends", "hashmap,memory"])
    ev = event_windows.parse_args([])
    assert (ev.flink, ev.flink_backends) == (None, "hashmap,rocksdb")
    assert event_windows.parse_args(["--no-flink", "--quick"]).flink is False
    assert event_windows.parse_args(["--flink", "--quick"]).flink_backends == "hashmap"
    with pytest.raises(SystemExit):
        event_windows.parse_args(["--flink-backends", "rocks"])
    assert "--flink-backends: unknown state backend 'rocks'; use hashmap" in capsys.readouterr().err


def test_flink_changelog_and_checkpoint_log_are_read_exactly(tmp_path: Path) -> None:
    bucket = tmp_path / "sink" / "2026-11-28--21"
    bucket.mkdir(parents=True)
    (bucket / "part-a-0").write_text("+I[w0, 2]\n+I[w1, 1]\n-U[w0, 2]\n+U[w0, 5]\n")
    (bucket / "part-b-0").write_text("+I[w2, 1]\n-U[w1, 1]\n+U[w1, 3]\n")
    (bucket / ".part-c-0.inprogress.x").write_text("+U[w0, 99]\n")  # not committed
    assert read_changelog(tmp_path / "sink") == {"w0": 5, "w1": 3, "w2": 1}
    log = tmp_path / "log"
    log.mkdir()
    job = "f6f3e1f65f7c8e4e4055ac9db1dce414"
    prefix = "INFO  org.apache.flink.runtime.checkpoint.CheckpointCoordinator [] - "
    (log / "flink-root-python-vm.log").write_text(
        f"{prefix}Completed checkpoint 1 for job {job} (6424 bytes, checkpointDuration=976 ms, "
        "finalizationTime=30 ms).\n"
        f"WARN Failed to trigger or complete checkpoint 2 for job {job}. (0 consecutive)\n"
        f"{prefix}Completed checkpoint 3 for job {job} (7000 bytes, checkpointDuration=120 ms, "
        "finalizationTime=1 ms).\n"
        f"{prefix}Completed checkpoint 1 for job {'0' * 32} (1 bytes, checkpointDuration=5 ms, "
        "finalizationTime=1 ms).\n"
    )
    assert checkpoint_stats(log, job) == {
        "completed": 2,
        "failed_or_declined": 1,
        "duration_s": [0.976, 0.12],
        "bytes": [6424, 7000],
    }


def test_pathway_updates_consolidate_to_the_final_table() -> None:
    updates = pa.table(
        {
            "word": ["w0", "w1", "w0", "w0"],
            "count": pa.array([1, 1, 1, 3], pa.int64()),
            "time": pa.array([2, 2, 4, 4], pa.int64()),
            "diff": pa.array([1, 1, -1, 1], pa.int64()),
        }
    )
    final = consolidate(updates)
    assert sorted(zip(*final.to_pydict().values(), strict=True)) == [("w0", 3), ("w1", 1)]
    without_the_retraction = pa.concat_tables([updates.slice(0, 2), updates.slice(3, 1)])
    with pytest.raises(RuntimeError, match="leave two counts for one word"):
        consolidate(without_the_retraction)


def test_peer_pins_come_from_pyproject() -> None:
    assert peer_env.pins("flink") == ["apache-flink>=2.3,<2.4"]
    assert peer_env.pins("pathway") == ["pathway>=0.33,<0.34"]
    with pytest.raises(ValueError, match="unknown benchmark peer 'spark'; the peers are flink"):
        peer_env.venv_dir("spark")


def test_peers_render_their_figures() -> None:
    flink = {
        "versions": {"apache-flink": "2.3.0"},
        "backend": "rocksdb",
        "words_per_s": 1_250_000,
        "wall_s": 6.4,
        "execute_s": 9.25,
        "checkpoints": {"completed": 7, "failed_or_declined": 2},
        "checkpoint_median_s": 0.3125,
        "checkpoint_max_s": None,
        "verify": {"identical": True},
        "prepare_s": 0.5,
    }
    pathway = {
        "versions": {"pathway": "0.33.0"},
        "words_per_s": 200_000,
        "wall_s": 3.0,
        "update_rows": 12_345,
        "persistence_bytes": 2**21,
        "verify": {"identical": False},
    }
    lines = peers.render({"flink": [flink], "pathway": pathway})
    assert lines[0].startswith("PyFlink 2.3.0 configurations (each its own process;")
    assert "| rocksdb | 1.25M | 6.40 | 9.25 | 7 (2) | 0.312 | - | True |" in lines
    assert (
        "Pathway 0.33.0: 0.20M words/s, `pw.run` 3.00 s, 12,345 update rows written, 2.0 MiB "
        "persisted, counts exact False." in lines
    )
    assert peers.render({}) == []

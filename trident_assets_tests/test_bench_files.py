"""The file spout and publishing benchmarks, as documented, at a small size in clean children."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trident_assets_tests.conftest import JVM_ENV

REPO = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **JVM_ENV},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_file_spout_benchmark_counts_both_engines_exactly(tmp_path: Path) -> None:
    """`python -m bench.file_spout`: ours and Spark SS's file source, every file read once."""
    out = tmp_path / "report.json"
    done = _run(
        tmp_path, "bench.file_spout", "--work", str(tmp_path / "work"), "--files", "3",
        "--sentences", "200", "--max-files", "2", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["corpus"]["total_words"] == 3 * 200 * 8
    for fmt in ("json", "parquet"):
        row = report["formats"][fmt]
        ours, ss = row["ours"], row["spark_ss"]
        assert ours["exact"]["identical"], (fmt, row)
        assert ss["exact"]["identical"], (fmt, row)
        assert (ours["txids"], ours["files_waiting_after"], ours["dead_letters"]) == (2, 0, 0)
        assert ss["micro_batches"] == 2
        assert row["ours_over_ss"] == float(f"{ours['words_per_s'] / ss['words_per_s']:.3g}")
    assert f"| json | {report['formats']['json']['ours']['words_per_s']:,} |" in done.stdout


def test_publish_cost_benchmark_publishes_exact_tables(tmp_path: Path) -> None:
    """`python -m bench.publish_cost`: the state, and its Delta and Iceberg tables, exact."""
    out = tmp_path / "report.json"
    done = _run(
        tmp_path, "bench.publish_cost", "--words", "2000", "--keys", "50", "--txids", "2",
        "--work", str(tmp_path / "work"), "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert [r["format"] for r in report["runs"]] == ["none", "delta", "iceberg"]
    assert [r["exact"] for r in report["runs"]] == [True, True, True]
    assert report["ok"]
    assert len(done.stdout.splitlines()) == 3

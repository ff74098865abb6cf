"""`trident demo` over a home the user added to: refused naming what it found, or moved aside.

The home is a copy of the session's demo (``demo_run``); the user then seeds the page-views
topic as docs/windows.md says, writes docs/dagster.md's ``sales`` state through the IO manager,
adds sentences and runs a txid of its own. The demo runs as a child process with a clean
environment, as ``make demo`` does.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.cli.demo_home import DEMO_MARKER
from trident_assets.home_lock import LOCK_FILE
from trident_assets.log.store import PartitionedLog
from trident_assets_tests.children import TRIDENT, run_child

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _tree(home: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(home)): None if p.is_dir() else p.read_bytes()
        for p in sorted(home.rglob("*"))
        if p.name != LOCK_FILE
    }


def test_the_demo_keeps_what_the_user_added_to_its_home(demo_run: Any, tmp_path: Path) -> None:
    assert demo_run.done.returncode == 0, demo_run.done.stderr
    home = tmp_path / ".trident"
    shutil.copytree(demo_run.home, home, symlinks=True)
    recorded = json.loads((home / DEMO_MARKER).read_text())
    assert recorded["scopes"] == {"word_count": 5}
    assert sorted(recorded["topics"]) == ["sentences", "word_queries"]

    seeded = run_child([sys.executable, "-m", "trident_assets.examples.page_views"], tmp_path)
    assert seeded.returncode == 0, seeded.stderr
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / "dagster.md").read_text(), re.S)
    (tmp_path / "sales.py").write_text(next(b for b in blocks if "SALES = " in b))
    sales = run_child([sys.executable, "sales.py"], tmp_path, timeout=300)
    assert sales.returncode == 0, sales.stderr[-3000:]
    producer = PartitionedLog(home / "log").producer("sentences")
    for sentence in (b"one more line", b"and another"):
        producer.send(sentence)
    producer.flush()
    with DuckDBStore(home / "state.duckdb") as store, store.transaction() as tx:
        tx.mark_committed("word_count", 6)  # as a run of the UI or live mode commits one
    before = _tree(home)

    refused = run_child([str(TRIDENT), "demo"], tmp_path)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        "error: trident home .trident holds data the demo did not write (topic "
        "page_view_events, 2 records added to topic sentences, state sales (txid 2), "
        "word_count txid 6 (run after the demo)); the demo replaces its home's log, state and "
        "Dagster instance: pass --home with another directory, or run "
        f"`{TRIDENT} demo --force` to move its log, state and Dagster instance aside (kept)\n"
    )
    assert _tree(home) == before  # nothing written, nothing deleted

    forced = run_child(
        [str(TRIDENT), "demo", "--force", "--sentences", "400", "--batch-size", "200",
         "--kill-txid", "2"],
        tmp_path, timeout=900,
    )  # fmt: skip
    assert forced.returncode == 0, forced.stdout + forced.stderr
    (aside,) = tmp_path.glob(".trident.before-demo-*")
    assert (
        "   moved the home's earlier data (topic page_view_events, 2 records added to topic "
        "sentences, state sales (txid 2), word_count txid 6 (run after the demo)) to "
        f"{aside.name}\n" in forced.stdout
    )
    assert "4. exactly-once check PASSED: " in forced.stdout
    assert _tree(aside) == {
        k: v for k, v in before.items() if k.split("/")[0] != DEMO_MARKER
    }  # every byte the home held, moved aside
    with DuckDBStore(home / "state.duckdb", read_only=True) as store:
        assert list(store.scopes()) == ["word_count"]
    assert sorted(PartitionedLog(home / "log").topics()) == ["sentences", "word_queries"]

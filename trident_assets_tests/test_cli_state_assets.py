"""A state written through the IO manager, read with ``trident state``, as a user does.

docs/dagster.md's ``sales`` example runs as written in a child process (its home
``.trident`` in the test's directory); the ``trident`` commands then run as child processes
with a clean environment.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from trident_assets_tests.children import run_child, run_trident

DOCS = Path(__file__).resolve().parents[1] / "docs" / "dagster.md"


def _sales_home(tmp_path: Path) -> None:
    """Run docs/dagster.md's ``sales`` example in ``tmp_path``: txids 1 and 2 of ``sales``."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    (code,) = [b for b in blocks if "SALES = " in b]
    (tmp_path / "sales.py").write_text(code)
    done = run_child([sys.executable, "sales.py"], tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _json(tmp_path: Path, *args: str) -> object:
    done = run_trident(tmp_path, *args, "--format", "json")
    assert (done.returncode, done.stderr) == (0, ""), args
    return json.loads(done.stdout)


def test_a_state_asset_is_listed_scanned_and_kept_by_a_restore(tmp_path: Path) -> None:
    _sales_home(tmp_path)
    status = _json(tmp_path, "status")
    assert [(r["topology"], r["last_txid"]) for r in status] == [("sales", 2)]  # type: ignore[index, union-attr]
    listed = [
        {
            "topology": "sales",
            "state": "sales",
            "kind": "opaque",
            "key_columns": "item",
            "value_type": "BIGINT",
            "keys": 2,
            "last_txid": 2,
            "orphaned": "n/a (asset)",
        }
    ]
    latest = [{"item": "tea", "n": 5}, {"item": "jam", "n": 1}]
    first = [{"item": "tea", "n": 3}, {"item": "jam", "n": 1}]

    def reads() -> None:
        assert _json(tmp_path, "state", "list") == listed
        assert _json(tmp_path, "state", "scan", "sales", "sales") == latest
        assert _json(tmp_path, "state", "scan", "sales", "sales", "--txid", "1") == first
        assert _json(tmp_path, "state", "get", "sales", "sales", "tea") == [latest[0]]
        store = ["--database", ".trident/state.duckdb"]  # the home's own: read from its replica
        assert _json(tmp_path, "state", "scan", "sales", "sales", *store) == latest

    reads()
    done = run_trident(tmp_path, "state", "list")  # no note about orphans: nothing to tell
    assert (done.returncode, done.stderr) == (0, "")
    done = run_trident(tmp_path, "state", "scan", "sales", "nope")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "error: topology 'sales' has no state 'nope'; its states: sales\n"
    for args in (["backup", "b.duckdb"], ["restore", "b.duckdb", "--force"]):
        done = run_trident(tmp_path, "state", *args)
        assert done.returncode == 0, done.stderr
    reads()

"""Every `trident ...` command the README and docs/ show works when pasted, over a demo home.

Each runs as a user pastes it: a child shell in a clean environment, in the directory the
demo ran in, with the demo's home as ``TRIDENT_HOME`` (the README's commands use the default
home; the demo fixture writes ``h``) and the virtualenv's ``bin`` on ``PATH``. Checked: the
exit code and a key line of the output. Commands that change the home (quarantine, backup,
restore) run last, in the order the README gives them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trident_assets_tests.conftest import JVM_ENV

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# fmt: off
# (command as documented, exit code, a line (regex) the output must contain)
READS = [
    ("trident log topics", 0, r"sentences"),
    ("trident log offsets sentences", 0, r"sentences"),
    ("trident log tail sentences -n 10", 0, r"."),
    ("trident state list", 0, r"word_counts"),
    ("trident state scan word_count word_counts", 0, (
        r"^word_count\.word_counts: \d+ keys, last committed txid 5")),
    ("trident state scan word_count word_counts --txid 2", 0, r"^word_count\.word_counts: \d+ keys, as of txid 2"),  # noqa: E501
    ("trident state get word_count word_counts the --txid 2", 0, r"┃ word ┃ +count ┃"),
    ("trident outputs word_count words --txid 2", 0, r"^word_count\.words: 1 rows, txid 2"),
    ("trident dead-letters word_count -n 20", 0, r"^0 dead letters of word_count"),
    ("trident state scan word_count word_counts --format json", 0, r'^\[\{"word": "[a-z]+", "count": \d+\}'),  # noqa: E501
    ("trident log verify sentences", 0, r"sentences"),
    ("trident status", 0, (
        r"^│ word_count │ +5 │ +0 │ .*│ +0 │ "
        r"txid 3 at \S+ \(since passed: txid 5 committed\): run +│$")),
    ("trident quarantine list", 0, r"nothing waits in the quarantine"),
    ("trident log create-topic lines --partitions 2", 0, r"lines"),
    ("printf 'the cow\\nthe moon\\n' | trident log produce lines", 0, r"2"),
]
WRITES = [
    ("trident state backup backups/state-1.duckdb", 0, r"^backed up h/state\.duckdb to backups/state-1\.duckdb: .*word_count at txid 5"),  # noqa: E501
    ('trident quarantine add word_count 7 --reason "bad record"', 1, r"\A" + re.escape(
        "error: refusing to commit txid 7 to 'word_count': it has committed up to txid 5, so "
        "txid 6 must commit first (batches commit in strict txid order). Nothing was changed; "
        "run txid 6 (the coordinator sensor does this) and then retry txid 7.\n") + r"\Z"),
    ("trident quarantine replay word_count", 1,
     r"\Aerror: nothing waits in the quarantine of topology 'word_count'\n\Z"),
    ("trident state restore backups/state-1.duckdb --force", 0, r"^restored backups/state-1\.duckdb to h/state\.duckdb: .*word_count at txid 5"),  # noqa: E501
    ("trident state rebuild word_count word_counts --module trident_assets.examples.topologies", 0, r"^state word_counts of word_count rebuilt from txids 1\.\.5: \d+ keys"),  # noqa: E501
    ("trident state scan word_count word_counts --txid 2", 0, r"as of txid 2"),
]


# fmt: on


def _documented() -> set[str]:
    """The `trident ...` command lines of the shell blocks of README.md and docs/*.md."""
    found = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        fence = None
        for line in path.read_text().splitlines():
            if line.startswith("```"):
                fence = None if fence is not None else line[3:].strip()
                continue
            if fence not in ("bash", "sh", "console", "shell", ""):
                continue
            command = line.split("  #")[0].strip().removeprefix("$ ")
            if re.match(r"^(printf .*\| )?(\.venv/bin/)?trident (?!demo|ui)", command):
                found.add(command.replace(".venv/bin/trident", "trident"))
    return found


def _sh(command: str, demo: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/bash", "-c", command],
        cwd=demo.cwd,
        env={
            "HOME": str(demo.cwd),
            "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
            "COLUMNS": "100",
            "TRIDENT_HOME": "h",
            **JVM_ENV,
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_every_documented_command_is_checked() -> None:
    checked = {c for c, _, _ in READS + WRITES}
    documented = _documented()
    assert documented, "no `trident` commands found in README.md and docs/"
    assert documented - checked == set(), "documented but not checked here"


@pytest.mark.parametrize("commands", [READS + WRITES], ids=["in README order"])
def test_documented_commands_work_over_the_demo_home(demo_run: Any, commands: list[Any]) -> None:
    assert demo_run.done.returncode == 0, demo_run.done.stderr
    failures = []
    for command, code, expected in commands:
        done = _sh(command, demo_run)
        text = done.stdout + done.stderr
        ok = done.returncode == code and re.search(expected, text, re.M)
        if not ok or "Traceback" in text:
            failures.append(f"$ {command}\nexit {done.returncode}\n{text[-3000:]}")
    assert failures == [], "\n\n".join(failures)


def test_status_after_the_demo_names_the_killed_attempt(demo_run: Any) -> None:
    assert demo_run.done.returncode == 0, demo_run.done.stderr
    done = _sh("trident status --format json", demo_run)
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    assert (row["topology"], row["last_txid"]) == ("word_count", 5)
    assert row["last_error"].startswith("txid 3 at ")
    assert row["last_error"].endswith(
        "(since passed: txid 5 committed): run process killed (exit code -9) between its "
        "state write and its commit; the coordinator replays the txid"
    )


def test_the_demo_runs_again_in_its_home(demo_run: Any, tmp_path: Path) -> None:
    """`make demo` twice in a row: the second run replaces the first's log, state, replica."""
    assert demo_run.done.returncode == 0, demo_run.done.stderr
    shutil.copytree(demo_run.home, tmp_path / "h", symlinks=True)
    again = subprocess.run(
        [str(BIN / "trident"), "demo", "--home", "h", "--sentences", "400", "--batch-size", "200",
         "--kill-txid", "2"],
        cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin", **JVM_ENV},
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert "4. exactly-once check PASSED: " in again.stdout

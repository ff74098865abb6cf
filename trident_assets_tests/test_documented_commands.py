"""Every `trident ...` command the README and docs/ show works when pasted, as written.

Each runs as a user pastes it: a child shell in a clean environment that first runs
``source .venv/bin/activate`` (what docs/cli.md says to do once; ``.venv`` is a link to this
virtualenv), in the directory the home is in, with the default home ``.trident``. Two homes:
the demo's (the session's ``demo_run``, `make demo` as a new user runs it), and one that the
user module of docs/cli.md ("Your own code location") filled. Checked: the exit code, a key
line of the output, and, where the docs show the command's output (a ``text`` block whose
``$ trident ...`` lines are followed by what they print), that output: the same lines, where
``...`` stands for any lines and only what varies from run to run is normalised (times,
durations, dates, sizes, PIDs, absolute paths). Commands run in the order the docs give them;
those that change a home run after the reads they would change.
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
from trident_assets_tests.test_readme import PARSED, SHELL_LANGS

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
VENV = Path(sys.prefix)

# fmt: off
# (command as documented, exit code, a line (regex) the output must contain), over the demo home
DEMO = [
    ("trident log create-topic lines --partitions 2", 0, r"^created topic lines with 2 partition"),
    ("printf 'the cow\\nthe moon\\n' | trident log produce lines", 0, r"^produced 2 record"),
    ("trident log topics", 0, r"sentences"),
    ("trident log offsets sentences", 0, r"sentences"),
    ("trident log tail sentences -n 10", 0, r"."),
    ("trident log verify sentences", 0, r"^verified 4 partition"),
    ("trident state list", 0, r"word_counts"),
    ("trident state scan word_count word_counts", 0, (
        r"^word_count\.word_counts: 28 keys, last committed txid 5")),
    ("trident state scan word_count word_counts --txid 2", 0, r"as of txid 2"),
    (".venv/bin/trident state scan word_count word_counts", 0, r"last committed txid 5"),
    (".venv/bin/trident state scan word_count word_counts --txid 2", 0, r"as of txid 2"),
    ("trident state get word_count word_counts the --txid 2", 0, r"┃ word ┃ +count ┃"),
    ("trident state scan word_count word_counts --format json", 0, r'^\[\{"word": "the", "count": 20012\}'),  # noqa: E501
    ("trident outputs word_count words --txid 2", 0, r"^word_count\.words: 1 rows, txid 2"),
    ("trident dead-letters word_count -n 20", 0, r"^0 dead letters of word_count"),
    ("trident dead-letters word_count -n 5 --records", 0, r"^0 dead letters of word_count"),
    ("trident status", 0, r"^│ word_count │ +5 │ +0 │ .*txid 3 at \S+ \(since passed: txid 5 committed\)"),  # noqa: E501
    ("trident state drop word_count word_counts --yes", 1, r"^error: state 'word_counts' of topology 'word_count' is still declared"),  # noqa: E501
    ("trident state accept-lost-commits", 0, r"^state file \.trident/state\.duckdb lost no committed txid; nothing changed$"),  # noqa: E501
    ("trident state backup backups/state-1.duckdb", 0, r"^backed up \.trident/state\.duckdb to backups/state-1\.duckdb: .*word_count at txid 5"),  # noqa: E501
    ("trident state restore backups/state-1.duckdb --force", 0, r"^restored backups/state-1\.duckdb to \.trident/state\.duckdb: .*word_count at txid 5"),  # noqa: E501
    ("trident state rebuild word_count word_counts --module trident_assets.examples.topologies", 0, r"^state word_counts of word_count rebuilt from txids 1\.\.5: 28 keys"),  # noqa: E501
    ("trident quarantine list", 0, r"nothing waits in the quarantine"),
    ("printf 'the cow\\nthe moon\\n' | trident log produce sentences", 0, r"^produced 2 record"),
    ('trident quarantine add word_count 6 --reason "bad record"', 0, r"^txid 6 of word_count quarantined: 2 records set aside"),  # noqa: E501
    ("trident quarantine replay word_count", 0, r"^quarantined txid 6 of word_count processed as txid 7"),  # noqa: E501
    ("trident quarantine add word_count 9", 1, r"^error: refusing to commit txid 9"),
    ("trident quarantine replay word_count", 1, r"^error: nothing waits in the quarantine"),
]
# over the home that docs/cli.md's own module (`my_pkg.defs`) filled: one txid, `seen` dropped
MINE = [
    ("trident log create-topic orders --partitions 1", 0, r"^created topic orders"),
    ("printf '%s\\n' '{\"customer\": \"ann\", \"amount\": 5, \"ts\": \"2026-01-01 00:00:10\"}' '{\"customer\": \"bob\", \"amount\": 7, \"ts\": \"2026-01-01 00:00:20\"}' '{\"customer\": \"ann\", \"amount\": 3, \"ts\": \"2026-01-01 00:00:50\"}' '{\"customer\": \"ann\", \"amount\": 4, \"ts\": \"2026-01-01 00:01:30\"}' '{\"customer\": \"bob\", \"amount\": 1, \"ts\": \"2026-01-01 00:02:05\"}' | trident log produce orders", 0, r"^produced 5 record"),  # noqa: E501
    # the coordinator runs txid 1 here (see _fill_with_the_user_module)
    ("trident state list --module my_pkg.defs", 0, r"│ orders +│ per_minute +│ event_window │"),
    ("trident state scan orders per_customer", 0, r"^orders\.per_customer: 2 keys"),
    ("trident state scan orders per_minute", 0, r"^orders\.per_minute: 3 final windows, 1 open"),
    ("trident state get orders per_minute ann", 0, r"^orders\.per_minute: 2 final windows"),
    ("trident state drop orders seen --module my_pkg.defs --yes", 0, r"^dropped state seen"),
]
# fmt: on
ELSEWHERE = {
    "trident ui --home .trident --module my_pkg.defs --local-spark": (
        "starts dagster dev: test_ui_warm_spark.py checks the lines it prints"
    ),
    ".venv/bin/trident ui --home .trident --port 3000": (
        "starts dagster dev: test_demo_ui.py runs it over the demo's home"
    ),
    ".venv/bin/trident ui --home .trident --port 3000 --live": (
        "starts dagster dev in live mode: test_live_ui.py runs it over a fresh home"
    ),
    **dict.fromkeys(
        [
            'printf \'%s\\n\' \'{"customer": "ann", "amount": 5}\' \'{"customer": "bob", "amount": 7}\' \'{"customer": "ann", "amount": 3}\' | trident log produce orders',  # noqa: E501
            "trident launch shop 1 --assets shop/spent",
            "trident state scan shop spent",
        ],
        "in a dg project (docs/dagster.md, the dg way): test_dg_component.py runs them",
    ),
}
"""Documented commands run by another test, and why not here."""

_VARIES = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00)?"), "<time>"),  # ISO times
    (re.compile(r"\d{8}T\d{6}"), "<time>"),  # before-restore-<time>
    (re.compile(r"\b\d+(\.\d+)?s\b"), "<duration>"),
    (re.compile(r"\b\d+ bytes\b"), "<size> bytes"),
    (re.compile(r"\bpid \d+\b"), "pid <pid>"),
]


def _commands_of(text: str) -> list[str]:
    """The `trident` command lines of one shell block (comments dropped)."""
    found = []
    for line in text.splitlines():
        command = line.split("  #")[0].strip().removeprefix("$ ")
        if re.match(r"^(printf .*\| )?(\.venv/bin/)?trident (?!demo|ui \[)", command):
            found.append(command)
    return found


def _documented() -> set[str]:
    """The `trident ...` commands of README.md and docs/*.md: shell blocks and ``$`` lines."""
    found: set[str] = set()
    for block in PARSED.blocks:
        if block.lang in SHELL_LANGS:
            found.update(_commands_of(block.code))
        elif block.lang in ("text", ""):
            found.update(_commands_of("\n".join(
                line for line in block.code.splitlines() if line.startswith("$ ")
            )))  # fmt: skip
    return found


def _samples() -> dict[str, list[str]]:
    """The documented outputs of each command text blocks show after ``$ trident ...``, in
    the docs' order (a command shown twice, say before and after a change, has two)."""
    samples: dict[str, list[str]] = {}
    for block in PARSED.blocks:
        if block.lang != "text" or not block.code.startswith("$ "):
            continue
        shown: list[str] = []
        for line in block.code.splitlines():
            if line.startswith("$ "):
                shown = samples.setdefault(line.removeprefix("$ "), [])
                shown.append("")
            else:
                shown[-1] += line + "\n"
    return samples


def _normalised(text: str) -> str:
    text = text.replace(f"{BIN}/", ".venv/bin/")
    for pattern, placeholder in _VARIES:
        text = pattern.sub(placeholder, text)
    return text


def matches_sample(printed: str, sample: str) -> bool:
    """``printed`` is ``sample`` line for line (a ``...`` line: any lines, none included),
    once what varies is normalised; trailing spaces ignored."""
    got = [line.rstrip() for line in _normalised(printed).splitlines()]
    parts: list[list[str]] = [[]]
    for line in _normalised(sample).splitlines():
        if line.strip() == "...":
            parts.append([])
        else:
            parts[-1].append(line.rstrip())
    if len(parts) == 1:
        return got == parts[0]
    first, *middle, last = parts
    start, end = len(first), len(got) - len(last)
    if end < start or got[:start] != first or got[end:] != last:
        return False
    for part in middle:
        found = next(
            (i for i in range(start, end - len(part) + 1) if got[i : i + len(part)] == part), None
        )
        if found is None:
            return False
        start = found + len(part)
    return True


def _sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` as a user pastes it after ``source .venv/bin/activate``, in ``cwd``."""
    return subprocess.run(
        ["/bin/bash", "-c", f"source .venv/bin/activate\n{command}"],
        cwd=cwd,
        env={
            "HOME": str(cwd),
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "COLUMNS": "200",
            **JVM_ENV,
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _run_all(commands: list[Any], cwd: Path) -> list[str]:
    """Run ``commands`` in order in ``cwd``; the failures, one text each."""
    samples = _samples()
    failures = []
    for command, code, expected in commands:
        done = _sh(command, cwd)
        text = done.stdout + done.stderr
        ok = done.returncode == code and re.search(expected, text, re.M)
        sample = samples[command].pop(0) if samples.get(command) else None
        if (
            not ok
            or "Traceback" in text
            or (sample is not None and not matches_sample(text, sample))
        ):
            shown = f"documented:\n{sample}" if sample is not None else ""
            failures.append(f"$ {command}\nexit {done.returncode}\n{text[-3000:]}\n{shown}")
    return failures


def test_every_documented_command_is_checked() -> None:
    checked = {c for c, _, _ in DEMO + MINE} | set(ELSEWHERE)
    documented = _documented()
    assert len(documented) >= 25, "the `trident` commands of README.md and docs/ were found"
    assert documented - checked == set(), "documented but not checked here"
    assert set(_samples()) <= checked, "a sample output of a command not run here"


def test_the_docs_say_how_trident_gets_on_path() -> None:
    """The commands are run after `source .venv/bin/activate`: README and cli.md say so."""
    readme = (ROOT / "README.md").read_text()
    cli = (ROOT / "docs" / "cli.md").read_text()
    assert "source .venv/bin/activate\n" in readme
    assert "source .venv/bin/activate   # puts .venv/bin (trident) first on PATH" in cli


@pytest.mark.parametrize(
    ("printed", "sample", "same"),
    [
        ("a 1.2s\nb\n", "a 8.8s\nb\n", True),
        ("a\nx\ny\nb\n", "a\n...\nb\n", True),
        ("a\nb\n", "a\n...\nb\n", True),
        ("a\nx\n", "a\nb\n", False),
        ("a 12 keys\n", "a 29 keys\n", False),
        (f"{BIN}/trident ui\n", ".venv/bin/trident ui\n", True),
        ("at 2026-11-28T18:09:51+00:00 pid 7\n", "at 2026-11-25T08:00:00+00:00 pid 12345\n", True),
    ],
)
def test_samples_match_only_what_varies(printed: str, sample: str, same: bool) -> None:
    assert matches_sample(printed, sample) is same


def test_the_demo_prints_what_the_docs_show(demo_run: Any) -> None:
    assert demo_run.done.returncode == 0, demo_run.done.stderr
    shown = [b for b in PARSED.blocks if b.lang == "text" and b.code.startswith("trident demo in ")]
    assert [b.doc for b in shown] == ["README.md", "docs/dagster.md"]
    for block in shown:
        assert matches_sample(demo_run.done.stdout, block.code), (block.doc, demo_run.done.stdout)


@pytest.mark.parametrize("commands", [DEMO], ids=["in the docs' order"])
def test_documented_commands_work_over_the_demo_home(
    demo_run: Any, commands: list[Any], tmp_path: Path
) -> None:
    assert demo_run.done.returncode == 0, demo_run.done.stderr
    # a copy: the commands write (a quarantined txid and its replay), the other tests read
    shutil.copytree(demo_run.home, tmp_path / ".trident", symlinks=True)
    (tmp_path / ".venv").symlink_to(VENV)
    failures = _run_all(commands, tmp_path)
    assert failures == [], "\n\n".join(failures)


def _user_module() -> str:
    """The code of `my_pkg/defs.py` as docs/cli.md gives it."""
    [block] = [
        b for b in PARSED.blocks
        if b.doc == "docs/cli.md" and b.section == "Your own code location" and b.lang == "python"
    ]  # fmt: skip
    return block.code


def _fill_with_the_user_module(cwd: Path, spark: Any) -> None:
    """Run txid 1 of the docs' module over ``cwd/.trident``, as its coordinator would.

    The declaration run also has a state ``seen`` that the module does not declare: the one
    `trident state drop` removes in the docs.
    """
    import trident_assets as ta

    namespace: dict[str, Any] = {"__name__": "my_pkg.defs"}
    exec(compile(_user_module(), "my_pkg/defs.py", "exec"), namespace)
    namespace["orders"].group_by("customer").persistent_aggregate(
        ta.StateSpec("seen"), "customer", ta.Count(), "seen"
    )
    resource = ta.TridentResource(home=str(cwd / ".trident"))
    with resource.store() as store:
        runner = ta.TopologyRunner(
            namespace["topo"], spark, store, resource.log(), replica=resource.replica()
        )
        assert runner.run_batch(1).tuples_in == {"orders": 5}


def test_documented_commands_work_over_a_user_modules_home(spark: Any, tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(VENV)
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_pkg" / "defs.py").write_text(_user_module())
    produce = MINE[:2]
    failures = _run_all(produce, tmp_path)
    assert failures == [], "\n\n".join(failures)
    _fill_with_the_user_module(tmp_path, spark)
    failures = _run_all(MINE[2:], tmp_path)
    assert failures == [], "\n\n".join(failures)


QUARANTINE_REFUSAL = """
import sys
from typer.testing import CliRunner
from trident_assets.cli import app
done = CliRunner().invoke(app, sys.argv[1:])
print(done.exit_code, done.stderr.strip())
print(sorted({m.split(".")[0] for m in sys.modules} & {"dagster", "pyspark"}))
"""


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["add", "word_count", "7", "--reason", "bad record"],
         "error: refusing to commit txid 7 to 'word_count': it has "
         "committed up to txid 5, so txid 6 must commit first (batches commit in strict txid "
         "order). Nothing was changed; run txid 6 (the coordinator sensor does this) and then "
         "retry txid 7."),
        (["add", "word_count", "5"], "error: txid 5 of topology 'word_count' has committed "
         "(last committed: 5); only the txid after it can be quarantined"),
        (["replay", "word_count"],
         "error: nothing waits in the quarantine of topology 'word_count'"),
        (["replay", "word_count", "--txid", "3"],
         "error: no txid 3 waits in the quarantine of topology 'word_count'"),
    ],
)  # fmt: skip
def test_quarantine_refusals_come_before_spark_and_dagster(
    demo_run: Any, tmp_path: Path, args: list[str], error: str
) -> None:
    """A refusal the stored state decides alone imports neither Spark nor Dagster."""
    assert demo_run.done.returncode == 0, demo_run.done.stderr
    home = tmp_path / "h"
    shutil.copytree(demo_run.home, home, symlinks=True)
    done = subprocess.run(
        [sys.executable, "-c", QUARANTINE_REFUSAL, "quarantine", *args, "--home", str(home)],
        cwd=tmp_path, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", **JVM_ENV},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"1 {error}\n[]\n"


def test_status_after_the_demo_names_the_killed_attempt(demo_run: Any) -> None:
    assert demo_run.done.returncode == 0, demo_run.done.stderr
    done = _sh("trident status --format json", demo_run.cwd)
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

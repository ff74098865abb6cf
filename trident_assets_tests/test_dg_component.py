"""The `dg` way, end to end: a topology as a component, as docs/dagster.md shows it.

In-process: ``TopologyComponent`` builds what ``trident_definitions`` builds, and refuses each
wrong attribute naming it. As a user runs it: the commands of docs/dagster.md's section, as
written, one child shell each in a clean environment (after ``source .venv/bin/activate``;
``cd`` and ``export`` lines carry over to the next commands), the files it shows written where
it says: ``create-dagster project``, ``dg scaffold defs`` (the defs.yaml it writes is the
documented one), ``dg check defs``, ``trident launch`` of txid 1 (the state's exact values in
the store afterwards), ``dg launch`` of the user's own asset over the state, then a broken
defs.yaml failing ``dg check defs`` with its message, and ``dg dev`` serving the assets.
"""

from __future__ import annotations

import json
import re
import runpy
import subprocess
import sys
import urllib.request
from pathlib import Path

import dagster as dg
import pytest
from dagster.components.core.component_tree import ComponentTree

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.cli.launch import next_partition
from trident_assets.dagster.component import TopologyComponent
from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.errors import ConfigError
from trident_assets.examples.topologies import word_count
from trident_assets_tests.children import clean_env
from trident_assets_tests.dagster_dev_helpers import (
    free_port,
    server_up,
    start_server,
    stop_ui,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "dagster.md"
SECTION = "## The `dg` way: a topology as a component"
EXAMPLE = "trident_assets.examples.topologies:word_count"


def _component_defs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **attrs: str
) -> dg.Definitions:
    monkeypatch.chdir(tmp_path)  # the test context's project root
    component = TopologyComponent(**{"topology": EXAMPLE, **attrs})
    return component.build_defs(ComponentTree.for_test().load_context)


def _summary(defs: dg.Definitions) -> tuple[set[str], set[str], set[str], set[str]]:
    graph = defs.resolve_asset_graph()
    return (
        {k.to_user_string() for k in graph.get_all_asset_keys()},
        {str(c) for c in graph.asset_check_keys},
        {s.name for s in defs.sensors or []},
        set(defs.resources or {}),
    )


def test_the_component_builds_what_trident_definitions_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    defs = _component_defs(tmp_path, monkeypatch, home="state_home")
    expected = trident_definitions([word_count], TridentResource(home=str(tmp_path)))
    assert _summary(defs) == _summary(expected)
    assert "word_count/word_counts" in _summary(defs)[0]
    trident = defs.resources["trident"]  # type: ignore[index]
    assert (trident.home, trident.state_database, trident.state_dsn) == (
        str(tmp_path / "state_home"),
        None,
        None,
    )
    assert defs.resolve_job_def("__ASSET_JOB") is not None


def test_two_topologies_of_one_home_share_the_resources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project with a component per topology loads: Dagster merges their definitions."""
    first = _component_defs(tmp_path, monkeypatch)
    second = _component_defs(
        tmp_path, monkeypatch, topology="trident_assets.examples.topologies:page_views"
    )
    merged = dg.Definitions.merge(first, second)
    assert [s.name for s in merged.sensors or []] == [
        "word_count_coordinator",
        "page_views_coordinator",
        "trident_finals_checks",
    ]
    assert set(merged.resources or {}) == {"trident", "pyspark", "trident_io_manager"}


@pytest.mark.parametrize(
    ("store", "database", "dsn"),
    [
        ("duckdb", None, None),
        ("states/shop.duckdb", "states/shop.duckdb", None),
        ("postgresql://me@db:5432/shop", None, "postgresql://me@db:5432/shop"),
    ],
)
def test_the_store_attribute(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    store: str,
    database: str | None,
    dsn: str | None,
) -> None:
    trident = _component_defs(tmp_path, monkeypatch, store=store).resources["trident"]  # type: ignore[index]
    assert trident.state_database == (str(tmp_path / database) if database else None)
    assert trident.state_dsn == dsn


def test_live_true_gives_the_live_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    defs = _component_defs(tmp_path, monkeypatch, live=True)  # type: ignore[arg-type]
    assert defs.resolve_job_def("word_count_live").name == "word_count_live"


@pytest.mark.parametrize(
    ("attrs", "error"),
    [
        (
            {"topology": "word_count"},
            "topology: 'word_count' is not module:attribute; write the module that declares "
            "the topology and its name, e.g. topology: my_project.topologies:shop",
        ),
        (
            {"topology": "no_such_pkg.topologies:shop"},
            "topology: no module 'no_such_pkg.topologies' (no module named 'no_such_pkg'); "
            "put it in the project's package (e.g. src/<project>/topologies.py, module "
            "<project>.topologies) or install it",
        ),
        (
            {"topology": "trident_assets.examples.topologies:word_counts"},
            "topology: module trident_assets.examples.topologies has no attribute "
            "'word_counts'; name the module-level TridentTopology declared there (e.g. "
            "word_counts = ta.TridentTopology('word_counts'))",
        ),
        (
            {"topology": "trident_assets.examples.topologies:topologies"},
            "topology: trident_assets.examples.topologies:topologies is a list, not a "
            "TridentTopology; name the module-level ta.TridentTopology(...) of "
            "trident_assets.examples.topologies",
        ),
        (
            {"store": "mysql://me@db/shop"},
            "store: 'mysql://me@db/shop' is not a state store; use 'duckdb' (the state in "
            "<home>/state.duckdb), a DuckDB file path ending in .duckdb, or a PostgreSQL DSN "
            "postgresql://user[:password]@host:port/database",
        ),
    ],
)
def test_a_wrong_attribute_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attrs: dict[str, str], error: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _component_defs(tmp_path, monkeypatch, **attrs)
    assert str(refused.value) == error


def test_trident_launch_adds_txid_keys_in_order() -> None:
    assert next_partition([], "shop", 1) is True
    assert next_partition(["0000000001"], "shop", 1) is False  # runs again
    assert next_partition(["0000000001"], "shop", 2) is True
    with pytest.raises(ConfigError) as refused:
        next_partition([], "shop", 2)
    assert str(refused.value) == (
        "txid 2 of shop: its last txid partition is 0; launch txid 1 first (txids are added "
        "and committed in order)"
    )


# ---- the documented flow, as a user runs it ----


def _documented_steps() -> list[tuple[str, str, str]]:
    """``(kind, path, text)`` of the section's blocks in order: ``("bash", "", line)`` per
    command line, ``("file", path, code)`` per block whose paragraph names the file
    (```` `path`: ````, or ``in `path`,`` for the defs.yaml dg writes)."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n{SECTION}\n")
    end = text.find("\n## ", start + 1)
    lines = text[start : end if end > 0 else len(text)].splitlines()
    steps: list[tuple[str, str, str]] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)$", lines[i])
        if not fence:
            prose.append(lines[i])
            i += 1
            continue
        body = []
        i += 1
        while lines[i] != "```":
            body.append(lines[i])
            i += 1
        i += 1
        paths = re.findall(r"`(src/[\w/]+\.(?:py|yaml))`", " ".join(prose))
        if fence.group(1) == "bash":
            steps += [("bash", "", line.split("  #")[0].strip()) for line in body]
        else:
            steps.append(("file", paths[-1], "\n".join(body) + "\n"))
        prose = []
    return steps


def test_the_documented_steps_are_found() -> None:
    steps = _documented_steps()
    assert [(k, p or t) for k, p, t in steps] == [
        ("bash", "create-dagster project my_project --no-uv-sync"),
        ("bash", "cd my_project"),
        ("bash", "export PYTHONPATH=$PWD/src"),
        ("bash", "export DAGSTER_HOME=$PWD/.trident/dagster"),
        ("bash", "dg scaffold defs trident_assets.TopologyComponent shop"),
        ("file", "src/my_project/defs/shop/defs.yaml"),
        ("file", "src/my_project/topologies.py"),
        ("file", "src/my_project/defs/top_customer.py"),
        ("bash", "dg check defs"),
        ("bash", "trident log create-topic orders --partitions 1"),
        ("bash", steps[10][2]),
        ("bash", "trident launch shop 1 --assets shop/spent"),
        ("bash", "dg launch --assets shop/top_customer --partition 0000000001"),
        ("bash", "trident state scan shop spent"),
        ("bash", "dg dev --port 3000"),
    ]
    assert steps[10][2].endswith("| trident log produce orders")


class Shell:
    """Commands as a user pastes them after ``source .venv/bin/activate``: each in a child
    shell with a clean environment, in the directory and with the exports of the lines so far."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.exports: list[str] = []
        # no version check against PyPI (create-dagster asks by default): the test is offline
        self.env = clean_env(cwd, DAGSTER_DG_UPDATE_CHECK_ENABLED="0", COLUMNS="200")

    def script(self, command: str) -> str:
        return "\n".join(["source .venv/bin/activate", f"cd {self.cwd}", *self.exports, command])

    def run(self, command: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        if command.startswith("cd "):
            self.cwd = self.cwd / command.removeprefix("cd ")
            return subprocess.CompletedProcess(command, 0, "", "")
        if command.startswith("export "):
            self.exports.append(command)
            return subprocess.CompletedProcess(command, 0, "", "")
        return subprocess.run(
            ["/bin/bash", "-c", self.script(command)],
            cwd=self.env["HOME"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def popen(self, command: str, out: Path) -> subprocess.Popen[bytes]:
        """``command`` left running (its own session, Ctrl-C reaches it), output in ``out``."""
        argv = ["/bin/bash", "-c", self.script(f"exec {command}")]
        return start_server(argv, Path(self.env["HOME"]), self.env, out)


def _ok(done: subprocess.CompletedProcess[str], *expected: str) -> str:
    text = done.stdout + done.stderr
    assert done.returncode == 0, f"$ {done.args}\nexit {done.returncode}\n{text[-4000:]}"
    for line in expected:
        assert line in text, f"{line!r} not in the output of {done.args}:\n{text[-4000:]}"
    return text


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_the_dg_way_as_documented(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(sys.prefix)
    shell = Shell(tmp_path)
    steps = _documented_steps()
    first_file = next(i for i, (kind, _, _) in enumerate(steps) if kind == "file")
    last_file = max(i for i, (kind, _, _) in enumerate(steps) if kind == "file")
    for _, _, line in steps[:first_file]:  # project, exports, scaffold
        _ok(shell.run(line))
    project = tmp_path / "my_project"
    assert shell.cwd == project

    # dg lists the component; what `dg scaffold defs` wrote is the documented defs.yaml
    listed = json.loads(shell.run("dg list components --json").stdout)
    assert "trident_assets.TopologyComponent" in [c["key"] for c in listed["items"]]
    _, yaml_path, yaml_text = steps[first_file]
    defs_yaml = project / yaml_path
    assert defs_yaml.read_text() == yaml_text
    for _, path, text in steps[first_file + 1 : last_file + 1]:
        (project / path).write_text(text)

    # the rest as documented: check, seed, launch txid 1, launch the own asset, scan
    outputs = {}
    rest = [line for _, _, line in steps[last_file + 1 :]]
    assert all(kind == "bash" for kind, _, _ in steps[last_file + 1 :])
    dev_command = rest.pop()
    assert dev_command.startswith("dg dev ")
    for line in rest:
        outputs[line] = _ok(shell.run(line))
    assert "All definitions loaded successfully." in outputs["dg check defs"]
    _ok_lines = outputs["trident launch shop 1 --assets shop/spent"]
    assert (
        f"added partition 0000000001 to shop_txids (DAGSTER_HOME={project}/.trident/dagster)"
        in _ok_lines
    )
    assert "txid 1 committed (spent: 2 keys; 0 dead letters)" in _ok_lines
    own = outputs["dg launch --assets shop/top_customer --partition 0000000001"]
    assert "top customer as of 0000000001: ann (8)" in own
    assert "SupersessionWarning" not in own  # what `dagster asset materialize` prints
    assert "shop.spent: 2 keys, last committed txid 1" in outputs["trident state scan shop spent"]

    # the state's exact values in the store; the runs recorded in DAGSTER_HOME's instance
    with DuckDBStore(project / ".trident" / "state.duckdb") as store:
        assert store.last_committed("shop") == 1
        rows = store.scan("shop__spent").to_pylist()
    assert sorted((r["customer"], r["value"]) for r in rows) == [("ann", 8), ("bob", 7)]
    with dg.DagsterInstance.from_config(str(project / ".trident" / "dagster")) as instance:
        for key in ("shop/spent", "shop/top_customer"):
            done = instance.get_materialized_partitions(dg.AssetKey.from_user_string(key))
            assert done == {"0000000001"}, key

    # what the docs say about refusals: a txid past the next one, a key that is not a txid's
    refused = shell.run("trident launch shop 3 --assets shop/spent")
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        "error: txid 3 of shop: its last txid partition is 1; launch txid 2 first"
    ), refused.stderr
    short = shell.run("dg launch --assets shop/spent --partition 1")
    assert short.returncode != 0
    assert (
        "All selected assets must have a PartitionsDefinition containing the passed partition "
        "key `1`" in short.stdout + short.stderr
    )

    # a wrong defs.yaml fails `dg check defs`, naming the attribute and the fix
    good = defs_yaml.read_text()
    for wrong, message in [
        (
            "  topology: my_project.topologies:shops\n",
            "ConfigError: topology: module my_project.topologies has no attribute 'shops'; "
            "name the module-level TridentTopology declared there",
        ),
        (
            "  topology: my_project.topology:shop\n",
            "ConfigError: topology: no module 'my_project.topology' (no module named "
            "'my_project.topology'); put it in the project's package",
        ),
        (
            "  store: mysql://me@db/shop\n",
            "ConfigError: store: 'mysql://me@db/shop' is not a state store",
        ),
        (
            "  topolgy: my_project.topologies:shop\n",
            "Additional properties are not allowed ('topolgy' was unexpected)",
        ),
    ]:
        field = wrong.split(":")[0].strip()
        field = "topology" if field == "topolgy" else field
        broken = re.sub(rf"^  {field}: .*\n", wrong, good, flags=re.M)
        defs_yaml.write_text(broken)
        failed = shell.run("dg check defs")
        assert failed.returncode != 0, broken
        assert message in failed.stdout + failed.stderr, (failed.stdout + failed.stderr)[-3000:]
    defs_yaml.write_text(good)

    # `dg dev` serves the component's assets and the user's (on a free port), stopped by PID
    port = free_port()
    log = tmp_path / "dg_dev.log"
    proc = shell.popen(dev_command.replace("--port 3000", f"--port {port}"), log)
    try:
        wait_for("dg dev", server_up(f"http://127.0.0.1:{port}"), 240, log)
        nodes = wait_for(
            "the code location",
            lambda: _graphql(port, "{ assetNodes { assetKey { path } } }")["data"]["assetNodes"],
            240,
            log,
        )
    finally:
        stop_ui(proc)  # Ctrl-C, as the user stops it; everything it started stops
    shop = runpy.run_path(str(project / "src" / "my_project" / "topologies.py"))["shop"]
    expected = trident_definitions([shop], TridentResource(home=str(tmp_path)))
    served = {"/".join(n["assetKey"]["path"]) for n in nodes}
    assert served == {*_summary(expected)[0], "shop/top_customer"}
    assert {"shop/orders_batch", "shop/spent", "shop/spent_partials"} < served

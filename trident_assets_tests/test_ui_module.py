"""`trident ui --module my_pkg.defs`: the UI loads a user's own topology as its code location.

A child process with a clean environment (no Spark Connect server: ``--local-spark``) in a
directory holding the user's package; the running webserver's GraphQL lists the user's
assets and not the built-in examples; stopping `trident ui` stops everything by PID.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from trident_assets.ui import stop_process_group
from trident_assets_tests.conftest import JVM_ENV
from trident_assets_tests.test_ui_warm_spark import _free_port, _gone, _wait

TRIDENT = Path(sys.executable).parent / "trident"

USER_DEFS = """\
import os

import trident_assets as ta

topo = ta.TridentTopology("my_clicks")
(topo.new_stream("clicks", ta.LogSpout("clicks", ta.StringScheme("line")))
    .each("line", ta.Split(), "word")
    .group_by("word")
    .persistent_aggregate(ta.StateSpec.opaque("word_totals"), "word", ta.Count(), "n"))
defs = ta.trident_definitions([topo], ta.TridentResource(home=os.environ["TRIDENT_HOME"]))
"""

QUERY = "{ assetNodes { assetKey { path } } }"


def _asset_keys(port: int) -> list[str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": QUERY}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        nodes = json.loads(response.read())["data"]["assetNodes"]
    return sorted("/".join(n["assetKey"]["path"]) for n in nodes)


def test_ui_module_loads_the_users_topology(tmp_path: Path) -> None:
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_pkg" / "defs.py").write_text(USER_DEFS)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    env.update(JVM_ENV)
    refused = subprocess.run(
        [str(TRIDENT), "ui", "--home", str(home), "--module", "nosuch_pkg.defs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"error: --module 'nosuch_pkg.defs': no such module importable from {tmp_path} "
        "(run `trident ui` in the directory that holds it, or install it)\n"
    )
    port = _free_port()
    out_path = tmp_path / "ui.log"
    with out_path.open("wb") as out:
        proc = subprocess.Popen(
            [str(TRIDENT), "ui", "--home", "home", "--port", str(port), "--local-spark",
             "--module", "my_pkg.defs"],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        keys = _wait(
            "the user's assets",
            lambda: [k for k in _asset_keys(port) if "word_totals" in k] and _asset_keys(port),
            300,
            out_path,
        )
        assert any(k.endswith("word_totals") for k in keys), keys
        assert not [k for k in keys if "word_counts" in k], keys  # the built-in is replaced
        workspace = (home / "dagster" / "workspace.yaml").read_text()
        assert "module_name: my_pkg.defs" in workspace
        assert f'working_directory: "{tmp_path.resolve()}"' in workspace
        logged = out_path.read_text()
        assert "SupersessionWarning" not in logged
        assert "will not be used" not in logged
        dev_pid = int(
            next(x for x in logged.splitlines() if x.startswith("dagster dev: pid ")).split()[-1]
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
        assert _gone(dev_pid, group=True)
    finally:
        stop_process_group(proc)  # type: ignore[arg-type]

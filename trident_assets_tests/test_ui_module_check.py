"""`trident ui --module M` with a module that fails on import: refused before anything starts.

A child process with a clean environment, in a directory holding the user's package whose
``defs`` raises on import: one ``error:`` line naming the module, the exception, where it
was raised and what to do; exit code 1; no Spark Connect server, no ``dagster dev`` (no
process of the home, its port free, no server log).
"""

from __future__ import annotations

import os
from pathlib import Path

from trident_assets.cli.ui import check_port
from trident_assets_tests.children import run_trident
from trident_assets_tests.dagster_dev_helpers import free_port

BAD_DEFS = """\
import os

raise RuntimeError("no STORE_URL configured")
"""


def _processes_naming(text: str) -> list[int]:
    """PIDs of this user's processes whose command line or environment contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            blob = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:  # another user's, or gone
            continue
        if text.encode() in blob:
            found.append(int(entry.name))
    return found


def test_ui_refuses_a_module_failing_on_import_before_starting_anything(tmp_path: Path) -> None:
    (tmp_path / "badpkg").mkdir()
    (tmp_path / "badpkg" / "__init__.py").write_text("")
    (tmp_path / "badpkg" / "defs.py").write_text(BAD_DEFS)
    home = tmp_path / "home"
    (home / "log").mkdir(parents=True)
    port = free_port()

    done = run_trident(
        tmp_path, "ui", "--home", "home", "--port", str(port), "--module", "badpkg.defs"
    )

    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "error: --module 'badpkg.defs' fails on import: RuntimeError: no STORE_URL configured "
        f"(at {tmp_path}/badpkg/defs.py:3); nothing was started: fix the module "
        "(`python -c 'import badpkg.defs'` shows the traceback), then run trident ui again\n"
    )
    assert not (home / "spark-connect.log").exists(), "no Spark Connect server was started"
    check_port(port)  # nothing listens on the port
    assert _processes_naming(str(home.resolve())) == [], "nothing of the home still runs"

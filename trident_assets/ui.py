"""The Dagster instance of a trident home: ``<home>/dagster`` with the shipped ``dagster.yaml``.

``trident ui`` (and ``make ui``) start ``dagster dev`` on 127.0.0.1 over a home: an absolute
``DAGSTER_HOME`` of ``<home>/dagster`` holding the repository's ``dagster.yaml`` (telemetry
and nux off, one run at a time per topology), ``TRIDENT_HOME`` set to the home, and the
shipped code location ``trident_assets.definitions``.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

__all__ = [
    "WORKSPACE_YAML",
    "dagster_home",
    "paste_command",
    "shipped_dagster_yaml",
    "ui_command",
    "ui_environment",
]

WORKSPACE_YAML = """\
# Written by trident_assets: the shipped code location (as the repository's workspace.yaml).
load_from:
  - python_module:
      module_name: trident_assets.definitions
      location_name: trident_assets
"""

_FALLBACK_YAML = """\
# Written by trident_assets (the repository's dagster.yaml was not found next to the package).
telemetry:
  enabled: false
nux:
  enabled: false
concurrency:
  runs:
    tag_concurrency_limits:
      - key: trident/topology
        value:
          applyLimitPerUniqueValue: true
        limit: 1
"""


def shipped_dagster_yaml() -> str:
    """The text of the repository's ``dagster.yaml`` (a minimal equivalent if not installed)."""
    shipped = Path(__file__).resolve().parents[1] / "dagster.yaml"
    return shipped.read_text(encoding="utf-8") if shipped.is_file() else _FALLBACK_YAML


def dagster_home(home: Path) -> Path:
    """Create ``<home>/dagster`` (absolute) with the shipped ``dagster.yaml`` if it has none.

    A ``workspace.yaml`` naming the shipped code location is written next to it, so
    ``dagster dev -w <home>/dagster/workspace.yaml`` works from any directory.
    """
    path = Path(home).resolve() / "dagster"
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    if not config.exists():
        config.write_text(shipped_dagster_yaml(), encoding="utf-8")
    (path / "workspace.yaml").write_text(WORKSPACE_YAML, encoding="utf-8")
    return path


def ui_environment(home: Path) -> dict[str, str]:
    """The environment of ``dagster dev`` over ``home``: absolute DAGSTER_HOME and TRIDENT_HOME."""
    return {
        **os.environ,
        "DAGSTER_HOME": str(dagster_home(home)),
        "TRIDENT_HOME": str(Path(home).resolve()),
    }


def ui_command(home: Path, port: int) -> list[str]:
    """``dagster dev`` on 127.0.0.1:``port`` with the shipped code location of ``home``."""
    dagster = Path(sys.executable).parent / "dagster"
    workspace = dagster_home(home) / "workspace.yaml"
    return [str(dagster), "dev", "--host", "127.0.0.1", "--port", str(port), "-w", str(workspace)]


def paste_command(home: Path, default_home: Path) -> str:
    """One command that opens the UI over ``home`` when pasted in this shell's directory."""
    if os.environ.get("MAKELEVEL") and Path(home).resolve() == default_home.resolve():
        return "make ui"
    trident = Path(sys.executable).parent / "trident"
    try:
        shown = str(trident.relative_to(Path.cwd()))
    except ValueError:
        shown = str(trident)
    args = [shown, "ui"]
    if Path(home).resolve() != default_home.resolve():
        args += ["--home", str(Path(home).resolve())]
    return shlex.join(args)

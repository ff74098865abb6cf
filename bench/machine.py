"""A description of the machine a benchmark ran on: CPU, cores, RAM, load, software versions."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["describe", "one_line"]

PACKAGES = ("pyspark", "dagster", "duckdb", "pyarrow", "numpy")


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _ram_gib() -> float:
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    return 0.0


def _java() -> str:
    try:
        proc = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    lines = (proc.stderr or proc.stdout).splitlines()
    return lines[0].strip() if lines else "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe() -> dict[str, Any]:
    """The machine and software, with the 1/5/15-minute load averages right now."""
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": _cpu_model(),
        "cores": cores,
        "usable_cores": usable,
        "ram_gib": _ram_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": _java(),
        **{package: _version(package) for package in PACKAGES},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def one_line(m: dict[str, Any]) -> str:
    """The description as one Markdown sentence."""
    return (
        f"{m['cpu']}, {m['cores']} cores ({m['usable_cores']} usable), {m['ram_gib']} GiB RAM, "
        f"{m['os']}; Python {m['python']}, {m['java']}, PySpark {m['pyspark']}, "
        f"Dagster {m['dagster']}, DuckDB {m['duckdb']}, pyarrow {m['pyarrow']}, "
        f"numpy {m['numpy']}. Load average at start {m['load_average']}."
    )


def run_json_child(cmd: list[str], out: Path, what: str, timeout_s: float) -> dict[str, Any]:
    """Run a benchmark child process from the repository root; return the JSON it wrote to ``out``.

    Raises:
        RuntimeError: the child failed (its exit code and the tail of its stderr).
    """
    proc = subprocess.run(
        cmd,
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        msg = f"{what} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
        raise RuntimeError(msg)
    return json.loads(out.read_text())

"""Getting trident_assets and the user's own modules to Spark's Python workers.

User functions (``PyFunction``, aggregators, query functions...) are pickled with the job.
A function of an installed module is pickled *by reference* (the worker imports it), one of
the user's own project *by value* (its code travels with the job), so a topology defined in
``my_topology.py`` next to the user's script runs on workers that have never seen that file:
local mode, a standalone cluster or Spark Connect alike.

trident_assets itself is imported by the code that runs on the workers. In local mode the
workers run this interpreter, which has it. With a master URL it is added to the job as a
zip (``addPyFile``, like ``spark.submit.pyFiles``); under Spark Connect as a Python
artifact (``addArtifacts(..., pyfile=True)``). What workers must have installed: Python of
the driver's minor version with ``pyarrow`` and ``pandas`` (``pip install pyarrow pandas``).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from trident_assets.spark.arrow_transfer import is_connect

__all__ = ["package_zip", "ship_package", "ship_user_modules", "topology_code", "user_modules"]

_PACKAGE = "trident_assets"
_shipped: set[int] = set()
"""Sessions (by id) that already have the package."""


def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"]}
    return tuple(os.path.realpath(r) for r in roots if r)


def _is_users(module: ModuleType) -> bool:
    """True for a module of the user's own project: not stdlib, not installed, not ours."""
    name = module.__name__
    if name == "__main__" or name == _PACKAGE or name.startswith(f"{_PACKAGE}."):
        return False  # __main__ is pickled by value already; ours is shipped as a package
    file = getattr(module, "__file__", None)
    if not file:
        return False  # built-in or namespace package
    real = os.path.realpath(file)
    parts = Path(real).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    return not real.startswith(_installed_roots())


def _code_of(obj: Any) -> Iterable[Any]:
    """``obj`` and the callables it holds (e.g. the ``fn`` of a ``PyFunction``)."""
    yield obj
    for value in getattr(obj, "__dict__", {}).values():
        if callable(value):
            yield value


def user_modules(objects: Iterable[Any]) -> list[ModuleType]:
    """The top-level packages of the user's own modules that define ``objects``' code."""
    found: dict[str, ModuleType] = {}
    for obj in objects:
        for code in _code_of(obj):
            name = getattr(code, "__module__", None) or type(code).__module__
            module = sys.modules.get(name)
            if module is None or not _is_users(module):
                continue
            top = name.split(".")[0]
            found[top] = sys.modules.get(top, module)
    return list(found.values())


def topology_code(nodes: Iterable[Any]) -> list[Any]:
    """Every object the ``nodes`` hold in their arguments (functions, aggregators, ...)."""
    return [value for node in nodes for value in node.args.values()]


def ship_user_modules(objects: Iterable[Any]) -> list[str]:
    """Make the user's own modules travel by value with every job; return their names."""
    from pyspark import cloudpickle

    names = []
    for module in user_modules(objects):
        cloudpickle.register_pickle_by_value(module)
        names.append(module.__name__)
    return names


def package_zip(directory: Path | None = None) -> Path:
    """A zip of the trident_assets package (sources only), built once per process."""
    root = Path(__file__).resolve().parents[1]
    target = (directory or Path(tempfile.gettempdir())) / f"trident_assets-{os.getpid()}.zip"
    if target.exists():
        return target
    partial = target.with_suffix(".part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".typed") and "__pycache__" not in path.parts:
                archive.write(path, Path(_PACKAGE) / path.relative_to(root))
    partial.replace(target)
    return target


def ship_package(spark: Any) -> str:
    """Give the session's workers trident_assets; return how (``local``, ``pyfile``, ``artifact``).

    Local masters need nothing (the workers run this interpreter). Idempotent per session.
    """
    if id(spark) in _shipped:
        return "shipped"
    if is_connect(spark):
        spark.addArtifacts(str(package_zip()), pyfile=True)
        how = "artifact"
    elif spark.sparkContext.master.startswith("local"):
        how = "local"
    else:
        spark.sparkContext.addPyFile(str(package_zip()))
        how = "pyfile"
    _shipped.add(id(spark))
    return how

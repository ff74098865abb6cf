"""The package's frames of a captured stack, for the tests that assert a txid's commit path."""

from __future__ import annotations

import traceback
from pathlib import Path

import trident_assets

__all__ = ["package_frames"]


def package_frames(stack: traceback.StackSummary) -> list[tuple[str, str]]:
    """``(path from the repository root, function name)`` of each frame in ``trident_assets``."""
    package = Path(trident_assets.__file__).parent
    return [
        (Path(f.filename).relative_to(package.parent).as_posix(), f.name)
        for f in stack
        if Path(f.filename).is_relative_to(package)
    ]

"""The package's frames of a captured stack, for the tests that assert a txid's commit path."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from pathlib import Path

import trident_assets

__all__ = ["ONE_COMMIT", "one_commit_frames", "package_frames"]

ONE_COMMIT = [
    ("trident_assets/runtime/commit.py", "commit"),
    ("trident_assets/core/commit.py", "commit_batch"),
]
"""The frames named commit* on a state's apply: the runtime's one commit, then the core's."""


def package_frames(stack: Sequence[traceback.FrameSummary]) -> list[tuple[str, str]]:
    """``(path from the repository root, function name)`` of each frame in ``trident_assets``."""
    package = Path(trident_assets.__file__).parent
    return [
        (Path(f.filename).relative_to(package.parent).as_posix(), f.name)
        for f in stack
        if Path(f.filename).is_relative_to(package)
    ]


def one_commit_frames(
    seen: list[tuple[list[traceback.FrameSummary], bool]],
) -> list[tuple[str, str]]:
    """The package frames of the one captured apply; asserts it ran inside the store's
    transaction and that its frames named commit* are exactly :data:`ONE_COMMIT`."""
    ((stack, in_transaction),) = seen  # one state, applied once
    assert in_transaction
    frames = package_frames(stack)
    assert [f for f in frames if "commit" in f[1].lower()] == ONE_COMMIT
    return frames

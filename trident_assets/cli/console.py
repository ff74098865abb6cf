"""Keeping a command's own output readable: engine logs (Spark's JVM, Dagster) go to a file."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

__all__ = ["engine_logs_to"]


@contextmanager
def engine_logs_to(log_path: Path, verbose: bool) -> Iterator[IO[str]]:
    """Yield the stream the story is printed to.

    Unless ``verbose``, everything else written to stdout or stderr meanwhile (Dagster's logs,
    warnings, the Spark JVM's log4j lines, child processes) goes to ``log_path``.
    """
    if verbose:
        yield sys.stdout
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    story = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    with open(log_path, "ab", buffering=0) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield story
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            story.close()

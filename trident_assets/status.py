"""A topology's last failure, kept beside its state for ``trident status``.

A failed batch run writes ``<home>/status/<topology>.json`` (the txid, the error, when, the
run); the file stays until a later failure replaces it, so ``trident status`` can say whether
the topology has moved past it (its last committed txid is at least the failed one).
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trident_assets.names import validate_identifier

__all__ = ["last_failure", "record_failure"]


def _path(home: str | Path, topology: str) -> Path:
    return Path(home) / "status" / f"{validate_identifier(topology, 'topology')}.json"


def record_failure(home: str | Path, topology: str, txid: int, error: str, run: str) -> None:
    """Record that ``txid`` of ``topology`` failed with ``error`` in ``run`` (atomically)."""
    path = _path(home, topology)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "txid": txid,
        "error": error,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "run": run,
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".status-")
    with os.fdopen(fd, "w") as out:
        json.dump(record, out)
    os.replace(tmp, path)


def last_failure(home: str | Path, topology: str) -> dict[str, Any] | None:
    """The last recorded failure of ``topology`` (None: none, or the file is unreadable)."""
    try:
        return json.loads(_path(home, topology).read_text())
    except (OSError, ValueError):
        return None

"""Spark session settings for the duration of a job, safe for overlapping scopes.

Used for settings that change how a job is split or evaluated, never its result:
:func:`~trident_assets.spark.log_reader.split_conf` (a task per segment file) and
:func:`~trident_assets.spark.codegen_conf.codegen_conf` (small batches interpreted).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

__all__ = ["read_conf", "scoped_conf"]

_SCOPES_LOCK = threading.Lock()
_SCOPES: dict[tuple[int, str], list[Any]] = {}
"""Per (session, key) with open scopes: ``[the value before the first one, scopes open]``."""


def read_conf(spark: Any, key: str) -> str | None:
    """The session's value of ``key``, stripped; None if unset or unreadable.

    A remote (Spark Connect) session may refuse to read a key it does not know: that reads
    as unset, so the caller's default applies.
    """
    try:
        value = spark.conf.get(key, None)
    except Exception:  # a remote session may refuse to read an unknown key
        return None
    return None if value is None else str(value).strip()


@contextmanager
def scoped_conf(spark: Any, conf: dict[str, str]) -> Iterator[None]:
    """Set session ``conf`` for the duration of a job, restoring each key's value afterwards.

    For settings that change how a job is split or evaluated, never its result; a session
    that refuses a setting (a remote one may) runs with its own. Scopes may overlap (runners
    in several threads of one session): while they do, the latest setting holds, and the
    value from before the first one is restored when the last one closes, never a value
    another scope set.
    """
    entered: list[str] = []
    try:
        with _SCOPES_LOCK:
            for key, value in conf.items():
                slot = _SCOPES.get((id(spark), key))
                before = slot[0] if slot else spark.conf.get(key, None)
                spark.conf.set(key, value)
                if slot is None:
                    slot = _SCOPES[(id(spark), key)] = [before, 0]
                slot[1] += 1
                entered.append(key)
    except Exception:  # only how the job runs: it runs either way
        pass
    try:
        yield
    finally:
        with _SCOPES_LOCK:
            for key in entered:
                slot = _SCOPES[(id(spark), key)]
                slot[1] -= 1
                if slot[1]:
                    continue
                del _SCOPES[(id(spark), key)]
                with suppress(Exception):
                    if slot[0] is None:
                        spark.conf.unset(key)
                    else:
                        spark.conf.set(key, slot[0])

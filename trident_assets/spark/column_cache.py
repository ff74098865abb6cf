"""Spark column expressions built once and reused by every batch.

Each PySpark ``Column`` call costs several JVM round trips on a classic (py4j) session, a
few more for recording its call site. The expressions a scheme or a windowed state applies
do not change from one txid to the next, so they are built once per owner and reused: a
``Column`` is an unresolved expression (fields by name), valid in any DataFrame of the same
JVM. An entry is rebuilt when the JVM (or the kind of session) changes, or when its key
(what the expressions were built from) does; one entry is kept per owner and slot, and an
owner's entries go when the owner does.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

__all__ = ["reuse"]

T = TypeVar("T")

_CACHE: weakref.WeakKeyDictionary[Any, dict[str, tuple[Any, Hashable, Any]]] = (
    weakref.WeakKeyDictionary()
)
_LOCK = threading.Lock()


def _token(df: Any) -> Any:
    """What the columns of ``df`` belong to: the classic JVM, or the Spark Connect client."""
    if type(df).__module__.startswith("pyspark.sql.connect"):
        return type(df)
    from pyspark import SparkContext

    return SparkContext._jvm  # the gateway's JVM view: one per launched JVM


def reuse(owner: Any, slot: str, key: Hashable, df: Any, build: Callable[[], T]) -> T:
    """``build()``'s expressions for ``owner``'s ``slot``, built once per ``key`` and JVM.

    ``df`` is a DataFrame the expressions will be applied to (it names the JVM). An owner
    that cannot be weakly referenced or hashed gets ``build()`` every time.
    """
    token = _token(df)
    try:
        with _LOCK:
            entry = _CACHE.get(owner, {}).get(slot)
    except TypeError:
        return build()
    if entry is not None and entry[0] is token and entry[1] == key:
        return entry[2]
    value = build()
    with _LOCK:
        _CACHE.setdefault(owner, {})[slot] = (token, key, value)
    return value

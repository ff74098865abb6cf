"""The metrics an ``Observation`` received, or None when Spark dropped the observed node."""

from __future__ import annotations

from typing import Any

__all__ = ["observed_metrics"]


def observed_metrics(observation: Any) -> dict[str, Any] | None:
    """The metrics an ``Observation`` received from its first action, or None if it got none.

    Spark's adaptive execution replaces a stage whose input turned out empty with an empty
    relation, the observed node with it: a batch whose records all failed to decode leaves
    the good tuples' plan empty, and its observation without metrics (Spark raises an
    ``AssertionError`` from ``Observation.get``). None then: the caller counts another way.
    Call it after the action that the observation rides on.
    """
    from pyspark.errors import PySparkAssertionError

    jo = getattr(observation, "_jo", None)  # classic PySpark: the JVM's Observation
    if jo is not None:
        return None if jo.getRow().length() == 0 else observation.get
    try:  # Spark Connect: an observation the server never reported has no result
        return observation.get
    except PySparkAssertionError as exc:
        if exc.getCondition() == "NO_OBSERVE_BEFORE_GET":
            return None
        raise

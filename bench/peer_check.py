"""The exactness check of the optional peers' word counts (PyFlink, Pathway)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["CountsDiffer", "check_counts"]


class CountsDiffer(RuntimeError):
    """A peer's final counts differ from the corpus's ground truth."""


def check_counts(truth: pa.Table, counts: pa.Table, system: str) -> dict[str, Any]:
    """Compare ``(word, count)`` tables exactly; the comparison, or raise.

    Raises:
        CountsDiffer: a word is missing, counted differently, or unexpected.
    """
    from bench.run_all import verify

    result = verify(truth, counts)
    if not result["identical"]:
        raise CountsDiffer(
            f"{system}: final counts differ from the ground truth: "
            f"{result['missing_or_different']} truth rows missing or different, "
            f"{result['unexpected']} unexpected rows ({result['keys']} keys, "
            f"{result['truth_keys']} in the truth); the benchmark figures are void"
        )
    return result

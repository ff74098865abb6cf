"""A user's word count whose split fails on one word: the poison batch of the quarantine tests.

``topology`` is the code as deployed: it fails on the word in ``POISON_WORD`` (unset: fixed).
"""

from __future__ import annotations

import os

from trident_assets import Count
from trident_assets.spark.schemes import StringScheme
from trident_assets.spouts.config import SpoutConfig, SpoutKind
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.graph import StateSpec
from trident_assets.stream.operations import PyFunction
from trident_assets.stream.topology import TridentTopology


def build(poison: str | None, kind: SpoutKind = SpoutKind.TRANSACTIONAL) -> TridentTopology:
    """Word count (2 sentences per batch) whose split fails on ``poison`` (None: fixed)."""

    def split(sentence: str) -> list[tuple[str]]:
        words = sentence.split()
        if poison is not None and poison in words:
            raise ValueError(f"cannot handle {poison!r}")
        return [(w,) for w in words]

    topo = TridentTopology("poisoned")
    spout = LogSpout(
        "sentences", StringScheme("sentence"), SpoutConfig(kind=kind, max_batch_size=2)
    )
    topo.new_stream("sentences", spout).each(
        "sentence", PyFunction(split, {"word": "string"}), "word"
    ).group_by("word").persistent_aggregate(StateSpec.opaque("counts"), "word", Count(), "count")
    return topo


topology = build(os.environ.get("POISON_WORD"))

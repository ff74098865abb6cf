"""A deterministic synthetic corpus for the word-count benchmarks, and its ground truth.

Batch ``i`` holds ``sentences`` sentences of ``words_per_sentence`` words. Word ids are drawn
from a Zipf-like law over ``vocab`` ranks (``P(rank r) ~ r^-s``, ``s = zipf_s``) by inverse-CDF
sampling with ``numpy.random.default_rng([seed, i])``, so every batch is reproducible on its own
and independent of the others. Word ``r`` is written ``"w<r>"``.

The same batch is written twice:

* to the embedded log (topic ``sentences``, ``partitions`` partitions): the batch is cut into
  contiguous slices, one ``PartitionedLog.append`` (one segment) per partition. A word-count
  spout with ``max_batch_size = sentences`` then reads exactly corpus batch ``i`` as txid
  ``i + 1`` (the spout's fair split gives every partition the same share, leftovers to the
  lowest partitions, as ``numpy.array_split`` does);
* as one Parquet file per batch (column ``value``: the sentence) for Spark Structured
  Streaming's file source (one file per trigger) and the DuckDB baseline.

The ground truth is ``numpy.bincount`` of the word ids, accumulated per batch (no Python loop
over words) and returned as an Arrow table ``(word, count)``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from trident_assets.log.store import PartitionedLog

__all__ = [
    "TOPIC",
    "CorpusSpec",
    "WrittenCorpus",
    "ground_truth",
    "sentences",
    "write_corpus",
    "zipf_cdf",
]

TOPIC = "sentences"
QUERY_TOPIC = "word_queries"
_FILE_TS_MS = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class CorpusSpec:
    """What to generate. The defaults are the issue's default corpus."""

    batches: int = 20
    sentences: int = 500_000
    vocab: int = 100_000
    words_per_sentence: int = 8
    zipf_s: float = 1.0
    seed: int = 7
    partitions: int = 2

    def __post_init__(self) -> None:
        for name in ("batches", "sentences", "vocab", "words_per_sentence", "partitions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.zipf_s <= 0:
            raise ValueError(f"zipf_s must be > 0, got {self.zipf_s}")

    @property
    def words_per_batch(self) -> int:
        """Words in one batch."""
        return self.sentences * self.words_per_sentence

    @property
    def total_words(self) -> int:
        """Words in the whole corpus."""
        return self.batches * self.words_per_batch

    def as_dict(self) -> dict[str, Any]:
        """The spec as JSON-friendly values (with the derived totals)."""
        return {**asdict(self), "total_words": self.total_words}


def zipf_cdf(spec: CorpusSpec) -> np.ndarray:
    """The cumulative Zipf distribution over ``spec.vocab`` words (exponent ``zipf_s``)."""
    weights = np.arange(1, spec.vocab + 1, dtype=np.float64) ** -spec.zipf_s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return cdf


def word_ids(spec: CorpusSpec, batch: int, cdf: np.ndarray | None = None) -> np.ndarray:
    """The word ids of ``batch`` as a ``(sentences, words_per_sentence)`` int64 matrix."""
    if not 0 <= batch < spec.batches:
        raise ValueError(f"batch {batch} outside 0..{spec.batches - 1}")
    cdf = zipf_cdf(spec) if cdf is None else cdf
    rng = np.random.default_rng([spec.seed, batch])
    u = rng.random(spec.words_per_batch)
    ids = np.searchsorted(cdf, u, side="right")
    np.minimum(ids, spec.vocab - 1, out=ids)  # guards u rounding up to cdf[-1]
    return ids.astype(np.int64).reshape(spec.sentences, spec.words_per_sentence)


def sentences(ids: np.ndarray) -> pa.Array:
    """Sentences ``"w<id> w<id> ..."`` of a word-id matrix, built column-wise in Arrow."""
    words = [
        pc.binary_join_element_wise("w", pa.array(ids[:, j]).cast(pa.string()), "")
        for j in range(ids.shape[1])
    ]
    return pc.binary_join_element_wise(*words, " ")


@dataclass(frozen=True, slots=True)
class WrittenCorpus:
    """Where a corpus was written and what it holds."""

    spec: CorpusSpec
    log_root: Path
    files_dir: Path
    files: tuple[Path, ...]
    truth: pa.Table
    seconds: float

    @property
    def distinct_words(self) -> int:
        """Distinct words in the whole corpus."""
        return self.truth.num_rows


def _batches(spec: CorpusSpec) -> Iterator[tuple[int, np.ndarray]]:
    cdf = zipf_cdf(spec)
    for i in range(spec.batches):
        yield i, word_ids(spec, i, cdf)


def truth_table(counts: np.ndarray) -> pa.Table:
    """``(word, count)`` of every id with a non-zero count."""
    present = np.flatnonzero(counts)
    words = pc.binary_join_element_wise("w", pa.array(present).cast(pa.string()), "")
    return pa.table({"word": words, "count": pa.array(counts[present], pa.int64())})


def ground_truth(spec: CorpusSpec) -> pa.Table:
    """The exact word counts of the corpus (regenerated; nothing written)."""
    counts = np.zeros(spec.vocab, dtype=np.int64)
    for _, ids in _batches(spec):
        counts += np.bincount(ids.ravel(), minlength=spec.vocab)
    return truth_table(counts)


def write_corpus(
    spec: CorpusSpec,
    root: Path,
    *,
    log_files: bool = True,
    parquet_files: bool = True,
    query_topic: bool = True,
) -> WrittenCorpus:
    """Generate the corpus under ``root`` (``root/log`` and ``root/files``) with its truth.

    The log topic must not exist yet. ``query_topic`` also creates the (empty) topic that the
    example word-count topology's query stream reads.
    """
    start = time.perf_counter()
    log_root = root / "log"
    files_dir = root / "files"
    log = PartitionedLog(log_root)
    if log_files:
        log.create_topic(TOPIC, spec.partitions)
        if query_topic:
            log.create_topic(QUERY_TOPIC, 1)
    files_dir.mkdir(parents=True, exist_ok=True)
    counts = np.zeros(spec.vocab, dtype=np.int64)
    files: list[Path] = []
    ts = pa.array(np.full(spec.sentences, _FILE_TS_MS, dtype=np.int64))
    mtime0 = int(time.time()) - spec.batches - 1
    for i, ids in _batches(spec):
        counts += np.bincount(ids.ravel(), minlength=spec.vocab)
        text = sentences(ids)
        if log_files:
            bounds = np.cumsum(
                [len(a) for a in np.array_split(np.arange(spec.sentences), spec.partitions)]
            )
            first = 0
            for p, end in enumerate(bounds):
                part = pa.table(
                    {
                        "value": text.slice(first, end - first),
                        "timestamp_ms": ts.slice(first, end - first),
                    }
                )
                log.append(TOPIC, p, part)
                first = int(end)
        if parquet_files:
            path = files_dir / f"batch-{i:05d}.parquet"
            tmp = files_dir / f".batch-{i:05d}.tmp"
            pq.write_table(pa.table({"value": text}), tmp, compression="zstd")
            os.replace(tmp, path)
            # distinct, increasing modification times: the file source orders by them
            os.utime(path, (mtime0 + i, mtime0 + i))
            files.append(path)
    return WrittenCorpus(
        spec, log_root, files_dir, tuple(files), truth_table(counts), time.perf_counter() - start
    )

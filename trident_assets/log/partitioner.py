"""Kafka-compatible partitioning: murmur2 of the key bytes, ``toPositive(h) % n``.

This is the algorithm of Kafka's default partitioner for keyed records
(``org.apache.kafka.common.utils.Utils.murmur2`` with seed ``0x9747b28c``, then
``Utils.toPositive(h) % numPartitions``), so a key lands on the same partition number here
as it would in a Kafka topic with the same number of partitions. Records without a key are
spread round robin by the producer (Kafka >= 2.4 uses "sticky" batches instead; for an
embedded log the per-record round robin spreads more evenly and is deterministic).

One implementation, :func:`murmur2_many` (the Java's steps vectorised with NumPy over an Arrow
binary buffer), serves every key: :func:`murmur2` and :func:`kafka_partition` are its one-key
forms. Tests check it against vectors computed with the Java code.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = ["kafka_partition", "kafka_partitions", "murmur2", "murmur2_many", "to_positive"]

_SEED = 0x9747B28C
_M = 0x5BD1E995


def murmur2(data: bytes) -> int:
    """Return Kafka's 32-bit murmur2 hash of ``data`` as a signed int (as Java returns it).

    E.g. ``murmur2(b"21") == -973932308``; the one-key form of :func:`murmur2_many`.
    """
    return int(murmur2_many([data])[0])


def to_positive(number: int) -> int:
    """Return Kafka's ``Utils.toPositive``: ``number & 0x7fffffff`` (not ``abs``)."""
    return number & 0x7FFFFFFF


def kafka_partition(key: bytes, partitions: int) -> int:
    """``to_positive(murmur2(key)) % partitions``: Kafka's default partitioner's choice.

    ``key`` is not null (an empty key is a key, not a null key); ``partitions`` >= 1.
    """
    return to_positive(murmur2(key)) % partitions


def murmur2_many(keys: Sequence[bytes] | pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Return Kafka's murmur2 of every key, vectorised; equal to ``[murmur2(k) for k in keys]``.

    The keys are packed into one Arrow buffer and hashed four bytes at a time across all keys
    at once (keys sorted by length so each step touches only keys that still have blocks).

    ``keys``: non-null key bytes (``bytes`` or an Arrow binary array); returns the signed
    hashes as a NumPy ``int32`` array, in their order.

    Raises:
        ValueError: If a key is null.
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks else pa.array([], pa.large_binary())
    arr = keys if isinstance(keys, pa.Array) else pa.array(keys, pa.large_binary())
    if arr.null_count:
        msg = "murmur2_many: null keys have no hash (null keys are partitioned round robin)"
        raise ValueError(msg)
    if not pa.types.is_large_binary(arr.type):
        arr = arr.cast(pa.large_binary())
    n = len(arr)
    if n == 0:
        return np.empty(0, dtype=np.int32)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(1, np.uint8)
    )
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    m = np.uint32(_M)

    blocks = lengths // 4
    order = np.argsort(-blocks, kind="stable")
    s_sorted = starts[order]
    neg_blocks = -blocks[order]  # ascending
    h_sorted = (np.uint32(_SEED) ^ lengths[order].astype(np.uint32)).astype(np.uint32)
    max_blocks = int(-neg_blocks[0])
    for i in range(max_blocks):
        active = int(np.searchsorted(neg_blocks, -i, side="left"))  # keys with > i blocks
        idx = s_sorted[:active] + 4 * i
        k = (
            data[idx].astype(np.uint32)
            | (data[idx + 1].astype(np.uint32) << np.uint32(8))
            | (data[idx + 2].astype(np.uint32) << np.uint32(16))
            | (data[idx + 3].astype(np.uint32) << np.uint32(24))
        )
        k *= m
        k ^= k >> np.uint32(24)
        k *= m
        view = h_sorted[:active]
        view *= m
        view ^= k

    h = np.empty(n, dtype=np.uint32)
    h[order] = h_sorted
    rem = lengths % 4
    tail = starts + (lengths - rem)
    sel = np.nonzero(rem == 3)[0]
    h[sel] ^= data[tail[sel] + 2].astype(np.uint32) << np.uint32(16)
    sel = np.nonzero(rem >= 2)[0]
    h[sel] ^= data[tail[sel] + 1].astype(np.uint32) << np.uint32(8)
    sel = np.nonzero(rem >= 1)[0]
    h[sel] ^= data[tail[sel]].astype(np.uint32)
    h[sel] *= m
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)
    return h.view(np.int32)


def kafka_partitions(
    keys: Sequence[bytes] | pa.Array | pa.ChunkedArray, partitions: int
) -> np.ndarray:
    """:func:`kafka_partition` of every non-null key, vectorised (a NumPy ``int64`` array)."""
    hashes = murmur2_many(keys).view(np.uint32) & np.uint32(0x7FFFFFFF)
    return hashes.astype(np.int64) % partitions

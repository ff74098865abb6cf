"""Txid partition keys: zero-padded so string, numeric and creation order agree in the UI."""

from __future__ import annotations

import dagster as dg

from trident_assets.errors import ConfigError

__all__ = ["parse_txid", "range_tags", "txid_key", "txid_partitions"]


KEY_DIGITS = 10
"""Digits of a txid partition key."""


def txid_key(txid: int) -> str:
    """The partition key of ``txid`` (``%010d``)."""
    return f"{txid:010d}"


def parse_txid(key: str) -> int:
    """The txid of a partition key (``%010d``).

    Raises:
        ConfigError: the key is not a positive integer of exactly 10 digits (a key typed as
            ``"12"`` would sort between ``"1"`` and ``"2"`` and never match txid 12's key).
    """
    if not isinstance(key, str):
        msg = f"partition key {key!r} is not a txid key: keys are strings of {KEY_DIGITS} digits"
        raise ConfigError(msg)
    digits = key.isascii() and key.isdigit()
    if len(key) != KEY_DIGITS or not digits or int(key) < 1:
        example = txid_key(int(key)) if digits and int(key) > 0 else txid_key(1)
        msg = (
            f"partition key {key!r} is not a txid key: txid keys are {KEY_DIGITS} digits, "
            f"zero-padded (e.g. {example!r}); use the partition the coordinator created"
        )
        raise ConfigError(msg)
    return int(key)


def range_tags(first: int, last: int) -> dict[str, str]:
    """Run tags that make one run process txids ``first..last`` (a partition key range)."""
    return {
        "dagster/asset_partition_range_start": txid_key(first),
        "dagster/asset_partition_range_end": txid_key(last),
    }


def txid_partitions(topology: str) -> dg.DynamicPartitionsDefinition:
    """The dynamic partitions (txids) of one topology."""
    return dg.DynamicPartitionsDefinition(name=f"{topology}_txids")

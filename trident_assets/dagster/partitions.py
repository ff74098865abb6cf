"""Txid partition keys: zero-padded so string, numeric and creation order agree in the UI."""

from __future__ import annotations

import dagster as dg

from trident_assets.errors import ConfigError

__all__ = ["parse_txid", "txid_key", "txid_partitions"]


def txid_key(txid: int) -> str:
    """The partition key of ``txid`` (``%010d``)."""
    return f"{txid:010d}"


def parse_txid(key: str) -> int:
    """The txid of a partition key.

    Raises:
        ConfigError: the key is not a positive integer.
    """
    if not key.isdigit() or int(key) < 1:
        msg = f"partition key {key!r} is not a txid (expected digits, e.g. {txid_key(1)!r})"
        raise ConfigError(msg)
    return int(key)


def txid_partitions(topology: str) -> dg.DynamicPartitionsDefinition:
    """The dynamic partitions (txids) of one topology."""
    return dg.DynamicPartitionsDefinition(name=f"{topology}_txids")

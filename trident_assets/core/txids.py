"""Validation of txid arguments (pure: no Dagster, Spark or DuckDB)."""

from __future__ import annotations

from trident_assets.errors import ConfigError

__all__ = ["validate_txid"]


def validate_txid(value: object, name: str = "txid") -> int:
    """Return ``value`` if it is an integer >= 1 (``bool`` is refused).

    Raises:
        ConfigError: ``value`` is not an int >= 1; the message names ``name`` and the rule.
    """
    if type(value) is not int or value < 1:
        msg = f"{name} must be an integer >= 1 (not a bool, float or string), got {value!r}"
        raise ConfigError(msg)
    return value

"""Schemes: turn raw log records (bytes) into tuples, sending records that fail to dead letters.

Every scheme returns ``(good, dead)``: ``good`` has the scheme's fields; ``dead`` has
``topic, partition, offset, reason, value`` for each record that could not be decoded.
Nothing is dropped silently. All decoding runs as Spark column expressions.
"""

from __future__ import annotations

from typing import Any

from trident_assets.spark.json_scheme import JsonScheme
from trident_assets.spark.scheme_base import (
    Scheme,
    utf8,
)
from trident_assets.stream.sql_types import SPARK_TYPES

__all__ = [
    "SPARK_TYPES",
    "JsonScheme",
    "KeyValueScheme",
    "RawScheme",
    "Scheme",
    "StringScheme",
]


class RawScheme(Scheme):
    """The value bytes as one binary field.

    Accepts every record; only a null value (which the log never stores) is a dead letter,
    ``value is null``.
    """

    def __init__(self, field: str = "bytes", *, with_metadata: bool = False) -> None:
        """Emit the raw value as ``field``."""
        super().__init__((field,), with_metadata)
        self.field = field

    def columns(self) -> tuple[dict[str, Any], Any]:
        """The value, unchanged; only a null value fails."""
        from pyspark.sql import functions as F

        err = F.when(F.col("value").isNull(), F.lit("value is null"))
        return {self.field: F.col("value")}, err


class StringScheme(Scheme):
    """The value as one UTF-8 string field (Storm's StringScheme, default field ``str``).

    Accepts any value that is valid UTF-8, the empty value included, unchanged (no trimming,
    no normalisation). Dead letters: ``value is null``, ``value is not valid UTF-8``.
    """

    def __init__(self, field: str = "str", *, with_metadata: bool = False) -> None:
        """Emit the decoded value as ``field``."""
        super().__init__((field,), with_metadata)
        self.field = field

    def columns(self) -> tuple[dict[str, Any], Any]:
        """Decode UTF-8; invalid bytes go to dead letters."""
        text, bad = utf8("value")
        return {self.field: text}, bad


class KeyValueScheme(Scheme):
    """Key and value as two UTF-8 string fields (a null key stays null).

    Accepts a record whose value is valid UTF-8 and whose key is null or valid UTF-8. Dead
    letters: ``value is null``, ``value is not valid UTF-8``, ``key is not valid UTF-8``.
    """

    def __init__(
        self, key_field: str = "key", value_field: str = "value", *, with_metadata: bool = False
    ) -> None:
        """Emit ``key_field`` and ``value_field``."""
        super().__init__((key_field, value_field), with_metadata)
        self.key_field = key_field
        self.value_field = value_field

    def columns(self) -> tuple[dict[str, Any], Any]:
        """Decode both; a key that is not valid UTF-8, or a bad value, fails the record."""
        from pyspark.sql import functions as F

        value, value_bad = utf8("value")
        key = F.col("key").cast("string")
        key_bad = F.when(
            F.col("key").isNotNull() & (F.encode(key, "UTF-8") != F.col("key")),
            F.lit("key is not valid UTF-8"),
        )
        return {self.key_field: key, self.value_field: value}, F.coalesce(value_bad, key_bad)

"""Schemes: turn raw log records (bytes) into tuples, sending records that fail to dead letters.

Every scheme returns ``(good, dead)``: ``good`` has the scheme's fields; ``dead`` has
``topic, partition, offset, reason, value`` for each record that could not be decoded.
Nothing is dropped silently. All decoding runs as Spark column expressions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from trident_assets.errors import ConfigError
from trident_assets.stream.fields import as_fields

__all__ = [
    "META_FIELDS",
    "JsonScheme",
    "KeyValueScheme",
    "RawScheme",
    "Scheme",
    "StringScheme",
]

META_FIELDS = ("topic", "partition", "offset", "timestamp")
"""Record metadata fields a scheme can add (``with_metadata=True``)."""

DEAD_LETTER_COLUMNS = ("topic", "partition", "offset", "reason", "value")


class Scheme(ABC):
    """Decodes the ``value`` (and ``key``) bytes of log records into named fields."""

    def __init__(self, fields: tuple[str, ...], with_metadata: bool) -> None:
        """Declare the output fields (metadata fields appended when requested)."""
        self.with_metadata = with_metadata
        self.fields = (*fields, *META_FIELDS) if with_metadata else fields
        as_fields(self.fields, f"{type(self).__name__} fields")

    @abstractmethod
    def columns(self) -> tuple[dict[str, Any], Any]:
        """Return ``({field: Column}, error Column)``; the error is null for good records."""

    def decode(
        self, raw: Any, *, keep: tuple[str, ...] = (), observation: Any = None
    ) -> tuple[Any, Any]:
        """Split ``raw`` records into (decoded tuples, dead letters).

        ``keep``: further columns of ``raw`` carried into both results (e.g. a txid tag).
        ``observation``: a ``pyspark.sql.Observation`` that receives ``dead``, the number of
        records that failed, from the first action over the decoded tuples (so dead
        letters need a Spark job of their own only when there are any).
        """
        from pyspark.sql import functions as F

        values, error = self.columns()
        meta = {name: F.col(name) for name in META_FIELDS} if self.with_metadata else {}
        staged = raw.select(
            *[col.alias(f"__f_{name}") for name, col in values.items()],
            error.alias("__error"),
            *[F.col(c) for c in ("topic", "partition", "offset", "timestamp", "value", *keep)],
        )
        if observation is not None:
            staged = staged.observe(observation, F.count(F.col("__error")).alias("dead"))
        good = staged.where(F.col("__error").isNull()).select(
            *[F.col(f"__f_{name}").alias(name) for name in values],
            *[F.col(name) for name in meta],
            *[F.col(c) for c in keep],
        )
        dead = staged.where(F.col("__error").isNotNull()).select(
            "topic",
            "partition",
            "offset",
            F.col("__error").alias("reason"),
            "value",
            *[F.col(c) for c in keep],
        )
        return good, dead


def _utf8(column: str) -> tuple[Any, Any]:
    """The column decoded as UTF-8 and an error if it is null or not valid UTF-8."""
    from pyspark.sql import functions as F

    text = F.col(column).cast("string")
    bad = F.when(F.col(column).isNull(), F.lit(f"{column} is null")).when(
        ~F.is_valid_utf8(text), F.lit(f"{column} is not valid UTF-8")
    )
    return text, bad


class RawScheme(Scheme):
    """The value bytes as one binary field."""

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
    """The value as one UTF-8 string field (Storm's StringScheme, default field ``str``)."""

    def __init__(self, field: str = "str", *, with_metadata: bool = False) -> None:
        """Emit the decoded value as ``field``."""
        super().__init__((field,), with_metadata)
        self.field = field

    def columns(self) -> tuple[dict[str, Any], Any]:
        """Decode UTF-8; invalid bytes go to dead letters."""
        text, bad = _utf8("value")
        return {self.field: text}, bad


class KeyValueScheme(Scheme):
    """Key and value as two UTF-8 string fields (a null key stays null)."""

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

        value, value_bad = _utf8("value")
        key = F.col("key").cast("string")
        key_bad = F.when(
            F.col("key").isNotNull() & (F.encode(key, "UTF-8") != F.col("key")),
            F.lit("key is not valid UTF-8"),
        )
        return {self.key_field: key, self.value_field: value}, F.coalesce(value_bad, key_bad)


class JsonScheme(Scheme):
    """A JSON object per record, its members mapped to typed fields.

    Args:
        fields: field name -> Spark SQL type (``{"user": "string", "age": "int"}``). A
            missing member gives null; a record that is not a JSON object, or whose member
            does not fit its type, goes to dead letters with the reason. Members not
            declared are ignored, so a topic whose objects gain members mid-stream decodes
            unchanged.
        required: fields that must be present and not null; a record without one goes to
            dead letters with ``required member 'f' is missing or null``.
    """

    def __init__(
        self,
        fields: Mapping[str, str],
        *,
        with_metadata: bool = False,
        required: tuple[str, ...] = (),
    ) -> None:
        """Declare the typed fields (and those that must not be missing or null)."""
        if not fields:
            msg = "JsonScheme needs at least one field, e.g. {'user': 'string'}"
            raise ConfigError(msg)
        if isinstance(required, str) or not all(isinstance(f, str) for f in required):
            msg = f"JsonScheme required must be a tuple of field names, got {required!r}"
            raise ConfigError(msg)
        unknown = [f for f in required if f not in fields]
        if unknown:
            msg = f"JsonScheme required names undeclared field(s) {unknown}; fields: {list(fields)}"
            raise ConfigError(msg)
        super().__init__(tuple(fields), with_metadata)
        self.types = dict(fields)
        self.required = tuple(required)

    def columns(self) -> tuple[dict[str, Any], Any]:
        """Parse with Spark's from_json in FAILFAST-like checks, per record."""
        from pyspark.sql import functions as F

        text, bad_utf8 = _utf8("value")
        ddl = ", ".join(f"`{n}` {t}" for n, t in self.types.items())
        parsed = F.from_json(
            text,
            f"{ddl}, `__corrupt` string",
            {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "__corrupt"},
        )
        not_object = F.when(~F.ltrim(text).startswith("{"), F.lit("value is not a JSON object"))
        corrupt = F.when(
            parsed.isNull() | parsed["__corrupt"].isNotNull(),
            F.lit("malformed JSON or a member of the wrong type for " + ddl),
        )
        values = {name: parsed[name] for name in self.types}
        missing = [
            F.when(parsed[name].isNull(), F.lit(f"required member {name!r} is missing or null"))
            for name in self.required
        ]
        return values, F.coalesce(bad_utf8, not_object, corrupt, *missing)

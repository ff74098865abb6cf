"""Schemes of files a :class:`~trident_assets.spouts.file_spout.FileSpout` reads: CSV, Parquet.

JSON lines and text need none of their own: a line scheme (``JsonScheme``, ``StringScheme``)
decodes each line of a file as it decodes a log record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trident_assets.errors import ConfigError
from trident_assets.spark.scheme_base import Scheme, utf8
from trident_assets.stream.fields import as_fields
from trident_assets.stream.sql_types import check_spark_type

__all__ = ["FILE_COLUMN_PREFIX", "CsvScheme", "ParquetScheme"]

FILE_COLUMN_PREFIX = "__file_"
"""A Parquet file's declared column ``f`` reaches the scheme as ``__file_f``."""


def _checked_fields(
    kind: str, fields: Mapping[str, str], optional: tuple[str, ...]
) -> tuple[dict[str, str], tuple[str, ...]]:
    if not isinstance(fields, Mapping) or not fields:
        msg = f"{kind} needs at least one field, e.g. {{'word': 'string'}}, got {fields!r}"
        raise ConfigError(msg)
    as_fields(tuple(fields), f"{kind} fields")
    for name, declared in fields.items():
        check_spark_type(declared, f"{kind} field {name!r}")
    if isinstance(optional, str) or not all(f in fields for f in optional):
        msg = f"{kind} optional must be a tuple of declared fields {list(fields)}, got {optional!r}"
        raise ConfigError(msg)
    return dict(fields), tuple(optional)


class CsvScheme(Scheme):
    """CSV files with a header line: each further line one record, its values typed.

    The header must name the declared fields, in declaration order (a file whose header
    differs refuses the txid, naming the file). Each line is parsed by Spark's CSV parser
    (``delimiter``, ``quote``; a quoted value may not span lines) and is a dead letter,
    with the first reason that applies, when: ``value is not valid UTF-8``; ``line has more
    than N values``; ``field 'f' is missing or empty`` (unless ``f`` is optional, then
    null); ``field 'f' is not a valid <type>`` (Spark's cast of the text to the declared
    type failed).

    Args:
        fields: field name -> Spark SQL type, in the header's order.
        optional: fields that may be empty (null).
        delimiter: the separator of values.
        quote: the quote character.
        with_metadata: append ``topic, partition, offset, timestamp`` (the file's URL, 0,
            the line number, the file's modification time).
    """

    file_format = "csv"

    def __init__(
        self,
        fields: Mapping[str, str],
        *,
        optional: tuple[str, ...] = (),
        delimiter: str = ",",
        quote: str = '"',
        with_metadata: bool = False,
    ) -> None:
        """Declare the typed fields."""
        self.types, self.optional = _checked_fields("CsvScheme", fields, optional)
        for name, value in (("delimiter", delimiter), ("quote", quote)):
            if not isinstance(value, str) or len(value) != 1 or value in "\r\n":
                msg = f"CsvScheme {name} must be one character (not a line break), got {value!r}"
                raise ConfigError(msg)
        self.delimiter = delimiter
        self.quote = quote
        super().__init__(tuple(self.types), with_metadata)

    def header(self) -> bytes:
        """The header line the files must start with."""
        return self.delimiter.join(self.types).encode()

    def columns(self) -> tuple[dict[str, Any], Any]:
        """Parse the line as strings, then cast each field; see the class docstring."""
        from pyspark.sql import functions as F

        text, bad = utf8("value")
        names = list(self.types)
        extra = "__extra"
        ddl = ", ".join(f"`{n}` STRING" for n in [*names, extra])
        options = {"sep": self.delimiter, "quote": self.quote, "mode": "PERMISSIVE"}
        parsed = F.from_csv(text, F.lit(ddl), options)
        error = bad.when(
            parsed[extra].isNotNull(), F.lit(f"line has more than {len(names)} values")
        )
        values: dict[str, Any] = {}
        for name, declared in self.types.items():
            raw = parsed[name]
            value = raw if declared.lower() == "string" else raw.try_cast(declared)
            values[name] = value
            if name not in self.optional:
                error = error.when(raw.isNull(), F.lit(f"field '{name}' is missing or empty"))
            error = error.when(
                raw.isNotNull() & value.isNull(),
                F.lit(f"field '{name}' is not a valid {declared}"),
            )
        return values, error


class ParquetScheme(Scheme):
    """Parquet files: the declared fields read as columns, typed by the file.

    Before any read, each file's schema is checked against the declared fields: a missing
    column, or one whose type is not the declared type, refuses the txid with an error
    naming the file and the field. A null in a declared field is a dead letter
    (``field 'f' is null``) unless the field is optional. Undeclared columns are not read.

    Args:
        fields: field name -> Spark SQL type (``string``, ``int``, ``bigint``, ``double``,
            ``boolean``, ``date``, ``timestamp``, ...).
        optional: fields that may be null.
        with_metadata: append ``topic, partition, offset, timestamp`` (the file's URL, 0,
            the row number from 1, the file's modification time).
    """

    file_format = "parquet"

    def __init__(
        self,
        fields: Mapping[str, str],
        *,
        optional: tuple[str, ...] = (),
        with_metadata: bool = False,
    ) -> None:
        """Declare the typed fields."""
        self.types, self.optional = _checked_fields("ParquetScheme", fields, optional)
        super().__init__(tuple(self.types), with_metadata)

    def columns(self) -> tuple[dict[str, Any], Any]:
        """The file's columns as they are; a null in a required field fails the row."""
        from pyspark.sql import functions as F

        values = {name: F.col(f"`{FILE_COLUMN_PREFIX}{name}`") for name in self.types}
        error = F.when(F.lit(False), F.lit(None).cast("string"))
        for name in self.types:
            if name not in self.optional:
                error = error.when(values[name].isNull(), F.lit(f"field '{name}' is null"))
        return values, error

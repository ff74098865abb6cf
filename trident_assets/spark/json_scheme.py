"""JSON records as typed fields: :class:`JsonScheme` (strict by default, or lenient)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trident_assets.errors import ConfigError
from trident_assets.spark.scheme_base import Scheme, utf8_error
from trident_assets.stream.fields import as_fields
from trident_assets.stream.sql_types import (
    INTEGER_TYPES,
    NUMBER_TYPES,
    check_spark_type,
)

__all__ = ["JsonScheme"]


MAX_JSON_DEPTH = 999
"""The deepest nesting a strict :class:`JsonScheme` accepts (objects and arrays, the record's
own object counted as level 1); deeper records are dead letters."""

_KINDS_FOR_TYPE = {
    "string": ("a string",),
    "boolean": ("a boolean",),
    **dict.fromkeys(INTEGER_TYPES, ("an integer",)),
    **dict.fromkeys(NUMBER_TYPES, ("an integer", "a fractional number")),
}
"""Per declared Spark type, the JSON kinds a strict scheme accepts for it; types not listed
(decimal, date, timestamp, array, struct, map, ...) are checked by Spark's conversion alone."""


class JsonScheme(Scheme):
    """One JSON object per record (RFC 8259), its members mapped to typed fields.

    **Strict (the default).** A record is decoded only if all of this holds; otherwise it is
    a dead letter with the first reason that applies, in this order:

    * ``value is not valid UTF-8`` (or ``value is null``);
    * ``value is not valid JSON (RFC 8259)``: single-quoted strings or names, unquoted names,
      ``NaN``/``Infinity``, leading zeros (``01``), trailing commas, comments, control
      characters in strings, a member name repeated in one object, or truncated JSON;
    * ``value has data after its JSON object``: trailing text, or several values (``{..}{..}``);
    * ``value is not a JSON object``: an array, string, number, ``true``/``false``/``null``;
    * nesting deeper than :data:`MAX_JSON_DEPTH` (999) levels: such a record is a dead letter
      with ``value is not valid JSON (RFC 8259) or nests deeper than 999 levels`` (that
      reason is used whenever the value holds 1000 or more ``[``/``{`` characters);
    * per declared field, in declaration order: ``missing member 'f'``, ``member 'f' is
      null`` (unless ``f`` is in ``optional``), and ``member 'f' is <kind>, declared
      <type>`` when the JSON kind does not match: a ``string`` field takes only JSON strings,
      ``boolean`` only ``true``/``false``, integer fields (``tinyint`` .. ``bigint``) only
      integers, ``float``/``double`` any number. The kinds are ``a string``, ``a boolean``,
      ``an integer``, ``a fractional number``, ``an object``, ``an array``;
    * ``malformed JSON or a member of the wrong type for <schema>``: Spark could not convert
      a member to its declared type (an integer out of range, ``1.0`` for an integer field,
      a date that does not parse, a nested value of the wrong shape).

    Members not declared are ignored, so a topic whose objects gain members decodes
    unchanged; a topic whose members are renamed sends its records to dead letters
    (``missing member 'f'``) instead of producing tuples of nulls.

    **Lenient** (``strict=False``, opt-in): Spark's JSON reader as it is, which accepts more
    than RFC 8259 (it reads the first value of a record and ignores what follows, and a
    ``string`` field takes a number or an object as text). A missing or null member gives
    null unless the field is in ``required``; a record that is not a JSON object, or whose
    member Spark cannot convert, is a dead letter with the reasons above.

    All checks run as Spark column expressions on the executors (Spark's own JSON parser
    through ``try_parse_json`` and ``from_json``); nothing is collected to the driver.

    Args:
        fields: field name -> Spark SQL type (``{"user": "string", "age": "int"}``).
        with_metadata: append ``topic, partition, offset, timestamp`` to the fields.
        required: fields that must be present and not null (what strict mode does for every
            field not in ``optional``); a lenient record without one is a dead letter with
            ``required member 'f' is missing or null``.
        optional: fields that may be missing or null (null in the tuple); strict mode only.
        strict: RFC 8259 and the declared kinds (True), or Spark's lenient reader (False).

    Raises:
        ConfigError: no fields, a field name that is not a valid name (a non-str name is
            given with its position), a type not in :data:`SPARK_TYPES`, ``required`` or
            ``optional`` not tuples of declared names, a field both required and optional,
            or ``optional`` with ``strict=False``.
    """

    def __init__(
        self,
        fields: Mapping[str, str],
        *,
        with_metadata: bool = False,
        required: tuple[str, ...] = (),
        optional: tuple[str, ...] = (),
        strict: bool = True,
    ) -> None:
        """Declare the typed fields, which may be missing (``optional``), and the mode."""
        if not isinstance(fields, Mapping) or not fields:
            msg = (
                "JsonScheme needs at least one field, as a mapping of field names to types "
                f"(e.g. {{'user': 'string'}}), got {fields!r}"
            )
            raise ConfigError(msg)
        as_fields(tuple(fields), "JsonScheme fields")
        for name, declared in fields.items():
            check_spark_type(declared, f"JsonScheme field {name!r}")
        for what, names in (("required", required), ("optional", optional)):
            if isinstance(names, str) or not all(isinstance(f, str) for f in names):
                msg = f"JsonScheme {what} must be a tuple of field names, got {names!r}"
                raise ConfigError(msg)
            unknown = [f for f in names if f not in fields]
            if unknown:
                msg = (
                    f"JsonScheme {what} names undeclared field(s) {unknown}; fields: {list(fields)}"
                )
                raise ConfigError(msg)
        both = [f for f in required if f in optional]
        if both:
            msg = f"JsonScheme field(s) {both} are both required and optional; choose one"
            raise ConfigError(msg)
        if optional and not strict:
            msg = (
                "JsonScheme optional applies to strict=True only (with strict=False every "
                "field may be missing); drop optional or use strict=True"
            )
            raise ConfigError(msg)
        super().__init__(tuple(fields), with_metadata)
        self.types = dict(fields)
        self.required = tuple(required)
        self.optional = tuple(optional)
        self.strict = strict

    def ddl(self) -> str:
        """The declared fields as a Spark DDL schema (names quoted)."""
        return ", ".join(f"`{n}` {t}" for n, t in self.types.items())

    def stages(self) -> list[dict[str, Any]]:
        """The text and its parse; strict, also the record as a variant, members and kinds.

        Each is computed once per record: the checks read them many times.
        """
        from pyspark.sql import functions as F

        text = F.col(_TEXT)
        options = json_options("__corrupt")
        parsed = F.from_json(text, f"{self.ddl()}, `__corrupt` string", options)
        stages = [{_TEXT: F.col("value").cast("string")}, {_PARSED: parsed}]
        if not self.strict:
            return stages
        digest = F.sha2(text, 256)
        stages[1][_DIGEST] = digest
        wrapped = F.concat(F.lit("["), text, F.lit(',"'), F.col(_DIGEST), F.lit('"]'))
        stages.append({_WRAPPED: F.try_parse_json(wrapped)})
        stages.append({_RECORD: F.try_variant_get(F.col(_WRAPPED), "$[0]", "variant")})
        stages.append(
            {
                _member(i): F.try_variant_get(F.col(_RECORD), f"$.{name}", "variant")
                for i, name in enumerate(self.types)
            }
        )
        stages.append(
            {
                _kind_of(i): _kind(F.schema_of_variant(F.col(_member(i))))
                for i in range(len(self.types))
            }
        )
        return stages

    def columns(self) -> tuple[dict[str, Any], Any]:
        """Parse with Spark's ``from_json``; in strict mode check RFC 8259 and kinds first."""
        from pyspark.sql import functions as F

        text = F.col(_TEXT)
        bad_utf8 = utf8_error("value", text)
        ddl = self.ddl()
        parsed = F.col(_PARSED)
        corrupt = F.when(
            parsed.isNull() | parsed["__corrupt"].isNotNull(),
            F.lit("malformed JSON or a member of the wrong type for " + ddl),
        )
        values = {name: parsed[name] for name in self.types}
        missing = [
            F.when(parsed[name].isNull(), F.lit(f"required member {name!r} is missing or null"))
            for name in self.required
        ]
        if not self.strict:
            not_object = F.when(~F.ltrim(text).startswith("{"), F.lit("value is not a JSON object"))
            return values, F.coalesce(bad_utf8, not_object, corrupt, *missing)
        return values, F.coalesce(bad_utf8, *self._strict_checks(text), corrupt)

    def _strict_checks(self, text: Any) -> list[Any]:
        """Error columns for RFC 8259, one object per record, and each member's kind.

        The record is parsed once as ``[<value>, "<sha256 of value>"]``: it parses, with two
        elements and the second equal to the digest, only if the value is one JSON value
        with nothing after it (a value cannot contain its own digest).
        """
        from pyspark.sql import functions as F

        digest, wrapped = F.col(_DIGEST), F.col(_WRAPPED)
        one_value = (
            wrapped.isNotNull()
            & (F.try_variant_get(wrapped, "$[1]", "string") == digest)
            & F.try_variant_get(wrapped, "$[2]", "variant").isNull()
        )
        opens = F.length(text) - F.length(F.regexp_replace(text, r"[\[{]", ""))
        invalid = "value is not valid JSON (RFC 8259)"
        not_one = F.when(
            ~F.coalesce(one_value, F.lit(False)),
            F.when(
                opens > MAX_JSON_DEPTH,
                F.lit(f"{invalid} or nests deeper than {MAX_JSON_DEPTH} levels"),
            )
            .when(F.try_parse_json(text).isNull(), F.lit(invalid))
            .otherwise(F.lit("value has data after its JSON object")),
        )
        not_object = F.when(
            ~F.schema_of_variant(F.col(_RECORD)).startswith("OBJECT"),
            F.lit("value is not a JSON object"),
        )
        checks = [not_one, not_object]
        for i, (name, declared) in enumerate(self.types.items()):
            member, kind = F.col(_member(i)), F.col(_kind_of(i))
            if name not in self.optional:
                checks.append(F.when(member.isNull(), F.lit(f"missing member {name!r}")))
                checks.append(F.when(kind == "null", F.lit(f"member {name!r} is null")))
            allowed = _KINDS_FOR_TYPE.get(" ".join(declared.lower().split()))
            if allowed:
                checks.append(
                    F.when(
                        member.isNotNull() & (kind != "null") & ~kind.isin(*allowed),
                        F.concat(
                            F.lit(f"member {name!r} is "), kind, F.lit(f", declared {declared}")
                        ),
                    )
                )
        return checks


def json_options(corrupt: str) -> dict[str, str]:
    """Spark's JSON parser options of a :class:`JsonScheme`; ``corrupt``: the corrupt-record column.

    PERMISSIVE, and none of the leniencies beyond RFC 8259 that Spark can turn off.
    """
    return {
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": corrupt,
        "allowSingleQuotes": "false",
        "allowNonNumericNumbers": "false",
        "allowNumericLeadingZeros": "false",
        "allowUnquotedFieldNames": "false",
        "allowComments": "false",
    }


_TEXT, _PARSED, _DIGEST = "__scheme_text", "__scheme_parsed", "__scheme_digest"
_WRAPPED, _RECORD = "__scheme_wrapped", "__scheme_record"


def _member(i: int) -> str:
    """The stage column of the ``i``-th declared field's member (a variant, null if absent)."""
    return f"__scheme_m{i}"


def _kind_of(i: int) -> str:
    """The stage column of the ``i``-th declared member's JSON kind (see :func:`_kind`)."""
    return f"__scheme_k{i}"


def _kind(schema: Any) -> Any:
    """The JSON kind of a variant from its ``schema_of_variant`` text (``a string``, ...)."""
    from pyspark.sql import functions as F

    return (
        F.when(schema == "VOID", F.lit("null"))
        .when(schema == "STRING", F.lit("a string"))
        .when(schema == "BOOLEAN", F.lit("a boolean"))
        .when(
            schema.isin("TINYINT", "SMALLINT", "INT", "BIGINT")
            | schema.rlike(r"^DECIMAL\(\d+,0\)$"),
            F.lit("an integer"),
        )
        .when(
            schema.startswith("DECIMAL") | schema.isin("DOUBLE", "FLOAT"),
            F.lit("a fractional number"),
        )
        .when(schema.startswith("OBJECT"), F.lit("an object"))
        .when(schema.startswith("ARRAY"), F.lit("an array"))
        .otherwise(F.lower(schema))
    )

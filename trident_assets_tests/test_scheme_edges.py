"""Records at the edges (issue 17, item 3): each decodes or goes to dead letters with its reason.

10 MB values, invalid UTF-8, JSON with wrong types, missing members, nulls, and a JSON topic
whose objects change shape mid-stream are read from the log through Spark and decoded by
the schemes; nothing fails the batch, and every dead letter carries its exact reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trident_assets.errors import ConfigError
from trident_assets.log import PartitionedLog, Record
from trident_assets.spark.log_reader import read_ranges
from trident_assets.spark.schemes import JsonScheme, StringScheme

BIG = 10 * 1024 * 1024
TYPES = "`word` string, `n` bigint"
WRONG = f"malformed JSON or a member of the wrong type for {TYPES}"


def _decode(spark: Any, tmp_path: Path, values: list[bytes], scheme: Any) -> tuple[list, list]:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("t", 1)
    log.append("t", 0, [Record(v) for v in values])
    raw = read_ranges(spark, log, [("t", 0, 0, len(values) - 1)])
    good, dead = scheme.decode(raw)
    goods = [tuple(r) for r in good.orderBy(*scheme.fields).collect()] if scheme.fields else []
    deads = sorted((r["offset"], r["reason"]) for r in dead.collect())
    return goods, deads


def test_string_scheme_at_the_edges(spark: Any, tmp_path: Path) -> None:
    big = b"a" * BIG
    values = [big, b"\xff\xfe bad", b"", "caf\u00e9".encode(), b"truncated \xc3"]
    good, dead = _decode(spark, tmp_path, values, StringScheme("s"))
    assert sorted(len(g[0]) for g in good) == [0, 4, BIG]
    assert dead == [(1, "value is not valid UTF-8"), (4, "value is not valid UTF-8")]


def test_lenient_json_scheme_at_the_edges(spark: Any, tmp_path: Path) -> None:
    values = [
        b'{"word": "a", "n": 1}',
        b'{"word": "b", "n": "one"}',  # wrong type
        b'{"word": "c"}',  # missing member: null
        b'{"word": null, "n": 2}',  # null member
        b"null",  # not an object
        b'{"word": "d", "n": 3, "extra": [1, 2]}',  # the shape changed: extra member ignored
        b'{"text": "e", "count": 4}',  # renamed members: both null
        b'{"word": "f", "n": ',  # truncated JSON
        b"\xff{}",  # not UTF-8
        b'{"word": "' + b"x" * BIG + b'", "n": 5}',  # 10 MB
        b'{"word": 7, "n": 6.5}',  # a number as the string, a fraction as bigint
    ]
    lenient = JsonScheme({"word": "string", "n": "bigint"}, strict=False)
    good, dead = _decode(spark, tmp_path, values, lenient)
    shown = [(w if w is None or len(w) < 100 else f"{len(w)} x", n) for w, n in good]
    assert sorted(shown, key=repr) == sorted(
        [("a", 1), ("c", None), (None, 2), ("d", 3), (None, None), (f"{BIG} x", 5)],
        key=repr,
    )
    assert dead == [
        (1, WRONG),
        (4, "value is not a JSON object"),
        (7, WRONG),
        (8, "value is not valid UTF-8"),
        (10, WRONG),
    ]


def test_lenient_json_required_members_go_to_dead_letters(spark: Any, tmp_path: Path) -> None:
    values = [b'{"word": "a", "n": 1}', b'{"n": 2}', b'{"word": null, "n": 3}', b'{"word": "b"}']
    scheme = JsonScheme({"word": "string", "n": "bigint"}, required=("word",), strict=False)
    good, dead = _decode(spark, tmp_path, values, scheme)
    assert sorted(good, key=repr) == [("a", 1), ("b", None)]
    assert dead == [
        (1, "required member 'word' is missing or null"),
        (2, "required member 'word' is missing or null"),
    ]
    with pytest.raises(ConfigError) as info:
        JsonScheme({"word": "string"}, required=("n",))
    assert (
        str(info.value) == "JsonScheme required names undeclared field(s) ['n']; fields: ['word']"
    )


# -- strict JSON (the default) ---------------------------------------------------------------------


def _nested(depth: int) -> bytes:
    """An object of ``depth`` levels: the record's object holding ``depth - 1`` nested arrays."""
    return b'{"word": "deep", "n": 1, "d": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def test_strict_json_is_rfc_8259_with_declared_kinds(spark: Any, tmp_path: Path) -> None:
    values = [
        b'{"word": "a", "n": 1}',
        b"{'word': 'b', 'n': 2}",  # single quotes
        b'{"word": "c", "n": 3} trailing',  # trailing garbage
        b'{"word": "d", "n": 4}{"word": "e", "n": 5}',  # two objects in one record
        b'{"word": "f", "n": NaN}',  # NaN literal
        b'{"word": 7, "n": 6}',  # a number where a string is declared
        b'{"word": "g", "n": "8"}',  # a string where an integer is declared
        b'{"word": "h", "n": 9.5}',  # a float where an integer is declared
        b'{"word": "i"}',  # missing member
        b'{"text": "j", "count": 10}',  # members renamed mid-topic
        b'{"word": null, "n": 11}',  # null member
        _nested(999),  # valid, at the depth limit
        _nested(5000),  # valid, beyond the limit
        b'{"word": "k", "n": 12, "word": "l"}',  # a repeated member name
        b'[{"word": "m", "n": 13}]',  # not an object
        b'  {"word": "o", "n": 14, "extra": {"x": [1, 2]}}\n',  # whitespace, extra member
        b'{"word": "p", "n": 01}',  # leading zero
        b'{"word": "q", "n": 1.0}',  # an integral float for an integer field
        b'{"word": "r", "n": 99999999999999999999}',  # out of bigint range
        b'{"word": {"s": 1}, "n": 15}',  # an object where a string is declared
    ]
    good, dead = _decode(spark, tmp_path, values, JsonScheme({"word": "string", "n": "bigint"}))
    assert good == [("a", 1), ("deep", 1), ("o", 14)]
    invalid = "value is not valid JSON (RFC 8259)"
    assert dead == [
        (1, invalid),
        (2, "value has data after its JSON object"),
        (3, "value has data after its JSON object"),
        (4, invalid),
        (5, "member 'word' is an integer, declared string"),
        (6, "member 'n' is a string, declared bigint"),
        (7, "member 'n' is a fractional number, declared bigint"),
        (8, "missing member 'n'"),
        (9, "missing member 'word'"),
        (10, "member 'word' is null"),
        (12, f"{invalid} or nests deeper than 999 levels"),
        (13, invalid),
        (14, "value is not a JSON object"),
        (16, invalid),
        (17, WRONG),
        (18, WRONG),
        (19, "member 'word' is an object, declared string"),
    ]


def test_strict_json_optional_members_may_be_missing_or_null(spark: Any, tmp_path: Path) -> None:
    values = [b'{"word": "a", "n": 1}', b'{"word": "b"}', b'{"word": "c", "n": null}', b"{}"]
    scheme = JsonScheme({"word": "string", "n": "bigint"}, optional=("n",))
    good, dead = _decode(spark, tmp_path, values, scheme)
    assert good == [("a", 1), ("b", None), ("c", None)]
    assert dead == [(3, "missing member 'word'")]


def test_strict_json_kinds_of_other_types(spark: Any, tmp_path: Path) -> None:
    values = [
        b'{"ok": true, "x": 1.5, "y": 2}',
        b'{"ok": "true", "x": 1, "y": 2}',
        b'{"ok": false, "x": "1.5", "y": 2}',
        b'{"ok": false, "x": 2, "y": [2]}',
    ]
    scheme = JsonScheme({"ok": "boolean", "x": "double", "y": "int"})
    good, dead = _decode(spark, tmp_path, values, scheme)
    assert good == [(True, 1.5, 2)]
    assert dead == [
        (1, "member 'ok' is a string, declared boolean"),
        (2, "member 'x' is a string, declared double"),
        (3, "member 'y' is an array, declared int"),
    ]


def test_json_scheme_declarations_are_checked() -> None:
    with pytest.raises(ConfigError) as info:
        JsonScheme({"word": "string"}, optional=("n",))
    assert str(info.value) == (
        "JsonScheme optional names undeclared field(s) ['n']; fields: ['word']"
    )
    with pytest.raises(ConfigError) as info:
        JsonScheme({"word": "string"}, required=("word",), optional=("word",))
    assert str(info.value) == (
        "JsonScheme field(s) ['word'] are both required and optional; choose one"
    )
    with pytest.raises(ConfigError) as info:
        JsonScheme({"word": "string"}, optional=("word",), strict=False)
    assert str(info.value) == (
        "JsonScheme optional applies to strict=True only (with strict=False every field may "
        "be missing); drop optional or use strict=True"
    )

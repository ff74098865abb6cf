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
from trident_assets.log.store import PartitionedLog, Record
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


def test_json_scheme_at_the_edges(spark: Any, tmp_path: Path) -> None:
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
    good, dead = _decode(spark, tmp_path, values, JsonScheme({"word": "string", "n": "bigint"}))
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


def test_json_required_members_go_to_dead_letters(spark: Any, tmp_path: Path) -> None:
    values = [b'{"word": "a", "n": 1}', b'{"n": 2}', b'{"word": null, "n": 3}', b'{"word": "b"}']
    scheme = JsonScheme({"word": "string", "n": "bigint"}, required=("word",))
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

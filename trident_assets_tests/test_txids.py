"""The txid argument rule: integers >= 1 only."""

import contextlib

import pytest

from trident_assets.core.txids import validate_txid
from trident_assets.errors import ConfigError


@pytest.mark.parametrize("bad", [True, False, -1, 0, "3", None, 1.0])
def test_validate_txid_refuses(bad: object) -> None:
    with pytest.raises(ConfigError) as info:
        validate_txid(bad)
    assert str(info.value) == (
        f"txid must be an integer >= 1 (not a bool, float or string), got {bad!r}"
    )


def test_validate_txid_accepts() -> None:
    assert validate_txid(1) == 1
    assert validate_txid(42) == 42


@pytest.mark.parametrize(
    ("key", "example"),
    [
        ("²", "0000000001"),
        ("²" * 10, "0000000001"),
        ("-1", "0000000001"),
        ("0", "0000000001"),
        (" 3", "0000000001"),
        ("3.0", "0000000001"),
        ("", "0000000001"),
        ("3", "0000000003"),
    ],
)
def test_parse_txid_refuses(key: str, example: str) -> None:
    from trident_assets.dagster.partitions import parse_txid

    with pytest.raises(ConfigError) as info:
        parse_txid(key)
    assert str(info.value) == (
        f"partition key {key!r} is not a txid key: txid keys are 10 digits, "
        f"zero-padded (e.g. {example!r}); use the partition the coordinator created"
    )


@pytest.mark.parametrize("bad", [True, False, -1, 0, "3", None, 1.0])
def test_runner_refuses_txid_before_any_work(bad: object) -> None:
    """The check runs before the runner touches Spark or the store (``self`` is unused)."""
    from trident_assets.spark.executor import TopologyRunner

    expected = f"txid must be an integer >= 1 (not a bool, float or string), got {bad!r}"
    with pytest.raises(ConfigError) as info:
        TopologyRunner.run_batch(object(), bad)  # type: ignore[arg-type]
    assert str(info.value) == expected
    with pytest.raises(ConfigError) as info:
        list(TopologyRunner.run_batches(object(), [1, bad]))  # type: ignore[arg-type, list-item]
    assert str(info.value) == expected


@pytest.mark.parametrize("bad", ["a__b", "_a", "a_", "__", "_"])
def test_validate_name_refuses_table_name_separators(bad: str) -> None:
    from trident_assets.spouts.config import validate_name

    with pytest.raises(ConfigError) as info:
        validate_name("state", bad)
    assert str(info.value) == (
        f"invalid state name {bad!r}: names may not contain '__' nor start or end "
        "with '_' (table names join names with '__'); e.g. 'word_count'"
    )


def test_joined_names_are_distinct() -> None:
    from trident_assets.spouts.config import validate_name

    parts = ["a", "b", "c", "a_b", "b_c", "a__b", "b__c", "a_", "_b", "_c", "x", "out_x"]
    ok = []
    for p in parts:
        with contextlib.suppress(ConfigError):
            ok.append(validate_name("topology", p))
    tables = {(t, s): f"{t}__{s}" for t in ok for s in ok}
    assert len(set(tables.values())) == len(tables)

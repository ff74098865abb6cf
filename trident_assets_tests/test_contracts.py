"""State contracts (trident_assets.core.contracts): stable JSON, field-by-field comparison."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from trident_assets.core.aggregators import Count, Max, Min, Sum
from trident_assets.core.contracts import (
    CONTRACT_FIELDS,
    FieldDifference,
    StateContract,
    compare,
    describe_aggregator,
)
from trident_assets.errors import ConfigError, StateContractError

BASE = StateContract(
    topology="wc",
    state="counts",
    table="wc_counts",
    state_type="opaque",
    key_fields=("word",),
    key_types=("varchar",),
    aggregator="trident_assets.core.aggregators.Count",
    aggregator_params=(),
    version=None,
    value_type="bigint",
    spouts=("log",),
    first_txid=1,
)

CHANGED = {
    "topology": "wc2",
    "state": "counts2",
    "table": "wc_counts2",
    "state_type": "transactional",
    "key_fields": ("word", "day"),
    "key_types": ("bigint",),
    "aggregator": "trident_assets.core.aggregators.Sum",
    "aggregator_params": (("field", "'n'"),),
    "version": "2",
    "value_type": "double",
    "spouts": ("log", "other"),
    "first_txid": 4,
}

COMPATIBLE = {"first_txid"}


def test_every_field_has_a_change_case() -> None:
    assert tuple(CHANGED) == CONTRACT_FIELDS
    assert {f.name for f in dataclasses.fields(StateContract)} == set(CONTRACT_FIELDS) | {"note"}


def test_identical() -> None:
    result = compare(BASE, dataclasses.replace(BASE, note="ignored"))
    assert not result.differences
    assert result.compatible
    assert result.differences == ()


@pytest.mark.parametrize("name", CONTRACT_FIELDS)
def test_each_field_change(name: str) -> None:
    declared = dataclasses.replace(BASE, **{name: CHANGED[name]})
    result = compare(BASE, declared)
    expected_ok = name in COMPATIBLE
    assert result.differences == (
        FieldDifference(name, getattr(BASE, name), CHANGED[name], expected_ok),
    )
    assert result.differences
    assert result.compatible is expected_ok
    assert result.incompatible == (() if expected_ok else result.differences)


@pytest.mark.parametrize("name", ["key_types", "value_type"])
def test_unknown_types_are_compatible(name: str) -> None:
    undeclared = dataclasses.replace(BASE, **{name: None})
    for stored, declared in ((BASE, undeclared), (undeclared, BASE)):
        result = compare(stored, declared)
        assert result.differences == (
            FieldDifference(name, getattr(stored, name), getattr(declared, name), True),
        )
        assert result.compatible


def test_several_differences_in_field_order() -> None:
    declared = dataclasses.replace(BASE, aggregator="x.Sum", state_type="transactional")
    result = compare(BASE, declared)
    assert [d.name for d in result.differences] == ["state_type", "aggregator"]
    assert not result.compatible


def test_json_is_stable_and_round_trips() -> None:
    c = dataclasses.replace(BASE, aggregator_params=(("field", "'n'"),), version="3", note="n")
    text = c.to_json()
    assert text == (
        '{"aggregator":"trident_assets.core.aggregators.Count",'
        '"aggregator_params":[["field","\'n\'"]],"first_txid":1,"key_fields":["word"],'
        '"key_types":["varchar"],"note":"n","spouts":["log"],"state":"counts",'
        '"state_type":"opaque","table":"wc_counts","topology":"wc","value_type":"bigint",'
        '"version":"3"}'
    )
    back = StateContract.from_json(text)
    assert back == c
    assert back.note == "n"
    assert back.to_json() == text
    unknown = StateContract.from_json(text[:-1] + ',"future":1}')
    assert unknown == c
    none_types = dataclasses.replace(BASE, key_types=None, value_type=None)
    assert StateContract.from_json(none_types.to_json()) == none_types


def aggregator_text(c: StateContract) -> str:
    """The aggregator as a human reads it: ``pkg.Sum(field='n')`` plus ``@version``."""
    params = ", ".join(f"{k}={v}" for k, v in c.aggregator_params)
    text = f"{c.aggregator}({params})"
    return f"{text}@{c.version}" if c.version is not None else text


def test_aggregator_text() -> None:
    assert aggregator_text(BASE) == "trident_assets.core.aggregators.Count()"
    c = dataclasses.replace(BASE, aggregator="m.A", aggregator_params=(("k", "1"),), version="2")
    assert aggregator_text(c) == "m.A(k=1)@2"


@pytest.mark.parametrize("agg", [Count(), Sum(), Min(), Max()])
def test_builtins_describe_themselves(agg: object) -> None:
    name = type(agg).__name__
    assert describe_aggregator(agg) == {
        "aggregator": f"trident_assets.core.aggregators.{name}",
        "aggregator_params": (),
        "version": None,
        "note": None,
    }


class Unversioned:
    def __init__(self, scale: int) -> None:
        self.scale = scale
        self._cache: dict[str, int] = {}


@dataclass(frozen=True)
class Versioned:
    weight: float
    version = "7"


class Described:
    def describe(self) -> dict[str, object]:
        return {"aggregator": "mine.Top", "aggregator_params": {"n": 3}, "version": "1"}


def test_user_aggregators() -> None:
    mod = __name__
    got = describe_aggregator(Unversioned(2), kind="updater")
    assert got == {
        "aggregator": f"{mod}.Unversioned",
        "aggregator_params": (("scale", "2"),),
        "version": None,
        "note": "user-defined updater without a version: only its class name is compared; "
        "give it a `version` (class attribute) and change it whenever the values it produces "
        "change meaning",
    }
    assert describe_aggregator(Versioned(0.5)) == {
        "aggregator": f"{mod}.Versioned",
        "aggregator_params": (("weight", "0.5"),),
        "version": "7",
        "note": None,
    }
    assert describe_aggregator(Described()) == {
        "aggregator": "mine.Top",
        "aggregator_params": (("n", "3"),),
        "version": "1",
        "note": None,
    }


def test_error_is_a_config_error() -> None:
    assert issubclass(StateContractError, ConfigError)


# -- deriving the declared contract from a topology -----------------------------------------------


def _topology(agg: object, spec: object = None) -> object:
    from trident_assets.spark.schemes import StringScheme
    from trident_assets.spouts.config import SpoutConfig, SpoutKind
    from trident_assets.spouts.log_spout import LogSpout
    from trident_assets.stream.graph import StateSpec
    from trident_assets.stream.operations import Split
    from trident_assets.stream.topology import TridentTopology

    topo = TridentTopology("wc")
    spout = LogSpout("sentences", StringScheme("sentence"), SpoutConfig(kind=SpoutKind.OPAQUE))
    words = topo.new_stream("src", spout).each("sentence", Split(), "word")
    return words.group_by("word").persistent_aggregate(
        spec or StateSpec.opaque("counts"), "word", agg, "count"
    )


def test_declared_contract_of_persistent_aggregate() -> None:
    state = _topology(Count())
    assert state.contract() == StateContract(
        topology="wc",
        state="counts",
        table="wc__counts",
        state_type="opaque",
        key_fields=("word",),
        key_types=None,
        aggregator="trident_assets.core.aggregators.Count",
        aggregator_params=(),
        version=None,
        value_type="bigint",
        spouts=("src",),
        first_txid=1,
    )
    summed = _topology(Sum()).contract()
    assert summed.aggregator == "trident_assets.core.aggregators.Sum"
    assert summed.value_type is None
    assert [(d.name, d.compatible) for d in compare(state.contract(), summed).differences] == [
        ("aggregator", False),
        ("value_type", True),
    ]


def test_declared_contract_of_partition_persist() -> None:
    from trident_assets.stream.graph import StateSpec, StateUpdater

    class Keep(StateUpdater):
        version = "2"

    state = _topology(Count())
    stream = state.new_values_stream()
    persisted = stream.partition_persist(StateSpec.opaque("kept"), "word", Keep())
    got = persisted.contract()
    assert got.aggregator == f"{__name__}.test_declared_contract_of_partition_persist.<locals>.Keep"
    assert (got.version, got.state_type, got.key_fields, got.spouts, got.note) == (
        "2",
        "opaque",
        (),
        ("src",),
        None,
    )

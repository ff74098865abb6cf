"""State contracts: what a state's stored values mean, and whether a declaration may continue.

A :class:`StateContract` records, for one state of one topology, everything that fixes the
meaning of its stored values: its table, replay guarantee (state type), keys, the aggregator
or updater that produced the values (with its parameters, or a user-given ``version``), the
value type, the spouts it reads and the first txid it covers. :func:`compare` tells which
fields differ between the stored and the declared contract and whether the change is
compatible (the stored values keep their meaning under the new declaration).

Pure: no Dagster, Spark or DuckDB imports.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONTRACT_FIELDS",
    "ContractComparison",
    "FieldDifference",
    "StateContract",
    "compare",
    "describe_aggregator",
]

_UNVERSIONED_NOTE = (
    "user-defined {kind} without a version: only its class name is compared; give it a "
    "`version` (class attribute) and change it whenever the values it produces change meaning"
)


@dataclass(frozen=True, slots=True)
class StateContract:
    """The stored meaning of one state's values.

    Attributes:
        topology: The topology's name.
        state: The state's name (unique in the topology).
        table: The table (or table prefix) holding the state.
        state_type: ``opaque``, ``transactional`` or ``non_transactional``.
        key_fields: The grouping fields, in order (empty for a global aggregate).
        key_types: The SQL types of the key fields, or None when not known at declaration.
        aggregator: The qualified class name of the aggregator or updater.
        aggregator_params: Its parameters as sorted ``(name, repr)`` pairs.
        version: A user-given version of the code that defines the values, or None.
        value_type: The declared SQL type of the value, or None when not declared.
        spouts: The ids of the spouts the state depends on, sorted.
        first_txid: The first txid the state's values cover (1 for a state built from the start).
        note: Free text for humans (e.g. an unversioned user aggregator); never compared.
    """

    topology: str
    state: str
    table: str
    state_type: str
    key_fields: tuple[str, ...] = ()
    key_types: tuple[str, ...] | None = None
    aggregator: str = ""
    aggregator_params: tuple[tuple[str, str], ...] = ()
    version: str | None = None
    value_type: str | None = None
    spouts: tuple[str, ...] = ()
    first_txid: int = 1
    note: str | None = field(default=None, compare=False)

    def to_json(self) -> str:
        """A stable JSON form: sorted keys, no whitespace, lists for tuples."""
        data = dataclasses.asdict(self)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> StateContract:
        """Parse :meth:`to_json`'s output (unknown keys are ignored)."""
        data: dict[str, Any] = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in names}
        for name in ("key_fields", "spouts"):
            if name in data:
                data[name] = tuple(data[name])
        if data.get("key_types") is not None:
            data["key_types"] = tuple(data["key_types"])
        if "aggregator_params" in data:
            data["aggregator_params"] = tuple(tuple(p) for p in data["aggregator_params"])
        return cls(**data)


CONTRACT_FIELDS: tuple[str, ...] = (
    "topology",
    "state",
    "table",
    "state_type",
    "key_fields",
    "key_types",
    "aggregator",
    "aggregator_params",
    "version",
    "value_type",
    "spouts",
    "first_txid",
)
"""The compared fields, in the order differences are reported."""

_UNKNOWN_IS_COMPATIBLE = frozenset({"key_types", "value_type"})
"""Fields where None (not known or not declared) on either side is compatible."""

_INFORMATIONAL = frozenset({"first_txid"})
"""Fields the declaration cannot know; the stored value stands, a difference is compatible."""


@dataclass(frozen=True, slots=True)
class FieldDifference:
    """One differing field: its name, stored and declared values, and whether it is compatible."""

    name: str
    stored: Any
    declared: Any
    compatible: bool


@dataclass(frozen=True, slots=True)
class ContractComparison:
    """The result of :func:`compare`."""

    differences: tuple[FieldDifference, ...]

    @property
    def compatible(self) -> bool:
        """True when every difference is compatible (vacuously true when identical)."""
        return all(d.compatible for d in self.differences)

    @property
    def incompatible(self) -> tuple[FieldDifference, ...]:
        """The differences that change what the stored values mean."""
        return tuple(d for d in self.differences if not d.compatible)


def compare(stored: StateContract, declared: StateContract) -> ContractComparison:
    """Compare a stored contract with a declaration, field by field.

    Every field of :data:`CONTRACT_FIELDS` is compared. ``key_types`` and ``value_type``
    differ compatibly when either side is None (unknown); ``first_txid`` is informational
    (the declaration cannot know it). Any other difference is incompatible: the stored
    values would mean something else under the declaration.
    """
    diffs: list[FieldDifference] = []
    for name in CONTRACT_FIELDS:
        a, b = getattr(stored, name), getattr(declared, name)
        if a == b:
            continue
        unknown = name in _UNKNOWN_IS_COMPATIBLE and (a is None or b is None)
        diffs.append(FieldDifference(name, a, b, name in _INFORMATIONAL or unknown))
    return ContractComparison(tuple(diffs))


def _params(obj: Any) -> tuple[tuple[str, str], ...]:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items: Mapping[str, Any] = {
            f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init
        }
    else:
        items = {k: v for k, v in getattr(obj, "__dict__", {}).items() if not k.startswith("_")}
    return tuple(sorted((k, repr(v)) for k, v in items.items()))


def describe_aggregator(obj: Any, kind: str = "aggregator") -> dict[str, Any]:
    """Describe an aggregator, updater or function for a contract.

    An object with a ``describe()`` method is asked for ``{"aggregator", "aggregator_params",
    "version"}`` (missing keys are filled in). Otherwise the description is its class's
    qualified name, its public parameters (dataclass fields or instance attributes, as
    ``repr``) and its ``version`` attribute if any. Classes outside ``trident_assets`` without
    a version get a ``note`` saying that only the class name is compared.

    Returns:
        A dict with ``aggregator``, ``aggregator_params``, ``version`` and ``note``.
    """
    version = getattr(obj, "version", None)
    cls = obj if isinstance(obj, type) else type(obj)
    out: dict[str, Any] = {
        "aggregator": f"{cls.__module__}.{cls.__qualname__}",
        "aggregator_params": _params(obj),
        "version": None if version is None else str(version),
        "note": None,
    }
    describe = getattr(obj, "describe", None)
    if callable(describe):
        given = dict(describe())
        if "aggregator_params" in given:
            given["aggregator_params"] = tuple(
                sorted((str(k), str(v)) for k, v in dict(given["aggregator_params"]).items())
            )
        out.update(given)
    builtin = str(out["aggregator"]).startswith("trident_assets.")
    if out["version"] is None and not builtin:
        out["note"] = _UNVERSIONED_NOTE.format(kind=kind)
    return out

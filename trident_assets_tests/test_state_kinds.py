"""The state-kind registry: each declaration's kind and its answers, and that no other code
reads a state node's arguments to tell its kind."""

from __future__ import annotations

import ast
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import trident_assets as ta
from trident_assets.planner import pipelinable, quarantine_refusal, recomputable
from trident_assets.runtime.backfill_plans import replay_refusal
from trident_assets.stream.graph import Node
from trident_assets.stream.state_kinds import (
    KINDS,
    Combiner,
    EventWindowKind,
    Reducer,
    SingleJoinKind,
    TridentWindowKind,
    Updater,
    state_kind,
)

PACKAGE = Path(ta.__file__).resolve().parent


class Concat(ta.ReducerAggregator[str]):
    """Joins words in order (a reducer)."""

    output_type = "string"

    def init(self) -> str:
        return ""

    def reduce(self, acc: str, values: tuple[Any, ...]) -> str:
        return acc + values[0]


class Keep(ta.StateUpdater):
    """Stores nothing."""

    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> Any:
        return None


def _topology() -> ta.TridentTopology:
    topo = ta.TridentTopology("kinds")
    scheme = ta.JsonScheme({"id": "bigint", "word": "string", "n": "bigint"})
    words = topo.new_stream("words", ta.LogSpout("words", scheme))
    words.group_by("word").persistent_aggregate(ta.StateSpec.opaque("counts"), "n", ta.Sum(), "s")
    words.group_by("id").persistent_aggregate(ta.StateSpec.opaque("joined"), "word", Concat(), "w")
    words.partition_persist(ta.StateSpec.opaque("kept"), ["word"], Keep())
    words.window(ta.TumblingCountWindow(2), "n", ta.Sum(), "total", spec="win")
    words.group_by("word").window_aggregate(
        ta.EventWindow.tumbling(timedelta(minutes=1), time_field="n", time_unit="s"),
        ta.Count(),
        "views",
        spec=ta.StateSpec("per_minute"),
        inputs="n",
    )
    other = topo.new_stream("others", ta.LogSpout("others", scheme))
    topo.single_join(
        "pair",
        [words.project(["id", "word"]), other.project(["id", "n"])],
        out_fields=["word", "n"],
    )
    return topo


def test_each_declaration_has_its_kind_and_answers() -> None:
    topo = _topology()
    kinds = {name: state_kind(s.node) for name, s in topo.states.items()}
    assert {name: type(k) for name, k in kinds.items()} == {
        "counts": Combiner,
        "joined": Reducer,
        "kept": Updater,
        "win": TridentWindowKind,
        "per_minute": EventWindowKind,
        "pair": SingleJoinKind,
    }
    assert {name for name, k in kinds.items() if k.map_state} == {"counts", "joined"}
    assert {name for name, k in kinds.items() if k.sql_combiner} == {"counts"}
    assert {name for name, k in kinds.items() if k.order_refusal is None} == {"counts"}
    assert kinds["joined"].order_refusal == (
        "uses a Concat, which folds tuples in order; only combiner aggregates may see records "
        "later than others"
    )
    assert {name for name, k in kinds.items() if k.log_refusal is None} == {
        "counts", "joined", "kept",
    }  # fmt: skip
    assert not pipelinable(topo)
    assert quarantine_refusal(topo) == (
        "state 'joined' uses a Concat, which folds tuples in order; only combiner aggregates "
        "may see records later than others"
    )
    assert recomputable(topo.states["counts"])
    assert replay_refusal(topo.states["pair"]) == (
        "it is a single join: its pending halves and expiries depend on the state as it was "
        "at each txid, not on the log alone"
    )


def test_a_node_that_declares_no_state_has_no_kind() -> None:
    with pytest.raises(TypeError, match=r"node 'each' declares no state \(arguments: \['f'\]\)"):
        state_kind(Node("each", ("a",), (), {"f": 1}))


CLASSIFYING = re.compile(
    r"""("agg"|"updater"|EVENT_WINDOW|SINGLE_JOIN|TRIDENT_WINDOW|"event_window"|"single_join"|"""
    r""""trident_window"|STATE_KIND|"state_kind") (not )?in \w"""
    r"""|kind [!=]= (STATIC_STATE|"static_state"|"persist")"""
    r"""|args(\.get\(|\[)(STATE_KIND|"state_kind")"""
)
"""A test of a node's arguments or kind for a state kind's marker (``SINGLE_JOIN in a``,
``node.kind == "static_state"``, ``node.args[STATE_KIND]``)."""

KIND_CLASSES = {kind.__name__ for kind in KINDS.values()} | {"StateKind"}


def _kind_tests(path: Path) -> list[str]:
    """``isinstance(x, SomeKind)`` and ``isinstance(state_kind(...), ...)`` in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            continue
        subject, classes = node.args
        named = {
            n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(classes)
            if isinstance(n, ast.Name | ast.Attribute)
        }
        asks_kind = any(
            isinstance(n, ast.Call) and getattr(n.func, "id", None) == "state_kind"
            for n in ast.walk(subject)
        )
        if named & KIND_CLASSES or asks_kind:
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_registry_tells_kinds_apart_by_their_class() -> None:
    """Every other module asks the kind (an attribute or a method), never its class."""
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "state_kinds.py"
        for hit in _kind_tests(path)
    ]
    assert found == []


def test_every_kind_is_in_the_table_and_has_an_engine() -> None:
    from trident_assets.spark.state_engines import ENGINES

    assert set(KINDS) == {*ENGINES, "static_state"}  # a static state is written by nothing
    assert all(name == kind.name for name, kind in KINDS.items())


def test_only_the_registry_reads_a_state_nodes_arguments_to_classify_it() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "state_kinds.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if CLASSIFYING.search(line)
    ]
    assert found == []

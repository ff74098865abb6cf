"""Names and arguments are checked at declaration, before any Spark job or write.

Every name a user gives maps to its own store tables and asset names: within a topology two
declarations never share one (:meth:`TridentTopology.claim`), across topologies the ``__``
rule keeps table names apart, and every derived table name fits in 63 characters. Fields
that would land on a state table's own columns, unknown JsonScheme types and non-str field
names are refused when declared. None of these tests needs Spark.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from trident_assets.backends.duckdb_store import DuckDBStore
from trident_assets.backends.state_batches import StateTarget
from trident_assets.backends.state_contracts import stored_contracts, write_contracts
from trident_assets.core.aggregators import Count, Sum
from trident_assets.core.values import StateType
from trident_assets.dagster.io_manager import TridentIOManager, state_asset_metadata
from trident_assets.dagster.partitions import parse_txid
from trident_assets.errors import ConfigError, StateContractError
from trident_assets.spark.executor import TopologyRunner
from trident_assets.spark.schemes import SPARK_TYPES, JsonScheme, StringScheme
from trident_assets.spouts.log_spout import LogSpout
from trident_assets.stream.fields import as_fields
from trident_assets.stream.operations import PyFlatMap, PyFunction, PyMap, Split
from trident_assets.stream.topology import StateSpec, StateUpdater, Stream, TridentTopology
from trident_assets_tests.state_assets import commit_partials

NAME_RULE = "use 1-63 letters, digits or underscores, starting with a letter or underscore"
RESERVED = (
    "is reserved for the store's own columns (txid, curr, prev and names starting with "
    "'_trident'); give the field another name where it is made (its scheme or function)"
)


def _words(topology: str = "t") -> tuple[TridentTopology, Stream]:
    topo = TridentTopology(topology)
    words = topo.new_stream("s", LogSpout("sentences", StringScheme("sentence")))
    return topo, words.each("sentence", Split(), "word")


def _count(stream: Stream, state: str) -> Any:
    return stream.group_by("word").persistent_aggregate(
        StateSpec.opaque(state), "word", Count(), "count"
    )


class Keep(StateUpdater):
    """Stores nothing (the declaration is what is tested)."""

    def update_state(self, store: Any, table: str, batch: Any, txid: int | None) -> Any:
        return None


# -- one name, one table, within a topology --------------------------------------------------


def test_state_and_output_sharing_a_table_are_refused_in_either_order() -> None:
    topo, words = _words()
    _count(words, "out_x")
    with pytest.raises(ConfigError) as info:
        words.as_output("x")
    assert str(info.value) == (
        "output 'x' of topology 't' would use store table 't__out_x', which state 'out_x' "
        "already uses; rename one of them (each state and output needs tables and assets of "
        "its own)"
    )
    assert list(topo.outputs) == []  # the refused output declared nothing

    topo, words = _words()
    words.as_output("x")
    with pytest.raises(ConfigError) as info:
        _count(words, "out_x")
    assert str(info.value) == (
        "state 'out_x' of topology 't' would use store table 't__out_x', which output 'x' "
        "already uses; rename one of them (each state and output needs tables and assets of "
        "its own)"
    )
    assert list(topo.states) == []
    assert set(topo.claims) == {"asset name:s_batch", "store table:t__out_x", "asset name:x"}


@pytest.mark.parametrize(
    ("declare_first", "declare_second", "message"),
    [
        (
            lambda w: _count(w, "x"),
            lambda w: w.as_output("x"),
            "output 'x' of topology 't' would use asset name 'x', which state 'x' already uses",
        ),
        (
            lambda w: _count(w, "x"),
            lambda w: w.as_output("x_new_values"),
            "output 'x_new_values' of topology 't' would use asset name 'x_new_values', which "
            "state 'x' already uses",
        ),
        (
            lambda w: w.as_output("x_partials"),
            lambda w: _count(w, "x"),
            "state 'x' of topology 't' would use asset name 'x_partials', which output "
            "'x_partials' already uses",
        ),
        (
            lambda w: None,
            lambda w: w.as_output("s_batch"),
            "output 's_batch' of topology 't' would use asset name 's_batch', which spout 's' "
            "already uses",
        ),
        (
            lambda w: w.partition_persist(StateSpec.opaque("out_k"), "word", Keep()),
            lambda w: w.as_output("k"),
            "output 'k' of topology 't' would use store table 't__out_k', which state 'out_k' "
            "already uses",
        ),
    ],
)
def test_names_of_one_topology_never_share_a_table_or_an_asset(
    declare_first: Any, declare_second: Any, message: str
) -> None:
    _, words = _words()
    declare_first(words)
    with pytest.raises(ConfigError) as info:
        declare_second(words)
    assert str(info.value).startswith(message + "; rename one of them")


def test_a_single_join_is_refused_whole_when_its_expired_output_is_taken() -> None:
    topo = TridentTopology("t")
    g = topo.new_stream("g", LogSpout("genders", JsonScheme({"id": "bigint", "sex": "string"})))
    a = topo.new_stream("a", LogSpout("ages", JsonScheme({"id": "bigint", "age": "bigint"})))
    g.group_by("id").persistent_aggregate(
        StateSpec.opaque("j_expired"), "id", Count(), "n"
    )  # asset 'j_expired'
    claims = dict(topo.claims)
    with pytest.raises(ConfigError) as info:
        topo.single_join("j", [g, a], out_fields=["id", "sex", "age"], timeout_batches=2)
    assert str(info.value).startswith(
        "output 'j_expired' of topology 't' would use asset name 'j_expired', which state "
        "'j_expired' already uses"
    )
    assert list(topo.states) == ["j_expired"]
    assert topo.claims == claims


def test_single_join_columns_too_long_are_refused() -> None:
    topo = TridentTopology("t")
    long = "i" * 60  # stored as key_<field>: 64 characters
    g = topo.new_stream("g", LogSpout("genders", JsonScheme({long: "bigint", "sex": "string"})))
    a = topo.new_stream("a", LogSpout("ages", JsonScheme({long: "bigint", "age": "bigint"})))
    with pytest.raises(ConfigError) as info:
        topo.single_join("j", [g, a], out_fields=[long, "sex", "age"], timeout_batches=2)
    assert str(info.value) == (
        f"single_join 'j': join field {long!r} is stored as column 'key_{long}' (64 "
        "characters, at most 63); use a name of at most 59 characters"
    )
    assert topo.states == {}
    assert topo.outputs == {}


# -- one name, one table, across topologies --------------------------------------------------


@pytest.mark.parametrize(
    ("make", "kind", "name"),
    [
        (lambda: TridentTopology("a__b"), "topology", "a__b"),
        (lambda: StateSpec.opaque("b__c"), "state", "b__c"),
        (lambda: _words()[1].as_output("x__y"), "output", "x__y"),
        (lambda: _words()[0].new_stream("p__q", None), "spout", "p__q"),
        (lambda: StateSpec.opaque("_b"), "state", "_b"),
        (lambda: TridentTopology("a_"), "topology", "a_"),
    ],
)
def test_names_that_could_join_into_another_table_name_are_refused(
    make: Any, kind: str, name: str
) -> None:
    """``a__b`` + ``c`` and ``a`` + ``b__c`` would both be table ``a__b__c``."""
    with pytest.raises(ConfigError) as info:
        make()
    assert str(info.value) == (
        f"invalid {kind} name {name!r}: names may not contain '__' nor start or end with '_' "
        "(table names join names with '__'); e.g. 'word_count'"
    )


def test_tables_of_different_topologies_never_meet() -> None:
    """Every table and asset a declaration can claim, for many name pairs: no two topologies
    share a table (asset names are per topology: Dagster keys them by topology)."""
    states = ["a", "b", "a_b", "b_c", "new_values"]
    outputs = ["c", "out", "out_b", "x", "b_new"]
    owners: dict[str, str] = {}
    for topology in states + outputs:
        topo, words = _words(topology)
        for name in states:
            _count(words, name)
        for name in outputs:
            words.as_output(name)
        for claim in topo.claims:
            if claim.startswith("store table:"):
                assert owners.setdefault(claim, topology) == topology, claim
    assert len(owners) == 10 * (5 * 5 + 5)  # per topology: 5 tables per state, 1 per output


def test_a_table_owned_by_another_topology_is_refused_before_any_write(tmp_path: Path) -> None:
    """A store whose table ``a__b`` belongs to another (topology, state) (a name an older
    release allowed): the runner refuses at creation, naming both owners; nothing changes."""
    topo, words = _words("a")
    state = _count(words, "b")
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        foreign = dataclasses.replace(state.contract(), topology="a_x", state="b_y")
        write_contracts(store, [foreign])

        def snapshot() -> tuple[Any, ...]:
            return (
                store.fetch_rows(
                    "SELECT table_name FROM information_schema.tables ORDER BY table_name"
                ),
                store.scopes(),
                stored_contracts(store),
            )

        before = snapshot()
        with pytest.raises(StateContractError) as info:
            TopologyRunner(topo, None, store, None)  # refused before Spark or the log is used
        assert str(info.value) == (
            "state 'b' of topology 'a' would write table 'a__b', which belongs to state 'b_y' "
            "of topology 'a_x'. Nothing was run or written. Rename the state or the topology "
            "so that their tables differ"
        )
        assert snapshot() == before
        assert before[2] == [foreign]


def _store_snapshot(store: DuckDBStore) -> tuple[Any, ...]:
    return (
        store.fetch_rows("SELECT table_name FROM information_schema.tables ORDER BY table_name"),
        store.scopes(),
        {t: store.scan(t).to_pylist() for t in store.tables()},
    )


def _commit(store: DuckDBStore, scope: str, table: str) -> None:
    target = StateTarget(table, ("word",), "n", StateType.OPAQUE, Count())
    partials = pa.table({"word": ["a"], "n": pa.array([2], pa.int64())})
    assert commit_partials(store, scope, target, partials, 1).applied


def test_a_topology_named_like_a_state_asset_of_the_store_is_refused(tmp_path: Path) -> None:
    """A state asset persisted by the TridentIOManager keeps table and commit scope 'wc'."""
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        _commit(store, "wc", "wc")
        before = _store_snapshot(store)
        topo, words = _words("wc")
        _count(words, "counts")
        with pytest.raises(StateContractError) as info:
            TopologyRunner(topo, None, store, None)
        assert str(info.value) == (
            "topology 'wc' would share commit scope 'wc' with the state asset 'wc' that the "
            "TridentIOManager persists in this store (map table 'wc'). Nothing was run or "
            "written. Rename the topology or the state asset"
        )
        assert _store_snapshot(store) == before


def test_a_state_asset_named_like_a_topology_of_the_store_is_refused(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        _commit(store, "wc", "wc__counts")  # what topology 'wc' commits for its state
    manager = TridentIOManager(home=str(tmp_path), state_database=str(tmp_path / "state.duckdb"))
    meta = state_asset_metadata("wc", key_fields=["word"], value_field="n")
    partials = pa.table({"word": ["b"], "n": pa.array([5], pa.int64())})
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        before = _store_snapshot(store)
    with pytest.raises(StateContractError) as info:
        manager.persist(meta, partials, 2)
    assert str(info.value) == (
        "state asset 'wc' would share commit scope 'wc' with topology 'wc' in this store (its "
        "tables wc__counts). Nothing was written. Rename the state asset "
        "(state_asset_metadata(name, ...)) or the topology"
    )
    with DuckDBStore(tmp_path / "state.duckdb") as store:
        assert _store_snapshot(store) == before
    # another name is its own scope
    assert (
        manager.persist(
            state_asset_metadata("wc_lengths", key_fields=["word"], value_field="n"), partials, 1
        )["txid"]
        == 1
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"state": "wc__counts"},
            "invalid state name 'wc__counts': names may not contain '__' nor start or end with "
            "'_' (table names join names with '__'); e.g. 'word_count'",
        ),
        (
            {"state": "s" * 51},
            f"state asset {'s' * 51!r} (51 characters) leaves no room for its store table "
            f"'_trident_log_{'s' * 51}': use at most 50 characters",
        ),
        ({"key_fields": ["curr"]}, f"state 'clicks': key field 'curr' {RESERVED}"),
        ({"value_field": "txid"}, f"state 'clicks': value field 'txid' {RESERVED}"),
        (
            {"key_fields": [None]},
            "state 'clicks' key_fields: field 1 of 1 is None (NoneType), not a name; field "
            "names are strings of 1-63 letters, digits or underscores",
        ),
    ],
)
def test_state_asset_metadata_checks_names(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"state": "clicks", "key_fields": ["page"], "value_field": "n"}
    args.update(kwargs)
    with pytest.raises(ConfigError) as info:
        state_asset_metadata(args.pop("state"), **args)
    assert str(info.value) == message


# -- table name lengths ----------------------------------------------------------------------


def test_a_state_whose_tables_are_too_long_is_refused() -> None:
    topo, words = _words("t" * 63)
    with pytest.raises(ConfigError) as info:
        _count(words, "s" * 63)
    table = "t" * 63 + "__" + "s" * 63
    assert str(info.value) == (
        f"state {'s' * 63!r} of topology {'t' * 63!r} needs store table {table!r} (128 "
        "characters), longer than the 63 a table name may have; shorten the topology name or "
        "the state name"
    )
    assert topo.states == {}


def test_state_and_output_name_length_boundaries() -> None:
    """A state table leaves room for its map log ``_trident_log_<table>`` (13 more
    characters): topology + state at most 48; an output table ``<t>__out_<o>``: at most 57."""
    topo, words = _words("t" * 24)
    assert _count(words, "s" * 24).table == "t" * 24 + "__" + "s" * 24
    with pytest.raises(ConfigError) as info:
        _count(words, "s" * 25)
    assert str(info.value) == (
        f"state {'s' * 25!r} of topology {'t' * 24!r} needs store table "
        f"'_trident_log_{'t' * 24}__{'s' * 25}' (64 characters), longer than the 63 a table "
        "name may have; shorten the topology name or the state name"
    )
    words.as_output("o" * 33)
    assert topo.output_table("o" * 33) == "t" * 24 + "__out_" + "o" * 33
    with pytest.raises(ConfigError) as info:
        words.as_output("o" * 34)
    assert "(64 characters), longer than the 63 a table name may have" in str(info.value)
    assert list(topo.outputs) == ["o" * 33]


# -- fields on a state table's own columns ---------------------------------------------------


def _events(topology: str = "t") -> Stream:
    scheme = JsonScheme({"curr": "string", "txid": "bigint", "n": "bigint", "key": "string"})
    return TridentTopology(topology).new_stream("ev", LogSpout("events", scheme))


@pytest.mark.parametrize("field", ["curr", "txid"])
def test_reserved_key_fields_are_refused(field: str) -> None:
    ev = _events()
    with pytest.raises(ConfigError) as info:
        ev.group_by(field).persistent_aggregate(StateSpec.opaque("st"), "n", Sum(), "total")
    assert str(info.value) == f"state 'st': key field {field!r} {RESERVED}"
    assert ev.topology.states == {}


@pytest.mark.parametrize("output", ["txid", "curr", "prev", "PREV", "Txid"])
def test_reserved_output_fields_are_refused(output: str) -> None:
    ev = _events()
    with pytest.raises(ConfigError) as info:
        ev.group_by("n").persistent_aggregate(StateSpec.opaque("st"), "n", Count(), output)
    assert str(info.value) == f"state 'st': output field {output!r} {RESERVED}"


@pytest.mark.parametrize("name", ["_trident_seq", "_TRIDENTx", "__trident_txid", "__Trident_pid"])
def test_internal_column_names_are_refused_as_fields(name: str) -> None:
    """``_trident*`` are the store's columns, ``__trident*`` Spark's (e.g. a chunk's txid)."""
    expected = (
        "names starting with '_trident' or '__trident' are trident's internal columns; "
        "choose another name"
    )
    ev = _events()
    with pytest.raises(ConfigError) as info:
        ev.group_by("n").persistent_aggregate(StateSpec.opaque("st"), "n", Count(), name)
    assert str(info.value) == (
        f"invalid field (in persistent_aggregate output) name {name!r}: {expected}"
    )
    with pytest.raises(ConfigError) as info:
        JsonScheme({"user": "string", name: "bigint"})
    assert str(info.value) == f"invalid field (in JsonScheme fields) name {name!r}: {expected}"
    assert as_fields(["___trident", "trident_x"]) == ("___trident", "trident_x")


def test_an_ungrouped_state_reserves_its_key_column() -> None:
    ev = _events()
    with pytest.raises(ConfigError) as info:
        ev.persistent_aggregate(StateSpec.opaque("st"), "n", Count(), "key")
    assert str(info.value) == (
        "state 'st': output field 'key' is reserved for the store's own columns (txid, curr, "
        "prev, key and names starting with '_trident'); give the field another name where it "
        "is made (its scheme or function)"
    )
    # a grouped state's keys are its group fields: 'key' is an ordinary output there
    assert ev.group_by("n").persistent_aggregate(StateSpec.opaque("ok"), "n", Count(), "key")


def test_partition_persist_refuses_reserved_output_fields() -> None:
    ev = _events()
    with pytest.raises(ConfigError) as info:
        ev.partition_persist(StateSpec.opaque("kept"), "n", Keep(), ["n", "txid"])
    assert str(info.value) == f"state 'kept': output field 'txid' {RESERVED}"


def test_a_state_spec_must_be_a_state_spec() -> None:
    ev = _events()
    with pytest.raises(ConfigError) as info:
        ev.group_by("n").persistent_aggregate("counts", "n", Count(), "c")  # type: ignore[arg-type]
    assert str(info.value) == (
        "persistent_aggregate needs a StateSpec as its state, got 'counts'; "
        "e.g. StateSpec.opaque('counts')"
    )


# -- schemes and field lists -----------------------------------------------------------------


@pytest.mark.parametrize(
    "declared",
    [
        "integr",
        "int) ; DROP TABLE x; --",
        "int, `evil` string",
        "decimal(39,2)",
        "decimal(5,6)",
        "array<int",
        "map<string>",
        "struct<>",
        "struct<`a`:int>",
        "int int",
        "",
        3,
        None,
    ],
)
def test_json_scheme_refuses_unknown_types(declared: object) -> None:
    with pytest.raises(ConfigError) as info:
        JsonScheme({"user": "string", "age": declared})  # type: ignore[dict-item]
    assert str(info.value) == (
        f"JsonScheme field 'age' has unknown type {declared!r}; use one of {SPARK_TYPES}"
    )


def test_json_scheme_accepts_spark_types() -> None:
    types = {
        "a": "string",
        "b": "BIGINT",
        "c": " int ",
        "d": "decimal(10,2)",
        "e": "Decimal(38)",
        "f": "array<string>",
        "g": "map<string, array<bigint>>",
        "h": "struct<x:int, y: struct<z:string>>",
        "i": "timestamp",
        "j": "date",
        "k": "boolean",
        "l": "double",
    }
    assert JsonScheme(types).types == types


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"user": "string", None: "int"}, "field 2 of 2 is None (NoneType), not a name"),
        ({3: "int"}, "field 1 of 1 is 3 (int), not a name"),
    ],
)
def test_json_scheme_refuses_non_str_names_with_their_position(
    fields: dict[Any, str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        JsonScheme(fields)
    assert str(info.value) == (
        f"JsonScheme fields: {message}; field names are strings of 1-63 letters, digits or "
        "underscores"
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda w: w.each("word", Split(), [None]), "each outputs: field 1 of 1 is None"),
        (lambda w: w.project(["word", 3]), "project: field 2 of 2 is 3 (int)"),
        (lambda w: w.group_by(None), "group_by must be a field name or a list of field names"),
        (lambda w: w.project(7), "project must be a field name or a list of field names, got 7"),
        (lambda w: w.each(["sentence", b"x"], Split(), "w2"), "each inputs: field 2 of 2 is b'x'"),
    ],
)
def test_field_lists_refuse_non_str_names(call: Any, message: str) -> None:
    _, words = _words()
    with pytest.raises(ConfigError) as info:
        call(words)
    assert str(info.value).startswith(message)


def test_string_scheme_refuses_a_non_str_field() -> None:
    with pytest.raises(ConfigError) as info:
        StringScheme(None)  # type: ignore[arg-type]
    assert str(info.value) == (
        "StringScheme fields: field 1 of 1 is None (NoneType), not a name; field names are "
        "strings of 1-63 letters, digits or underscores"
    )


def test_as_fields_keeps_valid_names() -> None:
    assert as_fields("a") == ("a",)
    assert as_fields(["a", "b_2"]) == ("a", "b_2")
    with pytest.raises(ConfigError) as info:
        as_fields(["a", "b c"], "x")
    assert str(info.value) == f"invalid field (in x) name 'b c': {NAME_RULE} (e.g. 'word_count')"


# -- txid arguments --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, 0, True, False, "3", None, 2.0])
def test_run_batch_refuses_bad_txids(bad: object) -> None:
    """The check runs before the runner reads or writes anything (``self`` is unused)."""
    with pytest.raises(ConfigError) as info:
        TopologyRunner.run_batch(object(), bad)  # type: ignore[arg-type]
    assert str(info.value) == (
        f"txid must be an integer >= 1 (not a bool, float or string), got {bad!r}"
    )


@pytest.mark.parametrize("key", ["²", "²" * 10, 3, None])
def test_parse_txid_refuses_bad_keys(key: object) -> None:
    with pytest.raises(ConfigError) as info:
        parse_txid(key)  # type: ignore[arg-type]
    assert str(info.value).startswith(f"partition key {key!r} is not a txid key")


def test_every_pair_of_name_parts_joins_into_distinct_tables() -> None:
    """The ``__`` rule, exhaustively over short names: ``<t>__<s>`` determines (t, s)."""
    alphabet = ["a", "b", "_", "x"]
    names = []
    for n in range(1, 5):
        for chars in itertools.product(alphabet, repeat=n):
            with contextlib.suppress(ConfigError):
                names.append(TridentTopology("".join(chars)).name)
    tables = {f"{t}__{s}": (t, s) for t in names for s in names}
    assert len(tables) == len(names) ** 2


@pytest.mark.parametrize("declared", ["integr", "bigint) ; DROP TABLE x; --", None])
def test_python_function_output_types_are_checked_when_constructed(declared: object) -> None:
    with pytest.raises(ConfigError) as info:
        PyFunction(lambda s: [(len(s),)], {"len": declared})  # type: ignore[dict-item]
    assert str(info.value) == (
        f"PyFunction output 'len' has unknown type {declared!r}; use one of {SPARK_TYPES}"
    )
    with pytest.raises(ConfigError) as info:
        PyMap(lambda s: s, {"u": "string", "n": declared})  # type: ignore[dict-item]
    assert str(info.value) == (
        f"PyMap output 'n' has unknown type {declared!r}; use one of {SPARK_TYPES}"
    )


def test_python_function_output_names_and_mapping_are_checked() -> None:
    with pytest.raises(ConfigError) as info:
        PyFunction(lambda s: [(s,)], {None: "string"})  # type: ignore[dict-item]
    assert str(info.value) == (
        "PyFunction output_types: field 1 of 1 is None (NoneType), not a name; field names "
        "are strings of 1-63 letters, digits or underscores"
    )
    with pytest.raises(ConfigError) as info:
        PyFlatMap(lambda s: [s], ["string"])  # type: ignore[arg-type]
    assert str(info.value) == (
        "PyFlatMap output_types must map each output field to its Spark type, e.g. "
        "{'len': 'bigint'}, got ['string']"
    )


@pytest.mark.parametrize("bad", [None, True, 0, "3"])
def test_a_state_asset_batch_refuses_bad_txids(bad: object, tmp_path: Path) -> None:
    """A state asset's batch without a txid would be applied with no commit marker."""
    db = tmp_path / "state.duckdb"
    manager = TridentIOManager(home=str(tmp_path), state_database=str(db))
    meta = state_asset_metadata("clicks", key_fields=["word"], value_field="n")
    partials = pa.table({"word": ["a"], "n": pa.array([2], pa.int64())})
    with pytest.raises(ConfigError) as info:
        manager.persist(meta, partials, bad)  # type: ignore[arg-type]
    assert str(info.value) == (
        f"txid must be an integer >= 1 (not a bool, float or string), got {bad!r}"
    )
    with DuckDBStore(db) as store:
        assert store.tables() == []
        assert store.scopes() == {}


OUTPUT_TXID = (
    "is reserved for the column holding each row's batch txid (txid; names starting with "
    "'_trident' are the store's too); give the field another name where it is made (its "
    "scheme or function), or leave it out with project(...) before the output"
)


@pytest.mark.parametrize("field", ["txid", "TxId"])
def test_an_output_field_named_txid_is_refused(tmp_path: Path, field: str) -> None:
    store = DuckDBStore(tmp_path / "state.duckdb")
    topo = TridentTopology("t")
    ev = topo.new_stream("ev", LogSpout("events", JsonScheme({field: "bigint", "n": "bigint"})))
    claims = dict(topo.claims)
    with pytest.raises(ConfigError) as info:
        ev.as_output("o")
    assert str(info.value) == f"output 'o': field {field!r} {OUTPUT_TXID}"
    assert (topo.outputs, topo.claims) == ({}, claims)  # nothing declared: the name is free
    assert ev.project(["n"]).as_output("o").fields == ("n",)
    assert store.tables() == []  # refused at declaration: no table was written
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.duckdb"]


@pytest.mark.parametrize(
    ("out_fields", "join_fields", "message"),
    [
        (["sex", "age"], ["txid"], f"output 'j_expired': field 'txid' {OUTPUT_TXID}"),
        (["id", "txid"], ["id"], f"single_join 'j' (its new values): field 'txid' {OUTPUT_TXID}"),
    ],
    ids=["join-field", "out-field"],
)
def test_a_single_join_with_a_txid_field_is_refused_whole(
    out_fields: list[str], join_fields: list[str], message: str
) -> None:
    topo = TridentTopology("t")
    g = topo.new_stream(
        "g", LogSpout("genders", JsonScheme({"id": "bigint", "txid": "bigint", "sex": "string"}))
    )
    a = topo.new_stream(
        "a", LogSpout("ages", JsonScheme({"id": "bigint", "txid": "bigint", "age": "bigint"}))
    )
    with pytest.raises(ConfigError) as info:
        topo.single_join(
            "j", [g, a], join_fields=join_fields, out_fields=out_fields, timeout_batches=2
        )
    assert str(info.value) == message
    assert (topo.states, topo.outputs) == ({}, {})

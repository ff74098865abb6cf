"""``single_join``: Storm's SingleJoinBolt as an exactly-once join across streams and batches.

Declaration (:func:`declare_single_join`, ``TridentTopology.single_join``) is pure and
validates everything up front. The join is a state of the topology (its pending halves, a
DuckDB table written in the batch's commit transaction, see
:mod:`trident_assets.backends.duckdb_join`, or records in a Redis Cluster or memcached, see
:mod:`trident_assets.spark.kv_join`) with two streams:

* the joined tuples (``out_fields``), produced during the commit, like a new-values stream;
* the expired halves, registered as output ``<name>_expired`` (the join fields, then
  ``side, arrived_txid, arrived_ts, reason, values_json``: one row per tuple Storm would fail).

The running half (``join_batch_input``, ``apply_join_state``) is in
:mod:`trident_assets.spark.single_join`: declarations never import execution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from trident_assets.core.join import SingleJoin, expired_fields
from trident_assets.core.rotating import DEFAULT_NUM_BUCKETS
from trident_assets.core.values import StateType
from trident_assets.errors import ConfigError
from trident_assets.names import MAX_IDENTIFIER_LENGTH, check_output_columns, validate_identifier
from trident_assets.spouts.config import validate_name
from trident_assets.stream.fields import Fields, as_fields, require_fields
from trident_assets.stream.graph import Node, StateSpec
from trident_assets.stream.kv_specs import KeyValueStateSpec
from trident_assets.stream.state_kinds import SINGLE_JOIN, STATE_KIND, join_kind
from trident_assets.stream.streams import Stream, TridentState

if TYPE_CHECKING:
    from trident_assets.stream.topology import TridentTopology

__all__ = [
    "SINGLE_JOIN_EXPIRED",
    "declare_single_join",
]


SINGLE_JOIN_EXPIRED = "single_join_expired"
"""Node kind of a single join's expired-halves stream (built during the commit)."""


def _check_column_lengths(name: str, spec: SingleJoin) -> None:
    """Refuse a join or side field whose pending-table column (``key_f``, ``side_s``) is too long.

    Raises:
        ConfigError: naming the field and the limit.
    """
    columns = [("join field", f, f"key_{f}") for f in spec.join_fields or ()]
    columns += [("side", s, f"side_{s}") for s in spec.sides]
    for role, field, column in columns:
        if len(column) > MAX_IDENTIFIER_LENGTH:
            msg = (
                f"single_join {name!r}: {role} {field!r} is stored as column {column!r} "
                f"({len(column)} characters, at most {MAX_IDENTIFIER_LENGTH}); use a name of "
                f"at most {MAX_IDENTIFIER_LENGTH - len(column) + len(field)} characters"
            )
            raise ConfigError(msg)


def _side_names(streams: Sequence[Stream], sides: Sequence[str] | None) -> tuple[str, ...]:
    if sides is None:
        names = tuple(
            s.node.args["spout_id"] if s.node.kind == "spout" else f"in{i}"
            for i, s in enumerate(streams)
        )
    else:
        names = as_fields(sides, "single_join sides")
    if len(names) != len(streams):
        msg = f"single_join got {len(streams)} streams but {len(names)} side names {list(names)}"
        raise ConfigError(msg)
    for name in names:
        validate_identifier(name, "join side")
    return names


def check_join_state(name: str, state: object) -> StateSpec:
    """The spec of join ``name``'s pending halves: ``state``, checked, or the default.

    The default, ``StateSpec.opaque(name)``, keeps them in the topology's store (DuckDB or
    PostgreSQL), written in the batch's commit transaction with the marker. An opaque
    ``RedisClusterState`` or ``MemcachedState`` named ``name`` keeps them on its servers,
    updated by the Spark executors (:mod:`trident_assets.spark.kv_join`).

    Raises:
        ConfigError: a key-value spec that is not opaque or has another name, or another
            name, type or object.
    """
    if state is None:
        return StateSpec.opaque(name)
    if isinstance(state, KeyValueStateSpec):
        if state.name != name or state.state_type is not StateType.OPAQUE:
            msg = (
                f"single_join {name!r}: its pending halves take an opaque {state.store} "
                f"state named like the join ({type(state).__name__}.opaque({name!r}, "
                f"servers)), got a {state.state_type.value} state named {state.name!r}"
            )
            raise ConfigError(msg)
        return state
    if not isinstance(state, StateSpec) or state != StateSpec.opaque(name):
        msg = (
            f"single_join {name!r}: state= takes StateSpec.opaque({name!r}) (the default: "
            f"its pending halves in the topology's store) or RedisClusterState.opaque / "
            f"MemcachedState.opaque({name!r}, servers), got {state!r}"
        )
        raise ConfigError(msg)
    return state


def declare_single_join(
    topology: TridentTopology,
    name: str,
    streams: Sequence[Stream],
    *,
    out_fields: Fields,
    join_fields: Fields | None = None,
    sides: Sequence[str] | None = None,
    timeout_batches: int | None = None,
    timeout_s: float | None = None,
    num_buckets: int = DEFAULT_NUM_BUCKETS,
    on_duplicate: Literal["error", "keep_latest"] = "error",
    event_time: str | None = None,
    state: StateSpec | None = None,
) -> Stream:
    """Join ``streams`` on their common fields across batches (Storm's SingleJoinBolt).

    Halves wait in state ``name`` (committed with the batch, so replays neither lose nor
    duplicate a join) until every side of their key has arrived; the joined tuples carry
    ``out_fields``, each from the first input that has it. Halves older than
    ``timeout_batches`` batches / ``timeout_s`` of ``event_time`` expire with Storm's
    bucket rotation (between the timeout and timeout x buckets/(buckets-1) after their
    first arrival) into output ``<name>_expired``. A side arriving twice for a pending
    key raises (``on_duplicate="error"``) or replaces it (``"keep_latest"``). ``sides``
    names the inputs (default: their spout ids). ``state``: where the halves are kept,
    ``StateSpec.opaque(name)`` (the default: the topology's store), or
    ``RedisClusterState.opaque(name, servers)`` / ``MemcachedState.opaque(name,
    servers)`` (the halves on those servers, updated by the Spark executors).

    Raises:
        ConfigError: fewer than two streams, a stream of another topology, bad or repeated
            side names, an out field no input has, no common field, bad timeouts, ``timeout_s``
            without ``event_time``, a join field named like an expired-output field, an out
            or join field named ``txid``, a state/output name already taken, or a ``state``
            :func:`check_join_state` refuses.
        FieldNotFoundError: ``event_time`` or a join field missing from an input.
    """
    validate_name("join", name)
    state_spec = check_join_state(name, state)
    streams = list(streams)
    if len(streams) < 2 or not all(isinstance(s, Stream) for s in streams):
        msg = f"single_join {name!r} needs at least two Streams, got {streams!r}"
        raise ConfigError(msg)
    for stream in streams:
        if stream.topology is not topology:
            msg = f"single_join {name!r}: a stream belongs to topology {stream.topology.name!r}"
            raise ConfigError(msg)
    side_names = _side_names(streams, sides)
    if len(set(side_names)) != len(side_names):
        msg = (
            f"single_join {name!r}: side names {list(side_names)} repeat; two streams of the "
            "same spout need explicit sides=[...]"
        )
        raise ConfigError(msg)
    outs = as_fields(out_fields, "single_join out_fields")
    keys = None if join_fields is None else as_fields(join_fields, "single_join join_fields")
    spec = SingleJoin(
        [(side, s.fields) for side, s in zip(side_names, streams, strict=True)],
        outs,
        join_fields=keys,
        timeout_batches=timeout_batches,
        timeout_s=timeout_s,
        num_buckets=num_buckets,
        on_duplicate=on_duplicate,
    )
    if event_time is not None:
        for side, stream in zip(side_names, streams, strict=True):
            require_fields((event_time,), stream.fields, f"single_join event_time (side {side})")
    elif timeout_s is not None:
        msg = (
            f"single_join {name!r} has timeout_s={timeout_s} but no event_time: name the field "
            "(present in every input) that holds each tuple's event time"
        )
        raise ConfigError(msg)
    _check_column_lengths(name, spec)
    if name in topology.states:
        msg = f"topology {topology.name!r} already has a state {name!r}"
        raise ConfigError(msg)
    expired_name = validate_identifier(f"{name}_expired", "expired output")
    if expired_name in topology.outputs:
        msg = f"topology {topology.name!r} already has an output {expired_name!r}"
        raise ConfigError(msg)
    check_output_columns(f"single_join {name!r} (its new values)", spec.out_fields)
    check_output_columns(f"output {expired_name!r}", expired_fields(spec))
    # both claims checked before either is recorded: a refused join declares nothing
    topology.claim(f"state {name!r}", *topology.state_names(name), check_only=True)
    topology.claim(
        f"output {expired_name!r}", *topology.output_names(expired_name), check_only=True
    )
    node = Node(
        SINGLE_JOIN,
        tuple(spec.out_fields),
        tuple(s.node for s in streams),
        {SINGLE_JOIN: spec, "event_time": event_time, "spec": state_spec}
        | {STATE_KIND: join_kind(state_spec)},
    )
    topology.check_exactly_once(state_spec, node)
    joined = TridentState(topology, state_spec, node, tuple(spec.join_fields or ()), None)
    topology.register_state(joined)
    expired = Node(SINGLE_JOIN_EXPIRED, expired_fields(spec), (), {"state": joined})
    Stream(topology, expired).as_output(expired_name)
    return joined.new_values_stream()

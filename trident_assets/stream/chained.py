"""``chained_agg``: several aggregators over the same tuples in one pass (Trident's chainedAgg).

``stream.chained_agg().aggregate("n", Count(), "c").aggregate("n", Sum(), "s").chain_end()``
emits one tuple per batch (per group when the stream is grouped) holding every aggregator's
output, in order: ``group + [c, s]``. ``partition_aggregate`` steps aggregate each Spark
partition instead; one chain cannot mix the two (as Trident). Aggregators are combiners (one
input field) or reducers; Python ones declare ``output_type`` (as for ``partition_aggregate``).
A global chain of ``aggregate`` steps emits exactly one tuple even for an empty batch (each
combiner's ``zero()``, each reducer's ``init()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic

from trident_assets.core.aggregators import Aggregator, check_aggregator
from trident_assets.errors import ConfigError
from trident_assets.stream.fields import Fields, as_fields, check_distinct, require_fields
from trident_assets.stream.graph import StreamT

__all__ = [
    "CHAINED_AGG",
    "ChainedAggregatorDeclarer",
    "ChainedStep",
    "aggregator_step",
]

CHAINED_AGG = "chained_agg"
"""The node kind of a chain."""


@dataclass(frozen=True, slots=True)
class ChainedStep:
    """One aggregator of a chain: its input fields, the aggregator and its output field."""

    inputs: tuple[str, ...]
    agg: Aggregator
    output: str


class ChainedAggregatorDeclarer(Generic[StreamT]):
    """Collects the aggregators of a chain; :meth:`chain_end` declares the node."""

    def __init__(self, stream: StreamT, group: tuple[str, ...] = ()) -> None:
        """Start a chain over ``stream`` (grouped by ``group`` when not empty)."""
        self._stream = stream
        self._group = group
        self._steps: list[ChainedStep] = []
        self._full: bool | None = None

    def aggregate(
        self,
        inputs: Fields,
        agg: Aggregator,
        outputs: Fields,
    ) -> ChainedAggregatorDeclarer[StreamT]:
        """Add an aggregator over the whole batch (per group)."""
        return self._add(True, inputs, agg, outputs)

    def partition_aggregate(
        self,
        inputs: Fields,
        agg: Aggregator,
        outputs: Fields,
    ) -> ChainedAggregatorDeclarer[StreamT]:
        """Add an aggregator over each Spark partition (per group)."""
        return self._add(False, inputs, agg, outputs)

    def _add(
        self,
        full: bool,
        inputs: Fields,
        agg: Any,
        outputs: Fields,
    ) -> ChainedAggregatorDeclarer[StreamT]:
        operation = "chained_agg " + ("aggregate" if full else "partition_aggregate")
        step = aggregator_step(self._stream.fields, (), inputs, agg, outputs, operation)
        if self._full is not None and self._full != full:
            msg = (
                "chained_agg: tried to chain different types of aggregation "
                "(aggregate and partition_aggregate)"
            )
            raise ConfigError(msg)
        self._full = full
        self._steps.append(step)
        return self

    def chain_end(self) -> StreamT:
        """Declare the chain: ``group`` + each aggregator's output field.

        Raises:
            ConfigError: no aggregator, repeated output fields, or one that is a group field.
        """
        if not self._steps:
            msg = "chained_agg needs at least one aggregator before chain_end()"
            raise ConfigError(msg)
        outs = [step.output for step in self._steps]
        if len(set(outs)) != len(outs):
            msg = f"Output fields for chained aggregators must be distinct: {outs}"
            raise ConfigError(msg)
        check_distinct(outs, self._group, "chained_agg")
        return self._stream.derive(
            CHAINED_AGG,
            (*self._group, *outs),
            group=self._group,
            steps=tuple(self._steps),
            full=self._full,
        )


def aggregator_step(
    fields: Sequence[str],
    group: Sequence[str],
    inputs: Fields,
    agg: Any,
    outputs: Fields,
    operation: str,
) -> ChainedStep:
    """One aggregator of ``operation`` over a stream of ``fields`` grouped by ``group``, checked.

    Raises:
        ConfigError: not one output field, an output that is a group field, or an aggregator
            ``check_aggregator`` refuses.
        FieldNotFoundError: an input field the stream does not have.
    """
    ins = as_fields(inputs, f"{operation} inputs")
    require_fields(ins, fields, operation)
    outs = as_fields(outputs, f"{operation} outputs")
    if len(outs) != 1:
        msg = f"{operation} emits one field per aggregator, got {list(outs)}"
        raise ConfigError(msg)
    check_distinct(outs, group, operation)
    check_aggregator(agg, ins, operation)
    return ChainedStep(ins, agg, outs[0])

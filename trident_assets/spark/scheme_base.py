"""The base of every scheme: decoding raw log records into fields and dead letters on Spark.

A :class:`Scheme` names its fields and says how to compute them (:meth:`Scheme.columns`);
:meth:`Scheme.decode` splits the records into decoded tuples and dead letters, with Columns
built once per Spark session. The schemes users pick are in :mod:`trident_assets.spark.schemes`.
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from trident_assets.stream.fields import as_fields

__all__ = ["DEAD_LETTER_COLUMNS", "Scheme", "utf8", "utf8_error"]

META_FIELDS = ("topic", "partition", "offset", "timestamp")
"""Record metadata fields a scheme can add (``with_metadata=True``)."""

DEAD_LETTER_COLUMNS = ("topic", "partition", "offset", "reason", "value")
"""The columns of a scheme's dead letters."""


@dataclass(frozen=True)
class _Decoding:
    """The Columns of :meth:`Scheme.decode` for one ``keep``: built once per Spark session."""

    stages: list[list[Any]]
    staged_once: Any
    """The decoded fields, error and record columns, as a one-row generator per record: the
    filters that split good records from dead letters cannot be pushed below it, so each
    stage (a JSON parse) is computed once per record, not again in every filter."""
    dead_count: Any
    is_good: Any
    good: list[Any]
    is_dead: Any
    dead: list[Any]


_DECODINGS: weakref.WeakKeyDictionary[Scheme, tuple[Any, dict[tuple[str, ...], _Decoding]]] = (
    weakref.WeakKeyDictionary()
)
"""Per scheme: the Spark session its Columns were built in, and its decodings per ``keep``."""


class Scheme(ABC):
    """Decodes the ``value`` (and ``key``) bytes of log records into named fields."""

    def __init__(self, fields: tuple[str, ...], with_metadata: bool) -> None:
        """Declare the output fields (metadata fields appended when requested)."""
        self.with_metadata = with_metadata
        self.fields = (*fields, *META_FIELDS) if with_metadata else fields
        as_fields(self.fields, f"{type(self).__name__} fields")

    @abstractmethod
    def columns(self) -> tuple[dict[str, Any], Any]:
        """Return ``({field: Column}, error Column)``; the error is null for good records.

        Called once per Spark session (:meth:`decode` reuses the Columns for every batch),
        so the Columns must depend on the scheme's settings only.
        """

    def stages(self) -> list[dict[str, Any]]:
        """Columns computed before :meth:`columns`', one projection per stage, in order.

        For expressions that several of :meth:`columns`' Columns use: computed once per
        record, and the plan Spark analyses for every batch stays small. Each stage's
        Columns may read the raw record's columns and the earlier stages' names; names
        start with ``__scheme_`` and are dropped after decoding. Default: none.
        """
        return []

    def _decoding(self, session: Any, keep: tuple[str, ...]) -> _Decoding:
        """The Columns of :meth:`decode`, built once per Spark session and ``keep``.

        Building a Column costs JVM round trips per function call (a strict
        :class:`JsonScheme`'s checks take hundreds); Columns are unresolved expressions,
        valid in any DataFrame of the session.
        """
        try:
            cached = _DECODINGS.get(self)
        except TypeError:  # unhashable (a subclass defining __eq__ only): nothing cached
            return self._build_decoding(keep)
        if cached is None or cached[0] is not session:
            cached = (session, {})
            _DECODINGS[self] = cached
        if keep not in cached[1]:
            cached[1][keep] = self._build_decoding(keep)
        return cached[1][keep]

    def _build_decoding(self, keep: tuple[str, ...]) -> _Decoding:
        """The Columns of :meth:`decode` (see :meth:`_decoding`)."""
        from pyspark.sql import functions as F

        stages = [
            [F.col("*"), *[col.alias(name) for name, col in stage.items()]]
            for stage in self.stages()
        ]
        values, error = self.columns()
        meta = META_FIELDS if self.with_metadata else ()
        record = ("topic", "partition", "offset", "timestamp", "value", *keep)
        failed = F.col("__error")
        staged = [
            *[col.alias(f"__f_{name}") for name, col in values.items()],
            error.alias("__error"),
            *[F.col(c) for c in record],
        ]
        return _Decoding(
            stages=stages,
            staged_once=F.inline(F.array(F.struct(*staged))),
            dead_count=F.count(failed).alias("dead"),
            is_good=failed.isNull(),
            good=[
                *[F.col(f"__f_{name}").alias(name) for name in values],
                *[F.col(name) for name in meta],
                *[F.col(c) for c in keep],
            ],
            is_dead=failed.isNotNull(),
            dead=[
                *[F.col(c) for c in ("topic", "partition", "offset")],
                failed.alias("reason"),
                F.col("value"),
                *[F.col(c) for c in keep],
            ],
        )

    def decode(
        self, raw: Any, *, keep: tuple[str, ...] = (), observation: Any = None
    ) -> tuple[Any, Any]:
        """Split ``raw`` records into (decoded tuples, dead letters).

        ``keep``: further columns of ``raw`` carried into both results (e.g. a txid tag).
        ``observation``: a ``pyspark.sql.Observation`` that receives ``dead``, the number of
        records that failed, from the first action over the decoded tuples (so dead
        letters need a Spark job of their own only when there are any).
        """
        return self.split_staged(self.staged(raw, keep=keep), keep=keep, observation=observation)

    def staged(self, raw: Any, *, keep: tuple[str, ...] = ()) -> Any:
        """``raw`` records with their decoded fields and error, not yet split (see :meth:`decode`).

        Columns: ``__f_<field>`` per field of :meth:`columns`, ``__error`` (null for a good
        record), ``topic, partition, offset, timestamp, value`` and ``keep``.
        """
        columns = self._decoding(raw.sparkSession, tuple(keep))
        for stage in columns.stages:
            raw = raw.select(*stage)
        return raw.select(columns.staged_once)

    def split_staged(
        self, staged: Any, *, keep: tuple[str, ...] = (), observation: Any = None
    ) -> tuple[Any, Any]:
        """:meth:`staged` records split into (decoded tuples, dead letters), as :meth:`decode`."""
        columns = self._decoding(staged.sparkSession, tuple(keep))
        if observation is not None:
            staged = staged.observe(observation, columns.dead_count)
        good = staged.where(columns.is_good).select(*columns.good)
        dead = staged.where(columns.is_dead).select(*columns.dead)
        return good, dead


def utf8(column: str) -> tuple[Any, Any]:
    """The column decoded as UTF-8 and an error if it is null or not valid UTF-8."""
    from pyspark.sql import functions as F

    text = F.col(column).cast("string")
    return text, utf8_error(column, text)


def utf8_error(column: str, text: Any) -> Any:
    """An error if ``column`` is null or ``text`` (the column as a string) is not valid UTF-8."""
    from pyspark.sql import functions as F

    return F.when(F.col(column).isNull(), F.lit(f"{column} is null")).when(
        ~F.is_valid_utf8(text), F.lit(f"{column} is not valid UTF-8")
    )

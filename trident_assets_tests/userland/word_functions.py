"""User code for every kind of Trident user function: ordinary Python in a user's module."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd
import pyarrow as pa

from trident_assets import CombinerAggregator, ReducerAggregator
from trident_assets.stream.queries import QueryFunction
from trident_assets.stream.topology import StateUpdater

FAIL_ON = "kaboom"
"""A word that makes ``split_words`` raise (the tests' poison record)."""


def split_words(sentence: str) -> Iterator[tuple[str]]:
    """PyFunction: one output tuple per word."""
    for word in sentence.split():
        if word == FAIL_ON:
            raise ValueError(f"cannot split a sentence containing {word!r}")
        yield (word,)


def longer_than_two(word: str) -> bool:
    """PyFilter: keep words of three letters or more."""
    return len(word) > 2


def shout(sentence: str, word: str) -> tuple[str, int]:
    """PyMap over every field: the word upper-cased and its length."""
    return word.upper(), len(word)


def positions(sentence: str) -> list[tuple[str, int]]:
    """PyFlatMap: each word with its position in the sentence."""
    return [(word, i) for i, word in enumerate(sentence.split())]


def with_length(pdf: pd.DataFrame) -> pd.DataFrame:
    """PandasMap: the word and its length, vectorised."""
    return pdf.assign(length=pdf["word"].str.len())


def vowels(pdf: pd.DataFrame) -> pd.DataFrame:
    """PandasFlatMap: one row per vowel occurrence of each word."""
    letters = pdf.assign(vowel=pdf["word"].map(lambda w: [c for c in w if c in "aeiou"]))
    return letters.explode("vowel").dropna(subset=["vowel"])[["word", "vowel"]]


class Letters(CombinerAggregator[int]):
    """A Python combiner: total letters of the input words."""

    output_type = "bigint"

    def init(self, values: tuple[Any, ...]) -> int:
        return len(values[0])

    def combine(self, a: int, b: int) -> int:
        return a + b

    def zero(self) -> int:
        return 0


class Occurrences(ReducerAggregator[int]):
    """A Python reducer: how many tuples."""

    output_type = "bigint"

    def init(self) -> int:
        return 0

    def reduce(self, acc: int, values: tuple[Any, ...]) -> int:
        return acc + 1


class WithE(ReducerAggregator[int]):
    """A Python reducer: how many words contain an 'e'."""

    output_type = "bigint"

    def init(self) -> int:
        return 0

    def reduce(self, acc: int, values: tuple[Any, ...]) -> int:
        return acc + ("e" in values[0])


class Doubled(QueryFunction):
    """A QueryFunction: twice the committed count of each word (0 when absent)."""

    def batch_retrieve(self, state: Any, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        return [2 * (v or 0) for v in state.multi_get([tuple(a) for a in args])]


class FirstSeen(StateUpdater):
    """A StateUpdater: the txid in which each word was first seen (one SQL statement)."""

    def update_state(self, store: Any, table: str, batch: pa.Table, txid: int | None) -> Any:
        store.conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{table}" (word VARCHAR PRIMARY KEY, txid BIGINT)'
        )
        with store.registered(batch) as name:
            return store.conn.sql(
                f'INSERT INTO "{table}" SELECT DISTINCT word, ? FROM {name} '
                "ON CONFLICT DO NOTHING RETURNING word, txid AS first_txid",
                params=[txid],
            ).to_arrow_table()

"""Driver-side Arrow tables into Spark in slices (``spark/arrow_transfer.py``), locally.

The same path under Spark Connect and on a standalone cluster (every query lookup, new-values
stream and join output sent in slices of 3 rows) runs in ``test_code_shipping.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from trident_assets.spark.arrow_transfer import MAX_ROWS_CONF, max_rows_for, to_spark


def _table(n: int) -> pa.Table:
    return pa.table(
        {
            "word": pa.array([f"w{i}" for i in range(n)], pa.string()),
            "n": pa.array(range(n), pa.int64()),
            "nothing": pa.nulls(n, pa.null()),
        }
    )


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


@pytest.mark.parametrize("max_rows", [3, 10, 11, 0])
def test_slices_give_exactly_the_table(spark: Any, max_rows: int) -> None:
    """10 rows in slices of 3 (4 slices, the last of 1), 10, 11 or one piece."""
    df = to_spark(spark, _table(10), max_rows=max_rows)
    assert df.columns == ["word", "n", "nothing"]
    assert [f.dataType.simpleString() for f in df.schema.fields] == ["string", "bigint", "void"]
    assert _rows(df) == sorted((f"w{i}", i, None) for i in range(10))


def test_empty_table_keeps_its_schema(spark: Any) -> None:
    df = to_spark(spark, _table(0), max_rows=3)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("word", "string"),
        ("n", "bigint"),
        ("nothing", "void"),
    ]
    assert df.count() == 0


@pytest.fixture
def max_rows_conf(spark: Any) -> Iterator[None]:
    spark.conf.set(MAX_ROWS_CONF, "4")
    yield
    spark.conf.unset(MAX_ROWS_CONF)


def test_limit_comes_from_the_session_conf(spark: Any, max_rows_conf: None) -> None:
    assert max_rows_for(spark) == 4
    assert _rows(to_spark(spark, _table(9))) == sorted((f"w{i}", i, None) for i in range(9))


def test_classic_sessions_send_one_piece_by_default(spark: Any) -> None:
    assert max_rows_for(spark) == 0

"""Shared fixtures: one local SparkSession for the whole session; every file under tmp_path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local[2] SparkSession shared by every test that needs Spark."""
    from trident_assets.spark.session import build_spark_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = build_spark_session(
        {"spark.sql.warehouse.dir": str(warehouse), "spark.local.dir": str(warehouse)}
    )
    yield session
    session.stop()

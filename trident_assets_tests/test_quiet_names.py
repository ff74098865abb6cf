"""No noise: live definitions load without a BetaWarning; names that left ``ta`` say where.

The shipped code location in live mode (``TRIDENT_LIVE=all``, as ``trident ui --live`` sets)
is loaded as Dagster's code server loads it (the module, then its repository), in a child
process with a clean environment and Dagster's BetaWarning turned into an error. A name that
``import trident_assets as ta`` no longer has fails with an AttributeError naming its module.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import trident_assets as ta
from trident_assets_tests.children import clean_env, run_python

LOAD = """
import warnings
import dagster as dg
warnings.simplefilter("error", dg.BetaWarning)
import trident_assets.definitions as location
repo = location.defs.get_repository_def()
print(sorted(s.name for s in repo.sensor_defs if s.has_jobs))
print(sorted(repo.get_job("word_count_live").resource_defs))
"""


def test_live_code_location_loads_without_a_beta_warning(tmp_path: Path) -> None:
    env = clean_env(tmp_path, TRIDENT_HOME=str(tmp_path / "home"), TRIDENT_LIVE="all")
    done = run_python(tmp_path, LOAD, env=env)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    sensors, resources = done.stdout.splitlines()
    assert sensors == str(
        [f"{t}_coordinator" for t in ("gender_age", "location_db", "page_views", "word_count")]
    ), "each coordinator launches its topology's live job"
    assert resources == str(["io_manager", "pyspark", "trident", "trident_io_manager"])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "MemoryBackingMap",
            "module 'trident_assets' has no attribute 'MemoryBackingMap': it moved, `from "
            "trident_assets.backends.memory import MemoryBackingMap` (internal; or use "
            "ta.MemoryStore().map(name))",
        ),
        (
            "DuckDBBackingMap",
            "module 'trident_assets' has no attribute 'DuckDBBackingMap': it moved, `from "
            "trident_assets.backends.duckdb_store import DuckDBBackingMap` (internal; or use "
            "ta.DuckDBStore(path).map(table))",
        ),
        (
            "GLOBAL_KEY",
            "module 'trident_assets' has no attribute 'GLOBAL_KEY': it moved, `from "
            "trident_assets.core.caching import GLOBAL_KEY` (internal)",
        ),
        (
            "commit_batch",
            "module 'trident_assets' has no attribute 'commit_batch': it moved, `from "
            "trident_assets.core.commit import commit_batch` (internal; or use "
            "ta.TopologyRunner.run_batches)",
        ),
    ],
)
def test_a_name_that_left_the_package_says_where_it_went(name: str, message: str) -> None:
    with pytest.raises(AttributeError) as raised:
        getattr(ta, name)
    assert str(raised.value) == message
    where = message.split("`from ")[1].split(" import ")[0]
    module = __import__(where, fromlist=[name])
    assert hasattr(module, name), "the import the message gives works"


def test_an_unknown_name_is_a_plain_attribute_error() -> None:
    with pytest.raises(AttributeError) as raised:
        ta.NoSuchName  # noqa: B018
    assert str(raised.value) == "module 'trident_assets' has no attribute 'NoSuchName'"

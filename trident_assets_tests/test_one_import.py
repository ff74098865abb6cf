"""``import trident_assets as ta``: every public name resolves, and the import stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import trident_assets as ta

HEAVY = ("pyspark", "dagster", "duckdb", "confluent_kafka", "pyarrow")


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={"HOME": str(cwd), "PATH": "/usr/local/bin:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_import_trident_assets_imports_no_spark_dagster_or_duckdb(tmp_path: Path) -> None:
    code = f"import sys, trident_assets\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = _python(code, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[]\n", "")


def test_every_public_name_resolves_in_a_fresh_interpreter(tmp_path: Path) -> None:
    code = (
        "import trident_assets as ta\n"
        "missing = [n for n in ta.__all__ if getattr(ta, n, None) is None]\n"
        "print(len(ta.__all__), missing)"
    )
    done = _python(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{len(ta.__all__)} []\n"


def test_what_a_user_writes_is_in_all() -> None:
    wanted = {
        "TridentTopology", "StateSpec", "LogSpout", "KafkaSpout", "PartitionedLog",
        "StringScheme", "JsonScheme", "Split", "PyMap", "PyFilter", "FilterNull", "MapGet",
        "Count", "Sum", "SpoutConfig", "SpoutKind", "TopologyRunner", "build_spark_session",
        "trident_definitions", "TridentResource", "TridentIOManager", "DuckDBStore",
    }  # fmt: skip
    assert wanted - set(ta.__all__) == set()
    assert len(ta.__all__) == len(set(ta.__all__))
    assert ta.TridentTopology.__module__ == "trident_assets.stream.topology"
    assert "TridentTopology" in dir(ta)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError) as caught:
        ta.NoSuchThing  # noqa: B018
    assert str(caught.value) == "module 'trident_assets' has no attribute 'NoSuchThing'"


def test_every_error_and_outcome_is_exported_and_internals_are_not() -> None:
    import inspect

    from trident_assets import errors

    classes = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value)
        and issubclass(value, Exception)
        and value.__module__ == errors.__name__
    }
    assert classes - set(ta.__all__) == set()
    assert {"BatchOutcome", "StateOutcome"} <= set(ta.__all__)
    assert ta.BatchOutcome.__module__ == "trident_assets.runtime.outcomes"
    internals = {
        "commit_batch", "CommitResult", "GLOBAL_KEY", "ChunkedMap", "MemoryBackingMap",
        "DuckDBBackingMap", "JSONOpaqueSerializer", "JSONTransactionalSerializer",
        "JSONNonTransactionalSerializer",
    }  # fmt: skip
    assert internals & set(ta.__all__) == set()
    for name in sorted(internals):
        with pytest.raises(AttributeError):
            getattr(ta, name)

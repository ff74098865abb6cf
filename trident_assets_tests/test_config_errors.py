"""Configuration errors fail before any write, naming the field (issue 17, item 4).

Every case builds a config object (or runs a CLI command) with one bad field: a wrong type,
a negative size, an unknown or a missing field. Each must raise before anything is written,
with a message naming the field; CLI options are refused as usage errors (exit 2) or as
``error:`` lines (exit 1), and the home stays empty.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from trident_assets.backends.compaction import CompactionPolicy
from trident_assets.cli import app
from trident_assets.errors import ConfigError
from trident_assets.spouts.config import SpoutConfig, StartPosition

CASES: list[tuple[str, Callable[[], Any], type[BaseException], str]] = [
    ("spout size type", lambda: SpoutConfig(max_batch_size="x"), ConfigError,
     "SpoutConfig max_batch_size must be an int or None, got 'x'"),
    ("spout size negative", lambda: SpoutConfig(max_batch_size=-1), ConfigError,
     "max_batch_size must be >= 1 or None (unlimited), got -1"),
    ("spout timestamp negative", lambda: SpoutConfig(start_timestamp_ms=-5), ConfigError,
     "SpoutConfig start_timestamp_ms must be >= 0 (epoch ms), got -5"),
    ("spout timestamp missing", lambda: SpoutConfig(start=StartPosition.TIMESTAMP), ConfigError,
     "start position TIMESTAMP needs start_timestamp_ms (epoch ms)"),
    ("spout flag type", lambda: SpoutConfig(ignore_stored_offsets="yes"), ConfigError,
     "SpoutConfig ignore_stored_offsets must be a bool, got 'yes'"),
    ("spout unknown field", lambda: SpoutConfig(bogus=1), TypeError,
     "SpoutConfig.__init__() got an unexpected keyword argument 'bogus'"),
    ("compaction ratio type", lambda: CompactionPolicy(ratio="1"), ConfigError,
     "CompactionPolicy ratio must be a number > 0, got '1'"),
    ("compaction rows type", lambda: CompactionPolicy(min_rows="a"), ConfigError,
     "CompactionPolicy min_rows must be an int >= 0, got 'a'"),
    ("compaction rows negative", lambda: CompactionPolicy(min_rows=-1), ConfigError,
     "CompactionPolicy needs ratio > 0 and min_rows >= 0, got "
     "CompactionPolicy(ratio=1.0, min_rows=-1)"),
    ("compaction unknown field", lambda: CompactionPolicy(foo=1), TypeError,
     "CompactionPolicy.__init__() got an unexpected keyword argument 'foo'"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "build", "error", "message"), CASES, ids=[c[0] for c in CASES])
def test_config_objects_name_the_bad_field(
    case: str, build: Callable[[], Any], error: type[BaseException], message: str
) -> None:
    with pytest.raises(error) as info:
        build()
    assert str(info.value) == message


GE = "Input should be greater than or equal to"
CLI_CASES: list[tuple[list[str], int, str]] = [
    (["log", "create-topic", "t", "--partitions", "x"], 2,
     "Invalid value for '--partitions' / '-p': Input should be a valid integer, "
     "unable to parse string as an integer"),
    (["log", "tail", "t", "-n", "0"], 2, f"Invalid value for '-n' / '--lines': {GE} 1"),
    (["log", "verify", "--bogus"], 2, "No such option: --bogus"),
    (["state", "backup"], 2, "Missing argument 'dest'."),
    (["state", "backup", "b.duckdb", "--wait", "-1"], 2, f"Invalid value for '--wait': {GE} 0"),
    (["state", "restore", "b.duckdb", "--force=maybe"], 2,
     "Option '--force' does not take a value."),
    (["log", "produce", "t", "--partitioner", "nope"], 1,
     "error: unknown partitioner 'nope': use hash or round_robin\n"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "code", "text"), CLI_CASES, ids=[" ".join(c[0]) for c in CLI_CASES]
)
def test_cli_options_are_refused_before_any_write(
    tmp_path: Path, args: list[str], code: int, text: str
) -> None:
    home = tmp_path / "home"
    result = CliRunner().invoke(app, [*args, "--home", str(home)])
    assert result.exit_code == code, result.output
    if code == 1:
        assert result.stderr == text
    else:
        assert text in " ".join(result.stderr.replace("│", " ").split())
    assert not home.exists()

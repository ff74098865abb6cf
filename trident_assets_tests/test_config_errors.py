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

import pydantic
import pytest
from typer.testing import CliRunner

from trident_assets.backends.compaction import CompactionPolicy
from trident_assets.cli import app
from trident_assets.core.retry import ExponentialBackoff
from trident_assets.dagster.checks import CheckSettings
from trident_assets.dagster.io_manager import TridentIOManager
from trident_assets.dagster.resources import TridentResource
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
    ("checks threshold negative", lambda: CheckSettings(dead_letter_threshold=-1), ConfigError,
     "CheckSettings.dead_letter_threshold must be a fraction between 0 and 1 (0.01 = 1%), "
     "got -1"),
    ("checks threshold type", lambda: CheckSettings(dead_letter_threshold="1%"), ConfigError,
     "CheckSettings.dead_letter_threshold must be a fraction between 0 and 1 (0.01 = 1%), "
     "got '1%'"),
    ("checks lag negative", lambda: CheckSettings(max_lag=-1), ConfigError,
     "CheckSettings.max_lag must be an integer >= 0 (records), got -1"),
    ("checks flag type", lambda: CheckSettings(exactly_once="yes"), ConfigError,
     "CheckSettings.exactly_once must be True or False, got 'yes'"),
    ("checks unknown field", lambda: CheckSettings(max_lagg=5), TypeError,
     "CheckSettings.__init__() got an unexpected keyword argument 'max_lagg'"),
    ("kafka tasks type", lambda: kafka(tasks="2"), ConfigError,
     "KafkaSpout tasks must be an integer >= 1 or None, got '2'"),
    ("kafka tasks zero", lambda: kafka(tasks=0), ConfigError,
     "KafkaSpout tasks must be an integer >= 1 or None, got 0"),
    ("kafka timeout type", lambda: kafka(timeout_s="x"), ConfigError,
     "KafkaSpout timeout_s must be a number of seconds > 0, got 'x'"),
    ("kafka timeout negative", lambda: kafka(timeout_s=-1), ConfigError,
     "KafkaSpout timeout_s must be a number of seconds > 0, got -1"),
    ("kafka retry type", lambda: kafka(retry="x"), ConfigError,
     "KafkaSpout retry must be an ExponentialBackoff or None, got 'x'"),
    ("kafka consumer config type", lambda: kafka(consumer_config=[1]), ConfigError,
     "KafkaSpout consumer_config must be a mapping of settings, got [1]"),
    ("kafka servers missing", lambda: kafka(bootstrap_servers=""), ConfigError,
     "KafkaSpout needs bootstrap_servers (host:port,...), e.g. '127.0.0.1:9092', got ''"),
    ("kafka unknown field", lambda: kafka(group="g"), TypeError,
     "KafkaSpout.__init__() got an unexpected keyword argument 'group'"),
    ("backoff negative", lambda: ExponentialBackoff(initial_delay_s=-1), ConfigError,
     "initial_delay_s must be a finite number of seconds >= 0, got -1"),
]  # fmt: skip


def kafka(**kw: Any) -> Any:
    from trident_assets.kafka.spout import KafkaSpout
    from trident_assets.spark.schemes import StringScheme

    return KafkaSpout("t", StringScheme("s"), **({"bootstrap_servers": "127.0.0.1:9092"} | kw))


@pytest.mark.parametrize(("case", "build", "error", "message"), CASES, ids=[c[0] for c in CASES])
def test_config_objects_name_the_bad_field(
    case: str, build: Callable[[], Any], error: type[BaseException], message: str
) -> None:
    with pytest.raises(error) as info:
        build()
    assert str(info.value) == message


RESOURCE_CASES: list[tuple[str, Callable[[], Any], str, str]] = [
    ("resource unknown field", lambda: TridentResource(max_spout_pendng=2), "max_spout_pendng",
     "Extra inputs are not permitted"),
    ("resource pending zero", lambda: TridentResource(max_spout_pending=0), "max_spout_pending",
     "Input should be greater than or equal to 1"),
    ("resource keep type", lambda: TridentResource(keep_txids="many"), "keep_txids",
     "Input should be a valid integer"),
    ("resource home type", lambda: TridentResource(home=5), "home",
     "Input should be a valid string"),
    ("resource crash point", lambda: TridentResource(crash_at="later"), "crash_at",
     "crash_at must be one of after_emit, after_state_write, before_commit, after_commit"),
    ("resource remote url", lambda: TridentResource(spark_remote="http://h:15002"), "spark_remote",
     "spark_remote must be a Spark Connect URL sc://host:port, got 'http://h:15002'"),
    ("io manager unknown field", lambda: TridentIOManager(home_dir="x"), "home_dir",
     "Extra inputs are not permitted"),
    ("io manager keep zero", lambda: TridentIOManager(keep_txids=0), "keep_txids",
     "Input should be greater than or equal to 1"),
    ("io manager home missing", lambda: TridentIOManager(home=None), "home",
     "Input should be a valid string"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "build", "field", "message"), RESOURCE_CASES, ids=[c[0] for c in RESOURCE_CASES]
)
def test_dagster_config_names_the_bad_field(
    case: str, build: Callable[[], Any], field: str, message: str
) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        build()
    [error] = info.value.errors()
    assert error["loc"] == (field,)
    assert message in error["msg"]


def test_spark_remote_else_the_ui_variable_else_local(monkeypatch: pytest.MonkeyPatch) -> None:
    from trident_assets.dagster.factory import pyspark_resource

    monkeypatch.delenv("TRIDENT_SPARK_REMOTE", raising=False)
    local = TridentResource()
    assert local.connect_url is None
    assert local.spark_target.startswith("Spark master local[")
    assert "spark.remote" not in pyspark_resource(local).spark_config
    monkeypatch.setenv("TRIDENT_SPARK_REMOTE", "sc://127.0.0.1:15002")
    ui = TridentResource()
    assert ui.connect_url == "sc://127.0.0.1:15002"
    assert ui.spark_target == "Spark Connect sc://127.0.0.1:15002"
    assert pyspark_resource(ui).spark_config == {"spark.remote": "sc://127.0.0.1:15002"}
    own = TridentResource(spark_remote="sc://cluster:15002")
    assert own.connect_url == "sc://cluster:15002", "the resource's own setting wins"
    monkeypatch.setenv("TRIDENT_SPARK_REMOTE", "cluster:15002")
    with pytest.raises(ConfigError) as info:
        TridentResource().connect_url  # noqa: B018
    assert str(info.value) == (
        "TRIDENT_SPARK_REMOTE='cluster:15002' is not a Spark Connect URL: set it to "
        "sc://host:port, or unset it for local Spark"
    )


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
    (["quarantine", "add", "t", "0"], 2, f"Invalid value for 'txid': {GE} 1"),
    (["quarantine", "replay", "t", "--txid", "x"], 2, "Invalid value for '--txid'"),
    (["quarantine", "list", "--format", "xml"], 2, "Invalid value for '--format'"),
    (["status", "--format", "xml"], 2, "Invalid value for '--format'"),
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

"""Tests of the log's command line (``trident log ...``) through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trident_assets.cli.log import log_app, log_root
from trident_assets.log import PartitionedLog, kafka_partition


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def _ok(runner: CliRunner, args: list[str], **kwargs: object):  # type: ignore[no-untyped-def]
    result = runner.invoke(log_app, args, catch_exceptions=False, **kwargs)  # type: ignore[arg-type]
    assert result.exit_code == 0, result.output
    return result


def test_create_produce_offsets_tail(runner: CliRunner, tmp_path: Path) -> None:
    home = tmp_path / "home"
    h = ["--home", str(home)]
    assert (
        "created topic words with 2"
        in _ok(runner, ["create-topic", "words", "--partitions", "2", *h]).output
    )
    out = _ok(
        runner, ["produce", "words", "--partitioner", "round_robin", *h], input="one\ntwo\nthree\n"
    ).output
    assert "produced 3 record(s) to words" in out
    assert "partition 0: 2 record(s), offsets 0..1" in out
    assert "partition 1: 1 record(s), offsets 0..0" in out
    log = PartitionedLog(log_root(home))
    assert log.read("words", 0, 0, 1).column("value").to_pylist() == [b"one", b"three"]

    offsets = _ok(runner, ["offsets", "words", *h]).output
    lines = [line.replace("┃", "│") for line in offsets.splitlines()]
    rows = [line.split("│") for line in lines if line.count("│") == 5]
    cells = [[c.strip() for c in row[1:-1]] for row in rows]
    assert cells == [
        ["partition", "earliest", "latest", "records"],
        ["0", "0", "2", "2"],
        ["1", "0", "1", "1"],
    ]

    tail = _ok(runner, ["tail", "words", "-n", "1", "--format", "csv", *h]).output.splitlines()
    assert tail[0] == "partition,offset,timestamp,key,value"
    assert [line.split(",")[:2] + line.split(",")[3:] for line in tail[1:]] == [
        ["0", "1", "null", "three"],
        ["1", "0", "null", "two"],
    ]
    assert tail[1].split(",")[2].endswith("+00:00")
    table = _ok(runner, ["tail", "words", "-n", "1", *h]).output.splitlines()
    assert table[0] == "topic words: last 1 per partition"
    assert [c.strip() for c in table[2].split("┃")[1:-1]] == [
        "partition", "offset", "timestamp", "key", "value"
    ]  # fmt: skip


def test_produce_with_key_separator_from_file(runner: CliRunner, tmp_path: Path) -> None:
    h = ["--home", str(tmp_path)]
    _ok(runner, ["create-topic", "kv", "--partitions", "3", *h])
    data = tmp_path / "in.txt"
    data.write_bytes(b"21\tfirst\r\nfoobar\tsecond\n21\tthird\tstill value\nabc\t")
    _ok(runner, ["produce", "kv", "--file", str(data), "--key-sep", "TAB", *h])
    log = PartitionedLog(tmp_path / "log")
    p21 = kafka_partition(b"21", 3)
    rows = log.read("kv", p21, 0, log.latest_offset("kv", p21) - 1).to_pylist()
    assert [(r["key"], r["value"]) for r in rows if r["key"] == b"21"] == [
        (b"21", b"first"),
        (b"21", b"third\tstill value"),
    ]
    pabc = kafka_partition(b"abc", 3)
    end = log.latest_offset("kv", pabc) - 1
    last = log.read("kv", pabc, end, end)
    assert last.to_pylist()[0]["value"] == b""
    assert sum(i.latest for i in log.partition_offsets("kv")) == 4


def test_produce_key_field_and_explicit_partition(runner: CliRunner, tmp_path: Path) -> None:
    h = ["--home", str(tmp_path)]
    _ok(runner, ["create-topic", "j", "--partitions", "4", *h])
    lines = [json.dumps({"user": "hello", "n": i}) for i in range(3)]
    _ok(runner, ["produce", "j", "--key-field", "user", *h], input="\n".join(lines) + "\n")
    log = PartitionedLog(tmp_path / "log")
    p = kafka_partition(b"hello", 4)
    assert log.read("j", p, 0, 2).column("key").to_pylist() == [b"hello"] * 3
    _ok(runner, ["produce", "j", "--partition", "3", *h], input="x\ny\n")
    assert log.latest_offset("j", 3) == (5 if p == 3 else 2)


def test_envvar_home_and_topics(runner: CliRunner, tmp_path: Path) -> None:
    env = {"TRIDENT_HOME": str(tmp_path / "viaenv")}
    _ok(runner, ["create-topic", "a", "-p", "2"], env=env)
    _ok(runner, ["add-partitions", "a", "--total", "3"], env=env)
    assert _ok(runner, ["topics", "--format", "csv"], env=env).output == "topic,partitions\na,3\n"
    assert json.loads(_ok(runner, ["topics", "--format", "json"], env=env).output) == [
        {"topic": "a", "partitions": 3}
    ]
    assert (tmp_path / "viaenv" / "log" / "a" / "topic.json").exists()


def test_tail_shows_binary_and_escapes(runner: CliRunner, tmp_path: Path) -> None:
    log = PartitionedLog(tmp_path / "log")
    log.create_topic("b", 1)
    from trident_assets.log import Record

    log.append("b", 0, [Record(b"\xff\x00", key=b"k"), Record(b"tab\there")])
    args = ["tail", "b", "--partition", "0", "--format", "csv", "--home", str(tmp_path)]
    lines = _ok(runner, args).output.splitlines()[1:]
    assert lines[0].split(",")[3:] == ["k", "0xff00"]
    assert lines[1].split(",")[3:] == ["null", "tab\\there"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create-topic", "../x"], "invalid topic name '../x'"),
        (["create-topic", "x'; drop table"], "invalid topic name"),
        (["create-topic", "ok", "--partitions", "0"], "invalid partition count 0"),
        (["offsets", "missing"], "topic 'missing' does not exist"),
        (["tail", "missing"], "topic 'missing' does not exist in log"),
        (["produce", "missing"], "topic 'missing' does not exist in log"),
    ],
)
def test_errors_exit_1_with_message(
    runner: CliRunner, tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "log").mkdir()
    result = runner.invoke(log_app, [*args, "--home", str(tmp_path)], input="")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {message}")
    assert len(result.stderr.splitlines()) == 1
    assert "Traceback" not in result.output


def test_produce_errors(runner: CliRunner, tmp_path: Path) -> None:
    h = ["--home", str(tmp_path)]
    _ok(runner, ["create-topic", "t", "--partitions", "2", *h])
    result = runner.invoke(log_app, ["produce", "t", "--key-sep", ",", *h], input="a,b\nnosep\n")
    assert result.exit_code == 1
    assert "line 2: no key separator ','" in result.output
    assert "0 record(s) were published" in result.output
    result = runner.invoke(log_app, ["produce", "t", "--partition", "2", *h], input="x\n")
    assert result.exit_code == 1
    assert "invalid partition 2 for topic 't'" in result.output
    result = runner.invoke(log_app, ["produce", "t", "--file", str(tmp_path / "no"), *h])
    assert result.exit_code == 1
    assert "cannot read" in result.output
    result = runner.invoke(log_app, ["produce", "t", "--partitioner", "sticky", *h], input="x\n")
    assert result.exit_code == 1
    assert "unknown partitioner 'sticky'" in result.output
    log = PartitionedLog(tmp_path / "log")
    assert [i.latest for i in log.partition_offsets("t")] == [0, 0]


def test_readers_never_create_the_home(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    for args in (["topics"], ["offsets", "t"], ["tail", "t"], ["produce", "t"]):
        result = runner.invoke(log_app, [*args, "--home", str(missing)], input="x\n")
        assert (result.exit_code, result.stdout, result.stderr) == (
            1,
            "",
            f"error: trident home {missing} does not exist; pass --home DIR or set TRIDENT_HOME "
            "(`make demo` fills the default home .trident)\n",
        )
    assert not missing.exists()
    _ok(runner, ["create-topic", "t", "--home", str(missing)])  # the one command that creates it
    assert (missing / "log" / "t" / "topic.json").exists()


def test_usage_errors_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    h = ["--home", str(tmp_path)]
    assert runner.invoke(log_app, ["topics", "--format", "xml", *h]).exit_code == 2
    assert runner.invoke(log_app, ["create-topic", "t", "--partitions", "x", *h]).exit_code == 2
    assert runner.invoke(log_app, ["tail"]).exit_code == 2

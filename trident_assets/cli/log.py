r"""Command line for the embedded log: a typer sub-app, mounted by the main CLI as ``trident log``.

Every command takes ``--home`` (envvar ``TRIDENT_HOME``, default ``./.trident``); the log
lives in ``<home>/log``. Errors of trident_assets are printed as ``error: ...`` on stderr
with exit code 1 (usage errors: 2). Only ``create-topic`` creates the home; the others
refuse a home without a log. ``topics``, ``offsets``, ``tail`` and ``verify`` take
``--format``.

Examples::

    trident log create-topic words --partitions 4
    printf 'the cat\nthe dog\n' | trident log produce words
    printf 'k1\tv1\n' | trident log produce words --key-sep TAB
    trident log offsets words
    trident log tail words -n 5
    trident log verify words
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Annotated

import pyarrow as pa
import typer

from trident_assets.cli.common import (
    DEFAULT_HOME,
    Format,
    FormatOption,
    HomeOption,
    cli_errors,
    emit,
    require_home,
)
from trident_assets.errors import ConfigError, TridentError
from trident_assets.log.store import PartitionedLog

__all__ = ["log_app", "log_root"]

log_app = typer.Typer(
    name="log",
    help="Produce to and inspect the embedded partitioned log.",
    no_args_is_help=True,
    add_completion=False,
)

_CHUNK = 100_000
_SEPARATORS = {"TAB": "\t", "\\t": "\t", "SPACE": " "}


def log_root(home: Path) -> Path:
    """Return the log directory for a trident home: ``<home>/log``."""
    return Path(home) / "log"


def _open_log(home: Path, create: bool = False) -> PartitionedLog:
    """The log of ``home``; unless ``create``, the home and its log must already exist."""
    if not create:
        require_home(home, "log")
    return PartitionedLog(log_root(home))


@log_app.command("create-topic")
def create_topic(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    partitions: Annotated[int, typer.Option("--partitions", "-p", help="Partition count.")] = 1,
    home: HomeOption = DEFAULT_HOME,
) -> None:
    """Create a topic with a fixed number of partitions."""
    with cli_errors():
        _open_log(home, create=True).create_topic(topic, partitions)
    typer.echo(f"created topic {topic} with {partitions} partition(s)")


@log_app.command("add-partitions")
def add_partitions(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    total: Annotated[int, typer.Option("--total", help="New total partition count.")],
    home: HomeOption = DEFAULT_HOME,
) -> None:
    """Grow a topic to a larger number of partitions."""
    with cli_errors():
        _open_log(home).add_partitions(topic, total)
    typer.echo(f"topic {topic} now has {total} partition(s)")


@log_app.command("topics")
def topics(home: HomeOption = DEFAULT_HOME, fmt: FormatOption = Format.table) -> None:
    """List the topics and their partition counts."""
    with cli_errors():
        log = _open_log(home)
        rows = [{"topic": name, "partitions": log.partitions(name)} for name in log.topics()]
    emit(rows, ["topic", "partitions"], fmt, f"{len(rows)} topics")


def _key_and_value(
    line: bytes, lineno: int, key_sep: bytes | None, key_field: str | None
) -> tuple[bytes | None, bytes]:
    if key_sep is not None:
        key, sep, value = line.partition(key_sep)
        if not sep:
            shown = key_sep.decode("utf-8", "backslashreplace")
            msg = f"line {lineno}: no key separator {shown!r} found (use --key-sep to change)"
            raise ConfigError(msg)
        return key, value
    if key_field is not None:
        try:
            obj = json.loads(line)
        except ValueError as exc:
            msg = f"line {lineno}: not valid JSON, needed for --key-field ({exc})"
            raise ConfigError(msg) from exc
        if not isinstance(obj, dict) or key_field not in obj:
            msg = f"line {lineno}: JSON object has no field {key_field!r}"
            raise ConfigError(msg)
        raw = obj[key_field]
        key = raw if isinstance(raw, str) else json.dumps(raw, separators=(",", ":"))
        return key.encode("utf-8"), line
    return None, line


@contextmanager
def _input(file: str) -> Iterator[IO[bytes]]:
    if file == "-":
        yield typer.get_binary_stream("stdin")
        return
    try:
        fh = open(file, "rb")  # noqa: SIM115 - closed below; only open errors are translated
    except OSError as exc:
        msg = f"cannot read {file!r}: {exc.strerror or exc}"
        raise ConfigError(msg) from exc
    with fh:
        yield fh


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    for raw in stream:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        yield line[:-1] if line.endswith(b"\r") else line


@log_app.command("produce")
def produce(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    file: Annotated[
        str, typer.Option("--file", "-f", help="Input file, one record per line; '-' = stdin.")
    ] = "-",
    key_sep: Annotated[
        str | None,
        typer.Option(
            "--key-sep",
            help="Split each line at the first separator into key and value "
            "(TAB, SPACE or a literal string).",
        ),
    ] = None,
    key_field: Annotated[
        str | None,
        typer.Option("--key-field", help="Lines are JSON objects; use this field as the key."),
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", help="Send every record to this partition.")
    ] = None,
    partitioner: Annotated[
        str, typer.Option("--partitioner", help="hash (murmur2 of the key) or round_robin.")
    ] = "hash",
    home: HomeOption = DEFAULT_HOME,
) -> None:
    """Append one record per input line (a trailing newline does not make an extra record).

    Records are flushed every 100,000 lines, each flush one atomic segment per partition; if a
    line is invalid, lines before the last flush stay published and the count is reported.
    """
    ranges: dict[int, list[int]] = {}
    counts: dict[int, int] = {}
    with cli_errors():
        if key_sep is not None and key_field is not None:
            msg = "use either --key-sep or --key-field, not both"
            raise ConfigError(msg)
        if partitioner not in ("hash", "round_robin"):
            msg = f"unknown partitioner {partitioner!r}: use hash or round_robin"
            raise ConfigError(msg)
        sep = _SEPARATORS.get(key_sep, key_sep) if key_sep is not None else None
        if sep == "":
            msg = "--key-sep must not be empty"
            raise ConfigError(msg)
        sep_bytes = sep.encode("utf-8") if sep is not None else None
        log = _open_log(home)
        producer = log.producer(topic, partitioner)  # type: ignore[arg-type]

        def flush() -> None:
            for p, (first, last) in producer.flush().items():
                r = ranges.setdefault(p, [first, last])
                r[0], r[1] = min(r[0], first), max(r[1], last)
                counts[p] = counts.get(p, 0) + last - first + 1

        try:
            with _input(file) as stream:
                for lineno, line in enumerate(_lines(stream), start=1):
                    key, value = _key_and_value(line, lineno, sep_bytes, key_field)
                    producer.send(value, key=key, partition=partition)
                    if producer.pending >= _CHUNK:
                        flush()
                flush()
        except TridentError as exc:
            published = sum(counts.values())
            typer.echo(f"error: {exc}", err=True)
            typer.echo(f"{published} record(s) were published before the error", err=True)
            raise typer.Exit(code=1) from None
    typer.echo(f"produced {sum(counts.values())} record(s) to {topic}")
    for p in sorted(ranges):
        first, last = ranges[p]
        typer.echo(f"  partition {p}: {counts[p]} record(s), offsets {first}..{last}")


@log_app.command("offsets")
def offsets(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    home: HomeOption = DEFAULT_HOME,
    fmt: FormatOption = Format.table,
) -> None:
    """Show the earliest and latest (next to write) offset of every partition."""
    with cli_errors():
        infos = _open_log(home).partition_offsets(topic)
    columns = ["partition", "earliest", "latest", "records"]
    rows = [
        {
            "partition": info.partition,
            "earliest": info.earliest,
            "latest": info.latest,
            "records": info.latest - info.earliest,
        }
        for info in infos
    ]
    emit(rows, columns, fmt, f"topic {topic}")


def _show(data: bytes | None) -> str:
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text


def _stamp(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)


@log_app.command("tail")
def tail(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    partition: Annotated[
        int | None, typer.Option("--partition", help="Only this partition (default: all).")
    ] = None,
    n: Annotated[int, typer.Option("-n", "--lines", help="Records per partition.", min=1)] = 10,
    home: HomeOption = DEFAULT_HOME,
    fmt: FormatOption = Format.table,
) -> None:
    """Print the last records of each partition.

    Columns: partition, offset, timestamp (UTC ISO-8601), key, value. Keys and values are
    shown as UTF-8 text (non-printable characters escaped), ``0x<hex>`` if not UTF-8, and
    ``null`` for a null key.
    """
    rows: list[dict[str, object]] = []
    with cli_errors():
        log = _open_log(home)
        parts = range(log.partitions(topic)) if partition is None else [partition]
        for p in parts:
            latest = log.latest_offset(topic, p)
            first = max(log.earliest_offset(topic, p), latest - n)
            table = log.read(topic, p, first, latest - 1)
            stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
            records = table.select(["offset", "key", "value"]).to_pylist()
            rows += [
                {
                    "partition": p,
                    "offset": r["offset"],
                    "timestamp": _stamp(ts),
                    "key": _show(r["key"]),
                    "value": _show(r["value"]),
                }
                for r, ts in zip(records, stamps, strict=True)
            ]
    columns = ["partition", "offset", "timestamp", "key", "value"]
    emit(rows, columns, fmt, f"topic {topic}: last {n} per partition")


@log_app.command("verify")
def verify(
    topic: Annotated[
        str | None, typer.Argument(help="Only this topic (default: every topic).")
    ] = None,
    home: HomeOption = DEFAULT_HOME,
    fmt: FormatOption = Format.table,
) -> None:
    """Check every segment (Parquet footer, row count and offsets vs its name, no gaps).

    Prints one row per partition; exits 1 (with an ``error:`` line) when anything is wrong.
    Only footers are read, so it is cheap on a large log.
    """
    from trident_assets.log.verify import verify_log

    with cli_errors():
        reports = verify_log(_open_log(home), topic)
    rows = [
        {
            "topic": r.topic,
            "partition": r.partition,
            "segments": r.segments,
            "earliest": r.earliest,
            "latest": r.latest,
            "status": "ok" if r.ok else "CORRUPT",
            "problems": "; ".join(r.problems),
        }
        for r in reports
    ]
    columns = ["topic", "partition", "segments", "earliest", "latest", "status", "problems"]
    bad = [r for r in reports if not r.ok]
    problems = sum(len(r.problems) for r in bad)
    emit(rows, columns, fmt, f"verified {len(reports)} partition(s)")
    if bad:
        where = ", ".join(f"{r.topic}/{r.partition}" for r in bad)
        typer.echo(
            f"error: {problems} problem(s) in {len(bad)} partition(s) ({where}); reads of the "
            "damaged offsets fail until the files are restored from a copy of the log",
            err=True,
        )
        raise typer.Exit(code=1)

"""The code examples of README.md and docs/*.md are executed here, so an example that stops
working fails the suite; and every relative link in them must point to a file that exists.

The convention (new examples and new docs/*.md files are picked up automatically):

- Every fenced ``python`` block runs. Blocks run in document order within their section,
  sharing one namespace per section; a section starts at a ``#`` or ``##`` heading (``###``
  subsections belong to the enclosing ``##`` section) and belongs to one file. Sections are
  independent of each other, so every example imports what it uses.
- A section runs with a fresh ``tmp_path`` as the working directory and ``TRIDENT_HOME`` set
  to ``<tmp_path>/.trident``. The test session's SparkSession exists before a section runs, so
  ``build_spark_session()`` in an example returns it (one SparkSession per process).
- ``127.0.0.1:9092`` in a python block is replaced by the address of librdkafka's mock
  cluster (``kafka_broker.MockKafkaBroker``), started only when some block names that address.
- A block runs unless the line right before its opening fence is
  ``<!-- readme-test: skip (why it cannot run here) -->``: the way out for snippets that cannot
  run as written (a fragment of a larger program, a config excerpt). The reason is required;
  each skipped block is reported as a skipped test carrying its file, line and reason. Keep
  such skips rare.
- ``<!-- readme-test: output -->`` right before a non-python block (usually ``text``) makes it
  the exact expected standard output of the python block before it, in the same section.
- After a section, the DuckDB stores and Kafka spouts left in its namespace (and the spouts of
  its topologies) are closed, even if a block failed.
- ``SECTION_CHECKS`` run after a section's blocks where an example only declares something:
  the Kafka section's word-count topology runs a batch against the mock broker.
- Every relative link ``[text](path)`` outside code blocks must point to a file or directory
  that exists (anchors are not checked); the failure lists every missing target.
- Every ``trident ...`` command in a ``bash`` block must parse: ``trident <subcommand> --help``
  exits 0 for each subcommand named, and the command line parses against the CLI (arguments,
  option names and values) without running. A synopsis line (``[--opt N]``) may only name
  options its subcommand has.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]
KAFKA_PLACEHOLDER = "127.0.0.1:9092"
PYTHON_LANGS = frozenset({"python", "py", "python3"})
SHELL_LANGS = frozenset({"bash", "sh", "shell", "console"})

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
_MARKER = re.compile(r"^\s*<!--\s*readme-test:(.*?)-->\s*$")
_SKIP = re.compile(r"^\s*skip\s*(?:\((.*)\))?\s*$")
_OUTPUT = re.compile(r"^\s*output\s*$")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATORS = frozenset({"|", "||", "&&", ";", "&"})


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown document."""

    lang: str
    code: str
    line: int
    """1-based line of the block's first code line."""
    section: str
    skip: str | None = None
    """The reason given by a ``readme-test: skip (...)`` marker, or None: the block runs."""
    doc: str = "README.md"
    """The document's path relative to the repository."""
    output: str | None = None
    """The exact standard output expected (a ``readme-test: output`` block after it), or None."""


@dataclass
class Parsed:
    """The blocks of a Markdown document and the problems found in its test markers."""

    blocks: list[Block] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse_markdown(text: str, name: str = "README.md") -> Parsed:
    """Split ``text`` into fenced blocks with their sections and ``readme-test`` markers."""
    out = Parsed()
    section = "(top)"
    fence: str | None = None  # the opening fence while inside a block
    lang = ""
    start = 0
    body: list[str] = []
    # (line, "skip", reason) or (line, "output", "") of a marker awaiting its block
    pending: tuple[int, str, str] | None = None
    for no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if fence is not None:
            if set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                code = "\n".join(body) + "\n"
                if pending is not None and pending[1] == "output":
                    _attach_output(out, name, pending[0], section, code)
                else:
                    skip = pending[2] if pending is not None else None
                    out.blocks.append(Block(lang, code, start, section, skip, name))
                fence, pending = None, None
            else:
                body.append(line)
            continue
        opened = _FENCE.match(line)
        if opened:
            fence, lang, start, body = opened.group(1), opened.group(2).lower(), no + 1, []
            if pending is not None and pending[1] == "skip" and lang not in PYTHON_LANGS:
                out.errors.append(
                    f"{name}:{pending[0]}: readme-test marker before a {lang or 'plain'} block; "
                    "only python blocks can be skipped"
                )
                pending = None
            elif pending is not None and pending[1] == "output" and lang in PYTHON_LANGS:
                out.errors.append(
                    f"{name}:{pending[0]}: readme-test output marker before a python block; "
                    "it marks the text block that follows a python block"
                )
                pending = None
            continue
        if pending is not None and stripped:
            kind = "a python" if pending[1] == "skip" else "an output"
            out.errors.append(
                f"{name}:{pending[0]}: readme-test marker not right before {kind} block"
            )
            pending = None
        heading = _HEADING.match(line)
        if heading and len(heading.group(1)) <= 2:
            section = heading.group(2)
        marker = _MARKER.match(line)
        if marker:
            skip = _SKIP.match(marker.group(1))
            reason = (skip.group(1) or "").strip() if skip else ""
            if _OUTPUT.match(marker.group(1)):
                pending = (no, "output", "")
            elif not skip:
                out.errors.append(
                    f"{name}:{no}: unknown readme-test directive {marker.group(1).strip()!r}; "
                    "the directives are 'skip (reason)' and 'output'"
                )
            elif not reason:
                out.errors.append(f"{name}:{no}: readme-test skip without a reason")
            else:
                pending = (no, "skip", reason)
    if fence is not None:
        out.errors.append(f"{name}:{start - 1}: code fence {fence} is never closed")
    if pending is not None:
        out.errors.append(f"{name}:{pending[0]}: readme-test marker not right before a block")
    return out


def _attach_output(out: Parsed, name: str, line: int, section: str, code: str) -> None:
    """Make ``code`` the expected output of the last python block, if it is in ``section``."""
    for i in range(len(out.blocks) - 1, -1, -1):
        block = out.blocks[i]
        if block.lang in PYTHON_LANGS:
            if block.section == section and block.skip is None and block.output is None:
                out.blocks[i] = replace(block, output=code)
                return
            break
    out.errors.append(
        f"{name}:{line}: readme-test output marker with no running python block before it "
        "in its section"
    )


def relative_links(text: str) -> Iterator[tuple[int, str]]:
    """``(line, target)`` of every relative link outside code blocks and inline code."""
    fence: str | None = None
    for no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if fence is not None:
            if set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                fence = None
            continue
        opened = _FENCE.match(line)
        if opened:
            fence = opened.group(1)
            continue
        for match in _LINK.finditer(re.sub(r"`[^`]*`", "", line)):
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue  # a URL (http:, mailto:) or an anchor in the same document
            yield no, target.split("#", 1)[0]


def missing_links(path: Path, text: str) -> list[str]:
    """The relative links of ``path``'s ``text`` whose target does not exist, one line each."""
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    return [
        f"{where}:{no}: {target} (no such file: {(path.parent / target).resolve()})"
        for no, target in relative_links(text)
        if not (path.parent / target).exists()
    ]


def shell_commands(code: str) -> Iterator[list[str]]:
    """The simple commands of a shell block (comments dropped, pipes and ``&&`` split,
    leading ``VAR=value`` assignments removed)."""
    for logical in code.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(logical, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        command: list[str] = []
        for token in [*lexer, ";"]:
            if token in _OPERATORS:
                while command and _ASSIGNMENT.match(command[0]):
                    command.pop(0)
                if command:
                    yield command
                command = []
            else:
                command.append(token)


def trident_commands(blocks: list[Block]) -> list[tuple[int, list[str]]]:
    """``(line, arguments after 'trident')`` of every trident command in the shell blocks."""
    found = []
    for block in blocks:
        if block.lang in SHELL_LANGS:
            for command in shell_commands(block.code):
                if Path(command[0]).name == "trident":
                    found.append((block.line, command[1:]))
    return found


def _section_key(block: Block) -> str:
    """A section's name across documents: ``<file>: <heading>``."""
    return f"{block.doc}: {block.section}"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "top"


def _cases(sections: dict[str, list[Block]]) -> list[Any]:
    """A case per section with a block to run, and a skipped case per skipped block."""
    cases = [
        pytest.param(section, id=_slug(section))
        for section, blocks in sections.items()
        if any(b.skip is None for b in blocks)
    ]
    cases += [
        pytest.param(
            _section_key(b),
            id=f"skipped-{b.doc}:{b.line}",
            marks=pytest.mark.skip(reason=f"{b.doc}:{b.line} ({b.section}): {b.skip}"),
        )
        for blocks in sections.values()
        for b in blocks
        if b.skip is not None
    ]
    return cases


PARSED = Parsed()
for _doc in DOCS:
    _parsed = parse_markdown(_doc.read_text(encoding="utf-8"), str(_doc.relative_to(REPO)))
    PARSED.blocks += _parsed.blocks
    PARSED.errors += _parsed.errors
PYTHON_BLOCKS = [b for b in PARSED.blocks if b.lang in PYTHON_LANGS]
SECTIONS: dict[str, list[Block]] = {}
for _block in PYTHON_BLOCKS:
    SECTIONS.setdefault(_section_key(_block), []).append(_block)


# -- what a section leaves behind, and checks beyond the examples' own asserts ------------------


def _close_resources(namespace: dict[str, Any]) -> None:
    """Close the DuckDB stores and Kafka spouts an example left open (idempotent closes)."""
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.kafka.spout import KafkaSpout
    from trident_assets.stream.topology import TridentTopology

    for value in list(namespace.values()):
        if isinstance(value, DuckDBStore | KafkaSpout):
            value.close()
        elif isinstance(value, TridentTopology):
            for node in value.spouts.values():
                spout = node.args.get("spout")
                if isinstance(spout, KafkaSpout):
                    spout.close()


def _kafka_topology_runs_a_batch(
    namespace: dict[str, Any], spark: Any, broker: Any, tmp_path: Path
) -> None:
    """The Kafka example's word count reads a batch from the broker and counts it exactly."""
    from trident_assets.backends.duckdb_store import DuckDBStore
    from trident_assets.spark.executor import TopologyRunner
    from trident_assets_tests.kafka_broker import produce

    topo = namespace["topo"]
    for topic in ("sentences", "word_queries"):
        broker.create_topic(topic)
    produce(broker.bootstrap_servers, "sentences", [b"the cow jumped", b"over the moon"])
    with DuckDBStore(tmp_path / "kafka.duckdb") as store:
        runner = TopologyRunner(topo, spark, store, None)
        outcome = runner.run_batch(1)
        assert outcome.applied
        assert outcome.tuples_in == {"sentences": 2, "queries": 0}
        state = topo.states["word_counts"]
        counted = {r["word"]: r["value"] for r in store.scan(state.table).to_pylist()}
        assert counted == {"cow": 1, "jumped": 1, "moon": 1, "over": 1, "the": 2}
        assert store.last_committed(topo.name) == 1


SECTION_CHECKS: dict[str, Callable[[dict[str, Any], Any, Any, Path], None]] = {
    "docs/kafka.md: Kafka": _kafka_topology_runs_a_batch,
}


@pytest.fixture(scope="module")
def kafka_broker() -> Iterator[Any]:
    """The mock Kafka cluster, started only for sections whose examples name a broker."""
    from trident_assets_tests.kafka_broker import MockKafkaBroker

    broker = MockKafkaBroker()
    yield broker
    broker.stop()


# -- the tests ------------------------------------------------------------------------------------


def test_readme_markers_are_well_formed() -> None:
    assert PARSED.errors == []
    assert len(PYTHON_BLOCKS) >= 3  # the word count, its run, Kafka: the parser found them
    assert {"README.md", "docs/kafka.md"} <= {b.doc for b in PYTHON_BLOCKS}
    assert [b.line for b in PYTHON_BLOCKS if b.doc == "README.md" and b.output is not None]


def test_docs_relative_links_point_to_files_that_exist() -> None:
    missing = [m for doc in DOCS for m in missing_links(doc, doc.read_text(encoding="utf-8"))]
    assert not missing, "relative links to missing files:\n" + "\n".join(missing)


@pytest.mark.parametrize("section", _cases(SECTIONS))
def test_readme_python_section(
    section: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark = request.getfixturevalue("spark")  # the one session; examples' getOrCreate returns it
    blocks = [b for b in SECTIONS[section] if b.skip is None]
    broker = None
    if any(KAFKA_PLACEHOLDER in b.code for b in blocks) or section in SECTION_CHECKS:
        broker = request.getfixturevalue("kafka_broker")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRIDENT_HOME", str(tmp_path / ".trident"))
    # the examples' temporary homes (tempfile.mkdtemp) go under tmp_path, not the machine's /tmp
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    namespace: dict[str, Any] = {"__name__": f"readme_{_slug(section).replace('-', '_')}"}
    try:
        for block in blocks:
            code = block.code
            if broker is not None:
                code = code.replace(KAFKA_PLACEHOLDER, broker.bootstrap_servers)
            # pad so tracebacks point at the document's own line numbers
            compiled = compile(
                "\n" * (block.line - 1) + code, str(REPO / block.doc), "exec", dont_inherit=True
            )
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(compiled, namespace)
            if block.output is not None:
                assert printed.getvalue() == block.output, f"{block.doc}:{block.line} printed"
        check = SECTION_CHECKS.get(section)
        if check is not None:
            check(namespace, spark, broker, tmp_path)
    finally:
        _close_resources(namespace)


def test_readme_section_checks_name_existing_sections() -> None:
    assert set(SECTION_CHECKS) <= set(SECTIONS)


TRIDENT_COMMANDS = [
    (doc, line, args)
    for doc in dict.fromkeys(b.doc for b in PARSED.blocks)
    for line, args in trident_commands([b for b in PARSED.blocks if b.doc == doc])
]


def _resolve(args: list[str]) -> tuple[list[str], Any, list[str]]:
    """Walk ``args`` down the CLI's groups: (subcommand path, leaf command, remaining args)."""
    from typer.main import get_command

    from trident_assets.cli import app

    command: Any = get_command(app)
    path: list[str] = []
    rest = list(args)
    # typer's groups are click groups of its own click: recognise them by their commands
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        sub = command.commands.get(rest[0])
        assert sub is not None, f"no subcommand {' '.join([*path, rest[0]])!r} in trident"
        path.append(rest.pop(0))
        command = sub
    assert not hasattr(command, "commands"), f"'trident {' '.join(path)}' names no command"
    return path, command, rest


def parse_trident(args: list[str]) -> list[str]:
    """Parse ``trident <args>`` against the CLI without running it; return the subcommand path.

    Raises:
        AssertionError: an unknown subcommand, or an option a synopsis names that does not exist.
        TyperException: the CLI's usage error (missing argument, unknown option, bad value).
    """
    path, command, rest = _resolve(args)
    if any("[" in a or "]" in a for a in rest):
        # a synopsis such as `trident demo [--home DIR] [--sentences N]`: check the names only
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        named = {a.strip("[]").split("=")[0] for a in rest if a.strip("[").startswith("-")}
        assert named <= known, f"unknown options {sorted(named - known)}"
    else:
        with command.make_context(f"trident {' '.join(path)}", list(rest)):
            pass  # arguments and options parsed and converted as the CLI would
    return path


def test_readme_trident_commands_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each documented command parses, and its command's ``--help`` renders.

    The help is rendered in this process (typer's runner; the entry point as a child process
    is the documented-commands tests' and ``trident --help`` below).
    """
    from typer.testing import CliRunner

    from trident_assets.cli import app

    assert len(TRIDENT_COMMANDS) >= 5  # the Command line section's commands were found
    monkeypatch.setenv("TRIDENT_HOME", str(tmp_path / ".trident"))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    helped: set[tuple[str, ...]] = set()
    for doc, line, args in TRIDENT_COMMANDS:
        where = f"{doc}:{line}: trident {shlex.join(args)}"
        try:
            path = parse_trident(args)
        except Exception as exc:
            pytest.fail(f"{where}: {type(exc).__name__}: {exc}")
        if tuple(path) in helped:
            continue
        helped.add(tuple(path))
        done = runner.invoke(app, [*path, "--help"])
        assert done.exit_code == 0, f"{where}: --help exited {done.exit_code}: {done.output}"
        assert f"trident {' '.join(path)}" in " ".join(done.output.split()), done.output
    assert len(helped) >= 5
    trident = Path(sys.executable).parent / "trident"
    done = subprocess.run(
        [str(trident), "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert all(f" {path[0]} " in done.stdout for path in helped), done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["log", "create-topic", "sentences", "--partitions", "four"],  # not an int
        ["log", "create-topic", "sentences", "--partition", "4"],  # no such option
        ["state", "get", "word_count"],  # missing the state
        ["log", "nope"],  # no such subcommand
        ["log"],  # a group, not a command
        ["demo", "[--home", "DIR]", "[--seed", "N]"],  # a synopsis naming a missing option
    ],
)
def test_parse_trident_refuses_wrong_commands(args: list[str]) -> None:
    from typer.exceptions import TyperException  # the base of the CLI's usage errors

    with pytest.raises((AssertionError, TyperException)):
        parse_trident(args)


# -- the parser itself ----------------------------------------------------------------------------


SAMPLE = """\
# title

```python
x = 1
```

## First

```bash
# a comment, not a heading
FOO=1 trident log tail t -n 3 | head  # trailing comment
make demo   # = trident demo
```

### Sub

<!-- readme-test: skip (needs a Kafka broker) -->
```python
y = 2
```

```text
z
```

## Second
```py
w = 3
```
"""


def test_parser_sections_markers_and_commands() -> None:
    parsed = parse_markdown(SAMPLE)
    assert parsed.errors == []
    assert [(b.lang, b.section, b.line, b.skip) for b in parsed.blocks] == [
        ("python", "title", 4, None),
        ("bash", "First", 10, None),
        ("python", "First", 19, "needs a Kafka broker"),
        ("text", "First", 23, None),
        ("py", "Second", 28, None),
    ]
    assert trident_commands(parsed.blocks) == [(10, ["log", "tail", "t", "-n", "3"])]
    sections: dict[str, list[Block]] = {}
    for b in parsed.blocks:
        if b.lang in PYTHON_LANGS:
            sections.setdefault(_section_key(b), []).append(b)
    cases = _cases(sections)
    assert [(c.id, c.values, [m.kwargs for m in c.marks]) for c in cases] == [
        ("readme-md-title", ("README.md: title",), []),
        ("readme-md-second", ("README.md: Second",), []),
        (
            "skipped-README.md:19",
            ("README.md: First",),
            [{"reason": "README.md:19 (First): needs a Kafka broker"}],
        ),
    ]


@pytest.mark.parametrize(
    ("marker", "error"),
    [
        ("<!-- readme-test: skip -->", "readme-test skip without a reason"),
        ("<!-- readme-test: skip () -->", "readme-test skip without a reason"),
        (
            "<!-- readme-test: run twice -->",
            "unknown readme-test directive 'run twice'; the directives are 'skip (reason)' "
            "and 'output'",
        ),
    ],
    ids=["no-reason", "empty-reason", "unknown-directive"],
)
def test_parser_refuses_bad_markers(marker: str, error: str) -> None:
    parsed = parse_markdown(f"# t\n\n{marker}\n```python\nx = 1\n```\n")
    assert parsed.errors == [f"README.md:3: {error}"]
    assert parsed.blocks[0].skip is None


def test_parser_refuses_a_marker_away_from_a_python_block() -> None:
    detached = parse_markdown("<!-- readme-test: skip (why) -->\n\ntext\n```python\nx = 1\n```\n")
    assert detached.errors == ["README.md:1: readme-test marker not right before a python block"]
    assert detached.blocks[0].skip is None
    on_bash = parse_markdown("<!-- readme-test: skip (why) -->\n```bash\nls\n```\n")
    assert on_bash.errors == [
        "README.md:1: readme-test marker before a bash block; only python blocks can be skipped"
    ]
    dangling = parse_markdown("text\n<!-- readme-test: skip (why) -->\n")
    assert dangling.errors == ["README.md:2: readme-test marker not right before a block"]


def test_parser_attaches_an_output_block_to_the_python_block_before_it() -> None:
    parsed = parse_markdown(
        "# t\n```python\nprint(1)\n```\nIt prints:\n\n<!-- readme-test: output -->\n"
        "```text\n1\n```\n"
    )
    assert parsed.errors == []
    assert [(b.lang, b.line, b.output) for b in parsed.blocks] == [("python", 3, "1\n")]


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        (
            "# t\n<!-- readme-test: output -->\n```text\n1\n```\n",
            "README.md:2: readme-test output marker with no running python block before it in "
            "its section",
        ),
        (
            "# t\n```python\nprint(1)\n```\n## u\n<!-- readme-test: output -->\n```text\n1\n```\n",
            "README.md:6: readme-test output marker with no running python block before it in "
            "its section",
        ),
        (
            "# t\n<!-- readme-test: output -->\n```python\nx = 1\n```\n",
            "README.md:2: readme-test output marker before a python block; it marks the text "
            "block that follows a python block",
        ),
        (
            "# t\n<!-- readme-test: output -->\ntext\n```text\n1\n```\n",
            "README.md:2: readme-test marker not right before an output block",
        ),
    ],
    ids=["no-python-block", "other-section", "before-python", "detached"],
)
def test_parser_refuses_misplaced_output_markers(doc: str, error: str) -> None:
    assert parse_markdown(doc).errors == [error]


def test_relative_links_found_and_missing_ones_listed(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("x")
    text = (
        "[a](docs/here.md) [b](docs/gone.md#part) [c](https://example.org/x.md) [d](#top)\n"
        "`[e](inline.md)` ![f](img/pic.png)\n```\n[g](in-a-block.md)\n```\n"
    )
    assert list(relative_links(text)) == [
        (1, "docs/here.md"),
        (1, "docs/gone.md"),
        (2, "img/pic.png"),
    ]
    doc = tmp_path / "README.md"
    assert missing_links(doc, text) == [
        f"{doc}:1: docs/gone.md (no such file: {tmp_path / 'docs' / 'gone.md'})",
        f"{doc}:2: img/pic.png (no such file: {tmp_path / 'img' / 'pic.png'})",
    ]

"""The package's dependency arrows run one way, checked on the source with ``ast``.

Layers (:data:`LAYERS`, the table of ``docs/architecture.md``), each importing only from
those above it::

    base, core, declarations, graph analysis, sources, stores, runtime, engine, Dagster,
    command line, user code

Every import counts: module-level and function-level, ``from x import y`` and ``import x``.
Imports inside ``if TYPE_CHECKING:`` blocks are exempt from the layer and cycle rules (they
never run), but not from the private-name rule.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "trident_assets"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


@dataclass(frozen=True)
class Import:
    """One import statement's edge: who imports what, where."""

    module: str  # the importing module
    target: str  # the imported trident_assets module
    name: str | None  # the imported name (``from target import name``), None for ``import x``
    line: int
    type_checking: bool

    def __str__(self) -> str:
        what = f"from {self.target} import {self.name}" if self.name else f"import {self.target}"
        guard = " (TYPE_CHECKING)" if self.type_checking else ""
        return f"{self.module}:{self.line}: {what}{guard}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports_of(module: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def resolve(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, guarded)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    found.append(Import(module, alias.name, None, node.lineno, guarded))
        elif isinstance(node, ast.ImportFrom):
            source = resolve(node)
            if source == PACKAGE or source.startswith(PACKAGE + "."):
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    if submodule in MODULES:  # ``from package import module``
                        found.append(Import(module, submodule, None, node.lineno, guarded))
                    else:
                        found.append(Import(module, source, alias.name, node.lineno, guarded))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return found


IMPORTS: list[Import] = [imp for mod, path in MODULES.items() for imp in _imports_of(mod, path)]


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _violations(importers: str, allowed: tuple[str, ...] = (), forbidden: tuple[str, ...] = ()):
    """Runtime imports by modules under ``importers`` that break the given rule."""
    bad = []
    for imp in IMPORTS:
        if imp.type_checking or not _in(imp.module, importers):
            continue
        if allowed and not any(_in(imp.target, a) for a in allowed):
            bad.append(str(imp))
        if forbidden and any(_in(imp.target, f) for f in forbidden):
            bad.append(str(imp))
    return bad


def _third_party_violations(importers: str, forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for mod, path in MODULES.items():
        if not _in(mod, importers):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            for name in names:
                if any(_in(name, f) for f in forbidden):
                    bad.append(f"{mod}:{node.lineno}: imports {name}")
    return bad


def test_the_scan_sees_the_package():
    assert f"{PACKAGE}.spark.executor" in MODULES
    assert f"{PACKAGE}.planner" in MODULES
    assert any(imp.module == f"{PACKAGE}.spark.executor" for imp in IMPORTS)


def test_core_is_pure():
    core = f"{PACKAGE}.core"
    allowed = (core, f"{PACKAGE}.errors", f"{PACKAGE}.names")
    bad = _violations(core, allowed=allowed)
    bad += _third_party_violations(core, ("dagster", "pyspark", "duckdb"))
    assert not bad, "core/ may import only core, errors and names:\n" + "\n".join(bad)


def test_declarations_never_import_execution():
    forbidden = tuple(f"{PACKAGE}.{p}" for p in ("spark", "backends", "dagster", "planner"))
    bad = _violations(f"{PACKAGE}.stream", forbidden=forbidden)
    assert not bad, "stream/ must not import execution or the planner:\n" + "\n".join(bad)
    allowed = tuple(
        f"{PACKAGE}.{p}" for p in ("stream", "core", "errors", "names", "spouts.config")
    )
    bad = _violations(f"{PACKAGE}.stream", allowed=allowed)
    assert not bad, (
        "stream/ may import only stream, core, errors, names and spouts.config:\n" + "\n".join(bad)
    )


def test_planner_is_pure_graph_analysis():
    forbidden = tuple(f"{PACKAGE}.{p}" for p in ("spark", "backends", "dagster"))
    bad = _violations(f"{PACKAGE}.planner", forbidden=forbidden)
    bad += _third_party_violations(f"{PACKAGE}.planner", ("dagster", "pyspark", "duckdb"))
    assert not bad, "the planner must not import spark, backends or dagster:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph: dict[str, dict[str, Import]] = {mod: {} for mod in MODULES}
    for imp in IMPORTS:
        if not imp.type_checking and imp.target in MODULES and imp.target != imp.module:
            graph[imp.module].setdefault(imp.target, imp)

    cycles = [sorted(c) for c in _strongly_connected({m: set(t) for m, t in graph.items()})]

    report = []
    for component in cycles:
        members = set(component)
        edges = [str(graph[a][b]) for a in component for b in sorted(graph[a]) if b in members]
        report.append("cycle among " + ", ".join(component) + ":\n  " + "\n  ".join(edges))
    assert not cycles, "import cycles (outside TYPE_CHECKING):\n" + "\n".join(report)


def _private_attributes(module: str, path: Path) -> list[str]:
    """``alias._name`` where ``alias`` is another trident_assets module imported by name."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and _in(a.name, PACKAGE):
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module and _in(node.module, PACKAGE):
            for a in node.names:
                if f"{node.module}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return [
        f"{module}:{node.lineno}: {aliases[node.value.id]}.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in aliases
        and aliases[node.value.id] != module
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
    ]


def test_no_private_name_crosses_modules():
    bad = [
        str(imp)
        for imp in IMPORTS
        if imp.target != imp.module
        and (
            (imp.name is not None and imp.name.startswith("_"))
            or any(part.startswith("_") and part != "__init__" for part in imp.target.split("."))
        )
    ]
    bad += [hit for mod, path in MODULES.items() for hit in _private_attributes(mod, path)]
    assert not bad, "private names imported from another module:\n" + "\n".join(bad)


KNOWN_CIRCLES: list[set[str]] = [
    {
        *("stream.event_windows", "stream.grouped", "stream.single_join", "stream.states"),
        *("stream.static_state", "stream.streams", "stream.topology"),
    },
]
"""Import circles counted with ``TYPE_CHECKING`` imports (which only hide a circle), each a
set of modules relative to the package: only the fluent builder's in ``stream/`` (its
streams and their declarations refer to each other). The list may only shrink: a new circle,
or a module joining one, fails :func:`test_import_circles_only_shrink`."""


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components of more than one module, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _circles_with_type_checking() -> list[set[str]]:
    graph: dict[str, set[str]] = {mod: set() for mod in MODULES}
    for imp in IMPORTS:
        if imp.target in MODULES and imp.target != imp.module:
            graph[imp.module].add(imp.target)
    prefix = PACKAGE + "."
    return [{m.removeprefix(prefix) for m in c} for c in _strongly_connected(graph)]


def test_import_circles_only_shrink():
    """TYPE_CHECKING imports count too: the modules that need them form a circle all the same."""
    bad = [
        sorted(circle)
        for circle in _circles_with_type_checking()
        if not any(circle <= known for known in KNOWN_CIRCLES)
    ]
    assert not bad, "new import circles (TYPE_CHECKING imports included):\n" + "\n".join(
        ", ".join(c) for c in bad
    )


def test_runtime_imports_no_spark_or_dagster():
    runtime = f"{PACKAGE}.runtime"
    forbidden = tuple(f"{PACKAGE}.{p}" for p in ("spark", "dagster", "cli"))
    bad = _violations(runtime, forbidden=forbidden)
    bad += _third_party_violations(runtime, ("dagster", "pyspark"))
    assert not bad, "runtime/ may not import pyspark, dagster or spark/:\n" + "\n".join(bad)


LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("errors", "names")),
    ("pure core", ("core",)),
    ("declarations", ("stream", "spouts.config")),
    ("graph analysis", ("planner",)),
    ("sources", ("log", "kafka", "spouts")),
    ("stores", ("backends", "lakehouse", "home_lock", "local_ports", "status")),
    ("runtime", ("runtime",)),
    ("engine", ("spark",)),
    ("Dagster", ("dagster", "overview")),
    ("public API and shipped examples", ("", "examples")),
    ("command line", ("cli",)),
    ("code locations", ("definitions", "testing")),
]
"""Each layer's modules, relative to the package (``""``: the package's ``__init__``,
``import trident_assets as ta``), in the order of ``docs/architecture.md``: a module imports
only from its own layer and those above it. The most specific entry places a module
(``spouts.config`` declares, the rest of ``spouts`` reads sources)."""


def _layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of ``module`` (its most specific entry), None if unplaced."""
    rel = module.removeprefix(PACKAGE).removeprefix(".")
    best: tuple[int, int] | None = None
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if entry.endswith("*"):
                hit = "." not in rel and rel.startswith(entry[:-1])
            else:
                hit = rel == entry or (entry != "" and rel.startswith(entry + "."))
            if hit and (best is None or len(entry) > best[0]):
                best = (len(entry), index)
    return None if best is None else best[1]


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in MODULES if _layer_of(m) is None)
    assert not unplaced, "modules in no layer (add them to LAYERS and docs/architecture.md):\n" + (
        "\n".join(unplaced)
    )


def test_every_layer_imports_only_from_the_layers_above():
    """Sources never import the engine, stores never the runtime, Dagster never the CLI..."""
    bad = []
    for imp in IMPORTS:
        if imp.type_checking:
            continue
        mine, theirs = _layer_of(imp.module), _layer_of(imp.target)
        if mine is not None and theirs is not None and theirs > mine:
            bad.append(f"{imp}  ({LAYERS[mine][0]} -> {LAYERS[theirs][0]})")
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_sources_never_import_the_engine():
    sources = [f"{PACKAGE}.{p}" for p in ("log", "kafka", "spouts")]
    bad = [
        hit
        for source in sources
        for hit in _violations(source, forbidden=(f"{PACKAGE}.spark", f"{PACKAGE}.dagster"))
    ]
    assert not bad, "sources may not import spark/ or dagster/:\n" + "\n".join(bad)

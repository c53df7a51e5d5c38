"""The package's layers are a contract (docs/architecture.md): every import in ``l2m/`` —
module-level, inside functions, under ``TYPE_CHECKING`` — goes to the importer's own layer or
a lower one, sibling packages of a layer stay independent, the engine never imports pyspark,
and no modules import each other in a circle."""

from __future__ import annotations

import ast
import functools
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "l2m"

# Lowest first. A module may import its own layer and the layers below; the groups of one
# layer (e.g. rules and config) may not import each other.
LAYERS: list[list[str]] = [
    ["l2m.errors", "l2m.defaults", "l2m.version", "l2m.semantics", "l2m.policy", "l2m.yamlio",
     "l2m.process"],
    ["l2m.query"],
    ["l2m.rules", "l2m.config"],
    ["l2m.engine"],
    ["l2m.state", "l2m.kafka", "l2m.batch", "l2m.remotewrite"],
    ["l2m.streaming"],
    ["l2m.runtime"],
    ["l2m.dev", "l2m.authoring"],
    # entry points: the command line, the shims images and Spark confs name, and the fork
    # client Spark's interpreter wrapper runs (l2m/bin, a script: standard library only)
    ["l2m.cli", "l2m.__main__", "l2m.daemon", "l2m.jvmcache", "l2m.bin", "l2m"],
]
# The base layer's modules are one group: they may use each other; so may the entry points.
BASE = set(LAYERS[0])
OPEN = (0, len(LAYERS) - 1)
# Third-party packages a layer must never import: the engine runs without a JVM (unit tests,
# any future engine), so pyspark stays out of it.
FORBIDDEN = {"l2m.engine": ("pyspark", "py4j"), "l2m.query": ("pyspark", "py4j"),
             "l2m.rules": ("pyspark", "py4j"), "l2m.config": ("pyspark", "py4j"),
             # rule authors' tools run without a JVM (l2m.batch.local, not the backfill job)
             "l2m.authoring": ("pyspark", "py4j")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path, name: str, known: Collection[str] = ()) -> Iterator[tuple[str, int]]:
    """Every module ``path`` imports (absolute names), with its line; ``known``: l2m's
    modules, to tell ``from package import module`` from ``from module import name``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _import_nodes(path):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            submodules = [f"{target}.{alias.name}" for alias in node.names
                           if f"{target}.{alias.name}" in known]
            # `from l2m.engine import parse` imports the module l2m.engine.parse (a
            # package's __init__ holds no code of its own but its docstring, or, for l2m
            # itself, a lazy API)
            yield from ((module, node.lineno) for module in submodules)
            if len(submodules) < len(node.names):
                yield target, node.lineno


@functools.cache
def _import_nodes(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``path``, anywhere in it: each file parsed once for all the
    tests here (each test walked the whole package again, ~0.3 s apiece)."""
    return [node for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Import | ast.ImportFrom)]


def group(name: str) -> tuple[int, str] | None:
    """(layer index, group) of an l2m module: its package, or itself in the base layer."""
    for index, members in enumerate(LAYERS):
        for member in sorted(members, key=len, reverse=True):
            if name == member or (member != "l2m" and name.startswith(member + ".")):
                return index, (name if member in BASE else member)
    return None


def l2m_imports() -> dict[str, list[tuple[str, int]]]:
    known = modules()
    found: dict[str, list[tuple[str, int]]] = {}
    for name, path in known.items():
        found[name] = [(target, line) for target, line in imports(path, name, known)
                       if target in known]
    return found


def test_every_module_belongs_to_a_layer():
    assert [name for name in modules() if group(name) is None] == []


def test_no_module_imports_a_higher_layer_or_a_sibling_package():
    problems = []
    for name, targets in l2m_imports().items():
        here = group(name)
        assert here is not None
        for target, line in targets:
            there = group(target)
            assert there is not None
            if there[0] > here[0]:
                problems.append(f"{name}:{line} imports {target}, a higher layer")
            elif there[0] == here[0] and there[1] != here[1] and here[0] not in OPEN:
                problems.append(f"{name}:{line} imports {target}, a sibling package "
                                f"({here[1]} and {there[1]} are independent)")
    assert problems == []


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_never_import_spark(package):
    problems = []
    for name, path in modules().items():
        if name == package or name.startswith(package + "."):
            for target, line in imports(path, name):
                if target.split(".")[0] in FORBIDDEN[package]:
                    problems.append(f"{name}:{line} imports {target}")
    assert problems == []


def test_no_import_cycles():
    graph = {name: {t for t, _ in targets if t != name}
             for name, targets in l2m_imports().items()}
    # A package's __init__ is imported with each of its modules; the lazy top-level package
    # (l2m/__init__.py) names its API as strings, so it adds no edges.
    cycles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert cycles == []


def test_the_layer_table_matches_the_architecture_document():
    text = (ROOT / "docs" / "architecture.md").read_text()
    for members in LAYERS[:-1]:
        for member in members:
            if member != "l2m":
                assert f"`{member.removeprefix('l2m.')}" in text, member

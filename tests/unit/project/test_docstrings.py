"""Docstrings and comments name what exists (issue 54): every package's ``__init__``
docstring names each of its modules as :mod:`l2m.pkg.module`; no docstring or comment in
``l2m/`` names an l2m module, symbol or file that does not exist; and nothing in the repository
points outside the clone for the contract (it is docs/spec.md).

Resolved on the source's syntax trees, without importing anything: a name is a module (a
``.py`` file, a package folder, a compiled extension's ``.c`` source), a module's top-level
definition, assignment or import (followed to where it comes from), or an attribute of a class
(its methods, class attributes, annotated fields, nested classes and the ``self.x`` its methods
assign). A name past a value that is not a class or module (an instance's attribute) is taken
as it is: checking it would need the value's type.

``l2m/bin`` is not a package: it holds the scripts Spark's interpreter wrapper runs by path
(``python``, ``forkclient.py``), with no ``__init__.py``; docs/architecture.md names each of
them instead, and this test checks that it does.
"""

from __future__ import annotations

import ast
import builtins
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "l2m"
SCRIPTS = PACKAGE / "bin"

# :role:`target`, with Sphinx's ``~`` (show the last part) and ``.`` (search) prefixes.
ROLE = re.compile(r":(mod|func|class|data|meth|attr|exc|obj|const):`([^`]+)`")
# a dotted l2m name in running text: l2m.engine.samples, l2m.state.processor.MetricProcessor
DOTTED = re.compile(r"(?<![\w./-])l2m(?:\.[A-Za-z_]\w*)+")
# a path inside the package: l2m/state/format.py, l2m/engine/
PATH = re.compile(r"(?<![\w./-])l2m/[\w/.-]*\w")
OUTSIDE = re.compile(r"\.\./shared|shared/SPEC\.md")
# benchmarks/README.md cited by a name in quotes, or linked to one of its headings
BENCH_CITED = re.compile(r'benchmarks/README\.md[,)]?\s+"([^"\s][^"]*)"')
BENCH_LINK = re.compile(r"(?:benchmarks/|\()README\.md#([\w-]+)")


@dataclass
class Scope:
    """What a module or class defines: its names, and for each name what it refers to —
    another dotted name (an import), a nested scope (a class) or nothing known (a value)."""

    names: dict[str, str | Scope | None] = field(default_factory=dict)
    exported: set[str] = field(default_factory=set)  # imports it re-exports on purpose


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def sources() -> dict[str, Path]:
    """Every l2m module by name (the scripts folder is not a package)."""
    found = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
             if SCRIPTS not in p.parents}
    for c in PACKAGE.rglob("*.c"):  # compiled extensions: their source names the module
        found[module_name(c)] = c
    return found


def _class_scope(node: ast.ClassDef, module: str) -> Scope:
    scope = Scope()
    for item in node.body:
        _bind(item, scope, module)
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            for sub in ast.walk(item):  # self.x = … in any method
                targets = (sub.targets if isinstance(sub, ast.Assign)
                           else [sub.target] if isinstance(sub, ast.AnnAssign | ast.AugAssign)
                           else [])
                for t in targets:
                    if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                            and t.value.id in ("self", "cls")):
                        scope.names.setdefault(t.attr, None)
    return scope


def _bind(node: ast.stmt, scope: Scope, module: str) -> None:
    """Record what statement ``node`` defines in ``scope`` (top-level names of ``if``,
    ``try`` and ``with`` blocks included)."""
    if isinstance(node, ast.ClassDef):
        scope.names[node.name] = _class_scope(node, module)
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        scope.names[node.name] = None
    elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        _bind_assignment(node, scope)
    elif isinstance(node, ast.Import | ast.ImportFrom):
        _bind_import(node, scope, module)
    elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
        for block in ("body", "orelse", "finalbody", "handlers"):
            for child in getattr(node, block, []):
                for stmt in child.body if isinstance(child, ast.ExceptHandler) else [child]:
                    _bind(stmt, scope, module)


def _bind_assignment(node: ast.Assign | ast.AnnAssign | ast.AugAssign, scope: Scope) -> None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for t in targets:
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                scope.names.setdefault(n.id, None)
    if (isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]
            and isinstance(node.value, ast.List | ast.Tuple)):
        scope.exported.update(e.value for e in node.value.elts
                              if isinstance(e, ast.Constant) and isinstance(e.value, str))


def _bind_import(node: ast.Import | ast.ImportFrom, scope: Scope, module: str) -> None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                scope.names[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                scope.names.setdefault(top, top)
        return
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        package = parts if sources()[module].name == "__init__.py" else parts[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    for alias in node.names:
        scope.names[alias.asname or alias.name] = f"{base}.{alias.name}"
        if alias.asname == alias.name:  # `from m import X as X`: typing's re-export
            scope.exported.add(alias.name)


@cache
def syntax(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for every check."""
    return ast.parse(path.read_text(), str(path))


@cache
def module_scope(name: str) -> Scope:
    path = sources()[name]
    scope = Scope()
    if path.suffix == ".py":
        for node in syntax(path).body:
            _bind(node, scope, name)
    else:  # an extension: what its C source registers in its method table
        for fn in re.findall(r'\{\s*"(\w+)"\s*,', path.read_text()):
            scope.names[fn] = None
    return scope


def resolves(dotted: str, depth: int = 0, strict: bool = True) -> bool:
    """Whether the l2m name ``dotted`` exists (a module, or a symbol reached from one).
    ``strict``: ``l2m.a.b.Name`` must be defined in ``l2m.a.b`` (or re-exported by it on
    purpose: a package's ``__init__``, ``__all__``, ``import X as X``), not merely imported
    there — the reader is sent to ``l2m.a.b`` to find it."""
    parts = dotted.split(".")
    if depth > 20:
        return True  # an import cycle of re-exports: not this test's concern
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in sources():
            return _walk(module_scope(module), parts[cut:], module, depth, strict)
    return False


def _walk(scope: Scope, rest: list[str], module: str, depth: int, strict: bool) -> bool:
    for i, part in enumerate(rest):
        if part not in scope.names:
            submodule = f"{module}.{part}"
            if i == 0 and submodule in sources():  # a package's module, not imported by it
                return resolves(".".join([submodule, *rest[1:]]), depth + 1)
            return False
        target = scope.names[part]
        if isinstance(target, Scope):
            scope = target
        elif isinstance(target, str):
            if not target.startswith("l2m"):
                return True  # someone else's: their names are not checked here
            if (strict and i == 0 and sources()[module].name != "__init__.py"
                    and part not in scope.exported):
                return False
            return resolves(".".join([target, *rest[i + 1:]]), depth + 1)
        else:
            return True  # a value: its attributes need its type
    return True


@cache
def literals() -> frozenset[str]:
    """Every string constant in l2m's code: a dotted name that is one (the ``l2m.json``
    marker file, the ``l2m.size`` header) is a name l2m uses, not a module."""
    return frozenset(name for path in sources().values() if path.suffix == ".py"
                     for name in re.findall(r"""["'](l2m(?:\.\w+)+)["']""", path.read_text()))


@dataclass(frozen=True)
class Text:
    """A docstring or comment of an l2m module, with its line."""

    path: Path
    line: int
    text: str


def texts(path: Path) -> Iterator[Text]:
    source = path.read_text()
    scopes: list[ast.AST] = [syntax(path)]
    while scopes:  # statements only: a docstring is never inside an expression
        node = scopes.pop()
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        first = body[0].value if body and isinstance(body[0], ast.Expr) else None
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and isinstance(first, ast.Constant) and isinstance(first.value, str)):
            yield Text(path, body[0].lineno, first.value)
        for block in ("body", "orelse", "finalbody", "handlers"):
            scopes += [c for c in getattr(node, block, [])
                       if isinstance(c, ast.stmt | ast.excepthandler)]
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield Text(path, tok.start[0], tok.string)


def _local(name: str, module: str) -> bool:
    """An unqualified role target: a name of ``module`` (or of one of its classes: a method
    named from inside its class), or a builtin."""
    head = name.split(".")[0]
    if hasattr(builtins, head):
        return True
    scope = module_scope(module)
    if head in scope.names:  # what the module imports counts: the reader finds it there
        return resolves(f"{module}.{name}", strict=False)
    return any(isinstance(s, Scope) and _walk(s, name.split("."), module, 0, False)
               for s in scope.names.values())


def broken_references(text: Text, module: str) -> Iterator[str]:
    where = f"{text.path.relative_to(ROOT)}:{text.line}"
    seen = set()
    for role, target in ROLE.findall(text.text):
        name = re.sub(r"\s+", "", target).lstrip("~.").removesuffix("()")
        seen.add(name)
        if name.startswith("l2m.") or name == "l2m":
            if not resolves(name):
                yield f"{where}: :{role}:`{target}`"
        elif "." in name and name.split(".")[0] not in module_scope(module).names:
            continue  # another library's name, e.g. :class:`pyarrow.Table`
        elif not _local(name, module):
            yield f"{where}: :{role}:`{target}`"
    for name in DOTTED.findall(re.sub(r"\.\n\s*(?=[a-z_])", ".", text.text)):
        if name not in seen and name not in literals() and not resolves(name):
            yield f"{where}: {name}"
    for path in PATH.findall(text.text):
        if not (ROOT / path).exists():
            yield f"{where}: {path}"


def test_every_package_docstring_names_each_of_its_modules():
    missing = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        package = module_name(init)
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        children = {module_name(p) for p in init.parent.iterdir()
                    if (p.suffix in (".py", ".c") and p.stem != "__init__")
                    or (p / "__init__.py").is_file()}
        for child in sorted(children):
            if f":mod:`{child}`" not in doc and f":mod:`~{child}`" not in doc:
                missing.append(f"{package}: {child}")
    assert missing == [], "\n".join(missing)


def test_the_scripts_folder_is_not_a_package_and_each_script_is_documented():
    assert not (SCRIPTS / "__init__.py").exists()
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    undocumented = [p.name for p in sorted(SCRIPTS.iterdir())
                    if p.is_file() and p.name not in architecture]
    assert undocumented == []


def test_no_docstring_or_comment_names_what_does_not_exist():
    broken = []
    for name, path in sources().items():
        if path.suffix != ".py":
            continue
        for text in texts(path):
            broken += broken_references(text, name)
    for script in sorted(SCRIPTS.iterdir()):  # not modules: their whole text, names qualified
        if script.is_file():
            broken += broken_references(Text(script, 1, script.read_text()), "l2m")
    assert broken == [], "\n".join(broken)


def test_the_resolver_tells_names_that_exist_from_names_that_do_not():
    assert resolves("l2m.errors.L2mError")
    assert resolves("l2m.engine._scan")
    assert resolves("l2m.query.nodes.FieldUse")
    assert resolves("l2m.errors.OPERATOR_ERRORS")
    assert resolves("l2m.rules.model.Rule.__reduce__")
    assert not resolves("l2m.query.compiler.FieldUse")
    assert not resolves("l2m.rules.model.Tenancy")
    assert not resolves("l2m.runtime.jvm.build")
    assert not resolves("l2m.text")


def test_the_checker_finds_each_kind_of_stale_name():
    text = Text(PACKAGE / "engine" / "parse.py", 1, (
        "See :class:`~l2m.query.compiler.FieldUse`, :func:`no_such_function`, "
        ":data:`~l2m.engine.status.STATUS_NAMES`, l2m.state.nosuch.CUMULATIVE, "
        "l2m/state/nosuch.py, l2m/engine/parse.py, :class:`dict`, :class:`pyarrow.Table` "
        "and the ``l2m.json`` marker."))
    assert list(broken_references(text, "l2m.engine.parse")) == [
        "l2m/engine/parse.py:1: :class:`~l2m.query.compiler.FieldUse`",
        "l2m/engine/parse.py:1: :func:`no_such_function`",
        "l2m/engine/parse.py:1: l2m.state.nosuch.CUMULATIVE",
        "l2m/engine/parse.py:1: l2m/state/nosuch.py"]


@cache
def _repository_files() -> tuple[Path, ...]:
    """The repository's files — tracked, or new and not ignored — without this test's and
    test_spec.py's own patterns."""
    mine = {Path(__file__).resolve(), (ROOT / "tests/unit/project/test_spec.py").resolve()}
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
        paths = [ROOT / name for name in listed if name]
    except (OSError, subprocess.CalledProcessError):  # not a checkout: the folders people write
        paths = [p for folder in ("l2m", "docs", "tests", "benchmarks", "k8s", "tools")
                 for p in (ROOT / folder).rglob("*")] + list(ROOT.glob("*.*"))
    return tuple(path for path in sorted(paths) if path.is_file()
                 and path.resolve() not in mine and path.stat().st_size <= 2_000_000)


def test_nothing_in_the_repository_cites_the_contract_outside_it():
    outside = []
    for path in _repository_files():
        data = path.read_bytes()
        if b"\0" in data[:4096]:
            continue  # binary
        if OUTSIDE.search(data.decode(errors="replace")):
            outside.append(str(path.relative_to(ROOT)))
    assert outside == [], "\n".join(outside)


def _plain(text: str) -> str:
    """Text as read: comment markers, line breaks and doubled backticks gone, lower case."""
    text = re.sub(r"\n\s*#\s*", " ", text).replace("``", "`")
    return " ".join(text.split()).lower()


def test_citations_of_the_benchmarks_write_up_resolve():
    """A cited name ("Session 26", "State layouts") is in benchmarks/README.md, and a link to
    one of its headings finds the heading: the write-up is organised by question, and a
    reorganisation must not leave citations pointing at nothing."""
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    text = _plain(readme)
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", readme, re.M)}
    broken = []
    for path in _repository_files():
        if path.suffix not in (".py", ".md", ".sh", ".yaml") or path.name == "CHANGELOG.md":
            continue
        source = path.read_text(errors="replace")
        where = str(path.relative_to(ROOT))
        broken += [f"{where}: \"{name}\"" for name in BENCH_CITED.findall(source)
                   if _plain(name) not in text]
        # a link from benchmarks/ itself may be relative (`(README.md#…)`)
        local = path.parent.name == "benchmarks"
        broken += [f"{where}: #{a}" for a in BENCH_LINK.findall(source)
                   if a not in anchors and (local or f"benchmarks/README.md#{a}" in source)]
    assert broken == [], "\n".join(broken)

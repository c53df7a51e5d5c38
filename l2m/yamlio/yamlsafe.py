"""Reading YAML that nobody validated (rule files, job configurations) without hanging,
crashing or echoing it.

Input: YAML text. Output: the composed node tree (positions kept), or a
:class:`YamlLimitError` / :class:`yaml.MarkedYAMLError` with a line and column:

* aliases may expand to at most :data:`MAX_ALIAS_NODES` nodes in all (a "billion laughs"
  bomb — also one used as a mapping key — is refused at its alias instead of taking minutes and
  gigabytes), and an alias may not refer to the node it is inside of;
* nesting past Python's recursion limit is an error, not a RecursionError, and
  :func:`too_deep` finds the first node past :data:`MAX_DEPTH` levels;
* :func:`tag_problems` lists explicit tags l2m does not know (``!foo``,
  ``!!python/object``) and typed scalars that do not convert (``!!int abc``);
  :func:`complex_keys` lists mapping keys that are lists or mappings.

:func:`nodes` and :func:`children` walk a composed tree (each aliased node once) for the
checks of the rule and job-configuration loaders.

Error messages carry the position and the problem only — never a snippet of the text, which
may hold a secret (``sasl.password``). YAML 1.2 booleans: only true/false (YAML 1.1's
yes/no/on/off would turn an id ``off`` or a label value ``no`` into a boolean)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.reader import ReaderError

MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_ALIAS_NODES = 10_000
MAX_DEPTH = 64  # nesting levels: no rule or job file needs more than a handful

_STD = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_STD}{t}" for t in ("str", "int", "float", "bool", "null", "timestamp")}


class YamlLimitError(yaml.MarkedYAMLError):
    """A limit of :mod:`l2m.yamlio.yamlsafe` was passed; ``code`` is the error class."""

    def __init__(self, code: str, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(None, None, problem, mark)
        self.code = code


class SafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 booleans and bounded alias expansion."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._expanded = 0
        self._sizes: dict[int, int] = {}
        self._done: set[int] = set()

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:
                if id(node) not in self._done:
                    raise YamlLimitError("YAML_ALIAS_LIMIT",
                                         f"alias *{event.anchor} refers to a node it is inside "
                                         "of (a recursive structure)", event.start_mark)
                self._expanded += _size(node, self._sizes)
                if self._expanded > MAX_ALIAS_NODES:
                    raise YamlLimitError("YAML_ALIAS_LIMIT",
                                         f"aliases expand to more than {MAX_ALIAS_NODES} nodes "
                                         f"(at *{event.anchor})", event.start_mark)
            return super().compose_node(parent, index)
        node = super().compose_node(parent, index)
        self._done.add(id(node))
        return node


# YAML 1.1's booleans go (re-added below as 1.2's), and so does its `!!value` type: a plain
# `=` would resolve to it, which nothing constructs, so a label value `=` would read as an
# unknown tag instead of the string "=".
SafeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag not in (f"{_STD}bool", f"{_STD}value")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
SafeLoader.add_implicit_resolver(
    f"{_STD}bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _fold(root: yaml.Node, combine: Callable[[list[int]], int],
          memo: dict[int, int]) -> int:
    """``combine`` of the children's values, bottom-up over the node graph: each node once
    (aliases are shared nodes), iterative (no recursion limit), memoised in ``memo``."""
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in memo:
            continue
        kids = children(node)
        if children_done or not kids:
            memo[id(node)] = combine([memo[id(k)] for k in kids])
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in memo)
    return memo[id(root)]


def _size(root: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes ``root`` stands for once its aliases are expanded."""
    return _fold(root, lambda kids: 1 + sum(kids), memo)


def children(node: yaml.Node) -> list[yaml.Node]:
    """A node's children: items of a sequence, keys and values of a mapping."""
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def nodes(root: yaml.Node | None) -> Iterator[yaml.Node]:
    """Every node of the tree once (an aliased node once), parents before children, in
    document order."""
    seen: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(reversed(children(node)))


def too_deep(root: yaml.Node | None, limit: int = MAX_DEPTH) -> yaml.Node | None:
    """The first node nested deeper than ``limit`` (aliases followed), or None.

    Composing stops at Python's recursion limit, but constructing values recurses deeper per
    level than composing: a file nested a few hundred levels composes and then crashes with a
    RecursionError. A fixed, small bound (no rule or job file nests past a handful of levels)
    makes the error deterministic and positioned."""
    if root is None:
        return None
    height: dict[int, int] = {}
    if _fold(root, lambda kids: 1 + max(kids, default=0), height) <= limit:
        return None
    node = root
    for _ in range(limit):  # follow the deepest path down to the first level past the limit
        node = max(children(node), key=lambda k: height[id(k)])
    return node


def complex_keys(root: yaml.Node | None) -> list[tuple[yaml.Node, str]]:
    """Every mapping key that is a list or a mapping (``? [a, b]``), in file order.
    Constructing such a mapping fails (an unhashable key), with an error that quotes the
    text; no key l2m reads can be one, so they are reported up front, positioned."""
    found = [(key, "list" if isinstance(key, yaml.SequenceNode) else "mapping")
             for node in nodes(root) if isinstance(node, yaml.MappingNode)
             for key, _ in node.value if not isinstance(key, yaml.ScalarNode)]
    found.sort(key=lambda item: (item[0].start_mark.line, item[0].start_mark.column))
    return found


try:
    from yaml.cyaml import CParser as _CParser
except ImportError:  # pragma: no cover - PyYAML without LibYAML
    _CParser = None

if _CParser is not None:
    class _CLoader(_CParser, yaml.constructor.SafeConstructor,
                   yaml.resolver.Resolver):
        """LibYAML's parser and composer with :class:`SafeLoader`'s resolvers (YAML 1.2
        booleans): about 10x faster on a 10,000-rule file."""

        yaml_implicit_resolvers = SafeLoader.yaml_implicit_resolvers

        def __init__(self, stream: Any) -> None:
            _CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
else:  # pragma: no cover - PyYAML without LibYAML
    # mypy types _CLoader as the class above; without LibYAML there is no such class.
    _CLoader = None  # type: ignore[assignment,misc]


def _plain(text: str) -> bool:
    """True when the C composer may take ``text``: it parses (LibYAML's event parser is
    iterative), uses no alias and nests at most :data:`MAX_DEPTH` levels — the C composer
    recurses without Python's limit, and aliases need :class:`SafeLoader`'s expansion bound."""
    parser = _CLoader(text)
    depth = 0
    try:
        while (event := parser.get_event()) is not None:
            kind = type(event)
            if kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
                depth += 1
                if depth > MAX_DEPTH:
                    return False
            elif kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
                depth -= 1
            elif kind is AliasEvent:
                return False
    except yaml.YAMLError:
        return False
    finally:
        parser.dispose()
    return True


def compose(text: str, loader: type[SafeLoader] = SafeLoader) -> yaml.Node | None:
    """The node tree of one YAML document; :class:`yaml.MarkedYAMLError` (including
    :class:`YamlLimitError`) on bad or hostile input.

    Plain, valid documents are composed by LibYAML when PyYAML has it; anything else — an
    error, an alias, deep nesting — by PyYAML's own composer, whose checks and positions
    the error messages are written for."""
    if loader is SafeLoader and _CLoader is not None and _plain(text):
        fast = _CLoader(text)
        try:
            return fast.get_single_node()
        except yaml.YAMLError:
            pass  # reported below, with PyYAML's positions
        finally:
            fast.dispose()
    instance = loader(text)
    try:
        return instance.get_single_node()
    except RecursionError:
        raise YamlLimitError("YAML_TOO_DEEP", "nesting is too deep",
                             instance.get_mark()) from None
    finally:
        instance.dispose()


def tag_problems(root: yaml.Node | None, loader: type[SafeLoader] = SafeLoader
                 ) -> list[tuple[str, yaml.Mark, str]]:
    """(code, position, problem) of every unknown tag and every typed scalar that does not
    convert, each node looked at once."""
    found: list[tuple[str, yaml.Mark, str]] = []
    if root is None:
        return found
    seen: set[int] = set()
    stack = [root]
    constructor = loader("")
    try:
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            tag = node.tag
            if isinstance(node, yaml.ScalarNode):
                if tag not in _SCALAR_TAGS:
                    found.append(("YAML_UNKNOWN_TAG", node.start_mark,
                                  f"unknown tag {_short(tag)}"))
                    continue
                try:
                    constructor.construct_object(node)
                except (ValueError, TypeError, yaml.YAMLError):
                    found.append(("YAML_INVALID_VALUE", node.start_mark,
                                  f"the value is not a valid {_short(tag)}"))
            elif tag not in (f"{_STD}seq", f"{_STD}map"):
                found.append(("YAML_UNKNOWN_TAG", node.start_mark, f"unknown tag {_short(tag)}"))
                continue
            stack.extend(children(node))
    finally:
        constructor.dispose()
    return found


def _short(tag: str) -> str:
    return "!!" + tag[len(_STD):] if tag.startswith(_STD) else tag


def position(exc: yaml.YAMLError, text: str = "") -> tuple[int, int, str]:
    """1-based line and column and the problem of a YAML error — never the snippet
    PyYAML's own message quotes (it may hold a secret). A reader error (a control character,
    say) carries only an offset into ``text``; its line and column are computed from it."""
    if isinstance(exc, ReaderError):
        at = max(0, min(exc.position, len(text)))
        line = text.count("\n", 0, at) + 1
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        what = f" #x{exc.character:04x}" if isinstance(exc.character, int) else ""
        return line, column, f"unacceptable character{what}: {exc.reason}"
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        context = exc.context_mark
        if exc.context and exc.problem and context is not None and mark is not None \
                and context.line != mark.line:
            # e.g. an unterminated quote: found at the end, started where the user looks
            problem += f" ({exc.context} at line {context.line + 1}, column {context.column + 1})"
        if mark is not None:
            return mark.line + 1, mark.column + 1, problem
        return 1, 1, problem
    return 1, 1, type(exc).__name__

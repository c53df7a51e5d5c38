"""Reading YAML that nobody validated (rule files, job configurations) without hanging,
crashing or echoing it.

Input: YAML text. Output: the composed node tree (positions kept), or a
:class:`YamlLimitError` / :class:`yaml.MarkedYAMLError` with a line and column:

* aliases may expand to at most :data:`MAX_ALIAS_NODES` nodes in all (a "billion laughs"
  bomb — also one used as a mapping key — is refused at its alias instead of taking minutes and
  gigabytes), and an alias may not refer to the node it is inside of;
* nesting past Python's recursion limit is an error, not a RecursionError;
* :func:`tag_problems` lists explicit tags l2m does not know (``!foo``,
  ``!!python/object``) and typed scalars that do not convert (``!!int abc``).

Error messages carry the position and the problem only — never a snippet of the text, which
may hold a secret (``sasl.password``). YAML 1.2 booleans: only true/false (YAML 1.1's
yes/no/on/off would turn an id ``off`` or a label value ``no`` into a boolean)."""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.events import AliasEvent

MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_ALIAS_NODES = 10_000

_STD = "tag:yaml.org,2002:"
_SCALAR_TAGS = {f"{_STD}{t}" for t in ("str", "int", "float", "bool", "null", "timestamp")}


class YamlLimitError(yaml.MarkedYAMLError):
    """A limit of :mod:`l2m.yamlsafe` was passed; ``code`` is the error class."""

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


SafeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != f"{_STD}bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
SafeLoader.add_implicit_resolver(
    f"{_STD}bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _size(root: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes ``root`` stands for once its aliases are expanded (iterative, memoised)."""
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in memo:
            continue
        kids = _children(node)
        if children_done or not kids:
            memo[id(node)] = 1 + sum(memo.get(id(k), 1) for k in kids)
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in memo)
    return memo[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def compose(text: str, loader: type[SafeLoader] = SafeLoader) -> yaml.Node | None:
    """The node tree of one YAML document; :class:`yaml.MarkedYAMLError` (including
    :class:`YamlLimitError`) on bad or hostile input."""
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
            stack.extend(_children(node))
    finally:
        constructor.dispose()
    return found


def _short(tag: str) -> str:
    return "!!" + tag[len(_STD):] if tag.startswith(_STD) else tag


def position(exc: yaml.YAMLError) -> tuple[int, int, str]:
    """1-based line and column and the problem of a YAML error — never the snippet
    PyYAML's own message quotes (it may hold a secret)."""
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

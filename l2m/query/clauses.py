"""Lucene query strings → the clause tree as written, each clause with its span in the query
and its compiled node (``l2m explain``).

:class:`ClauseCompiler` is :class:`~l2m.query.compiler.QueryCompiler` itself, watched: every
luqum node it compiles becomes a :class:`Clause` holding the node it compiled to (not
normalised: each clause keeps its own), so what a clause means is what the job evaluates.
Wrappers that only carry a field or a boost (``f:…``, ``( … )``, ``f:( … )``, ``x^2``, a lone
``+x``) merge into the clause they wrap, keeping the wider span; in an operator-less group
each clause takes its role (``must`` for ``+x``, ``must_not`` for ``-x``/``NOT x``,
``should`` otherwise) and its sign's span.

Input: a query string and the query settings (text and default fields). Output: the root
:class:`Clause`, or :class:`~l2m.errors.QueryError` exactly as
:func:`~l2m.query.compiler.parse_query` raises it. Nothing is cached: compiled queries are
:func:`~l2m.query.compiler.parse_query`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from luqum import tree as lq

from l2m.query.compiler import QueryCompiler, _wildcard_parts, parsed_tree
from l2m.query.nodes import (
    Exists,
    MatchAll,
    Node,
    QueryConfig,
)


@dataclass(frozen=True)
class Clause:
    """One clause of a query as written: ``kind`` (``and``, ``or``, ``not``, ``group`` — an
    operator-less group —, ``term``, ``phrase``, ``wildcard``, ``regex``, ``range``,
    ``exists``, ``all``), its span ``[start, end)`` in the query, the field it applies to
    (None: a bare term, searching the default fields), its compiled ``node``, its children
    and, inside a group, its ``role``; ``boost``: the ``^N`` written on it (ignored)."""

    kind: str
    start: int
    end: int
    field: str | None
    node: Node
    children: tuple[Clause, ...] = ()
    role: str | None = None
    boost: str | None = None

    def text(self, query: str) -> str:
        """The clause as written: ``query[start:end]``."""
        return query[self.start:self.end]

    def walk(self) -> Iterator[Clause]:
        """This clause and every clause below it, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()


# luqum nodes that only wrap one clause: a field, parentheses, a boost, a lone '+'.
_WRAPPERS = (lq.SearchField, lq.Group, lq.FieldGroup, lq.Boost, lq.Plus)


def clause_tree(query: str, config: QueryConfig | None = None) -> Clause:
    """The clause tree of ``query`` (module docstring)."""
    tree = parsed_tree(query)
    return ClauseCompiler(query, config or QueryConfig()).tree(tree)


class ClauseCompiler(QueryCompiler):
    """The query compiler, recording a :class:`Clause` per luqum node it compiles."""

    def __init__(self, query: str, config: QueryConfig) -> None:
        super().__init__(config)
        self.query = query
        self._frames: list[list[Clause]] = [[]]

    def tree(self, root: lq.Item) -> Clause:
        """The clause of ``root`` (a parsed, checked tree)."""
        self.compile(root)
        (clause,) = self._frames[0]
        return clause

    def compile(self, node: lq.Item, field_name: str | None = None) -> Node:
        self._frames.append([])
        compiled = super().compile(node, field_name)
        children = tuple(self._frames.pop())
        self._frames[-1].append(self._clause(node, field_name, compiled, children))
        return compiled

    def _span(self, node: lq.Item) -> tuple[int, int]:
        """The node's span without the blanks luqum counts around it."""
        start = node.pos or 0
        end = start + (node.size or 0)
        while start < end and self.query[start].isspace():
            start += 1
        while end > start and self.query[end - 1].isspace():
            end -= 1
        return start, end

    def _clause(self, node: lq.Item, field_name: str | None, compiled: Node,
                children: tuple[Clause, ...]) -> Clause:
        start, end = self._span(node)
        if isinstance(node, _WRAPPERS) and len(children) == 1:
            (inner,) = children
            boost = str(node.force) if isinstance(node, lq.Boost) else inner.boost
            return replace(inner, start=start, end=end, boost=boost)
        if isinstance(node, lq.UnknownOperation):
            children = tuple(self._role(operand, child)
                             for operand, child in zip(node.operands, children, strict=True))
        field = field_name
        if isinstance(node, lq.SearchField) and isinstance(compiled, Exists):
            field = compiled.field
        return Clause(_kind(node, compiled), start, end, field, compiled, children)

    def _role(self, operand: lq.Item, child: Clause) -> Clause:
        if isinstance(operand, lq.Plus):
            role = "must"
        elif isinstance(operand, lq.Prohibit | lq.Not):
            role = "must_not"
        else:
            return replace(child, role="should")
        start, end = self._span(operand)  # the sign's too
        return replace(child, start=start, end=end, role=role)


def _kind(node: lq.Item, compiled: Node) -> str:
    if isinstance(node, lq.AndOperation):
        return "and"
    if isinstance(node, lq.OrOperation):
        return "or"
    if isinstance(node, lq.UnknownOperation):
        return "group"
    if isinstance(node, lq.Not | lq.Prohibit):
        return "not"
    if isinstance(node, lq.Range | lq.From | lq.To):
        return "range"
    if isinstance(node, lq.Regex):
        return "regex"
    if isinstance(node, lq.Phrase):
        return "phrase"
    if isinstance(node, lq.SearchField) or isinstance(compiled, Exists):
        return "exists"  # _exists_:f, f:*
    if isinstance(compiled, MatchAll):
        return "all"
    if isinstance(node, lq.Word) and _wildcard_parts(node.value) is not None:
        return "wildcard"
    return "term"

"""Lucene query strings → a small typed query tree (SPEC §2).

luqum parses; :class:`QueryCompiler` — one ``visit_<node>`` per luqum node type, like luqum's
own ``ElasticsearchQueryBuilder`` — turns the luqum tree into the immutable nodes of
:mod:`l2m.query.nodes`, which already carry the field semantics (keyword or text, numeric or
lexicographic range). Runs on the driver only; :mod:`l2m.engine.match` evaluates the result
over Arrow batches.

Input: a query string and the query settings (text and default fields). Output: a
:class:`~l2m.query.nodes.CompiledQuery` (the tree and the fields it reads, in which forms), or
:class:`~l2m.errors.QueryError` with a stable code and the offset inside the query.
"""

from __future__ import annotations

import decimal
import functools
import re
import threading
from collections.abc import Callable

from luqum import tree as lq
from luqum.exceptions import IllegalCharacterError, ParseError
from luqum.parser import parser as _luqum_parser
from luqum.visitor import TreeVisitor

from l2m.errors import QueryError
from l2m.query.limits import (
    MAX_NESTING,
    MAX_QUERY_LENGTH,
    MAX_REGEX_LENGTH,
    MAX_TERMS,
    MAX_TREE_DEPTH,
)
from l2m.query.nodes import (
    And,
    Clauses,
    CompiledQuery,
    Exists,
    FieldUse,
    KeywordEquals,
    KeywordRegex,
    KeywordWildcard,
    MatchAll,
    MatchNone,
    Node,
    Not,
    Or,
    QueryConfig,
    Range,
    TextPhrase,
    TextRegex,
    TextWildcard,
)
from l2m.query.patterns import (
    MAX_PATTERN_POSITIONS,
    regex_problem,
    wildcard_positions,
    wildcard_regex,
)
from l2m.semantics.values import NUMERIC_STRING, TOKEN, text_tokens

# ply's parser keeps state on the module-level object: one parse at a time.
_PARSE_LOCK = threading.Lock()


# --- compilation ---------------------------------------------------------------------------


def parse_query(query: str, config: QueryConfig | None = None) -> CompiledQuery:
    """Validate and compile ``query``; raises :class:`QueryError` on anything unsupported.
    Compiled queries are immutable and kept (:data:`QUERY_CACHE` of them): rule sets repeat
    their queries across tenants (100,000 rules from ten templates spent 12 s of a 29 s
    ``validate`` in the parser)."""
    return _compiled(query, config or QueryConfig())


QUERY_CACHE = 65_536  # compiled queries kept; errors are not kept (raised again each time)


@functools.lru_cache(maxsize=QUERY_CACHE)
def _compiled(query: str, config: QueryConfig) -> CompiledQuery:
    tree = parsed_tree(query)
    root = normalize(QueryCompiler(config).compile(tree))
    return CompiledQuery(query, root, tuple(collect_fields(root)))


def parsed_tree(query: str) -> lq.Item:
    """luqum's tree of ``query``, checked against every limit (:class:`QueryError`
    otherwise); not kept (:func:`parse_query` keeps what it compiles)."""
    if not query.strip():
        raise QueryError("QUERY_EMPTY", 0)
    if len(query) > MAX_QUERY_LENGTH:
        raise QueryError(
            "QUERY_TOO_LONG", MAX_QUERY_LENGTH, length=len(query), limit=MAX_QUERY_LENGTH
        )
    _lexical_checks(query)
    with _PARSE_LOCK:
        try:
            tree = _luqum_parser.parse(query)
        except (IllegalCharacterError, ParseError) as exc:
            pos = _error_pos(str(exc), query)
            raise QueryError("QUERY_SYNTAX", pos, reason=_reason(exc)) from None
        except (decimal.InvalidOperation, ValueError):
            # luqum parses a '~' or '^' followed by digits and dots, then fails to build the
            # node when they are no number ("a~.", "x^.", '"a b"~1.5'): Decimal's or int()'s
            # own exception, not a parse error.
            raise _bad_modifier(query) from None
    _check_tree(tree)
    return tree


# A phrase, an escaped character, or a '~' or '^' and the digits and dots luqum reads after
# it (its lexer's fuzzy, proximity and boost tokens).
_MODIFIER = re.compile(r'("(?:[^"\\]|\\.)*")|\\.|([~^])([0-9.]*)')


def _bad_modifier(query: str) -> QueryError:
    """The error for the first '~' or '^' whose number luqum could not read — read as luqum
    reads it: a proximity's (after a phrase) with ``int()``, any other with ``Decimal``."""
    phrase_end = -1  # where the last phrase ended: a '~' there (or past blanks) is a proximity's
    for match in _MODIFIER.finditer(query):
        phrase, op, digits = match.groups()
        if op is not None and digits:
            proximity = op == "~" and phrase_end >= 0 and \
                not query[phrase_end:match.start()].strip()
            try:
                int(digits) if proximity else decimal.Decimal(digits)
            except (decimal.InvalidOperation, ValueError):
                if op == "^":
                    return QueryError("QUERY_SYNTAX", match.start(),
                                      reason=f"a boost '^' takes a number, not '{digits}'")
                return _approximate(match.start(), proximity)
        if phrase is not None:
            phrase_end = match.end()
    return QueryError("QUERY_SYNTAX", len(query), reason="a '~' or '^' not followed by a number")


def _approximate(pos: int, proximity: bool) -> QueryError:
    """Fuzzy (``term~``) and proximity (``"a b"~N``) search, which l2m does not support."""
    if proximity:
        return QueryError("QUERY_UNSUPPORTED", pos, construct="proximity search '\"...\"~N'",
                          hint=": use a phrase")
    return QueryError("QUERY_UNSUPPORTED", pos, construct="fuzzy search '~'",
                      hint=": use a wildcard or a regex")


def _reason(exc: Exception) -> str:
    text = str(exc)
    if "unmatched parenthesis" in text or "end of expression" in text:
        return "unexpected end of query (unbalanced '(' or a missing term?)"
    match = re.search(r"unexpected\s+'(.*)'", text)
    if match:
        return f"unexpected '{match.group(1)}'"
    match = re.search(r"Illegal character '(.)", text)
    if match and match.group(1) == '"':
        return "unterminated phrase (missing closing '\"')"
    if match and match.group(1) == "/":
        return ("'/' starts a regular expression: quote the value (\"/path\") or escape it "
                "(\\/path)")
    if match:
        return f"illegal character '{match.group(1)}'"
    return text


def _error_pos(text: str, query: str) -> int:
    match = re.search(r"position (\d+)", text)
    return int(match.group(1)) if match else len(query)


def _lexical_checks(query: str) -> None:
    """Reject what luqum would silently mis-read (``&&``, ``||``, ``!`` are words to it),
    unbalanced parentheses and quotes, and nesting over the limit — each with the offset of
    the offending character."""
    opened: list[int] = []
    phrase_at = -1  # offset of the opening quote while inside a phrase
    in_regex = False
    i = 0
    n = len(query)
    while i < n:
        ch = query[i]
        if ch == "\\":
            i += 2
            continue
        if phrase_at >= 0:
            if ch == '"':
                phrase_at = -1
        elif in_regex:
            in_regex = ch != "/"
        elif ch == '"':
            phrase_at = i
        elif ch == "/" and (i == 0 or query[i - 1] in " \t\r\n(:"):
            in_regex = True
        elif query.startswith("&&", i):
            raise QueryError("QUERY_UNSUPPORTED_OPERATOR", i, operator="&&", instead="AND")
        elif query.startswith("||", i):
            raise QueryError("QUERY_UNSUPPORTED_OPERATOR", i, operator="||", instead="OR")
        elif ch == "!":
            raise QueryError("QUERY_UNSUPPORTED_OPERATOR", i, operator="!", instead="NOT")
        elif ch == "(":
            opened.append(i)
            if len(opened) > MAX_NESTING:
                raise QueryError("QUERY_TOO_DEEP", i, limit=MAX_NESTING)
        elif ch == ")":
            if not opened:
                raise QueryError("QUERY_SYNTAX", i, reason="unbalanced ')'")
            opened.pop()
        i += 1
    if phrase_at >= 0:
        raise QueryError("QUERY_SYNTAX", phrase_at,
                         reason="unterminated phrase (missing closing '\"')")
    if opened:
        raise QueryError("QUERY_SYNTAX", opened[-1], reason="unbalanced '('")


def _check_tree(tree: lq.Item) -> None:
    """Depth and term limits, before the (recursive) compiler sees the tree."""
    terms: list[int] = []
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_TREE_DEPTH:
            raise QueryError("QUERY_TOO_DEEP", node.pos or 0, limit=MAX_NESTING)
        if isinstance(node, lq.Term | lq.Range | lq.OpenRange):
            terms.append(node.pos or 0)  # a range's bounds are part of its one term
            continue
        stack.extend((child, depth + 1) for child in node.children)
    if len(terms) > MAX_TERMS:
        terms.sort()
        raise QueryError("QUERY_TOO_MANY_TERMS", terms[MAX_TERMS], count=len(terms),
                         limit=MAX_TERMS)


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text, flags=re.DOTALL)


def _wildcard_parts(text: str) -> tuple[str, ...] | None:
    """Split a term into literals and unescaped ``*``/``?``; ``None`` if it has no wildcard."""
    parts: list[str] = []
    literal: list[str] = []
    wild = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            literal.append(text[i + 1])
            i += 2
            continue
        if ch in "*?":
            wild = True
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(ch)
        else:
            literal.append(ch)
        i += 1
    if literal:
        parts.append("".join(literal))
    return tuple(parts) if wild else None


def is_number(text: str) -> bool:
    return NUMERIC_STRING.fullmatch(text) is not None


class QueryCompiler(TreeVisitor):
    """luqum tree → compiled query nodes. Context: the current field (``None`` at top
    level, where bare terms search the default fields)."""

    def __init__(self, config: QueryConfig) -> None:
        super().__init__(track_parents=False)
        self.config = config

    def compile(self, node: lq.Item, field_name: str | None = None) -> Node:
        return self._get_method(node)(node, field_name)

    def generic_visit(self, node: lq.Item, field_name: str | None) -> Node:
        raise QueryError(
            "QUERY_UNSUPPORTED", node.pos or 0, construct=type(node).__name__, hint=""
        )

    # structure

    def visit_search_field(self, node: lq.SearchField, field_name: str | None) -> Node:
        name = _unescape(node.name)
        if name == "_exists_":
            return self._exists(node.expr)
        if isinstance(node.expr, lq.Prohibit | lq.Plus):
            # luqum reads `f:-5` as `f:(NOT 5)`; Lucene rejects it. Neither is what was meant.
            sign = "-" if isinstance(node.expr, lq.Prohibit) else "+"
            raise QueryError(
                "QUERY_SYNTAX", node.expr.pos or 0,
                reason=f"'{sign}' right after '{name}:' is ambiguous: write {name}:\\{sign}... "
                       f"for a value starting with '{sign}', or {sign}{name}:... for the operator",
            )
        return self.compile(node.expr, name)

    def _exists(self, expr: lq.Item) -> Node:
        if isinstance(expr, lq.Word):
            return Exists(_unescape(expr.value))
        if isinstance(expr, lq.Phrase):
            return Exists(_unescape(expr.value[1:-1]))
        raise QueryError(
            "QUERY_UNSUPPORTED",
            expr.pos or 0,
            construct="this form of _exists_",
            hint=": write _exists_:field",
        )

    def visit_group(self, node: lq.Group, field_name: str | None) -> Node:
        return self.compile(node.expr, field_name)

    def visit_field_group(self, node: lq.FieldGroup, field_name: str | None) -> Node:
        return self.compile(node.expr, field_name)

    def visit_boost(self, node: lq.Boost, field_name: str | None) -> Node:
        return self.compile(node.expr, field_name)  # boosts only rank: ignored

    def visit_and_operation(self, node: lq.AndOperation, field_name: str | None) -> Node:
        return And(tuple(self.compile(child, field_name) for child in node.operands))

    def visit_or_operation(self, node: lq.OrOperation, field_name: str | None) -> Node:
        return Or(tuple(self.compile(child, field_name) for child in node.operands))

    def visit_unknown_operation(self, node: lq.UnknownOperation, field_name: str | None) -> Node:
        must: list[Node] = []
        should: list[Node] = []
        must_not: list[Node] = []
        for child in node.operands:
            if isinstance(child, lq.Plus):
                must.append(self.compile(child.a, field_name))
            elif isinstance(child, lq.Prohibit | lq.Not):
                must_not.append(self.compile(child.a, field_name))
            else:
                should.append(self.compile(child, field_name))
        return Clauses(tuple(must), tuple(should), tuple(must_not))

    def visit_not(self, node: lq.Not, field_name: str | None) -> Node:
        return Not(self.compile(node.a, field_name))

    def visit_prohibit(self, node: lq.Prohibit, field_name: str | None) -> Node:
        return Not(self.compile(node.a, field_name))

    def visit_plus(self, node: lq.Plus, field_name: str | None) -> Node:
        return self.compile(node.a, field_name)

    # leaves

    def _leaf(self, field_name: str | None, build: Callable[[str, bool], Node]) -> Node:
        if field_name is None:
            options = tuple(build(name, True) for name in self.config.default_fields)
            return options[0] if len(options) == 1 else Or(options)
        return build(field_name, field_name in self.config.text_fields)

    def visit_word(self, node: lq.Word, field_name: str | None) -> Node:
        raw = node.value
        if raw == "*":
            return MatchAll() if field_name is None else Exists(field_name)
        parts = _wildcard_parts(raw)
        if parts is not None:
            if wildcard_positions(parts) > MAX_PATTERN_POSITIONS:
                raise QueryError("PATTERN_TOO_COMPLEX", (node.pos or 0) + _crossing(raw),
                                 positions=wildcard_positions(parts),
                                 limit=MAX_PATTERN_POSITIONS)

            def wildcard(name: str, text: bool) -> Node:
                if not text:
                    return KeywordWildcard(name, parts)
                lowered = tuple(p.lower() for p in parts)
                if not all(p in ("*", "?") or TOKEN.fullmatch(p) for p in lowered):
                    return MatchNone()  # no token holds a non-word character
                return TextWildcard(name, lowered)

            return self._leaf(field_name, wildcard)
        value = _unescape(raw)
        return self._leaf(field_name, lambda name, text: self._term(name, text, value))

    def visit_phrase(self, node: lq.Phrase, field_name: str | None) -> Node:
        value = _unescape(node.value[1:-1])
        return self._leaf(field_name, lambda name, text: self._term(name, text, value))

    @staticmethod
    def _term(name: str, text: bool, value: str) -> Node:
        if not text:
            return KeywordEquals(name, value)
        tokens = tuple(text_tokens(value))
        # A term with no token (only punctuation) matches nothing, as in Lucene.
        return TextPhrase(name, tokens) if tokens else MatchNone()

    def visit_regex(self, node: lq.Regex, field_name: str | None) -> Node:
        body = node.value[1:-1].replace("\\/", "/")
        pos = node.pos or 0
        if len(body) > MAX_REGEX_LENGTH:
            raise QueryError("REGEX_TOO_LONG", pos, length=len(body), limit=MAX_REGEX_LENGTH)
        _check_regex(body, pos)
        return self._leaf(
            field_name,
            lambda name, text: TextRegex(name, body) if text else KeywordRegex(name, body),
        )

    def visit_range(self, node: lq.Range, field_name: str | None) -> Node:
        low = self._bound(node.low)
        high = self._bound(node.high)
        numeric = all(b is None or is_number(b) for b in (low, high))
        return self._range(node, field_name, low, high, node.include_low, node.include_high,
                           numeric)

    def visit_from(self, node: lq.From, field_name: str | None) -> Node:
        low = self._bound(node.a)
        return self._range(node, field_name, low, None, node.include, False,
                           low is None or is_number(low))

    def visit_to(self, node: lq.To, field_name: str | None) -> Node:
        high = self._bound(node.a)
        return self._range(node, field_name, None, high, False, node.include,
                           high is None or is_number(high))

    def _range(self, node: lq.Item, field_name: str | None, low: str | None,
               high: str | None, include_low: bool, include_high: bool,
               numeric: bool) -> Node:
        if field_name is None:
            raise QueryError("QUERY_UNSUPPORTED", node.pos or 0,
                             construct="a range without a field", hint=": write field:[a TO b]")
        return Range(field_name, low, high, include_low, include_high, numeric)

    def _bound(self, node: lq.Item) -> str | None:
        if isinstance(node, lq.Word):
            return None if node.value == "*" else _unescape(node.value)
        if isinstance(node, lq.Phrase):
            return _unescape(node.value[1:-1])
        if isinstance(node, lq.Prohibit) and isinstance(node.a, lq.Word):
            return "-" + _unescape(node.a.value)  # luqum reads "-5" in a range as NOT 5
        raise QueryError("QUERY_UNSUPPORTED", node.pos or 0, construct="this range bound", hint="")

    def visit_fuzzy(self, node: lq.Fuzzy, field_name: str | None) -> Node:
        raise _approximate(_tilde(node), proximity=False)

    def visit_proximity(self, node: lq.Proximity, field_name: str | None) -> Node:
        raise _approximate(_tilde(node), proximity=True)


def _crossing(raw: str) -> int:
    """Offset in a wildcard term of the character past :data:`MAX_PATTERN_POSITIONS`."""
    count = 0
    i = 0
    while i < len(raw):
        escaped = raw[i] == "\\" and i + 1 < len(raw)
        if escaped or raw[i] != "*":
            count += 1
            if count > MAX_PATTERN_POSITIONS:
                return i
        i += 2 if escaped else 1
    return 0


def _tilde(node: lq.BaseApprox) -> int:
    return (node.term.pos or 0) + (node.term.size or 0)


_LUCENE_ONLY = re.compile(r"(?<!\\)(?:\\\\)*([@&~#<>])")


def _check_regex(body: str, pos: int) -> None:
    bad = _LUCENE_ONLY.search(body)
    if bad:
        raise QueryError(
            "QUERY_UNSUPPORTED",
            pos + 1 + bad.start(1),
            construct=f"the regex operator '{bad.group(1)}'",
            hint=f": escape it as \\{bad.group(1)} to match it literally",
        )
    # Validated by RE2, the engine the parse stage runs it with (l2m.query.patterns).
    problem = regex_problem(body)
    if problem is not None:
        raise QueryError(problem.code, pos + 1 + problem.offset, **problem.params)


def pattern_of(node: Node) -> tuple[str, bool, str] | None:
    """``(field, text, regex)`` of a pattern leaf — the RE2 regex the parse stage evaluates,
    over the whole string form or (``text``) each token — or ``None`` for other nodes."""
    match node:
        case KeywordRegex(name, pattern):
            return name, False, pattern
        case TextRegex(name, pattern):
            return name, True, pattern
        case KeywordWildcard(name, parts):
            return name, False, wildcard_regex(parts)
        case TextWildcard(name, parts):
            return name, True, wildcard_regex(parts)
    return None


def normalize(node: Node) -> Node:
    """An equivalent tree, flatter: nested ``And``/``Or`` of the same kind become one,
    duplicate children go, one-child ``And``/``Or`` become the child, ``NOT NOT x`` becomes
    ``x``. Depth is what costs (Spark analyses expressions recursively); the result's depth
    is at most the input's."""
    match node:
        case And(children) | Or(children):
            kind = type(node)
            flat: list[Node] = []
            for child in map(normalize, children):
                flat.extend(child.children if isinstance(child, kind) else (child,))
            unique = tuple(dict.fromkeys(flat))
            return unique[0] if len(unique) == 1 else kind(unique)
        case Not(child):
            inner = normalize(child)
            return inner.child if isinstance(inner, Not) else Not(inner)
        case Clauses(must, should, must_not):
            return Clauses(*(tuple(dict.fromkeys(map(normalize, part)))
                             for part in (must, should, must_not)))
    return node


def collect_fields(root: Node) -> list[FieldUse]:
    """The fields a compiled query reads, and in which forms, merged per path."""
    uses: dict[str, FieldUse] = {}

    def add(use: FieldUse) -> None:
        uses[use.path] = uses[use.path].merged(use) if use.path in uses else use

    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        match node:
            case And(children) | Or(children):
                stack.extend(children)
            case Not(child):
                stack.append(child)
            case Clauses(must, should, must_not):
                stack.extend(must + should + must_not)
            case Exists(name):
                add(FieldUse(name, exists=True))
            case KeywordEquals(name, _):
                add(FieldUse(name, string=True))
            case TextPhrase(name, _):
                add(FieldUse(name, text=True))
            case Range(field=name, numeric=numeric):
                add(FieldUse(name, number=numeric, string=not numeric))
            case _:
                pattern = pattern_of(node)
                if pattern is not None:
                    name, text, regex = pattern
                    add(FieldUse(name, text_patterns=(regex,)) if text
                        else FieldUse(name, keyword_patterns=(regex,)))
    return list(uses.values())

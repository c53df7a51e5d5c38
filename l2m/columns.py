"""Compiled query tree → one boolean Spark ``Column`` over the parse stage's columns.

Every leaf is null-safe (a missing field is ``False``, never ``NULL``), so ``NOT f:x`` is
true for logs without ``f``, as SPEC §2 requires. Regexes and wildcards are not evaluated
here: the parse stage matched them with RE2 (:mod:`l2m.patterns`) and a leaf reads its
boolean column.

The query becomes one Spark SQL expression, handed to the JVM in a single call: built through
the Column API, every operator is a few py4j round trips plus a captured Python call site, and
a query at the term limit took ten seconds to build. ``AND``/``OR`` of many children become
shallow trees — chains of at most :data:`CHAIN` terms, grouped — so a query at the term limit
is an expression of small depth (Spark analyses expressions recursively: the left-deep chain
of a few hundred ``OR`` built before overflowed the JVM's stack). Few parentheses also keep
Spark's SQL parser fast: a balanced binary tree, nested ten deep, took it seconds to parse.
Literals are written as UTF-8 hex (``X'…'``): no SQL quoting to get wrong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

from l2m.parse import ParsePlan
from l2m.query import (
    And,
    Clauses,
    Exists,
    KeywordEquals,
    KeywordRegex,
    KeywordWildcard,
    MatchAll,
    MatchNone,
    Node,
    Not,
    Or,
    Range,
    TextPhrase,
    TextRegex,
    TextWildcard,
    normalize,
    pattern_of,
)


def to_column(node: Node, plan: ParsePlan) -> Column:
    """A boolean Column that is true exactly when a log matches ``node``."""
    return F.expr(to_sql(node, plan))


def to_sql(node: Node, plan: ParsePlan) -> str:
    """``node`` as a Spark SQL boolean expression over ``plan``'s columns, never null."""
    # parse_query already returns normalised trees; hand-built ones get the same depth.
    return _sql(normalize(node), plan)


def _sql(node: Node, plan: ParsePlan) -> str:
    match node:
        case MatchAll():
            return "true"
        case MatchNone():
            return "false"
        case And(children):
            return _all([_sql(c, plan) for c in children])
        case Or(children):
            return _any([_sql(c, plan) for c in children])
        case Not(child):
            return f"(NOT {_sql(child, plan)})"
        case Clauses(must, should, must_not):
            return _clauses(must, should, must_not, plan)
        case Exists(field):
            return _safe(_col(plan.column(field, "x")))
        case KeywordEquals(field, value):
            return _safe(f"{_col(plan.column(field, 's'))} = {_string(value)}")
        case KeywordWildcard() | KeywordRegex() | TextWildcard() | TextRegex():
            field, text, regex = pattern_of(node)  # type: ignore[misc]
            return _safe(_col(plan.pattern_column(field, text, regex)))
        case TextPhrase(field, tokens):
            needle = " " + " ".join(tokens) + " "
            return _safe(f"contains({_col(plan.column(field, 't'))}, {_string(needle)})")
        case Range():
            return _range(node, plan)
    raise TypeError(f"unknown query node {node!r}")


def _col(name: str) -> str:
    return f"`{name}`"  # plan column names are f<i>_<form>: no backtick to escape


def _string(value: str) -> str:
    return f"CAST(X'{value.encode('utf-8').hex()}' AS STRING)"


def _double(value: float) -> str:
    text = repr(value) if math.isfinite(value) else ("Infinity" if value > 0 else "-Infinity")
    return f"CAST('{text}' AS DOUBLE)"


def _safe(sql: str) -> str:
    return f"coalesce({sql}, false)"


# Terms per flat `a OR b OR …` chain. Even if Spark built each chain left-deep, a query at the
# term limit (1024) is two levels of chains: depth ≤ 64 per AND/OR node.
CHAIN = 32


def _grouped(terms: Sequence[str], op: str) -> str:
    """``op`` over all ``terms`` as chains of at most :data:`CHAIN`, grouped by chains of at
    most :data:`CHAIN` groups, and so on: depth ⌈log_CHAIN n⌉ levels of parentheses."""
    level = list(terms)
    while len(level) > 1:
        level = [f"({f' {op} '.join(level[i:i + CHAIN])})" for i in range(0, len(level), CHAIN)]
    return level[0]


def _all(terms: Sequence[str]) -> str:
    return _grouped(terms, "AND") if terms else "true"


def _any(terms: Sequence[str]) -> str:
    return _grouped(terms, "OR") if terms else "false"


def _clauses(must: tuple[Node, ...], should: tuple[Node, ...], must_not: tuple[Node, ...],
             plan: ParsePlan) -> str:
    parts = [_sql(c, plan) for c in must]
    if not must and should:
        parts.append(_any([_sql(c, plan) for c in should]))
    parts += [f"(NOT {_sql(c, plan)})" for c in must_not]
    return _all(parts)


def _range(node: Range, plan: ParsePlan) -> str:
    if node.numeric:
        col = _col(plan.column(node.field, "n"))
        low = None if node.low is None else _double(float(node.low))
        high = None if node.high is None else _double(float(node.high))
    else:
        col = _col(plan.column(node.field, "s"))
        low = None if node.low is None else _string(node.low)
        high = None if node.high is None else _string(node.high)
    cond = [f"{col} IS NOT NULL"]
    if low is not None:
        cond.append(f"{col} {'>=' if node.include_low else '>'} {low}")
    if high is not None:
        cond.append(f"{col} {'<=' if node.include_high else '<'} {high}")
    return _safe("(" + " AND ".join(cond) + ")")

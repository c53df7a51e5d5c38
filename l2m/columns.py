"""Compiled query tree → one boolean Spark ``Column`` over the parse stage's columns.

Every leaf is null-safe (a missing field is ``False``, never ``NULL``), so ``NOT f:x`` is
true for logs without ``f``, as SPEC §2 requires."""

from __future__ import annotations

import re
from functools import reduce

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
)

_WORD = re.compile(r"\w*")


def to_column(node: Node, plan: ParsePlan) -> Column:
    """A boolean Column that is true exactly when a log matches ``node``."""
    match node:
        case MatchAll():
            return F.lit(True)
        case MatchNone():
            return F.lit(False)
        case And(children):
            return reduce(lambda a, b: a & b, (to_column(c, plan) for c in children))
        case Or(children):
            return reduce(lambda a, b: a | b, (to_column(c, plan) for c in children))
        case Not(child):
            return ~to_column(child, plan)
        case Clauses(must, should, must_not):
            return _clauses(must, should, must_not, plan)
        case Exists(field):
            return _safe(F.col(plan.column(field, "x")))
        case KeywordEquals(field, value):
            return _safe(F.col(plan.column(field, "s")) == F.lit(value))
        case KeywordWildcard(field, parts):
            return _safe(F.col(plan.column(field, "s")).like(_like_pattern(parts)))
        case KeywordRegex(field, pattern):
            return _safe(F.col(plan.column(field, "s")).rlike(_anchored(pattern)))
        case TextPhrase(field, tokens):
            needle = " " + " ".join(tokens) + " "
            return _safe(F.col(plan.column(field, "t")).contains(F.lit(needle)))
        case TextWildcard(field, parts):
            literals = [p for p in parts if p not in ("*", "?")]
            if not all(_WORD.fullmatch(p) for p in literals):
                return F.lit(False)  # no token holds a non-word character
            regex = " " + "".join(_token_wildcard(p) for p in parts) + " "
            return _safe(F.col(plan.column(field, "t")).rlike(regex))
        case TextRegex(field, pattern):
            tokens = F.split(F.trim(F.col(plan.column(field, "t"))), " ")
            anchored = _anchored(pattern)
            return _safe(F.exists(tokens, lambda t: (t != F.lit("")) & t.rlike(anchored)))
        case Range():
            return _range(node, plan)
    raise TypeError(f"unknown query node {node!r}")


def _safe(column: Column) -> Column:
    return F.coalesce(column, F.lit(False))


def _clauses(must: tuple[Node, ...], should: tuple[Node, ...], must_not: tuple[Node, ...],
             plan: ParsePlan) -> Column:
    parts: list[Column] = [to_column(c, plan) for c in must]
    if not must and should:
        parts.append(reduce(lambda a, b: a | b, (to_column(c, plan) for c in should)))
    parts += [~to_column(c, plan) for c in must_not]
    return reduce(lambda a, b: a & b, parts) if parts else F.lit(True)


def _range(node: Range, plan: ParsePlan) -> Column:
    if node.numeric:
        col = F.col(plan.column(node.field, "n"))
        low = None if node.low is None else F.lit(float(node.low))
        high = None if node.high is None else F.lit(float(node.high))
    else:
        col = F.col(plan.column(node.field, "s"))
        low = None if node.low is None else F.lit(node.low)
        high = None if node.high is None else F.lit(node.high)
    cond = col.isNotNull()
    if low is not None:
        cond = cond & ((col >= low) if node.include_low else (col > low))
    if high is not None:
        cond = cond & ((col <= high) if node.include_high else (col < high))
    return _safe(cond)


def _like_pattern(parts: tuple[str, ...]) -> str:
    out = []
    for part in parts:
        if part == "*":
            out.append("%")
        elif part == "?":
            out.append("_")
        else:
            out.append(re.sub(r"([\\%_])", r"\\\1", part))
    return "".join(out)


def _token_wildcard(part: str) -> str:
    if part == "*":
        return "[^ ]*"
    if part == "?":
        return "[^ ]"
    return re.escape(part)


def _anchored(pattern: str) -> str:
    # Java regex (Spark's rlike) searches; \z anchors at the very end, unlike $.
    return f"(?s)^(?:{pattern})\\z"

"""The compiled query tree: immutable nodes that already carry the field semantics (keyword or
text, numeric or lexicographic range), what the parse stage must extract per field
(:class:`FieldUse`), and the query configuration.

Input: none (plain values). Output: the types :mod:`l2m.query.compiler` builds and
:mod:`l2m.engine.match` evaluates."""

from __future__ import annotations

from dataclasses import dataclass, field

from l2m.defaults import DEFAULT_FIELDS, TEXT_FIELDS


@dataclass(frozen=True)
class QueryConfig:
    """Which fields are analysed as text, and which fields bare terms search."""

    text_fields: tuple[str, ...] = TEXT_FIELDS
    default_fields: tuple[str, ...] = DEFAULT_FIELDS


# --- the compiled query tree -------------------------------------------------------------


class Node:
    """Base of compiled query nodes."""


@dataclass(frozen=True)
class MatchAll(Node):
    pass


@dataclass(frozen=True)
class MatchNone(Node):
    pass


@dataclass(frozen=True)
class Exists(Node):
    field: str


@dataclass(frozen=True)
class KeywordEquals(Node):
    field: str
    value: str


@dataclass(frozen=True)
class KeywordWildcard(Node):
    field: str
    # literal strings and the wildcards "*" / "?" as separate items, in order
    parts: tuple[str, ...]


@dataclass(frozen=True)
class KeywordRegex(Node):
    field: str
    pattern: str


@dataclass(frozen=True)
class TextPhrase(Node):
    field: str
    tokens: tuple[str, ...]


@dataclass(frozen=True)
class TextWildcard(Node):
    field: str
    parts: tuple[str, ...]  # lower-cased


@dataclass(frozen=True)
class TextRegex(Node):
    field: str
    pattern: str


@dataclass(frozen=True)
class Range(Node):
    field: str
    low: str | None  # None: open end
    high: str | None
    include_low: bool
    include_high: bool
    numeric: bool


@dataclass(frozen=True)
class And(Node):
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Or(Node):
    children: tuple[Node, ...]


@dataclass(frozen=True)
class Not(Node):
    child: Node


@dataclass(frozen=True)
class Clauses(Node):
    """Lucene's operator-less group: every ``must``, no ``must_not``, and — when there is no
    ``must`` — at least one ``should`` (a group of only prohibitions matches what they
    don't)."""

    must: tuple[Node, ...]
    should: tuple[Node, ...]
    must_not: tuple[Node, ...]


@dataclass(frozen=True)
class FieldUse:
    """What the parse stage must extract for one field path. Patterns are RE2 regexes (see
    :func:`~l2m.query.compiler.pattern_of`) the parse stage evaluates into one boolean column
    each: against the whole string form (``keyword_patterns``) or against each token
    (``text_patterns``)."""

    path: str
    string: bool = False  # string form
    number: bool = False  # numeric value
    exists: bool = False  # present and not null
    text: bool = False  # padded lower-case tokens
    keyword_patterns: tuple[str, ...] = ()
    text_patterns: tuple[str, ...] = ()

    def merged(self, other: FieldUse) -> FieldUse:
        """Both uses of the same path in one: every form either needs, each pattern once."""
        return FieldUse(
            self.path,
            self.string or other.string,
            self.number or other.number,
            self.exists or other.exists,
            self.text or other.text,
            tuple(sorted({*self.keyword_patterns, *other.keyword_patterns})),
            tuple(sorted({*self.text_patterns, *other.text_patterns})),
        )


@dataclass(frozen=True)
class CompiledQuery:
    source: str
    root: Node
    fields: tuple[FieldUse, ...] = field(default=())

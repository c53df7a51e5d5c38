"""Match stage on Arrow: compiled query trees → boolean masks over one parsed batch.

Input: a batch with ``ParsePlan.schema()`` (:func:`l2m.engine.parse.parse_lines`) and query trees
(:mod:`l2m.query.compiler`). Output: one ``pa.BooleanArray`` per tree, never null — a missing field
is ``False``, so ``NOT f:x`` is true for logs without ``f`` (SPEC §2), exactly as the reference
evaluator (``tests/support/reference.py``) reads it. It is l2m's one query engine: streaming and
backfill both route with it.

One visitor, one ``visit_<Node>`` method per node type, in the manner of luqum's
``TreeVisitor``; a node type without a method is a :class:`~l2m.errors.QueryError`, not a
silent ``False``. A :class:`Matcher` lives for one batch and remembers every node it has
evaluated: thousands of rules that share ``service:checkout`` evaluate it once per batch
(query nodes are frozen dataclasses, equal when their text is equal).

Regexes and wildcards are not evaluated here: the parse stage matched them with RE2
(:mod:`l2m.query.patterns`) into one boolean column per (field, pattern), which a leaf reads.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.parse import Form, ParsePlan
from l2m.errors import QueryError
from l2m.query.compiler import pattern_of
from l2m.query.nodes import (
    And,
    Clauses,
    Exists,
    KeywordEquals,
    MatchAll,
    MatchNone,
    Node,
    Not,
    Or,
    Range,
    TextPhrase,
)

Batch: TypeAlias = "pa.RecordBatch | pa.Table"


class Matcher:
    """Evaluates query trees over one parsed batch; each distinct node once."""

    def __init__(self, batch: Batch, plan: ParsePlan) -> None:
        self.batch = batch
        self.plan = plan
        self.rows = batch.num_rows
        self._memo: dict[Node, pa.BooleanArray] = {}
        # Text columns made ready for phrases, per field: once, however many phrases read them.
        self._haystacks: dict[str, list[Haystack]] = {}
        self._true: pa.BooleanArray | None = None
        self._false: pa.BooleanArray | None = None

    def mask(self, node: Node) -> pa.BooleanArray:
        """True where the log matches ``node``; no nulls."""
        found = self._memo.get(node)
        if found is None:
            visit: Callable[[Any], pa.BooleanArray] | None = getattr(
                self, f"visit_{type(node).__name__}", None)
            if visit is None:
                raise QueryError("QUERY_UNSUPPORTED", 0, construct=type(node).__name__,
                                 hint=" by the Arrow matcher")
            found = self._memo[node] = visit(node)
        return found

    # -- constants and connectives --------------------------------------------------------

    def visit_MatchAll(self, node: MatchAll) -> pa.BooleanArray:
        if self._true is None:
            self._true = pa.repeat(pa.scalar(True), self.rows)
        return self._true

    def visit_MatchNone(self, node: MatchNone) -> pa.BooleanArray:
        if self._false is None:
            self._false = pa.repeat(pa.scalar(False), self.rows)
        return self._false

    def visit_And(self, node: And) -> pa.BooleanArray:
        return self._all(node.children)

    def visit_Or(self, node: Or) -> pa.BooleanArray:
        return self._any(node.children)

    def visit_Not(self, node: Not) -> pa.BooleanArray:
        return pc.invert(self.mask(node.child))

    def visit_Clauses(self, node: Clauses) -> pa.BooleanArray:
        masks = [self.mask(c) for c in node.must]
        if not node.must and node.should:
            masks.append(self._any(node.should))
        masks += [pc.invert(self.mask(c)) for c in node.must_not]
        return _fold(pc.and_, masks) if masks else self.visit_MatchAll(MatchAll())

    def _all(self, children: tuple[Node, ...]) -> pa.BooleanArray:
        if not children:
            return self.visit_MatchAll(MatchAll())
        return _fold(pc.and_, [self.mask(c) for c in children])

    def _any(self, children: tuple[Node, ...]) -> pa.BooleanArray:
        if not children:
            return self.visit_MatchNone(MatchNone())
        return _fold(pc.or_, [self.mask(c) for c in children])

    # -- leaves ----------------------------------------------------------------------------

    def _column(self, path: str, form: Form) -> pa.Array:
        return self.batch.column(self.plan.column(path, form))

    def visit_Exists(self, node: Exists) -> pa.BooleanArray:
        return _safe(self._column(node.field, Form.EXISTS))

    def visit_KeywordEquals(self, node: KeywordEquals) -> pa.BooleanArray:
        value = pa.scalar(node.value, pa.string())
        return _safe(pc.equal(self._column(node.field, Form.STRING), value))

    def _pattern(self, node: Node) -> pa.BooleanArray:
        found = pattern_of(node)
        assert found is not None
        field, text, regex = found
        return _safe(self.batch.column(self.plan.pattern_column(field, text, regex)))

    visit_KeywordWildcard = visit_KeywordRegex = _pattern
    visit_TextWildcard = visit_TextRegex = _pattern

    def visit_TextPhrase(self, node: TextPhrase) -> pa.BooleanArray:
        # Tokens are stored padded (" a b "), so a phrase is a substring with its spaces.
        needle = " " + " ".join(node.tokens) + " "
        if not node.tokens:
            return _safe(pc.match_substring(self._column(node.field, Form.TEXT), needle))
        hays = self._haystacks.get(node.field)
        if hays is None:
            column = self._column(node.field, Form.TEXT)
            chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
            hays = self._haystacks[node.field] = [Haystack(chunk) for chunk in chunks]
        found = [contains_phrase(hay, needle) for hay in hays]
        return found[0] if len(found) == 1 else _safe(pa.chunked_array(found, pa.bool_()))

    def visit_Range(self, node: Range) -> pa.BooleanArray:
        if node.numeric:
            column = self._column(node.field, Form.NUMBER)
            low = None if node.low is None else pa.scalar(float(node.low), pa.float64())
            high = None if node.high is None else pa.scalar(float(node.high), pa.float64())
        else:
            column = self._column(node.field, Form.STRING)
            low = None if node.low is None else pa.scalar(node.low, pa.string())
            high = None if node.high is None else pa.scalar(node.high, pa.string())
        masks = [pc.is_valid(column)]
        if low is not None:
            masks.append((pc.greater_equal if node.include_low else pc.greater)(column, low))
        if high is not None:
            masks.append((pc.less_equal if node.include_high else pc.less)(column, high))
        return _safe(_fold(pc.and_, masks))


class Haystack:
    """A padded token string column (``" a b "``, :func:`l2m.semantics.values.
    padded_tokens`) made ready for :func:`contains_phrase`: its data buffer as bytes and its
    offsets, once per column however many phrases read it."""

    __slots__ = ("_bounds", "column", "end", "offsets", "start", "text")

    def __init__(self, column: pa.Array) -> None:
        self.column = column
        rows = len(column)
        wide = pa.types.is_large_string(column.type)
        data = column.buffers()[2] if rows else None
        self.offsets = np.frombuffer(column.buffers()[1], dtype=np.int64 if wide else np.int32,
                                     count=column.offset + rows + 1)[column.offset:] \
            if rows else np.zeros(1, np.int32)
        self.start, self.end = int(self.offsets[0]), int(self.offsets[-1])
        self.text = b"" if data is None or self.end <= self.start else data.to_pybytes()
        self._bounds: list[int] | None = None

    def bounds(self) -> list[int]:
        """The offsets as a list, for ``bisect`` (built on the first hit of any phrase)."""
        if self._bounds is None:
            self._bounds = self.offsets.tolist()
        return self._bounds


def contains_phrase(padded: pa.Array | Haystack, needle: str) -> pa.BooleanArray:
    """Per row: does a padded token string (``" a b "``, :func:`l2m.semantics.values.
    padded_tokens`) hold ``needle`` — a phrase's tokens padded the same way, at least one
    token — as a substring? ``False`` for null rows. The same rows as Arrow's
    ``match_substring``, found by searching the column's whole data buffer at once: Arrow
    compares row by row (≈ 400 MB/s on the benchmark machine), CPython's ``bytes.find``
    skips through the buffer several times faster, which tells on long messages and rules
    heavy on phrases (benchmarks/README.md, issue 58).
    No hit spans two rows: rows meet as ``"… x␣" + "␣y …"`` (two spaces, or more past rows
    without tokens) and a needle has no two spaces in a row."""
    hay = padded if isinstance(padded, Haystack) else Haystack(padded)
    column = hay.column
    out = np.zeros(len(column), dtype=np.bool_)
    text, end = hay.text, hay.end
    if not text:
        return pa.array(out)
    target = needle.encode()
    at = text.find(target, hay.start, end)
    while at != -1:
        bounds = hay.bounds()
        # The row holding the hit; the search goes on from the next row's start. Empty rows
        # share their offset with the next: bisect_right picks the last of them, the row the
        # bytes belong to.
        row = bisect_right(bounds, at) - 1
        out[row] = True
        at = text.find(target, bounds[row + 1], end)
    mask = pa.array(out)
    # A null row's slot may hold bytes (Arrow does not forbid it): it never matches.
    return mask if column.null_count == 0 else pc.and_(mask, pc.is_valid(column))


def _safe(mask: Any) -> pa.BooleanArray:
    """Null (a missing field) reads as ``False``; a chunked result becomes one array."""
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks() if mask.num_chunks != 1 else mask.chunk(0)
    return mask if mask.null_count == 0 else pc.fill_null(mask, False)


def _fold(op: Callable[[Any, Any], Any], masks: list[Any]) -> pa.BooleanArray:
    """``op`` over ``masks``, pairwise as a balanced tree."""
    level = list(masks)
    while len(level) > 1:
        level = [op(level[i], level[i + 1]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return _safe(level[0])

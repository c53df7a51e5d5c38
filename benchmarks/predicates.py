"""Rules compiled once into plain Python predicates, for the Quix Streams peer
(:mod:`benchmarks.peer_quix`): what a competent user of a Python stream processor would write
instead of walking the query tree for every log.

Each compiled query node (:mod:`l2m.query.compiler`) becomes a closure ``pred(doc) -> bool`` built
from its children's closures, with field paths pre-split, numbers pre-parsed and patterns
precompiled. The semantics are exactly those of the reference evaluator
(``tests/support/reference.py``, SPEC §2–4) and of the value helpers of :mod:`l2m.semantics.values`:

* field lookup, string form and numbers are :func:`~l2m.semantics.values.lookup`,
  :func:`~l2m.semantics.values.string_form` and :func:`~l2m.semantics.values.number`, with the
  common cases
  (a top-level key, a ``str``, an ``int``/``float``) inlined;
* text fields are the lower-cased ``\\w+`` tokens of :func:`~l2m.semantics.values.text_tokens`. A
  phrase or a wildcard over word characters is searched in the lower-cased text with a
  token-bounded regex (``(?<!\\w)connection\\W+refused(?!\\w)``): tokens are the maximal
  ``\\w`` runs, so this is the token-sequence test without splitting the text;
* wildcards are matched whole: ``*``-only patterns with ``startswith``/``endswith``/``find``,
  others with a precompiled Python regex or, past two ``*``, the reference's glob algorithm;
* regexes are specified for RE2. Those of a conservative subset on which Python's ``re``
  (with ``re.ASCII`` and ``re.DOTALL``) provably agrees with RE2 — literals, ``.``, simple
  classes, ``\\d``/``\\w``, groups, alternation, repetitions, no nested repetition — run as
  a precompiled Python regex; anything else (``(?i)``, ``\\pL``, ``a{,3}``, ``(a+)+``…)
  runs on RE2 through pyarrow as the reference does, one value at a time, memoised.

Per rule, :func:`compile_rule` also precomputes the account check, the group-by label
extraction and the value extraction; :class:`CompiledRules` picks the rules of a log's
account before any query runs."""

from __future__ import annotations

import math
import re
import string
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from l2m.query.nodes import (
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
from l2m.rules.model import Rule
from l2m.semantics.values import TOKEN, label_name, lookup, number, string_form

Pred = Callable[[dict[str, Any]], bool]
Getter = Callable[[dict[str, Any]], Any]


# --- values -------------------------------------------------------------------------------


def getter(path: str) -> Getter:
    """:func:`l2m.semantics.values.lookup` for one path: one- and two-part paths unrolled."""
    if "." not in path:
        return lambda doc: doc.get(path)
    parts = tuple(path.split("."))
    if len(parts) == 2:  # the common "a.b": unrolled
        first, second = parts

        def get2(doc: dict[str, Any]) -> Any:
            value = doc.get(path)
            if value is not None:
                return value
            node = doc.get(first)
            return node.get(second) if isinstance(node, dict) else None

        return get2

    return lambda doc: lookup(doc, path)  # deeper paths are rare: the shared lookup


def _text(value: Any) -> str | None:
    """:func:`l2m.semantics.values.string_form`, with the common ``str`` case first."""
    return value if value.__class__ is str else string_form(value)


def _number(value: Any) -> float | None:
    """:func:`l2m.semantics.values.number`, with the common ``int``/``float`` cases first."""
    cls = value.__class__
    if cls is float:
        return value if math.isfinite(value) else None
    if cls is int:
        result = float(value)
        return result if math.isfinite(result) else None
    return number(value)


# --- patterns -----------------------------------------------------------------------------


def _glob_matcher(parts: tuple[str, ...]) -> Callable[[str], bool]:
    """Whole-string wildcard matcher: ``"*"`` any run, ``"?"`` one character, any other part
    literal (as :func:`tests.reference.glob` reads the parts)."""
    stars = parts.count("*")
    if "?" not in parts:
        return _star_matcher(parts)
    if stars <= 2:
        body = "".join(".*" if p == "*" else "." if p == "?" else re.escape(p) for p in parts)
        full = re.compile(body, re.DOTALL).fullmatch
        return lambda text: full(text) is not None
    return _glob_loop(parts)


def _star_matcher(parts: tuple[str, ...]) -> Callable[[str], bool]:
    """Literals and ``*`` only: a prefix, a suffix and the middle literals found leftmost
    in order (greedy leftmost is exact when ``*`` is the only wildcard)."""
    if "*" not in parts:
        literal = "".join(parts)
        return lambda text: text == literal
    pieces = _split_on_stars(parts)
    head, middle, tail = pieces[0], tuple(pieces[1:-1]), pieces[-1]
    need = len(head) + len(tail)
    if not middle:
        if not head and not tail:
            return lambda text: True
        if not tail:
            return lambda text: text.startswith(head)
        if not head:
            return lambda text: text.endswith(tail)
        return lambda text: (len(text) >= need and text.startswith(head)
                             and text.endswith(tail))
    if not head and not tail and len(middle) == 1:
        only = middle[0]
        return lambda text: only in text

    def match(text: str) -> bool:
        if len(text) < need or not text.startswith(head) or not text.endswith(tail):
            return False
        at = len(head)
        end = len(text) - len(tail)
        for piece in middle:
            at = text.find(piece, at, end)
            if at < 0:
                return False
            at += len(piece)
        return True

    return match


def _split_on_stars(parts: tuple[str, ...]) -> list[str]:
    """The literal runs around the ``*`` parts, empty ones at open ends; empty middle runs
    (``**``) dropped: ``**`` matches what ``*`` matches."""
    pieces = [""]
    for part in parts:
        if part == "*":
            pieces.append("")
        else:
            pieces[-1] += part
    return [pieces[0], *(p for p in pieces[1:-1] if p), pieces[-1]]


def _glob_loop(parts: tuple[str, ...]) -> Callable[[str], bool]:
    """The reference's glob algorithm (O(len(text) · len(pattern))), the pattern list built
    once: for many ``*`` and ``?``, where a backtracking regex could take polynomial time."""
    pattern: list[str | None] = []
    for part in parts:
        if part == "*":
            pattern.append(None)
        elif part == "?":
            pattern.append("")
        else:
            pattern.extend(part)
    size = len(pattern)

    def match(text: str) -> bool:
        p = t = 0
        star = mark = -1
        n = len(text)
        while t < n:
            if p < size and pattern[p] is not None and pattern[p] in ("", text[t]):
                p += 1
                t += 1
            elif p < size and pattern[p] is None:
                star, mark = p, t
                p += 1
            elif star >= 0:
                mark += 1
                p, t = star + 1, mark
            else:
                return False
        return all(c is None for c in pattern[p:])

    return match


_PUNCT = frozenset(string.punctuation)
_CONTROL_ESCAPES = frozenset("tnrfva")
_CLASS_ESCAPES = frozenset("dDwW")
_META = frozenset("\\.^$*+?()[]{}|")
_REPEAT = re.compile(r"\{(\d+)(?:(,)(\d*))?\}")
# Unbounded repetitions a keyword regex may hold on the Python path: each one more can
# multiply the backtracking work on a long value.
MAX_UNBOUNDED = 3


def python_regex(body: str) -> str | None:
    """A Python regex (for ``re.ASCII | re.DOTALL`` and ``fullmatch``) that matches exactly
    what RE2 matches with ``(?s)\\A(?:body)\\z``, or ``None`` when ``body`` leaves the
    subset where the two engines are known to agree, or could backtrack badly (a repeated
    group holding a repetition or an alternation)."""
    out: list[str] = []
    # per open group: (does it hold a repetition or "|", index in out of its "(")
    groups: list[list[bool]] = [[False]]
    can_repeat = False  # the last item is an atom a repetition may follow
    last_group_risky = False  # that atom is a group holding a repetition or "|"
    unbounded = 0
    i, n = 0, len(body)
    while i < n:
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1:i + 2]
            if not nxt:
                return None
            if nxt in _PUNCT:
                out.append(re.escape(nxt))
            elif nxt in _CONTROL_ESCAPES or nxt in _CLASS_ESCAPES:
                out.append("\\" + nxt)
            else:
                return None
            i += 2
            can_repeat, last_group_risky = True, False
        elif ch == "[":
            end, text = _class(body, i)
            if text is None:
                return None
            out.append(text)
            i = end
            can_repeat, last_group_risky = True, False
        elif ch == "(":
            if body.startswith("(?:", i):
                out.append("(?:")
                i += 3
            elif body.startswith("(?", i):
                return None  # flags, named groups: not in the subset
            else:
                out.append("(")
                i += 1
            groups.append([False])
            can_repeat = False
        elif ch == ")":
            if len(groups) == 1:
                return None
            risky = groups.pop()[0]
            groups[-1][0] = groups[-1][0] or risky
            out.append(")")
            i += 1
            can_repeat, last_group_risky = True, risky
        elif ch in "*+?" or ch == "{":
            if not can_repeat:
                return None
            if ch == "{":
                repeat = _REPEAT.match(body, i)
                if repeat is None:
                    return None  # a literal "{" in RE2: not in the subset
                low, comma, high = repeat.groups()
                if comma and not high:
                    unbounded += 1
                elif comma and int(high) < int(low):
                    return None
                out.append(repeat.group(0))
                i = repeat.end()
            else:
                unbounded += ch != "?"
                out.append(ch)
                i += 1
            if body.startswith("?", i):  # lazy: the same set of matches
                out.append("?")
                i += 1
            if i < n and body[i] in "*+?{":
                return None
            if last_group_risky:
                return None
            groups[-1][0] = True
            can_repeat = False
        elif ch == "|":
            groups[-1][0] = True
            out.append("|")
            i += 1
            can_repeat = False
        elif ch == "^":
            out.append("^")  # beginning of text in both, without the m flag
            i += 1
            can_repeat = False
        elif ch == "$":
            out.append("\\Z")  # RE2's $ is the very end; Python's also before a final \n
            i += 1
            can_repeat = False
        elif ch == ".":
            out.append(".")
            i += 1
            can_repeat, last_group_risky = True, False
        elif ch in _META:  # "]", "}" alone
            return None
        else:
            out.append(re.escape(ch))
            i += 1
            can_repeat, last_group_risky = True, False
    if len(groups) != 1 or unbounded > MAX_UNBOUNDED:
        return None
    return "".join(out)


def _class(body: str, i: int) -> tuple[int, str | None]:
    """The character class opening at ``i``: its end and its Python form, or ``None``
    outside the subset (a leading ``]``, nested ``[``, ``[:alpha:]``, set operators, a
    ``-`` that is not a plain range, escapes other than punctuation and ``\\d\\w\\D\\W``)."""
    j = i + 1
    out = ["["]
    if body.startswith("^", j):
        out.append("^")
        j += 1
    items = 0
    while j < len(body):
        ch = body[j]
        if ch == "]":
            return (j + 1, "".join(out) + "]") if items else (j + 1, None)
        if ch in "[&~|-^":
            return j, None
        if ch == "\\":
            nxt = body[j + 1:j + 2]
            if nxt and nxt in _PUNCT:
                out.append(re.escape(nxt))
            elif nxt and (nxt in _CLASS_ESCAPES or nxt in _CONTROL_ESCAPES):
                out.append("\\" + nxt)
            else:
                return j, None
            j += 2
            if body.startswith("-", j) and not body.startswith("-]", j):
                return j, None
            items += 1
            continue
        if body.startswith("-", j + 1) and not body.startswith("-]", j + 1):
            high = body[j + 2:j + 3]
            if not high or high in "\\[]&~|-^" or high < ch:
                return j, None
            out.append(re.escape(ch) + "-" + re.escape(high))
            j += 3
        else:
            out.append(re.escape(ch))
            j += 1
        items += 1
    return j, None


def regex_matcher(pattern: str, keyword: bool) -> Callable[[str], object]:
    """Whole-value RE2 match of ``pattern``, truthy on a match: a precompiled Python regex's
    ``fullmatch`` inside the subset of :func:`python_regex`, else RE2 through pyarrow,
    memoised per value."""
    body = python_regex(pattern)
    if body is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                compiled = re.compile(body, re.ASCII | re.DOTALL)
            except (re.error, Warning, OverflowError, RecursionError):
                compiled = None
        if compiled is not None:
            return compiled.fullmatch
    return _re2_matcher(pattern, 4096 if keyword else 65536)


def _re2_matcher(pattern: str, memo_size: int) -> Callable[[str], bool]:
    import pyarrow as pa
    import pyarrow.compute as pc

    whole = f"(?s)\\A(?:{pattern})\\z"
    memo: dict[str, bool] = {}

    def match(text: str) -> bool:
        hit = memo.get(text)
        if hit is None:
            hit = bool(pc.match_substring_regex(pa.array([text], pa.string()),
                                                whole)[0].as_py())
            if len(memo) >= memo_size:
                memo.clear()
            memo[text] = hit
        return hit

    return match


# --- query nodes --------------------------------------------------------------------------


def _true(doc: dict[str, Any]) -> bool:
    return True


def _false(doc: dict[str, Any]) -> bool:
    return False


def compile_node(node: Node) -> Pred:
    """The closure ``pred(doc) -> bool`` equal to ``tests.reference.matches(node, doc)``."""
    match node:
        case MatchAll():
            return _true
        case MatchNone():
            return _false
        case And(children):
            return _all(tuple(map(compile_node, children)))
        case Or(children):
            return _any(tuple(map(compile_node, children)))
        case Not(child):
            inner = compile_node(child)
            return lambda doc: not inner(doc)
        case Clauses(must, should, must_not):
            return _clauses(must, should, must_not)
        case Exists(field):
            get = getter(field)
            return lambda doc: get(doc) is not None
        case KeywordEquals(field, value):
            return _keyword_equals(getter(field), value)
        case KeywordWildcard(field, parts):
            return _keyword(getter(field), _glob_matcher(parts))
        case KeywordRegex(field, pattern):
            return _keyword(getter(field), regex_matcher(pattern, keyword=True))
        case TextPhrase(field, tokens):
            return _text_phrase(getter(field), tokens)
        case TextWildcard(field, parts):
            return _text_wildcard(getter(field), parts)
        case TextRegex(field, pattern):
            return _any_token(getter(field), regex_matcher(pattern, keyword=False))
        case Range(field, low, high, include_low, include_high, numeric):
            return _range(getter(field), low, high, include_low, include_high, numeric)
    raise TypeError(node)


def _all(preds: tuple[Pred, ...]) -> Pred:
    if not preds:
        return _true
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        a, b = preds
        return lambda doc: a(doc) and b(doc)

    def pred(doc: dict[str, Any]) -> bool:
        for p in preds:  # noqa: SIM110 -- a loop is cheaper than all() over a generator
            if not p(doc):
                return False
        return True

    return pred


def _any(preds: tuple[Pred, ...]) -> Pred:
    if not preds:
        return _false
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        a, b = preds
        return lambda doc: a(doc) or b(doc)

    def pred(doc: dict[str, Any]) -> bool:
        for p in preds:  # noqa: SIM110 -- a loop is cheaper than any() over a generator
            if p(doc):
                return True
        return False

    return pred


def _clauses(must: tuple[Node, ...], should: tuple[Node, ...],
             must_not: tuple[Node, ...]) -> Pred:
    # no must_not, then every must — or, without must, one should (true if none)
    forbidden = _any(tuple(map(compile_node, must_not)))
    required = (_all(tuple(map(compile_node, must))) if must
                else _any(tuple(map(compile_node, should))) if should else _true)
    if not must_not:
        return required
    return lambda doc: not forbidden(doc) and required(doc)


def _keyword_equals(get: Getter, value: str) -> Pred:
    def pred(doc: dict[str, Any]) -> bool:
        v = get(doc)
        if v.__class__ is str:
            return v == value
        return string_form(v) == value

    return pred


def _keyword(get: Getter, match: Callable[[str], object]) -> Pred:
    def pred(doc: dict[str, Any]) -> bool:
        text = _text(get(doc))
        return text is not None and bool(match(text))

    return pred


def _text_phrase(get: Getter, tokens: tuple[str, ...]) -> Pred:
    if not tokens:  # the empty sequence is in every token list
        return lambda doc: _text(get(doc)) is not None
    if not all(TOKEN.fullmatch(t) for t in tokens):  # no token holds a non-word character
        return _false
    # consecutive tokens are maximal \w runs: separated by one or more non-word characters
    search = re.compile(r"(?<!\w)" + r"\W+".join(map(re.escape, tokens)) + r"(?!\w)").search
    needles = tuple(dict.fromkeys(tokens))

    def pred(doc: dict[str, Any]) -> bool:
        text = _text(get(doc))
        if text is None:
            return False
        low = text.lower()
        for needle in needles:  # every token is a substring of the lower-cased text
            if needle not in low:
                return False
        return search(low) is not None

    return pred


def _text_wildcard(get: Getter, parts: tuple[str, ...]) -> Pred:
    literals = tuple(dict.fromkeys(p for p in parts if p not in ("*", "?")))
    if not all(TOKEN.fullmatch(p) for p in literals):
        return _any_token(get, _glob_matcher(parts))
    # A token is a maximal \w run: "*" is \w*, "?" is one \w, the ends are run boundaries.
    if not parts or parts.count("*") > 2:  # > 2: no polynomial backtracking in a token
        return _any_token(get, _glob_matcher(parts))
    body = "".join(r"\w*" if p == "*" else r"\w" if p == "?" else re.escape(p) for p in parts)
    # at the start of a token (at least one character), to its end
    search = re.compile(r"(?<!\w)(?=\w)" + body + r"(?!\w)").search

    def pred(doc: dict[str, Any]) -> bool:
        text = _text(get(doc))
        if text is None:
            return False
        low = text.lower()
        for needle in literals:
            if needle not in low:
                return False
        return search(low) is not None

    return pred


def _any_token(get: Getter, match: Callable[[str], object]) -> Pred:
    findall = TOKEN.findall

    def pred(doc: dict[str, Any]) -> bool:
        text = _text(get(doc))
        return text is not None and any(map(match, findall(text.lower())))

    return pred


def _range(get: Getter, low: str | None, high: str | None, include_low: bool,
           include_high: bool, numeric: bool) -> Pred:
    lo: Any = low
    hi: Any = high
    if numeric:
        lo = None if low is None else float(low)
        hi = None if high is None else float(high)
        convert: Callable[[Any], Any] = _number
    else:
        convert = _text
    if lo is None and hi is None:
        return lambda doc: convert(get(doc)) is not None
    if lo is not None and hi is not None:
        if include_low and include_high:
            def pred(doc: dict[str, Any]) -> bool:
                v = convert(get(doc))
                return v is not None and lo <= v <= hi
        else:
            def pred(doc: dict[str, Any]) -> bool:
                v = convert(get(doc))
                if v is None:
                    return False
                return ((v >= lo if include_low else v > lo)
                        and (v <= hi if include_high else v < hi))
        return pred
    bound = lo if lo is not None else hi
    compare = {(True, True): bound.__le__, (True, False): bound.__lt__,
               (False, True): bound.__ge__, (False, False): bound.__gt__}[
        (lo is not None, include_low if lo is not None else include_high)]

    def one_sided(doc: dict[str, Any]) -> bool:
        v = convert(get(doc))
        return v is not None and compare(v)

    return one_sided


# --- rules --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompiledRule:
    """One rule's closures: its query, its labels and its value."""

    rule: Rule
    account: str | None
    pred: Pred
    labels: Callable[[dict[str, Any]], dict[str, str]]
    value: Callable[[dict[str, Any]], float | None]
    buckets: tuple[tuple[str, float], ...]  # (le label, bound) of a histogram

    def match(self, doc: dict[str, Any]) -> tuple[dict[str, str], float] | None:
        """``tests.reference.rule_match(rule, doc)``, account check included."""
        if self.account is not None and _text(_ACCOUNT(doc)) != self.account:
            return None
        if not self.pred(doc):
            return None
        value = self.value(doc)
        return None if value is None else (self.labels(doc), value)


_ACCOUNT = getter("account")


def compile_rule(rule: Rule) -> CompiledRule:
    assert rule.compiled is not None
    base = dict(rule.labels)
    fields = tuple((label_name(f), getter(f)) for f in rule.group_by)

    def labels(doc: dict[str, Any]) -> dict[str, str]:
        out = base.copy()
        for name, get in fields:
            text = _text(get(doc))
            if text is not None:
                out[name] = text
        return out

    value: Callable[[dict[str, Any]], float | None]
    if rule.aggregation == "count":
        def value(doc: dict[str, Any]) -> float | None:
            return 1.0
    else:
        assert rule.field is not None
        get_value = getter(rule.field)

        def value(doc: dict[str, Any]) -> float | None:
            return _number(get_value(doc))

    buckets = (tuple(zip(rule.bucket_labels, rule.buckets, strict=True))
               if rule.aggregation == "histogram" else ())
    return CompiledRule(rule, rule.account, compile_node(rule.compiled.root), labels, value,
                        buckets)


class CompiledRules:
    """Rules compiled once; :meth:`for_doc` gives the ones of a log's account, in order."""

    MAX_ACCOUNTS = 4096  # account → rules lists kept

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = [compile_rule(r) for r in rules]
        self._any_account = any(c.account is not None for c in self.rules)
        self._no_account = [c for c in self.rules if c.account is None]
        self._by_account: dict[str, list[CompiledRule]] = {}

    def for_doc(self, doc: dict[str, Any]) -> list[CompiledRule]:
        if not self._any_account:
            return self.rules
        account = _text(_ACCOUNT(doc))
        if account is None:
            return self._no_account
        chosen = self._by_account.get(account)
        if chosen is None:
            chosen = [c for c in self.rules if c.account in (None, account)]
            if len(self._by_account) < self.MAX_ACCOUNTS:
                self._by_account[account] = chosen
        return chosen


"""Pattern matching — regular expressions and wildcards — with one engine: RE2, through
``pyarrow.compute``.

RE2 runs in time linear in the input (no backtracking), so no rule can stall the job, and the
same library both validates a rule (:func:`regex_problem`) and evaluates it in the parse stage
(:func:`match_whole`, :func:`match_any_token`): what ``l2m validate`` accepts, the job runs.
Wildcards are translated to RE2 regexes (:func:`wildcard_regex`) and take the same path.

Input: a regex body or wildcard parts (validation), and Arrow string columns (evaluation).
Output: a :class:`PatternProblem` or None; boolean Arrow columns.

A pattern matches the *whole* value (keyword fields) or one whole token (text fields):
:func:`anchored` wraps it as ``(?s)^(?:…)$``. In RE2, without the ``m`` flag, ``$`` matches
only at the very end of the text (Python's and Java's also match before a final newline), and
``(?s)`` lets ``.`` match a newline, as Lucene's ``.`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Positions (literal characters, classes, `.`) a pattern may have once counted repetitions
# are expanded. Where RE2's DFA gives up (too many states), its cost per input character
# grows with the positions live at once: about 1 s per 100 kB of value on a 2-core machine
# for `.*a.{996}c`, at this limit; 30 s for the 32,000 positions RE2's own memory budget
# would let through. Linear, but the constant must stay bounded. RE2 itself caps a single
# repetition count at 1000.
MAX_PATTERN_POSITIONS = 1000

_ERROR_PREFIX = "Invalid regular expression: "
_TOO_LARGE = "pattern too large"
# One empty string: Arrow compiles a kernel's regex only when there is a row to match. Built
# from buffers, not pa.array([""]): converting Python objects makes pyarrow import pandas
# (0.35 s), which every Spark Python process importing l2m would pay at start.
_PROBE = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(b"\0\0\0\0\0\0\0\0"),
                                                pa.py_buffer(b"")])


def anchored(regex: str) -> str:
    """``regex`` matching the whole input only. The group keeps a top-level ``|`` inside the
    anchors and scopes the regex's own inline flags (``(?i)``) to it."""
    return f"(?s)^(?:{regex})$"


def wildcard_regex(parts: tuple[str, ...]) -> str:
    """RE2 regex (to be :func:`anchored`) for wildcard parts: literals and ``*``/``?`` items,
    as :class:`~l2m.query.nodes.KeywordWildcard` holds them. ``?`` is one code point."""
    out: list[str] = []
    for part in parts:
        if part == "*":
            out.append(".*")
        elif part == "?":
            out.append(".")
        else:
            out.append("".join(_literal(ch) for ch in part))
    return "".join(out)


def _literal(ch: str) -> str:
    # \x{…} for every non-word character: no RE2 metacharacter or escape rule to get wrong.
    return ch if ch.isalnum() or ch == "_" else f"\\x{{{ord(ch):x}}}"


def _compile(regex: str) -> str | None:
    """RE2's error text for ``regex`` (e.g. ``missing ]: [a``), ``None`` if it compiles."""
    try:
        pc.match_substring_regex(_PROBE, regex)
    except pa.ArrowInvalid as exc:
        text = str(exc)
        return text[len(_ERROR_PREFIX):] if text.startswith(_ERROR_PREFIX) else text
    except UnicodeEncodeError:  # a lone surrogate cannot reach RE2 as UTF-8
        return "invalid UTF-8"
    return None


@dataclass(frozen=True)
class PatternProblem:
    """Why a pattern is refused: an error code of :data:`l2m.errors.ERROR_CLASSES`, the
    offset inside the pattern, and the code's message parameters."""

    code: str
    offset: int
    params: dict[str, object]


def regex_problem(body: str) -> PatternProblem | None:
    """Why the user's regex ``body`` cannot run — invalid for RE2 (``REGEX_INVALID``) or too
    costly (``PATTERN_TOO_COMPLEX``, see :func:`pattern_positions`) — or ``None``."""
    reason = _compile(body)
    # RE2 parsed it but its program exceeds the memory budget: the size check below says
    # where the expansion happens, which RE2's message does not.
    if reason is not None and not reason.startswith(_TOO_LARGE):
        return PatternProblem("REGEX_INVALID", _locate(body, reason), {"reason": reason})
    positions, crossed = pattern_positions(body)
    if positions > MAX_PATTERN_POSITIONS:
        return PatternProblem("PATTERN_TOO_COMPLEX", crossed,
                              {"positions": positions, "limit": MAX_PATTERN_POSITIONS})
    # The body alone is valid; the anchored form can still exceed RE2's size budget.
    reason = reason or _compile(anchored(body))
    return None if reason is None else PatternProblem("REGEX_INVALID", 0, {"reason": reason})


def _locate(body: str, reason: str) -> int:
    """Offset in ``body`` of what RE2's error ``reason`` is about.

    RE2 names the offending fragment (``invalid repetition size: {100}``), not its offset: it
    is located as the first occurrence whose prefix of ``body`` fails the same way (RE2 parses
    left to right and stops at the first error). Unbalanced parentheses, where RE2 quotes the
    whole regex, are located by a scan."""
    _code, _sep, arg = reason.partition(": ")
    if not arg or arg == body:
        return _paren_offset(body, reason)
    start = body.find(arg)
    first = start
    while start >= 0:
        if _compile(body[:start + len(arg)]) == reason:
            return start
        start = body.find(arg, start + 1)
    return max(first, 0)


def _paren_offset(body: str, reason: str) -> int:
    """Offset of the first unmatched ``)`` or, for ``missing )``, the last unclosed ``(``;
    0 when neither applies. Skips escapes and character classes."""
    opened: list[int] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            i = _class_end(body, i)
            continue
        if ch == "(":
            opened.append(i)
        elif ch == ")":
            if not opened:
                return i
            opened.pop()
        i += 1
    if reason.startswith("missing )") and opened:
        return opened[-1]
    if reason.startswith("trailing \\"):
        return len(body) - 1
    return 0


def _class_end(body: str, i: int) -> int:
    """Offset just past the character class opening at ``i`` (a leading ``]`` or ``^]`` is
    literal, as in RE2)."""
    j = i + 1
    if body.startswith("^", j):
        j += 1
    if body.startswith("]", j):
        j += 1
    while j < len(body):
        if body[j] == "\\":
            j += 2
            continue
        if body[j] == "]":
            return j + 1
        j += 1
    return len(body)


_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")


def pattern_positions(body: str) -> tuple[int, int]:
    """Size of a valid RE2 regex once counted repetitions are expanded — every literal
    character, class, ``.`` or escape counts 1, ``x{n,m}`` counts ``m`` times ``x`` (as RE2
    compiles it), ``*`` ``+`` ``?`` add nothing — and the offset where the count first went
    over :data:`MAX_PATTERN_POSITIONS` (-1 if it did not). Alternatives add up: the automaton
    holds them all."""
    frames = [0]  # accumulated positions per open group, outermost first
    last = 0  # positions of the last atom, which a following repetition multiplies
    crossed = -1
    i = 0
    n = len(body)
    while i < n:
        ch = body[i]
        start = i
        if ch == "\\" and body.startswith("Q", i + 1):
            end = body.find("\\E", i + 2)
            end = n if end < 0 else end
            frames[-1] += end - (i + 2)
            last = 1  # a repetition applies to the last quoted character
            i = end + 2
        elif ch == "\\":
            i = _escape_end(body, i)
            frames[-1] += 1
            last = 1
        elif ch == "[":
            i = _class_end(body, i)
            frames[-1] += 1
            last = 1
        elif ch == "(":
            i += 1
            if body.startswith(("?P<", "?<"), i):  # a named group: skip its name
                i = body.find(">", i) + 1
            elif body.startswith("?", i):
                close = min((j for j in (body.find(":", i), body.find(")", i)) if j >= 0),
                            default=n)
                if close < n and body[close] == ")":  # (?i): flags only, not a group
                    i = close + 1
                    continue
                i = close + 1
            frames.append(0)
            last = 0
        elif ch == ")":
            inner = frames.pop() if len(frames) > 1 else 0
            frames[-1] += inner
            last = inner
            i += 1
        elif ch == "{" and (repeat := _REPEAT.match(body, i)):
            low = int(repeat.group(1))
            high = repeat.group(3)
            count = low + 1 if high == "" else int(high or low)
            frames[-1] += last * (count - 1)
            last *= count
            i = repeat.end()
        elif ch in "*+?":
            i += 1
        elif ch == "|":
            last = 0
            i += 1
        else:
            frames[-1] += 1
            last = 1
            i += 1
        if crossed < 0 and sum(frames) > MAX_PATTERN_POSITIONS:
            crossed = start
    return sum(frames), crossed


def wildcard_positions(parts: tuple[str, ...]) -> int:
    """:func:`pattern_positions` of a wildcard: its literal characters and ``?`` count."""
    return sum(len(p) for p in parts if p != "*")


def _escape_end(body: str, i: int) -> int:
    """Offset just past the escape starting at ``i`` (``\\x{…}``, ``\\p{…}``, ``\\pL``,
    ``\\xHH``, ``\\d`` …)."""
    kind = body[i + 1:i + 2]
    if kind in ("x", "p", "P"):
        if body.startswith("{", i + 2):
            end = body.find("}", i + 2)
            return len(body) if end < 0 else end + 1
        return i + (4 if kind == "x" else 3)
    return i + 2


def match_whole(values: pa.Array, regex: str) -> pa.Array:
    """Per row: does the whole string match ``regex``? ``False`` (never null) for null rows."""
    matched = pc.match_substring_regex(values, anchored(regex))
    return pc.fill_null(matched, False)


def match_any_token(padded: pa.Array, regex: str, tokens: Tokens | None = None) -> pa.Array:
    """Per row: does any token of a padded token string (``" a b "``, see
    :func:`l2m.semantics.values.padded_tokens`) match ``regex`` whole? ``False`` for null rows
    and rows
    without tokens. ``tokens``: :func:`token_lists` of ``padded``, when several patterns
    read the same column (split once, not once per pattern)."""
    words, word_of, parents = tokens if tokens is not None else token_lists(padded)
    hit = pc.match_substring_regex(words, anchored(regex)).to_numpy(zero_copy_only=False)
    out = np.zeros(len(padded), dtype=bool)
    out[parents[hit if word_of is None else hit[word_of]]] = True
    return pa.array(out, pa.bool_())


# A column's tokens: the words matched (every token, or each distinct token once), which
# word each token is (None: the words are the tokens), and the row each token comes from.
Tokens: TypeAlias = "tuple[pa.Array, np.ndarray | None, np.ndarray]"


def token_lists(padded: pa.Array, distinct: bool = False) -> Tokens:
    """Every token of a padded token string column, flat, and the row each comes from; with
    ``distinct``, each distinct token once and which one each token is — for several
    patterns over long texts, whose tokens repeat (stack frames, templates): one hash pass,
    then each regex over a twentieth of the tokens (issue 58's corpus)."""
    split = pc.split_pattern(padded, " ")
    flat = pc.list_flatten(split)
    # The padding leaves empty strings at both ends: they are not tokens.
    keep = pc.greater(pc.utf8_length(flat), 0)
    flat = pc.filter(flat, keep)
    parents = pc.filter(pc.list_parent_indices(split), keep).to_numpy(zero_copy_only=False)
    if not distinct:
        return flat, None, parents
    encoded = flat.dictionary_encode()
    return encoded.dictionary, encoded.indices.to_numpy(zero_copy_only=False), parents

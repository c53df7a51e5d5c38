"""The limits a query must stay within (SPEC §2): what validates must run, in bounded time
and memory. Each limit has one definition here; errors quote it.

Input: none. Output: the limits the compiler (:mod:`l2m.query.compiler`) and the pattern
checks (:mod:`l2m.query.patterns`) enforce."""

from __future__ import annotations

from l2m.query.patterns import MAX_PATTERN_POSITIONS

__all__ = ["MAX_NESTING", "MAX_PATTERN_POSITIONS", "MAX_QUERY_LENGTH", "MAX_REGEX_LENGTH",
           "MAX_TERMS", "MAX_TREE_DEPTH"]

MAX_QUERY_LENGTH = 4096
MAX_NESTING = 64
MAX_REGEX_LENGTH = 256
# Guards recursion on pathological trees (e.g. a thousand chained NOTs) that the
# parenthesis limit does not catch.
MAX_TREE_DEPTH = 4 * MAX_NESTING
# Terms (words, phrases, regexes, ranges, _exists_) per query. Keeps the Spark expression of
# one rule small enough to analyse and generate code for; 4096 characters could otherwise
# hold about 2000 one-letter terms.
MAX_TERMS = 1024

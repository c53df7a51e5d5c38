"""Names the user may have meant: one similarity rule for every "did you mean …?" hint.

Input: a name as written and the names a file accepts. Output: whether two names are close
(:func:`similar`) and the closest accepted name (:func:`closest`). Used by rule files
(:mod:`l2m.rules.loader`) and job configurations (:mod:`l2m.config.decode`)."""

from __future__ import annotations

from collections.abc import Iterable

# Two names at least this similar (difflib's ratio: matched characters over total) are a
# misspelling of each other: one letter off in a short name, a separator changed in a long one.
SIMILARITY = 0.75


def similarity(a: str, b: str) -> float:
    from difflib import SequenceMatcher  # only on an error path

    return SequenceMatcher(None, a, b).ratio()


def similar(a: str, b: str) -> bool:
    return similarity(a, b) >= SIMILARITY


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The accepted name most like ``name`` (the first of equals), if any is :func:`similar`."""
    best, score = None, SIMILARITY
    for choice in choices:
        ratio = similarity(name, choice)
        if ratio > score or (best is None and ratio >= score):
            best, score = choice, ratio
    return best

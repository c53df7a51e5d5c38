"""Value semantics shared by every stage (SPEC §2–3): field lookup, string form, numbers,
text tokens and event time. Pure Python, so the parse stage, the tests and any reference
evaluator agree on one definition."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from typing import Any

# A value is "numeric" when it is a JSON number or a string in this shape. Stricter than
# float(): no whitespace, no "nan"/"inf", no "1_000" — those are not numbers in a log.
NUMERIC_STRING = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")

# Text analysis: maximal runs of letters, digits and "_" (Python's Unicode \w).
TOKEN = re.compile(r"\w+")

_MISSING = object()


def lookup(doc: dict[str, Any], path: str) -> Any:
    """Return the value at ``path``: the top-level key ``path`` if present and not null,
    else the nested path split on dots. ``None`` means missing (JSON null counts as
    missing)."""
    value = doc.get(path)
    if value is not None:
        return value
    if "." not in path:
        return None
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
        if node is None:
            return None
    return node


def string_form(value: Any) -> str | None:
    """The string form of a scalar JSON value; ``None`` for missing, objects and arrays.

    Integers print without a decimal point, other numbers in Python's shortest round-trip
    form (``1.5``, ``1.0``, ``1e-07``), booleans as ``true``/``false``."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return None


def number(value: Any) -> float | None:
    """The numeric value of a JSON number or numeric string; ``None`` otherwise (booleans,
    non-finite values and anything else are not numeric)."""
    if isinstance(value, bool) or value is None:
        return None
    if not isinstance(value, int | float) and not (
        isinstance(value, str) and NUMERIC_STRING.fullmatch(value)
    ):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def text_tokens(text: str) -> list[str]:
    """Analyse a text value: lower-cased maximal runs of letters, digits and ``_``."""
    return TOKEN.findall(text.lower())


def padded_tokens(text: str) -> str:
    """Tokens joined by single spaces with a space at each end, so that a contiguous token
    sequence is a plain substring search (" a b " in " x a b y ")."""
    return " " + " ".join(text_tokens(text)) + " "


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)
# Event times l2m accepts: years 0001–9999, what ISO-8601 can write. Anything outside (1e20,
# 2^63, int64's minimum) has no usable time: it would overflow Spark's microsecond timestamps
# and the window arithmetic.
MIN_TIMESTAMP_MS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _MILLISECOND
MAX_TIMESTAMP_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC) - _EPOCH) // _MILLISECOND


def parse_timestamp(value: Any) -> int | None:
    """Event time in epoch milliseconds: a JSON number is epoch ms (fraction floored); a
    string must be ISO-8601 with ``Z`` or an offset. ``None`` when unusable, including times
    outside years 0001–9999."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if MIN_TIMESTAMP_MS <= value <= MAX_TIMESTAMP_MS else None
    if isinstance(value, float):
        if not MIN_TIMESTAMP_MS <= value < MAX_TIMESTAMP_MS + 1:  # also NaN and ±inf
            return None
        return math.floor(value)
    if not isinstance(value, str) or len(value) < 11 or not value[:4].isdigit():
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        return None
    # Aware subtraction and floor division are exact (and 3× faster than via time tuples).
    try:
        ms = (parsed - _EPOCH) // _MILLISECOND
    except OverflowError:  # year 1 with a positive offset: before datetime's minimum
        return None
    return ms if MIN_TIMESTAMP_MS <= ms <= MAX_TIMESTAMP_MS else None


# Prometheus's syntax of metric names and label names: what rules may write and remote write
# sends (a name starting with ``__`` is Prometheus's own, refused where labels are checked).
METRIC_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def label_name(field: str) -> str:
    """Label name for a group-by field: characters outside ``[a-zA-Z0-9_]`` become ``_``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", field)


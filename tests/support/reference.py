"""A slow, obvious, pure-Python implementation of SPEC §2–4, written from the spec and not
from the Spark code: differential tests compare the Spark pipeline against it. It shares
only the rule loader, the compiled query tree, the value helpers of :mod:`l2m.semantics.values`
and the definition of native histograms (:mod:`l2m.semantics.exphist`: a series' values
bucketed, limited to the rule's bucket count and read for quantiles — not the engine's
bucket keys).

Regular expressions run on RE2, the engine the rules are specified for (SPEC §2), called
through pyarrow one value at a time and anchored with ``\\A``/``\\z`` (the pipeline uses
``^``/``$``); wildcards are matched by the classic glob algorithm (linear enough for the
hostile-pattern tests, where a backtracking regex would never finish)."""

from __future__ import annotations

import functools
from collections import defaultdict
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.parse import ParsePlan
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
from l2m.semantics import exphist
from l2m.semantics.values import (
    label_name,
    lookup,
    number,
    padded_tokens,
    parse_timestamp,
    string_form,
    text_tokens,
)
from l2m.semantics.windows import window_start


def field_forms(doc: dict[str, Any], plan: ParsePlan) -> dict[str, Any]:
    """The parse stage's field columns for one log, from the SPEC's lookup and value forms
    (column name → value)."""
    row: dict[str, Any] = {}
    for use in plan.fields:
        value = lookup(doc, use.path)
        if use.string:
            row[plan.column(use.path, "s")] = string_form(value)
        if use.number:
            row[plan.column(use.path, "n")] = number(value)
        if use.exists:
            row[plan.column(use.path, "x")] = value is not None
        if use.text:
            text = string_form(value)
            row[plan.column(use.path, "t")] = None if text is None else padded_tokens(text)
    return row


def glob(parts: tuple[str, ...], text: str) -> bool:
    """Does ``text`` match the wildcard ``parts`` whole (``*`` any run, ``?`` one character)?
    On a mismatch, only the last ``*`` takes one more character: O(len(text) · len(pattern))."""
    # one item per character to match: None for "*", "" for "?" (any one character)
    pattern: list[str | None] = []
    for part in parts:
        if part == "*":
            pattern.append(None)
        elif part == "?":
            pattern.append("")
        else:
            pattern.extend(part)
    p = t = 0
    star = mark = -1
    while t < len(text):
        if p < len(pattern) and pattern[p] is not None and pattern[p] in ("", text[t]):
            p += 1
            t += 1
        elif p < len(pattern) and pattern[p] is None:
            star, mark = p, t
            p += 1
        elif star >= 0:
            mark += 1
            p, t = star + 1, mark
        else:
            return False
    return all(c is None for c in pattern[p:])


@functools.lru_cache(maxsize=4096)
def re2_fullmatch(pattern: str, text: str) -> bool:
    """Does RE2 match ``pattern`` against the whole of ``text``? (``.`` matches a newline.)"""
    whole = f"(?s)\\A(?:{pattern})\\z"
    return bool(pc.match_substring_regex(pa.array([text], pa.string()), whole)[0].as_py())


def matches(node: Node, doc: dict[str, Any]) -> bool:
    """Does ``doc`` match the compiled query ``node``?"""
    match node:
        case MatchAll():
            return True
        case MatchNone():
            return False
        case And(children):
            return all(matches(c, doc) for c in children)
        case Or(children):
            return any(matches(c, doc) for c in children)
        case Not(child):
            return not matches(child, doc)
        case Clauses(must, should, must_not):
            if any(matches(c, doc) for c in must_not):
                return False
            if must:
                return all(matches(c, doc) for c in must)
            return any(matches(c, doc) for c in should) if should else True
        case Exists(field):
            return lookup(doc, field) is not None
    text = string_form(lookup(doc, node.field))  # type: ignore[attr-defined]
    match node:
        case KeywordEquals(_, value):
            return text == value
        case KeywordWildcard(_, parts):
            return text is not None and glob(parts, text)
        case KeywordRegex(_, pattern):
            return text is not None and re2_fullmatch(pattern, text)
        case TextPhrase(_, tokens):
            if text is None:
                return False
            have = text_tokens(text)
            n = len(tokens)
            return any(tuple(have[i:i + n]) == tokens for i in range(len(have) - n + 1))
        case TextWildcard(_, parts):
            return text is not None and any(glob(parts, t) for t in text_tokens(text))
        case TextRegex(_, pattern):
            return text is not None and any(re2_fullmatch(pattern, t)
                                            for t in text_tokens(text))
        case Range(field, low, high, include_low, include_high, numeric):
            value: Any
            if numeric:
                value = number(lookup(doc, field))
                lo = None if low is None else float(low)
                hi = None if high is None else float(high)
            else:
                value, lo, hi = text, low, high
            if value is None:
                return False
            if lo is not None and not (value >= lo if include_low else value > lo):
                return False
            return hi is None or (value <= hi if include_high else value < hi)
    raise TypeError(node)


def rule_match(rule: Rule, doc: dict[str, Any]) -> tuple[dict[str, str], float] | None:
    """The labels and value one rule takes from one log, or None when it does not count it
    (no match, another account, no numeric value)."""
    if rule.account is not None and string_form(lookup(doc, "account")) != rule.account:
        return None
    assert rule.compiled is not None
    if not matches(rule.compiled.root, doc):
        return None
    labels = dict(rule.labels)
    for field in rule.group_by:
        text = string_form(lookup(doc, field))
        if text:  # a missing field, or one whose string form is empty, adds no label
            labels[label_name(field)] = text
    value = 1.0 if rule.aggregation == "count" else number(lookup(doc, rule.field))
    return None if value is None else (labels, value)


def backfill(rules: list[Rule], lines: list[str]) -> list[dict[str, Any]]:
    """Final samples as SPEC §3–4 define them, in backfill order."""
    enabled = [r for r in rules if r.enabled]
    acc: dict[tuple[int, tuple, int | None], dict[str, Any]] = defaultdict(
        lambda: {"n": 0, "sum": Decimal(0), "min": None, "max": None, "ts": None, "values": []})
    for line in lines:
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(doc, dict):
            continue
        ts = parse_timestamp(lookup(doc, "@timestamp"))
        if ts is None:
            continue
        for index, rule in enumerate(enabled):
            match = rule_match(rule, doc)
            if match is None:
                continue
            labels, value = match
            window = window_start(ts) if rule.kind == "gauge" else None
            state = acc[(index, tuple(sorted(labels.items())), window)]
            state["n"] += 1
            state["sum"] += Decimal(repr(value))
            state["min"] = value if state["min"] is None else min(state["min"], value)
            state["max"] = value if state["max"] is None else max(state["max"], value)
            state["ts"] = ts if state["ts"] is None else max(state["ts"], ts)
            state["values"].append(value)
    out = []
    for (index, labels, window), state in sorted(
            acc.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
        rule = enabled[index]
        ts = window if rule.kind == "gauge" else state["ts"]
        base = dict(labels)

        def sample(name: str, lab: dict[str, str], value: float, rule: Rule = rule,
                   ts: int = ts) -> dict[str, Any]:
            return {"name": name, "kind": rule.kind, "labels": lab, "value": float(value),
                    "timestamp": ts, "account": rule.target_account, "rule": rule.id}

        total = float(state["sum"])
        if rule.aggregation in ("histogram", "quantiles") and rule.native_schema is not None:
            histogram = exphist.limit_buckets(
                exphist.from_values(state["values"], rule.native_schema),
                rule.native_max_buckets)
        if rule.aggregation == "quantiles":
            for q, label in zip(rule.quantiles, rule.quantile_labels, strict=True):
                out.append(sample(rule.name, {**base, "quantile": label},
                                  exphist.quantile(histogram, q)))
            continue
        if rule.aggregation == "histogram" and rule.buckets:
            for le, bound in zip(rule.bucket_labels, rule.buckets, strict=True):
                count = sum(1 for v in state["values"] if v <= bound)
                out.append(sample(f"{rule.name}_bucket", {**base, "le": le}, count))
            out.append(sample(f"{rule.name}_bucket", {**base, "le": "+Inf"}, state["n"]))
            out.append(sample(f"{rule.name}_sum", base, total))
            out.append(sample(f"{rule.name}_count", base, state["n"]))
        if rule.aggregation == "histogram":
            if rule.native_schema is not None:
                out.append(native_sample(rule, base, histogram, total, ts))
        else:
            value = {"count": state["n"], "sum": total, "avg": total / state["n"],
                     "min": state["min"], "max": state["max"]}[rule.aggregation]
            out.append(sample(rule.name, base, value))
    return out


def native_sample(rule: Rule, labels: dict[str, str], histogram: exphist.NativeHistogram,
                  total: float, ts: int) -> dict[str, Any]:
    """A native histogram's sample (SPEC §4, format 2): its buckets as sorted [index, count]
    pairs, the exact sum of its values."""
    return {"name": rule.name, "kind": rule.kind, "labels": labels,
            "histogram": {"schema": histogram.schema,
                          "zero_threshold": histogram.zero_threshold,
                          "zero_count": histogram.zero_count, "count": histogram.count,
                          "sum": total,
                          "positive": sorted([i, c] for i, c in histogram.positive.items()),
                          "negative": sorted([i, c] for i, c in histogram.negative.items())},
            "timestamp": ts, "account": rule.target_account, "rule": rule.id, "format": 2}

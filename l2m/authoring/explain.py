"""``l2m explain``: why one log did or did not count, rule by rule, clause by clause.

Every verdict is the engine's: the log goes through the parse stage
(:func:`l2m.engine.parse.parse_lines`, with a plan holding every field and pattern any clause,
label, value or account scope reads) and every clause's compiled node through
:class:`l2m.engine.match.Matcher` — so explain cannot disagree with backfill or streaming.
Labels, the value, the histogram bucket (a native one by the engine's own bucket key,
:func:`l2m.engine.nativebuckets.bucket_key_codes`), the event time, and every string form
and number the text states are the engine's columns too (the plan holds the string and
number form of every field a clause reads), and the log is decoded by the engine's decoder
(:func:`l2m.engine.decoding.decode`) to say how a field was looked up — so no description can
contradict a verdict. The Python value semantics (:mod:`l2m.semantics.values`) only split an
engine string form into tokens and state the comparison of a range.

Input: the rules (in their order), one log line, the job settings (:class:`JobConfig`: query
fields, timestamp field, label length, grace, future skew). Output: a report (a JSON-able
dict, :func:`explain_log`) printed as text or as one JSON document (docs/rules.md, "Why did
my log not count?").
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Sequence
from typing import Any, TextIO

import numpy as np
import pyarrow as pa

from l2m.batch.local import file_lines
from l2m.config.job import JobConfig
from l2m.engine.decoding import decode
from l2m.engine.fanout import value_buckets
from l2m.engine.labels import cut_value
from l2m.engine.match import Matcher
from l2m.engine.nativebuckets import NEGATIVE, NO_BUCKET, POSITIVE, bucket_key_codes, parse_key
from l2m.engine.parse import ERROR, STATUS, TIMESTAMP, Form, ParsePlan, parse_lines
from l2m.engine.samples import sample_value
from l2m.engine.status import Status
from l2m.errors import ConfigError, InputError
from l2m.query.clauses import Clause, clause_tree
from l2m.query.compiler import collect_fields, pattern_of
from l2m.query.nodes import (
    Exists,
    FieldUse,
    KeywordEquals,
    KeywordRegex,
    KeywordWildcard,
    MatchAll,
    MatchNone,
    Node,
    Or,
    Range,
    TextPhrase,
    TextRegex,
    TextWildcard,
)
from l2m.rules.model import Aggregation, Kind, Rule
from l2m.semantics import exphist
from l2m.semantics.times import duration_text, iso_text
from l2m.semantics.values import number, text_tokens
from l2m.semantics.windows import MINUTE_MS, window_start
from l2m.yamlio.suggest import closest

# How much of a value or a log the text shows (the JSON document has them whole).
SHOWN = 80
SHOWN_LOG = 200
# Objects and arrays nested deeper than this are left out of the JSON document (their
# ``value`` is null): Python's JSON writer recurses, and a log may nest up to 1024 levels.
JSON_DEPTH = 100
# The integers the engine's decoder reads as integers (orjson: int64 and uint64).
INT_MIN, INT_END = -(2**63), 2**64
MATCHED, MISSED = "✓", "✗"


def input_line(path: str, number: int) -> bytes:
    """Line ``number`` (1 = the first) of a JSON-lines file (or directory; ``.gz`` and
    ``.bz2`` too), read as ``l2m backfill`` reads it; an :class:`InputError` past the end."""
    if number < 1:
        raise InputError(f"--line {number}: lines are numbered from 1")
    count = 0
    for count, line in enumerate(file_lines([path]), 1):
        if count == number:
            return line
    raise InputError(f"{path}: no line {number} (it has {count} line{'s' * (count != 1)})")


def explain_command(rules: Sequence[Rule], line: str | bytes, cfg: JobConfig,
                    rule_id: str | None, as_json: bool, out: TextIO) -> int:
    """Explain one log against the enabled rules (or the one named ``rule_id``), as text or
    one JSON document on ``out``; the exit code (0: explained, matched or not). An unknown
    ``rule_id`` is a :class:`ConfigError` naming the closest id."""
    report = explain_log(chosen_rules(rules, rule_id), line, cfg)
    out.write(json.dumps(report, ensure_ascii=False, indent=2) + "\n" if as_json
              else render_text(report))
    return 0


def chosen_rules(rules: Sequence[Rule], rule_id: str | None) -> list[Rule]:
    """The enabled rules in their order, or the one named (enabled or not)."""
    if rule_id is None:
        return [r for r in rules if r.enabled]
    for rule in rules:
        if rule.id == rule_id:
            return [rule]
    ids = [r.id for r in rules]
    near = closest(rule_id, ids)
    if near:
        hint = f" (did you mean '{near}'?)"
    elif len(ids) <= 10:
        hint = f" (the rules: {', '.join(ids) or 'none'})"
    else:
        hint = f" ({len(ids)} rules: l2m validate --list names them)"
    raise ConfigError(f"--rule {rule_id}: no rule with this id in the rules given{hint}")


# --- the report ------------------------------------------------------------------------------


def explain_log(rules: Sequence[Rule], line: str | bytes, cfg: JobConfig) -> dict[str, Any]:
    """The report for one log (a JSON-able dict; its shape is documented in docs/rules.md)."""
    # Tenants' rules repeat a few queries: each parsed once.
    parsed: dict[str, Clause] = {}
    trees = [parsed.get(rule.query) or parsed.setdefault(
        rule.query, clause_tree(rule.query, cfg.query_config)) for rule in rules]
    plan = _plan(rules, trees, cfg)
    batch = parse_lines([line], plan)
    status = Status(batch.column(STATUS)[0].as_py())
    # The bytes the engine reads (a str as l2m.engine.decoding encodes it), shown with U+FFFD
    # for what is not UTF-8 (a lone surrogate of a --log argument, say).
    raw = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
    text = raw.decode("utf-8", "replace")
    doc = _document(raw) if status not in (Status.MALFORMED, Status.BLANK) else None
    ts = batch.column(TIMESTAMP)[0].as_py()
    report: dict[str, Any] = {
        "log": text,
        "status": status.label if status != Status.BLANK else "blank",
        "reason": batch.column(ERROR)[0].as_py(),
        "event_time": None,
        "account": None,
        "outcomes": [],
        "rules": [],
    }
    if doc is None:
        report["outcomes"] = _unrouted(status, report["reason"])
        report["rules"] = [_rule_head(rule, False) | {"why": "the log is not routed: "
                                                      + report["status"]} for rule in rules]
        return report
    report["event_time"] = _event_time(doc, cfg.timestamp_field, ts)
    report["account"] = _looked_up(doc, "account", _column(batch, plan, "account", Form.STRING))
    account = report["account"]
    matcher = Matcher(batch, plan)
    report["rules"] = [_explain_rule(rule, tree, doc, account, matcher, cfg, ts)
                       for rule, tree in zip(rules, trees, strict=True)]
    report["outcomes"] = _outcomes(status, ts, cfg, report["rules"])
    return report


def _plan(rules: Sequence[Rule], trees: Sequence[Clause], cfg: JobConfig) -> ParsePlan:
    """What the parse stage must extract: every clause's fields and patterns (and the string
    and number form of each, which the text states), the group-by fields, the value fields and
    the account."""
    uses = [u for tree in trees for u in collect_fields(tree.node)]
    uses += [FieldUse(u.path, string=True, number=True) for u in uses]
    for rule in rules:
        if rule.compiled is not None:
            uses += rule.compiled.fields
        uses += [FieldUse(f, string=True) for f in rule.group_by]
        if rule.field:
            uses.append(FieldUse(rule.field, number=True))
    uses.append(FieldUse("account", string=True))
    return ParsePlan.merge(uses, cfg.timestamp_field, cfg.max_future_ms)


def _document(raw: bytes) -> dict[str, Any]:
    """The log as the engine's decoder reads it (orjson: nesting to 1024 levels, integers past
    64 bits as doubles, the last of duplicate keys)."""
    doc, _ = decode(raw)
    return doc if doc is not None else {}  # never: the parse stage said it is a log


def _column(batch: Any, plan: ParsePlan, path: str, form: Form) -> Any:
    return batch.column(plan.column(path, form))[0].as_py()


def _rule_head(rule: Rule, matches: bool) -> dict[str, Any]:
    return {"id": rule.id, "file": rule.file, "line": rule.line, "enabled": rule.enabled,
            "kind": str(rule.kind), "aggregation": str(rule.aggregation), "query": rule.query,
            "matches": matches}


def _explain_rule(rule: Rule, tree: Clause, doc: dict[str, Any], account: dict[str, Any],
                  matcher: Matcher, cfg: JobConfig, ts: int | None) -> dict[str, Any]:
    batch, plan = matcher.batch, matcher.plan
    root = rule.compiled.root if rule.compiled is not None else tree.node
    query_matched = bool(matcher.mask(root)[0].as_py())
    log_account = account["string_form"]
    sees = rule.account is None or log_account == rule.account
    matches = query_matched and sees and rule.enabled
    result = _rule_head(rule, matches) | {
        "query_matched": query_matched,
        "scope": _scope(rule, account, sees),
        "clauses": _clause(tree, rule.query, doc, matcher),
        "failed": None,
        "why": None,
        "result": None,
    }
    if not rule.enabled:
        result["why"] = "the rule is disabled (enabled: false): it produces nothing"
    elif not sees:
        result["why"] = result["scope"]["text"]
    elif not query_matched:
        culprit = _culprit(result["clauses"])
        result["failed"] = {k: culprit[k] for k in ("text", "span", "detail")}
        prohibited = "a prohibited clause matched: " if culprit["role"] == "must_not" else ""
        detail = culprit["detail"]
        if culprit["kind"] == "not":  # what it excludes, and why that matched
            detail += f": {culprit['children'][0]['text']}: {culprit['children'][0]['detail']}"
        result["why"] = f"{culprit['text']} [{culprit['span'][0]}:{culprit['span'][1]}]: " \
                        f"{prohibited}{detail}"
    if matches:
        result["result"] = _result(rule, doc, batch, plan, cfg, ts)
    return result


def _scope(rule: Rule, account: dict[str, Any], sees: bool) -> dict[str, Any]:
    log_account = account["string_form"]
    if rule.account is None:
        text = "no account scope: the rule sees every log"
    elif sees:
        text = f"scoped to account {rule.account!r}: the log's account is {rule.account!r}"
    elif account["found"] in ("missing", "null"):
        text = (f"scoped to account {rule.account!r}: the log has no account (its `account` "
                "field is missing), so the rule does not see it")
    elif log_account is None:  # an object or array: there, but no account a rule can name
        text = (f"scoped to account {rule.account!r}: {account['text']}, which has no string "
                "form, so the rule does not see it")
    else:
        text = (f"scoped to account {rule.account!r}: the log's account is {log_account!r}, "
                "so the rule does not see it")
    return {"account": rule.account, "log_account": log_account, "sees": sees, "text": text}


# --- clauses -----------------------------------------------------------------------------------


def _clause(clause: Clause, query: str, doc: dict[str, Any], matcher: Matcher
            ) -> dict[str, Any]:
    matched = bool(matcher.mask(clause.node)[0].as_py())
    children = [_clause(c, query, doc, matcher) for c in clause.children]
    out: dict[str, Any] = {
        "kind": clause.kind,
        "text": clause.text(query),
        "span": [clause.start, clause.end],
        "role": clause.role,
        "field": clause.field,
        "matched": matched,
        "detail": "",
        "lookup": None,
        "children": children,
    }
    if clause.boost is not None:
        out["boost"] = clause.boost
    if children:
        out["detail"] = _compound(clause, matched, children)
    else:
        detail, lookups = _leaf(clause, doc, matcher)
        out["detail"] = detail
        out["lookup"] = lookups[0] if len(lookups) == 1 else lookups or None
    if clause.boost is not None:
        out["detail"] += f" (boost ^{clause.boost} ignored: boosts only rank)"
    return out


def _compound(clause: Clause, matched: bool, children: list[dict[str, Any]]) -> str:
    hits = sum(c["matched"] for c in children)
    n = len(children)
    if clause.kind == "and":
        return f"AND: all {n} must match; all did" if matched else \
            f"AND: all {n} must match; {n - hits} did not"
    if clause.kind == "or":
        return f"OR: one of {n} must match; {hits} did" if matched else \
            f"OR: one of {n} must match; none did"
    if clause.kind == "not":
        return "NOT: the clause inside did not match" if matched else \
            "NOT: the clause inside matched"
    must = [c for c in children if c["role"] == "must"]
    should = [c for c in children if c["role"] == "should"]
    must_not = [c for c in children if c["role"] == "must_not"]
    parts = []
    if must:
        parts.append(f"+ {sum(c['matched'] for c in must)} of {len(must)} matched")
    if must_not:
        parts.append(f"- {sum(c['matched'] for c in must_not)} of {len(must_not)} matched")
    if should:
        parts.append(f"plain {sum(c['matched'] for c in should)} of {len(should)} matched")
    head = "group without operators (Lucene's default OR; " + ", ".join(parts) + ")"
    if any(c["matched"] for c in must_not):
        return f"{head}: a prohibited clause (-/NOT) matched"
    if any(not c["matched"] for c in must):
        return f"{head}: a required clause (+) did not match"
    if not must and should and not any(c["matched"] for c in should):
        return f"{head}: no plain clause matched (with no + clause, one must)"
    if must:
        why = "every + clause matched" + (", no prohibited one" if must_not else "")
        if should:
            why += " (plain clauses only rank when a + clause is there)"
        return f"{head}: {why}"
    if should:
        return f"{head}: a plain clause matched" + (", no prohibited one" if must_not else "")
    return f"{head}: no prohibited clause matched"


def _culprit(clause: dict[str, Any]) -> dict[str, Any]:
    """The clause that decided a non-match: the first failing clause of an AND or of a
    group's + clauses, a group's matching prohibited clause; an OR, a NOT or a group whose
    plain clauses all failed is itself the reason."""
    children = clause["children"]
    if clause["kind"] == "and":
        return _culprit(next(c for c in children if not c["matched"]))
    if clause["kind"] == "group":
        for child in children:
            if child["role"] == "must_not" and child["matched"]:
                return child
        for child in children:
            if child["role"] == "must" and not child["matched"]:
                return _culprit(child)
    return clause


def _leaf(clause: Clause, doc: dict[str, Any], matcher: Matcher
          ) -> tuple[str, list[dict[str, Any]]]:
    node = clause.node
    if isinstance(node, MatchAll):
        return "* matches every log", []
    if isinstance(node, MatchNone):
        return ("matches nothing: on a text field a term needs a token and a wildcard a "
                "single token (letters, digits, _), as in Lucene"), []
    options = node.children if isinstance(node, Or) else (node,)
    parts = []
    lookups = []
    for option in options:
        text, lookup = _describe(option, doc, matcher)
        parts.append(text)
        lookups.append(lookup)
    if clause.field is None and clause.kind not in ("exists",):
        fields = [_field_of(o) for o in options]
        where = ("the default field " if len(fields) == 1 else "the default fields ") + \
            ", ".join(fields)
        return f"bare term on {where}: " + "; ".join(parts), lookups
    return "; ".join(parts), lookups


def _field_of(node: Node) -> str:
    return str(getattr(node, "field", ""))


def _describe(node: Node, doc: dict[str, Any], matcher: Matcher
              ) -> tuple[str, dict[str, Any]]:
    """One leaf node over the log: the field as looked up, and the comparison of the engine's
    string form or number with the clause."""
    matched = bool(matcher.mask(node)[0].as_py())
    path = _field_of(node)
    found = _lookup(doc, path)
    sf = _column(matcher.batch, matcher.plan, path, Form.STRING)
    found["string_form"] = sf
    where = found["text"]
    if isinstance(node, Exists):
        return (f"_exists_: {where}" + ("" if matched else " → no match")), found
    if found["found"] in ("missing", "null"):
        return f"{_what(node)}: {where} → no match", found
    if sf is None and not isinstance(node, Range):
        return f"{_what(node)}: {where}, which has no string form → no match", found
    if isinstance(node, KeywordEquals):
        assert sf is not None
        return f"{_what(node)}: {where}, string form {_q(sf)} " + \
            (f"= {_q(node.value)}" if matched else f"≠ {_q(node.value)}" + _hint(sf, node.value)), \
            found
    if isinstance(node, TextPhrase):
        assert sf is not None
        tokens = text_tokens(sf)
        found["tokens"] = tokens
        want = " ".join(node.tokens)
        head = f"{_what(node)}: {where}, tokens {_tokens(tokens)}; "
        if len(node.tokens) == 1:
            return head + (f"{_q(want)} is one of them" if matched else
                           f"{_q(want)} is not among them"), found
        if matched:
            return head + f"{_q(want)} is among them, in this order", found
        if set(node.tokens) <= set(tokens):
            return head + (f"{_q(want)}: all its tokens are there, but not next to each other "
                           "in this order"), found
        return head + f"{_q(want)} is not among them", found
    pattern = pattern_of(node)
    if pattern is not None:
        assert sf is not None
        if isinstance(node, TextWildcard | TextRegex):
            tokens = text_tokens(sf)
            found["tokens"] = tokens
            return (f"{_what(node)}, anchored to one whole token: {where}, tokens "
                    f"{_tokens(tokens)}: {'a token matches' if matched else 'no token matches'}"
                    ), found
        return (f"{_what(node)}, anchored to the whole string form (case-sensitive): {where}, "
                f"string form {_q(sf)}: {'matches' if matched else 'no match'}"), found
    if isinstance(node, Range):
        return _range(node, found, _column(matcher.batch, matcher.plan, path, Form.NUMBER)), \
            found
    return f"{_what(node)}: {where}", found


def _what(node: Node) -> str:
    match node:
        case Exists():
            return "_exists_"
        case KeywordEquals(value=value):
            return f"keyword term {_q(value)}"
        case TextPhrase(tokens=tokens):
            return f"text {'term' if len(tokens) == 1 else 'phrase'} {_q(' '.join(tokens))}"
        case KeywordWildcard(parts=parts) | TextWildcard(parts=parts):
            return f"wildcard {''.join(parts)}"
        case KeywordRegex(pattern=pattern) | TextRegex(pattern=pattern):
            return f"regex /{pattern}/"
        case Range():
            return f"{'numeric' if node.numeric else 'lexicographic'} range {_bounds(node)}"
    return type(node).__name__


def _bounds(node: Range) -> str:
    low = "*" if node.low is None else node.low
    high = "*" if node.high is None else node.high
    return f"{'[' if node.include_low else '{'}{low} TO {high}{']' if node.include_high else '}'}"


def _range(node: Range, found: dict[str, Any], n: float | None) -> str:
    head = f"{_what(node)}: {found['text']}"
    if node.numeric:
        if n is None:
            return head + ", not a number → no match"
        shown = _num(n)
        checks = []
        if node.low is not None:
            low = float(node.low)
            ok = n >= low if node.include_low else n > low
            checks.append(f"{shown} {_cmp(ok, node.include_low, True)} {node.low}")
        if node.high is not None:
            high = float(node.high)
            ok = n <= high if node.include_high else n < high
            checks.append(f"{shown} {_cmp(ok, node.include_high, False)} {node.high}")
        return head + f", the number {shown}" + (": " + ", ".join(checks) if checks else
                                                 ": numeric")
    sf = found["string_form"]
    if sf is None:
        return head + ", which has no string form → no match"
    checks = []
    if node.low is not None:
        ok = sf >= node.low if node.include_low else sf > node.low
        checks.append(f"{_q(sf)} {_cmp(ok, node.include_low, True)} {_q(node.low)}")
    if node.high is not None:
        ok = sf <= node.high if node.include_high else sf < node.high
        checks.append(f"{_q(sf)} {_cmp(ok, node.include_high, False)} {_q(node.high)}")
    return head + ", compared by code point: " + ", ".join(checks or ["any string"])


def _cmp(ok: bool, inclusive: bool, low: bool) -> str:
    """The relation that holds: for a lower bound ``≥``/``>`` when it is met, else ``<``
    (``≤`` for an exclusive one); the mirror for an upper bound."""
    if low:
        return (">=" if inclusive else ">") if ok else ("<" if inclusive else "<=")
    return ("<=" if inclusive else "<") if ok else (">" if inclusive else ">=")


def _hint(sf: str, want: str) -> str:
    if sf.lower() == want.lower():
        return " (only the case differs: keyword fields are case-sensitive)"
    n, m = number(sf), number(want)
    if n is not None and n == m:
        return f" (the same number, another string form: write {sf} to match it)"
    return ""


def _lookup(doc: dict[str, Any], path: str) -> dict[str, Any]:
    """How ``path`` is looked up in the log (SPEC §2; as
    :func:`l2m.semantics.values.lookup`): the top-level key, else the nested path."""
    top = doc.get(path)
    if top is not None:
        return {"path": path, "found": "key", "value": _bounded(top),
                "text": f"{path} = {_json(top)} (top-level key {_q(path)}{_double(top)})"}
    parts = path.split(".")
    if len(parts) == 1:
        why = "null" if path in doc else "missing"
        return {"path": path, "found": why, "value": None,
                "text": f"{path} is null (counts as missing)" if why == "null" else
                f"{path} is missing (no key {_q(path)})"}
    node: Any = doc
    arrow = " → ".join(parts)
    for i, part in enumerate(parts):
        if not isinstance(node, dict):
            kind = "an array" if isinstance(node, list) else "not an object"
            return {"path": path, "found": "missing", "value": None,
                    "text": f"{path} is missing (no key {_q(path)}; nested path {arrow}: "
                            f"{_q('.'.join(parts[:i]))} is {kind})"}
        if part not in node:
            return {"path": path, "found": "missing", "value": None,
                    "text": f"{path} is missing (no key {_q(path)}; nested path {arrow}: "
                            f"no key {_q(part)}" + (f" in {_q('.'.join(parts[:i]))})"
                                                   if i else ")")}
        node = node[part]
        if node is None:
            return {"path": path, "found": "null", "value": None,
                    "text": f"{path} is null (counts as missing; nested path {arrow})"}
    return {"path": path, "found": "nested", "value": _bounded(node),
            "text": f"{path} = {_json(node)} (nested path {arrow}{_double(node)})"}


def _double(value: Any) -> str:
    """Why a number past 64-bit integers shows as a double (the log may have written it as an
    integer: the engine's decoder, as orjson, reads it so)."""
    if isinstance(value, float) and value.is_integer() and not INT_MIN <= value < INT_END:
        return "; an integer past 64 bits is read as a double"
    return ""


def _bounded(value: Any) -> Any:
    """``value``, or None for an object or array nested deeper than :data:`JSON_DEPTH`."""
    stack = [(value, 0)]
    while stack:  # no recursion: the value may nest 1023 levels
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth == JSON_DEPTH:
                return None
            stack += [(child, depth + 1) for child in
                      (node.values() if isinstance(node, dict) else node)]
    return value


def _looked_up(doc: dict[str, Any], path: str, engine_string: str | None) -> dict[str, Any]:
    found = _lookup(doc, path)
    found["string_form"] = engine_string
    return found


def _json(value: Any) -> str:
    if isinstance(value, dict):
        text = "an object"
    elif isinstance(value, list):
        text = "an array"
    else:
        text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN else text[:SHOWN - 1] + "…"


def _q(text: str) -> str:
    shown = json.dumps(text, ensure_ascii=False)
    return shown if len(shown) <= SHOWN else shown[:SHOWN - 2] + '…"'


def _tokens(tokens: list[str]) -> str:
    shown = "[" + " ".join(tokens) + "]"
    return shown if len(shown) <= SHOWN else shown[:SHOWN - 2] + "…]"


def _num(x: float) -> str:
    if x in (math.inf, -math.inf):
        return "+Inf" if x > 0 else "-Inf"
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


# --- a match: labels, value, time, tenancy ------------------------------------------------------


def _result(rule: Rule, doc: dict[str, Any], batch: Any, plan: ParsePlan, cfg: JobConfig,
            ts: int | None) -> dict[str, Any]:
    limit = cfg.limits.max_label_value_length
    labels: list[dict[str, Any]] = [
        {"name": name, "from": "labels", "value": value, "text": f"{name}={_q(value)} (static)"}
        for name, value in rule.labels]
    for name, path in rule.group_labels:
        value = _column(batch, plan, path, Form.STRING)
        found = _lookup(doc, path)
        entry: dict[str, Any] = {"name": name, "from": path, "value": None}
        renamed = f"group_by {path} → label {name}" if name != path else f"group_by {path}"
        if value is None:
            entry["text"] = f"{renamed}: {found['text']}, no string form → no label"
        elif value == "":
            entry["text"] = f"{renamed}: empty → no label"
        else:
            cut = cut_value(value, limit)
            entry["value"] = cut
            entry["text"] = f"{renamed}: {name}={_q(cut)}"
            if cut != value:
                entry["cut"] = True
                entry["text"] += (f" (cut: {len(value)} characters, longer than {limit}; "
                                  "counted in l2m_label_values_cut_total)")
        labels.append(entry)
    sample_labels = dict(sorted((e["name"], e["value"]) for e in labels
                                if e["value"] is not None))
    out: dict[str, Any] = {"labels": labels, "sample_labels": sample_labels}
    out["value"] = _value(rule, doc, batch, plan)
    window = window_start(ts) if ts is not None else None
    if ts is None:
        out["time"] = {"window": None, "sample_timestamp": None,
                       "text": "no event time: backfill skips the log; streaming dates it by "
                               "its Kafka record's time"}
    elif rule.kind == Kind.GAUGE:
        assert window is not None
        out["time"] = {"window": [window, window + MINUTE_MS],
                       "text": f"window [{iso_text(window)}, {iso_text(window + MINUTE_MS)}); the "
                               f"sample's timestamp is the window start {window}",
                       "sample_timestamp": window}
    else:
        out["time"] = {"window": None,
                       "text": f"counter: the sample's timestamp is the newest event time "
                               f"counted into the series, at least {ts} ({iso_text(ts)})",
                       "sample_timestamp": ts}
    target = rule.target_account
    out["target_account"] = target
    out["tenancy"] = (f"written to account {target!r} (target_account)" if target else
                      "written with account null (no target_account)")
    names = [f"{rule.name}_bucket", f"{rule.name}_sum", f"{rule.name}_count"] \
        if rule.classic else []
    if not rule.classic or rule.native_schema is not None:
        names.append(rule.name)  # the value's, or the native histogram's, or the quantiles'
    out["metrics"] = names
    if ts is not None and rule.kind == Kind.GAUGE and window is not None:
        end = window + MINUTE_MS
        out["late"] = {"watermark_before": end, "newest_event_time_before": end + cfg.grace_ms,
                       "text": f"streaming: counted into its window while the watermark "
                               f"(newest event time seen − grace {duration_text(cfg.grace_ms)}) is "
                               f"before {iso_text(end)}, i.e. until the job has seen an event time "
                               f"of {iso_text(end + cfg.grace_ms)}; later it is late: the gauges "
                               "ignore it (l2m_late_logs_total counts it)"}
    return out


def _value(rule: Rule, doc: dict[str, Any], batch: Any, plan: ParsePlan) -> dict[str, Any]:
    if rule.aggregation == Aggregation.COUNT or not rule.field:
        return {"field": None, "value": None, "text": "count: the log counts 1"}
    value = _column(batch, plan, rule.field, Form.NUMBER)
    found = _lookup(doc, rule.field)
    out: dict[str, Any] = {"field": rule.field, "value": value}
    if value is None:
        why = found["text"] if found["found"] in ("missing", "null") else \
            f"{found['text']}, not a number"
        out["text"] = (f"{rule.aggregation} of {rule.field}: {why} → no value: the log counts "
                       "as a match only, no sample from it alone")
        return out
    out["text"] = f"{rule.aggregation} of {rule.field}: {found['text']} → {_num(value)}"
    if rule.classic:
        # The engine's bucket (the first bound at or above the value); the log counts in it
        # and every bucket above (cumulative, as the samples are).
        first = value_buckets(rule, pa.array([value], pa.float64()))[0].as_py()
        every = [*rule.bucket_labels, "+Inf"]
        les = every[every.index(first):]
        out["buckets"] = les
        out["text"] += f", counted in the buckets le={', '.join(les)}"
    if rule.native_schema is not None:
        out["native"] = _native_bucket(rule, value)
    if rule.aggregation == Aggregation.QUANTILES:
        out["quantiles"] = _quantiles(rule)
    return out


def _native_bucket(rule: Rule, value: float) -> dict[str, Any]:
    """The native bucket the engine counts ``value`` in (its bucket key, from
    :func:`~l2m.engine.nativebuckets.bucket_key_codes`: the partial row's ``le``), with the
    bucket's bounds (:func:`~l2m.semantics.exphist.upper_bound`)."""
    schema = rule.native_schema
    assert schema is not None
    codes, keys = bucket_key_codes(np.array([value], np.float64), schema)
    key = keys[int(codes[0])]
    side, _schema, index = parse_key(key)
    holder = "its window" if rule.kind == Kind.GAUGE else "the series"
    kept = (f"; in a coarser schema's bucket that holds it once {holder} has more than "
            f"{rule.native_max_buckets} populated buckets")
    out: dict[str, Any] = {"schema": schema, "key": key, "index": None, "lower": None,
                           "upper": None}
    if side == NO_BUCKET:  # NaN: in the count and the sum only
        out["side"] = "none"
        out["text"] = f"schema {schema}: NaN is in no bucket (counted in count and sum only)"
        return out
    if side not in (POSITIVE, NEGATIVE):
        threshold = exphist.DEFAULT_ZERO_THRESHOLD
        out.update(side="zero", lower=-threshold, upper=threshold)
        # The zero bucket is the same at every schema: lowering never moves a value out of it.
        out["text"] = (f"schema {schema}: the zero bucket [{_num(-threshold)}, {_num(threshold)}]"
                       " (|value| at most the zero threshold), at every schema")
        return out
    lower, upper = exphist.upper_bound(index - 1, schema), exphist.upper_bound(index, schema)
    if side == POSITIVE:
        shown = f"({_num(lower)}, {_num(upper)}]"
        out.update(side="positive", index=index, lower=sample_value(lower),
                   upper=sample_value(upper))
    else:
        shown = f"[{_num(-upper)}, {_num(-lower)})"
        out.update(side="negative", index=index, lower=sample_value(-upper),
                   upper=sample_value(-lower))
    out["text"] = f"schema {schema}: {out['side']} bucket {index} {shown}{kept}"
    return out


def _quantiles(rule: Rule) -> dict[str, Any]:
    """What a quantiles rule writes of a window holding the log."""
    assert rule.native_schema is not None
    bound = exphist.relative_error_bound(rule.native_schema)
    return {"quantiles": list(rule.quantile_labels), "schema": rule.native_schema,
            "relative_error": bound,
            "text": f"the log is one observation of its window's native histogram (schema "
                    f"{rule.native_schema}); each sample (quantile="
                    f"{', '.join(rule.quantile_labels)}) is the window's estimate of that "
                    f"quantile from it, within {bound:.2%} of the exact one — not this value"}


# --- the log's outcomes --------------------------------------------------------------------------


def _event_time(doc: dict[str, Any], field: str, ts: int | None) -> dict[str, Any]:
    found = _lookup(doc, field)
    out = {"field": field, "raw": found["value"], "ms": ts, "iso": iso_text(ts) if ts is not None
           else None}
    if ts is not None:
        out["text"] = f"{found['text']} → {ts} ms = {iso_text(ts)}"
    elif found["found"] in ("missing", "null"):
        out["text"] = found["text"]
    else:
        out["text"] = (f"{found['text']}: not a usable time (epoch milliseconds, or ISO-8601 "
                       "with Z or an offset, years 0001-9999)")
    return out


def _unrouted(status: Status, reason: str | None) -> list[str]:
    if status == Status.BLANK:
        return ["a blank line: not a log, counted as blank and skipped"]
    return [f"malformed: {reason}",
            "backfill: counted as malformed and skipped (summary: malformed lines)",
            "streaming: sent to the dead-letter topic with this reason (header l2m.error), "
            "counted in l2m_input_logs_total{status=\"malformed\"}"]


def _outcomes(status: Status, ts: int | None, cfg: JobConfig, rules: list[dict[str, Any]]
              ) -> list[str]:
    if status == Status.NO_TIMESTAMP or ts is None:
        return ["no usable event time: backfill skips the log and counts it (summary: without "
                "timestamp)",
                "streaming: dated by its Kafka record's time instead (l2m_input_logs_total"
                "{status=\"no_timestamp\"}) and routed; dead-lettered as future if that time is "
                f"more than {duration_text(cfg.max_future_ms)} ahead of l2m's clock"]
    earliest = ts - cfg.max_future_ms
    end = window_start(ts) + MINUTE_MS
    return [
        "backfill: routed (no lateness in a backfill)",
        f"streaming: routed if its Kafka record's time is at or after {iso_text(earliest)}; an "
        f"earlier record time puts the event time more than {duration_text(cfg.max_future_ms)} "
        "(max_future_skew) ahead: status future, dead-lettered, never routed",
        f"streaming: late once the job has seen an event time of {iso_text(end + cfg.grace_ms)} "
        f"(the watermark, that minus the grace, reaches {iso_text(end)}, the end of its minute): "
        "counted once in "
        "l2m_late_logs_total, ignored by the gauges, still counted by counters",
    ]


# --- text ------------------------------------------------------------------------------------


def render_text(report: dict[str, Any]) -> str:
    """The report as the text ``l2m explain`` prints."""
    log = report["log"]
    shown = log if len(log) <= SHOWN_LOG else log[:SHOWN_LOG - 1] + "…"
    lines = [f"log: {_oneline(shown)}", f"status: {report['status']}"]
    if report["event_time"] is not None:
        lines.append(f"event time: {report['event_time']['text']}")
    if report["account"] is not None and any(r.get("scope", {}).get("account")
                                             for r in report["rules"]):
        lines.append(f"account field: {report['account']['text']}")
    lines.append("outcomes:")
    lines += [f"  {o}" for o in report["outcomes"]]
    rules = report["rules"]
    if report["status"] in ("malformed", "blank"):
        lines.append(f"rules: none sees it ({len(rules)} rule{'s' * (len(rules) != 1)} not "
                     "evaluated)")
        return "\n".join(lines) + "\n"
    hits = [r["id"] for r in rules if r["matches"]]
    lines.append(f"rules matching: {len(hits)} of {len(rules)}" +
                 (f": {', '.join(hits)}" if hits else ""))
    for rule in rules:
        lines.append("")
        lines += _rule_text(rule)
    return "\n".join(lines) + "\n"


def _rule_text(rule: dict[str, Any]) -> list[str]:
    where = f"{rule['file']}:{rule['line']}"
    verdict = "matches" if rule["matches"] else "does not match"
    lines = [f"rule {rule['id']} ({where}, {rule['kind']} {rule['aggregation']}): {verdict}"]
    if rule["why"] is not None and rule["failed"] is None:
        lines.append(f"  why: {rule['why']}")  # disabled, or another account's: that first
    lines.append(f"  query: {_oneline(rule['query'])}")
    if rule["failed"] is not None:
        start, end = rule["failed"]["span"]
        query = _oneline(rule["query"])
        lines.append("         " + " " * _width(query[:start]) +
                     "^" * max(1, _width(query[start:end])))
        lines.append(f"  why: {rule['why']}")
    if rule["scope"]["account"] is not None and rule["scope"]["sees"]:
        lines.append(f"  account: {rule['scope']['text']}")
    lines.append("  clauses:")
    lines += _clause_text(rule["clauses"], 2)
    result = rule["result"]
    if result is not None:
        for label in result["labels"]:
            lines.append(f"  label: {label['text']}")
        lines.append(f"  labels: {_labels(result['sample_labels'])}")
        lines.append(f"  value: {result['value']['text']}")
        if "native" in result["value"]:
            lines.append(f"  native bucket: {result['value']['native']['text']}")
        if "quantiles" in result["value"]:
            lines.append(f"  quantiles: {result['value']['quantiles']['text']}")
        lines.append(f"  time: {result['time']['text']}")
        lines.append(f"  account: {result['tenancy']}")
        if "late" in result:
            lines.append(f"  late: {result['late']['text']}")
    return lines


def _clause_text(clause: dict[str, Any], depth: int) -> list[str]:
    mark = MATCHED if clause["matched"] else MISSED
    role = f"{clause['role']} " if clause["role"] else ""
    start, end = clause["span"]
    text = _oneline(clause["text"])
    if len(text) > SHOWN:
        text = text[:SHOWN - 1] + "…"
    lines = [f"{'  ' * depth}{mark} {role}{text} [{start}:{end}] {clause['detail']}"]
    for child in clause["children"]:
        lines += _clause_text(child, depth + 1)
    return lines


def _labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={_q(v)}" for k, v in labels.items()) + "}"


def _width(text: str) -> int:
    """Columns ``text`` takes in a terminal: wide (East Asian) characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _oneline(text: str) -> str:
    """Control characters shown as one space each, so a caret line stays under its span."""
    return "".join(" " if ord(ch) < 32 or ord(ch) == 127 else ch for ch in text)


__all__ = ["MATCHED", "MISSED", "chosen_rules", "explain_command", "explain_log",
           "input_line", "render_text"]

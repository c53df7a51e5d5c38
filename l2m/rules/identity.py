"""Series identity (SPEC §7): at most one enabled rule may be able to emit a given series.

A series is (target account, metric name, label set). Two enabled rules for the same target
account collide when

* they share a metric name and their label sets can coincide (``SERIES_COLLISION``) — a rule
  can emit its static labels plus any subset of its ``group_by`` labels (a field missing from
  a log adds no label), so ``{service}`` and ``{service, status}`` coincide on a log without
  ``status``, and a static label coincides with another rule's group-by label of that name;
* they share a metric name but not its type: a counter and a gauge, or a histogram and a
  plain series (``METRIC_TYPE_CONFLICT``) — one name is one metric family;
* one's name is a series of the other's histogram family, ``<name>_bucket``, ``_sum`` or
  ``_count`` (``HISTOGRAM_NAME_COLLISION``).

Input: the loaded rules (disabled rules don't count). Output: one :class:`~l2m.errors.Problem`
per colliding pair, located at the later rule (in load order) and naming the earlier one's
position."""

from __future__ import annotations

from collections.abc import Sequence

from l2m.errors import Problem, render
from l2m.rules.model import Aggregation, Rule
from l2m.values import label_name

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def collisions(rules: Sequence[Rule]) -> list[Problem]:
    """Every pair of enabled rules that could write the same series (module docstring)."""
    order = {id(rule): i for i, rule in enumerate(rules)}
    # (target account, a metric name a rule writes) → (rule, histogram suffix or None)
    families: dict[tuple[str | None, str], list[tuple[Rule, str | None]]] = {}
    for rule in rules:
        if not rule.enabled:
            continue
        families.setdefault((rule.target_account, rule.name), []).append((rule, None))
        if rule.aggregation == Aggregation.HISTOGRAM:
            for suffix in HISTOGRAM_SUFFIXES:
                families.setdefault((rule.target_account, rule.name + suffix), []).append(
                    (rule, suffix))
    problems: list[Problem] = []
    for members in families.values():
        for i, (later, later_suffix) in enumerate(members):
            for earlier, earlier_suffix in members[:i]:
                if earlier.id == later.id:
                    continue  # one rule loaded twice: DUPLICATE_ID says so
                if order[id(earlier)] > order[id(later)]:
                    earlier, later = later, earlier
                    earlier_suffix, later_suffix = later_suffix, earlier_suffix
                problem = _pair(earlier, earlier_suffix, later, later_suffix)
                if problem is not None:
                    problems.append(problem)
    return sorted(problems, key=lambda p: (p.file, p.line))


def _pair(earlier: Rule, earlier_suffix: str | None, later: Rule, later_suffix: str | None
          ) -> Problem | None:
    other = f"rule '{earlier.id}' at {earlier.file}:{earlier.line}"
    if earlier_suffix is not None and later_suffix is not None:
        return None  # two histograms of one name: their own (name, None) entries compare them
    if earlier_suffix is not None or later_suffix is not None:
        histogram, plain, suffix = ((earlier, later, earlier_suffix) if earlier_suffix
                                    else (later, earlier, later_suffix))
        return _problem(later, "HISTOGRAM_NAME_COLLISION", name=plain.name,
                        family=histogram.name, suffix=suffix, other=other)
    kinds = (earlier.kind, earlier.aggregation == Aggregation.HISTOGRAM)
    if kinds != (later.kind, later.aggregation == Aggregation.HISTOGRAM):
        return _problem(later, "METRIC_TYPE_CONFLICT", name=later.name, type=_type(later),
                        other=other, other_type=_type(earlier))
    if not can_coincide(earlier, later):
        return None
    return _problem(later, "SERIES_COLLISION", name=later.name, other=other,
                    labels=_example(earlier, later))


def can_coincide(a: Rule, b: Rule) -> bool:
    """Whether some log of each rule yields the same label set: every static label of one is
    a label the other can have (static, with the same value, or from its group-by)."""
    static_a, static_b = dict(a.labels), dict(b.labels)
    group_a = {label_name(f) for f in a.group_by}
    group_b = {label_name(f) for f in b.group_by}
    return (all(name in static_b or name in group_b for name in static_a)
            and all(name in static_a or name in group_a for name in static_b)
            and all(static_b[name] == value for name, value in static_a.items()
                    if name in static_b))


def _example(a: Rule, b: Rule) -> str:
    """The smallest label set both rules can write: their static labels' names."""
    names = sorted({*dict(a.labels), *dict(b.labels)})
    return "{" + ", ".join(names) + "}" if names else "{} (no labels)"


def _type(rule: Rule) -> str:
    return f"{rule.kind} histogram" if rule.aggregation == Aggregation.HISTOGRAM else rule.kind


def _problem(rule: Rule, code: str, **params: object) -> Problem:
    return Problem(code, rule.file, rule.line, 1, rule.id, render(code, params), "name")

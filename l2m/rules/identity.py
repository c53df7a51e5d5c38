"""Series identity (SPEC §7): at most one enabled rule may be able to emit a given series.

A series is (target account, metric name, label set). Two enabled rules for the same target
account collide when

* they share a metric name and their label sets can coincide (``SERIES_COLLISION``) — a rule
  can emit its static labels plus any subset of its ``group_by`` labels (a field missing from
  a log adds no label), so ``{service}`` and ``{service, status}`` coincide on a log without
  ``status``, and a static label coincides with another rule's group-by label of that name;
* they share a metric name but not its type: a counter and a gauge, or a histogram and a
  plain series (``METRIC_TYPE_CONFLICT``) — one name is one metric family. A histogram is of
  type histogram whether its buckets are classic, native or both; a quantiles rule is a gauge
  whose series always carry a ``quantile`` label (any value: it may coincide with any series
  of that label);
* one's name is a series of the other's classic histogram family, ``<name>_bucket``, ``_sum``
  or ``_count`` (``HISTOGRAM_NAME_COLLISION``; a native histogram is one series, ``<name>``).

Input: the loaded rules (disabled rules don't count). Output: one :class:`~l2m.errors.Problem`
per colliding pair, located at the later rule (in load order) and naming the earlier one's
position — at most :data:`MAX_PER_RULE` per later rule, its earliest.

Cost: many rules may share a name, kept apart by a static label's values (docs/rules.md); a
check of every pair was quadratic (10,000 such rules: 50 million pairs, minutes). Here a rule
looks up the earlier rules it could coincide with: the earlier rules of a name are indexed by
the label names they write (static, group-by) and, per set of static names two rules share,
by those static values, so a family of one label layout costs a lookup per rule."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from itertools import islice

from l2m.errors import Problem, render
from l2m.rules.model import QUANTILE_LABEL, Aggregation, Kind, Rule
from l2m.semantics.values import label_name

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Problems reported per later rule: its first collisions in load order. A rule colliding with
# thousands of others is one mistake, and its first few name it.
MAX_PER_RULE = 10

Member = tuple[Rule, "str | None"]  # a rule and the histogram suffix it writes the name with


def collisions(rules: Sequence[Rule]) -> list[Problem]:
    """Every pair of enabled rules that could write the same series (module docstring)."""
    order = {id(rule): i for i, rule in enumerate(rules)}
    # (target account, a metric name a rule writes) → (rule, histogram suffix or None)
    families: dict[tuple[str | None, str], list[Member]] = {}
    for rule in rules:
        if not rule.enabled:
            continue
        families.setdefault((rule.target_account, rule.name), []).append((rule, None))
        if rule.classic:
            for suffix in HISTOGRAM_SUFFIXES:
                families.setdefault((rule.target_account, rule.name + suffix), []).append(
                    (rule, suffix))
    problems: list[Problem] = []
    reported: dict[int, int] = {}  # problems so far per later rule (a histogram is in four
    # families: its name and its three suffixed names)
    for members in families.values():
        if len(members) > 1:
            problems.extend(_family(sorted(members, key=lambda m: order[id(m[0])]), order,
                                    reported))
    return sorted(problems, key=lambda p: (p.file, p.line))


def _family(members: list[Member], order: dict[int, int],
            reported: dict[int, int]) -> Iterator[Problem]:
    """The problems of one family (its members in load order): each member against the
    earlier ones it collides with, found without visiting the others, while the member has
    fewer than :data:`MAX_PER_RULE` problems (``reported``, across families)."""
    suffixed: list[Member] = []  # earlier histograms writing this name with a suffix
    plain: list[Member] = []  # earlier rules writing this name as it is
    by_type: dict[tuple[str, str], _Layouts] = {}  # earlier plain rules by metric type
    for rule, suffix in members:
        if suffix is not None:
            # Only a plain rule of the name collides with a histogram's suffixed series.
            found: list[Iterator[Member]] = [iter(plain)]
        else:
            kind = _kind(rule)
            found = [iter(suffixed)]
            found += [iter(layouts.members) for other, layouts in by_type.items()
                      if other != kind]  # METRIC_TYPE_CONFLICT
            if kind in by_type:
                found += by_type[kind].coinciding(rule)  # SERIES_COLLISION
        earlier = heapq.merge(*found, key=lambda m: order[id(m[0])])
        # One rule loaded twice (DUPLICATE_ID says so) is not a collision with itself.
        others = (m for m in earlier if m[0].id != rule.id)
        left = MAX_PER_RULE - reported.get(id(rule), 0)
        for other, other_suffix in islice(others, max(0, left)):
            problem = _pair(other, other_suffix, rule, suffix)
            if problem is not None:
                reported[id(rule)] = reported.get(id(rule), 0) + 1
                yield problem
        if suffix is not None:
            suffixed.append((rule, suffix))
        else:
            plain.append((rule, None))
            by_type.setdefault(_kind(rule), _Layouts()).add(rule)


def _kind(rule: Rule) -> tuple[str, str]:
    """A metric family's type as one name must keep it: its kind and the type remote write
    sends (:attr:`~l2m.rules.model.Rule.metric_type`: a classic gauge histogram is a
    ``histogram``, one with native buckets a ``gaugehistogram``) — one family name, one
    TYPE."""
    return rule.kind.value, rule.metric_type


class _Layouts:
    """The earlier plain rules of one family and metric type, by the label names they can
    write (static names, group-by names, always-written names of any value: a quantile
    gauge's ``quantile``): two rules coincide when each one's static and always-written names
    are among the other's names and their static values agree on the static names they share
    (:func:`can_coincide`). Rules of one layout are indexed by those shared values."""

    def __init__(self) -> None:
        self.members: list[Member] = []
        self.layouts: dict[Names, _Layout] = {}

    def add(self, rule: Rule) -> None:
        self.members.append((rule, None))
        names = _names(rule)
        layout = self.layouts.get(names)
        if layout is None:
            layout = self.layouts[names] = _Layout(*names)
        layout.add(rule)

    def coinciding(self, rule: Rule) -> list[Iterator[Member]]:
        """The earlier rules ``rule`` can coincide with, in load order per layout."""
        static, groups, wild = _names(rule)
        values = dict(rule.labels)
        found: list[Iterator[Member]] = []
        for layout in self.layouts.values():
            if static | wild <= layout.static | layout.groups | layout.wild \
                    and layout.static | layout.wild <= static | groups | wild:
                shared = tuple(sorted(static & layout.static))
                rules = layout.index(shared).get(tuple(values[n] for n in shared), [])
                found.append((r, None) for r in rules)
        return found


class _Layout:
    """Rules with one set of static label names, one of group-by label names and one of
    always-written names of any value; ``index``: the rules by their values of some of those
    static names, built when first asked for."""

    def __init__(self, static: frozenset[str], groups: frozenset[str],
                 wild: frozenset[str]) -> None:
        self.static = static
        self.groups = groups
        self.wild = wild
        self.rules: list[Rule] = []
        self.indexes: dict[tuple[str, ...], dict[tuple[str, ...], list[Rule]]] = {}

    def add(self, rule: Rule) -> None:
        self.rules.append(rule)
        values = dict(rule.labels)
        for names, index in self.indexes.items():
            index.setdefault(tuple(values[n] for n in names), []).append(rule)

    def index(self, names: tuple[str, ...]) -> dict[tuple[str, ...], list[Rule]]:
        found = self.indexes.get(names)
        if found is None:
            found = self.indexes[names] = {}
            for rule in self.rules:
                values = dict(rule.labels)
                found.setdefault(tuple(values[n] for n in names), []).append(rule)
        return found


Names = tuple[frozenset[str], frozenset[str], frozenset[str]]


def _names(rule: Rule) -> Names:
    """A rule's static label names, group-by label names and always-written names."""
    return (frozenset(name for name, _ in rule.labels),
            frozenset(label_name(f) for f in rule.group_by), _wild(rule))


_QUANTILE_NAMES = frozenset({QUANTILE_LABEL})


def _wild(rule: Rule) -> frozenset[str]:
    """Labels every series of the rule carries with a value no rule file fixes: a quantile
    gauge's ``quantile``."""
    return _QUANTILE_NAMES if rule.aggregation == Aggregation.QUANTILES else frozenset()


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
    if _kind(earlier) != _kind(later):
        return _problem(later, "METRIC_TYPE_CONFLICT", name=later.name, type=_type(later),
                        other=other, other_type=_type(earlier))
    if not can_coincide(earlier, later):
        return None
    return _problem(later, "SERIES_COLLISION", name=later.name, other=other,
                    labels=_example(earlier, later))


def can_coincide(a: Rule, b: Rule) -> bool:
    """Whether some log of each rule yields the same label set: every static (or
    always-written) label of one is a label the other can have (static, with the same value,
    from its group-by, or always-written)."""
    static_a, static_b = dict(a.labels), dict(b.labels)
    can_a = {*static_a, *(label_name(f) for f in a.group_by), *_wild(a)}
    can_b = {*static_b, *(label_name(f) for f in b.group_by), *_wild(b)}
    return ({*static_a, *_wild(a)} <= can_b and {*static_b, *_wild(b)} <= can_a
            and all(static_b[name] == value for name, value in static_a.items()
                    if name in static_b))


def _example(a: Rule, b: Rule) -> str:
    """The smallest label set both rules can write: their static (and always-written)
    labels' names."""
    names = sorted({*dict(a.labels), *dict(b.labels), *_wild(a), *_wild(b)})
    return "{" + ", ".join(names) + "}" if names else "{} (no labels)"


def _type(rule: Rule) -> str:
    if rule.metric_type == "gaugehistogram":
        return "gauge native histogram"
    return f"{rule.kind} histogram" if rule.aggregation == Aggregation.HISTOGRAM else rule.kind


def shown_type(rule: Rule) -> str:
    """What a listing shows as a rule's metric (``l2m validate --list``, TOPOLOGY.md):
    ``histogram``, ``native histogram`` or ``classic+native histogram`` (``gauge …`` for a
    gauge histogram, one per window), ``quantiles`` (gauges with a quantile label), else the
    kind."""
    if rule.aggregation == Aggregation.QUANTILES:
        return "quantiles"
    if rule.aggregation != Aggregation.HISTOGRAM:
        return rule.kind.value
    form = "histogram" if rule.native_schema is None \
        else "classic+native histogram" if rule.classic else "native histogram"
    return form if rule.kind == Kind.COUNTER else f"gauge {form}"


def _problem(rule: Rule, code: str, **params: object) -> Problem:
    return Problem(code, rule.file, rule.line, 1, rule.id, render(code, params), "name")

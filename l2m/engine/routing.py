"""The compiled rule set a job routes logs with, independent of any engine.

Input: the rules. Output: :class:`Routing` — the enabled rules, the parse plan (the fields
their queries, group-by, values and account scopes read) and which rules each log can reach:
rules scoped to an ``account`` only see that account's logs, so they are kept apart by
account (:attr:`Routing.by_account`) and evaluated on those logs alone
(:mod:`l2m.engine.fanout`)."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from l2m.defaults import MAX_FUTURE_MS, MAX_LABEL_VALUE_LENGTH, TIMESTAMP_FIELD
from l2m.engine.admission import RuleCaps, rule_caps
from l2m.engine.parse import ParsePlan
from l2m.policy.limits import Limits
from l2m.process.collector import collector_paused
from l2m.query.nodes import FieldUse, Node
from l2m.rules.model import Aggregation, Rule

# What a rule's match rows are built from besides its matches: rules of one shape (the
# thousand tenants' "errors" rules) get their rows in one pass of takes over all their matches
# (:mod:`l2m.engine.fanout`).
Shape = tuple[str, str, str | None, tuple[str, ...], tuple[str, ...]]


def shape_of(rule: Rule) -> Shape:
    """Kind, aggregation, value field, buckets and group-by fields: what a rule's match rows
    are built from besides its matches. Buckets by their labels, not their values: bounds
    written ``[1, 2]`` and ``[1.0, 2.0]`` are equal numbers but their own ``le`` labels; and
    the native schema."""
    # The group-by fields as the rule has them: its `group_labels` would name a label per
    # field first (a regex each, 0.15 s of a 100,000-rule index in every read worker).
    buckets: tuple[str, ...] = ()
    if rule.bucketed:
        buckets = rule.bucket_labels if rule.aggregation == Aggregation.HISTOGRAM else ()
        if rule.native_schema is not None:  # not a bound's label: those never hold "/"
            buckets += (f"native/{rule.native_schema}",)
    return (rule.kind, rule.aggregation, rule.field, buckets, tuple(rule.group_by))


@dataclass(frozen=True)
class ScopedIndex:
    """The account-scoped rules as arrays, so that a batch finds each account's rules and
    their matches with a few numpy calls instead of a few per (account, rule) — 10,000
    accounts of 10 rules made 70,000 mask slices per read task.

    ``rules`` holds every scoped rule, an account's together in rule order; ``span`` maps an
    account to its ``[start, end)`` there; per rule, ``node`` (an index into ``nodes``, the
    distinct query roots: equal queries share one mask) and ``shape`` (an index into
    ``shapes``); ``ids``, the rules' ids in that order (read per matching pair: a tuple
    lookup, not an attribute per rule object)."""

    rules: tuple[Rule, ...]
    span: Mapping[str, tuple[int, int]]
    node: np.ndarray
    nodes: tuple[Node, ...]
    shape: np.ndarray
    shapes: tuple[Shape, ...]
    ids: tuple[str, ...]


V = TypeVar("V")


class Delegating(Mapping[str, V]):
    """A read-only mapping over a table built on demand (:meth:`_table`). Mapping's own
    ``get`` and ``in`` go through ``__getitem__`` and an exception: a state call makes
    hundreds of thousands of them with 100,000 rules, so each goes to the table directly."""

    def _table(self) -> Mapping[str, V]:
        raise NotImplementedError

    def __getitem__(self, rule_id: str) -> V:
        return self._table()[rule_id]

    def get(self, rule_id: str, default: Any = None) -> Any:
        return self._table().get(rule_id, default)

    def __contains__(self, rule_id: object) -> bool:
        return rule_id in self._table()

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


class RuleCapsTable(Delegating[RuleCaps]):
    """A routing's series caps (:func:`~l2m.engine.admission.rule_caps`), worked out from its
    rules and the job's limits on first use, and travelling as those two: the driver neither
    computes nor pickles 100,000 records at each start or rule change (0.45 s of it), a read
    worker never needs them, and a state worker computes them once (as fast as it unpickled
    them)."""

    def __init__(self, rules: tuple[Rule, ...], limits: Limits) -> None:
        self._rules = rules
        self._limits = limits
        self._caps: dict[str, RuleCaps] | None = None

    def __reduce__(self) -> tuple[Any, tuple[tuple[Rule, ...], Limits]]:
        # The rules pickle once: the routing holds the same tuple (pickle's memo).
        return RuleCapsTable, (self._rules, self._limits)

    def decoded(self) -> dict[str, RuleCaps]:
        """The caps as a plain dict (for hot loops), worked out once."""
        if self._caps is None:
            with collector_paused():  # 100,000 records, no cycles among them
                self._caps = rule_caps(self._rules, self._limits)
        return self._caps

    def _table(self) -> Mapping[str, RuleCaps]:
        return self.decoded()


def plain_caps(caps: Mapping[str, RuleCaps]) -> Mapping[str, RuleCaps]:
    """Caps as a plain mapping: a :class:`RuleCapsTable` worked out, any other as it is."""
    return caps.decoded() if isinstance(caps, RuleCapsTable) else caps


@dataclass(frozen=True)
class Routing:
    """The compiled rules, what the parse stage must extract for them, the longest label
    value a log may give a series (:mod:`l2m.engine.labels`) and each rule's series caps
    (:mod:`l2m.engine.admission`; empty: none)."""

    rules: tuple[Rule, ...]
    plan: ParsePlan
    max_label_value_length: int = MAX_LABEL_VALUE_LENGTH
    caps: Mapping[str, RuleCaps] = field(default_factory=dict)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Its fields only (tables built on the driver stay there).
        return Routing, (self.rules, self.plan, self.max_label_value_length, self.caps)

    @functools.cached_property
    def by_kind(self) -> dict[str, dict[str, Rule]]:
        """The rules by id, per kind (``counter``, ``gauge``): the state stage's tables, built
        once per worker with the routing (:class:`l2m.engine.pipeline.RuleTable`)."""
        tables: dict[str, dict[str, Rule]] = {}
        for rule in self.rules:
            tables.setdefault(str(rule.kind), {})[rule.id] = rule
        return tables

    @functools.cached_property
    def unscoped(self) -> tuple[Rule, ...]:
        """The rules every log can reach."""
        return tuple(r for r in self.rules if r.account is None)

    @functools.cached_property
    def by_account(self) -> dict[str, tuple[Rule, ...]]:
        """The account-scoped rules, by account, in rule order."""
        scoped: dict[str, list[Rule]] = {}
        for rule in self.rules:
            if rule.account is not None:
                scoped.setdefault(rule.account, []).append(rule)
        return {account: tuple(rules) for account, rules in scoped.items()}

    @functools.cached_property
    def scoped(self) -> ScopedIndex:
        """:attr:`by_account` as arrays (:class:`ScopedIndex`). Built on a read task's first
        use, not with the routing's decode: state workers never need it (0.15-0.3 s for
        100,000 rules)."""
        rules: list[Rule] = []
        span: dict[str, tuple[int, int]] = {}
        node_of: dict[int, int] = {}  # id(compiled) → node index: tenants share compiled queries
        by_root: dict[Node, int] = {}  # the distinct roots, numbered in order of appearance
        shape_index: dict[Shape, int] = {}
        node: list[int] = []
        shape: list[int] = []
        for account, scoped in self.by_account.items():
            span[account] = (len(rules), len(rules) + len(scoped))
            for rule in scoped:
                assert rule.compiled is not None
                n = node_of.get(id(rule.compiled))
                if n is None:
                    n = node_of[id(rule.compiled)] = by_root.setdefault(rule.compiled.root,
                                                                        len(by_root))
                node.append(n)
                shape.append(shape_index.setdefault(shape_of(rule), len(shape_index)))
                rules.append(rule)
        return ScopedIndex(tuple(rules), span, np.array(node, np.int64), tuple(by_root),
                           np.array(shape, np.int64), tuple(shape_index),
                           tuple(r.id for r in rules))

    @functools.cached_property
    def exact_rules(self) -> frozenset[str]:
        """Rules whose samples show a sum (sum, avg, a histogram's ``_sum``): only their
        values get exact decimal sums."""
        return frozenset(r.id for r in self.rules if r.aggregation in (
            Aggregation.SUM, Aggregation.AVG, Aggregation.HISTOGRAM))


def plan_for(rules: Sequence[Rule], timestamp_field: str = TIMESTAMP_FIELD,
             max_future_ms: int = MAX_FUTURE_MS,
             max_label_value_length: int = MAX_LABEL_VALUE_LENGTH,
             limits: Limits | None = None) -> Routing:
    """Collect the fields of enabled rules (queries, group-by, value, account) into one plan;
    label values from logs are cut past ``max_label_value_length`` characters; with
    ``limits``, each rule's series caps."""
    enabled = tuple(r for r in rules if r.enabled)
    # Each distinct use once: tenants' rules share their compiled queries and fields, and
    # merging a use per rule took 1.1 s of 100,000 rules' start (the merge is order-free).
    compiled: dict[int, tuple[FieldUse, ...]] = {}
    strings: set[str] = set()
    numbers: set[str] = set()
    with collector_paused():
        for rule in enabled:
            assert rule.compiled is not None
            compiled.setdefault(id(rule.compiled), rule.compiled.fields)
            strings.update(rule.group_by)
            if rule.field:
                numbers.add(rule.field)
            if rule.account is not None:
                strings.add("account")
        uses = [u for fields in compiled.values() for u in fields]
        uses += [FieldUse(f, string=True) for f in sorted(strings)]
        uses += [FieldUse(f, number=True) for f in sorted(numbers)]
        return Routing(enabled, ParsePlan.merge(uses, timestamp_field, max_future_ms),
                       max_label_value_length, RuleCapsTable(enabled, limits) if limits else {})

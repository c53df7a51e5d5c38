"""The rule model (SPEC §1): immutable, typed :class:`Rule` records and what a rule may say.

Input: none (plain values). Output: the types :mod:`l2m.rules.loader` builds from YAML and
every later stage reads; the allowed kinds, aggregations, keys and name patterns, each
defined once here."""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from l2m.errors import Problem
from l2m.query.nodes import CompiledQuery
from l2m.semantics.values import LABEL_NAME_RE, METRIC_NAME_RE, label_name


class Kind(StrEnum):
    """A rule's ``kind``: cumulative counters or one-minute gauge windows (SPEC §3)."""

    COUNTER = "counter"
    GAUGE = "gauge"


class Aggregation(StrEnum):
    """A rule's ``aggregation`` (SPEC §3). Members equal their strings (``"sum"``)."""

    COUNT = "count"
    SUM = "sum"
    AVG = "avg"
    MIN = "min"
    MAX = "max"
    HISTOGRAM = "histogram"
    QUANTILES = "quantiles"  # per-window quantile gauges, from the window's native histogram


KINDS = tuple(Kind)
AGGREGATIONS = tuple(Aggregation)
ALLOWED = {
    Kind.COUNTER: (Aggregation.COUNT, Aggregation.SUM, Aggregation.HISTOGRAM),
    Kind.GAUGE: AGGREGATIONS,
}
# Aggregations whose rows carry a bucket key in ``le`` (classic bounds, native bucket keys:
# l2m.engine.nativebuckets), so that one series has a row per bucket.
BUCKETED = (Aggregation.HISTOGRAM, Aggregation.QUANTILES)
KEYS = (
    "id", "name", "kind", "query", "aggregation", "field", "buckets", "native", "quantiles",
    "group_by", "labels", "account", "target_account", "enabled", "max_series", "description",
    "unit",
)
# Native (exponential) buckets (docs/rules.md "Distributions"): the schema a rule's values are
# bucketed at — bucket i holds (base^(i-1), base^i], base = 2^(2^-schema) — and how many
# populated buckets a series' histogram may keep before its resolution is halved (the state
# keeps at most about that many per series and window). Schema 3 is client_golang's default
# bucket factor 1.1; quantile gauges default finer, schema 5 (quantile error at most 1.08%),
# and keep twice the buckets: their histogram lives only while its window is open and never
# reaches a TSDB, and 320 buckets at schema 5 span values a factor 1024 apart (1 ms to 1 s)
# before the resolution — the documented error bound — is halved; 160 made a busy window's
# lognormal latencies fall back to schema 3 (4.33%).
NATIVE_SCHEMA = 3
QUANTILES_SCHEMA = 5
NATIVE_MAX_BUCKETS = 160
QUANTILES_MAX_BUCKETS = 320
# A rule's max_buckets at most: a series of a native histogram weighs about 90 bytes of state
# per populated bucket, and its sample that many on the metrics topic each time it changes
# (10,000 let one tenant's rule hold 724 KB per series); a classic histogram has 128 bounds.
MAX_NATIVE_BUCKETS = 1_000
MAX_QUANTILES = 20
# Metric metadata (HELP, UNIT): what Prometheus shows and remote write sends with the samples.
MAX_DESCRIPTION = 1024  # Mimir's default metadata length limit
UNIT_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
REQUIRED = ("id", "name", "kind", "query", "aggregation")
MAX_BUCKETS = 128
# The label a quantiles rule adds to each of its series: the quantile as written (its
# `quantile_labels`), as a Prometheus summary's.
QUANTILE_LABEL = "quantile"
# Labels a series may carry (static labels, group-by labels and a histogram's `le`): Mimir's
# default per-series limit, so every series l2m writes is one a TSDB takes.
MAX_LABELS = 30

# Metric names l2m writes about itself to the same metrics topic (l2m_input_logs_total,
# l2m_late_logs_total, …; docs/metrics.md): a rule writing one would interleave its samples
# with l2m's own under one series.
RESERVED_NAME_PREFIX = "l2m_"
# Rule ids of l2m's own counters (l2m-late, l2m-label-cut, l2m-series-refused-window, …): a
# rule with one would share their per-rule counts and state sections in open mode.
RESERVED_ID_PREFIX = "l2m-"
# Label names l2m adds to samples: the overflow series' l2m_overflow, the account label of
# `l2m deliver` (l2m_account by default, docs/prometheus.md).
RESERVED_LABEL_PREFIX = "l2m_"

ID_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
NAME_RE = METRIC_NAME_RE
LABEL_RE = LABEL_NAME_RE


@dataclass(frozen=True)
class Rule:
    """One LogMetric rule, validated. ``labels`` and ``buckets`` are tuples so rules hash."""

    id: str
    name: str
    kind: Kind
    query: str
    aggregation: Aggregation
    field: str | None = None
    buckets: tuple[float, ...] = ()
    bucket_labels: tuple[str, ...] = ()  # each bound's string form, the `le` label value
    # Native buckets (histogram: also a native histogram; quantiles: always): the schema its
    # values are bucketed at, None without; the most populated buckets a series keeps.
    native_schema: int | None = None
    native_max_buckets: int = NATIVE_MAX_BUCKETS
    quantiles: tuple[float, ...] = ()  # aggregation quantiles: each q, 0 <= q <= 1
    quantile_labels: tuple[str, ...] = ()  # each q's string form, the `quantile` label value
    group_by: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    account: str | None = None
    target_account: str | None = None
    enabled: bool = True
    # Live series this rule may hold (l2m.engine.admission); None: its account's per-rule cap.
    max_series: int | None = None
    description: str = ""  # the metric's HELP text
    unit: str = ""  # its UNIT (OpenMetrics: a base unit, e.g. seconds)
    file: str = "<memory>"
    line: int = 0
    compiled: CompiledQuery | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Plain strings (rules built in code) become the enums; a bad one is a ValueError.
        object.__setattr__(self, "kind", Kind(self.kind))
        object.__setattr__(self, "aggregation", Aggregation(self.aggregation))

    @functools.cached_property
    def signature(self) -> tuple[Any, ...]:
        """What makes the values accumulated under this rule meaningful: its aggregation,
        field, bucket bounds and group-by (:func:`l2m.state.counters.signature`). Strings and
        tuples of them only: the cyclic collector stops tracking it (a list per rule, 100,000
        rules, made the collections after every state task take 0.2–0.4 s)."""
        if self.native_schema is None:
            return (self.aggregation.value, self.field, self.bucket_labels, self.group_by)
        # The native schema as one more "bound" ("native/3": no classic label holds "/"):
        # every other rule's stored signature stays what releases wrote, and a build that
        # knows no native buckets sees a signature unlike its rule's and restarts the series
        # — rather than summing the native rows into +Inf, _sum and _count.
        return (self.aggregation.value, self.field,
                (*self.bucket_labels, f"native/{self.native_schema}"), self.group_by)

    @property
    def bucketed(self) -> bool:
        """Whether this rule's rows carry a bucket key in ``le`` (:data:`BUCKETED`)."""
        return self.aggregation in BUCKETED

    @property
    def metric_type(self) -> str:
        """The type of the metric family this rule writes, as remote write's metadata sends
        it: ``counter`` or ``gauge`` (quantile gauges too), ``histogram`` (a classic gauge
        histogram too, as before native histograms), ``gaugehistogram`` for a gauge with
        native buckets."""
        if self.aggregation != Aggregation.HISTOGRAM:
            return self.kind.value
        return "gaugehistogram" if self.kind == Kind.GAUGE and self.native_schema is not None \
            else "histogram"

    @property
    def classic(self) -> bool:
        """Whether this rule writes a classic histogram family (``_bucket``, ``_sum``,
        ``_count``): a histogram with ``buckets``."""
        return bool(self.buckets) and self.aggregation == Aggregation.HISTOGRAM

    @functools.cached_property
    def group_labels(self) -> tuple[tuple[str, str], ...]:
        """(label name, log field) per group-by field (kept: every sample's labels read it, and
        a label name is a regex substitution)."""
        return tuple((label_name(f), f) for f in self.group_by)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Rules travel to every Python worker inside the compiled routing, pickled: as their
        # field values in order, not a dict of names and cached properties per rule (100,000
        # rules: 24 → 19.5 MB, 0.40 → 0.27 s to unpickle in each worker).
        return _restore_rule, _rule_values(self)


_RULE_FIELDS = tuple(f.name for f in dataclasses.fields(Rule))
_rule_values = operator.attrgetter(*_RULE_FIELDS)  # in C: 100,000 rules 0.59 → 0.12 s


def _restore_rule(*values: Any) -> Rule:
    """A :class:`Rule` from its pickled field values (already checked and converted when it
    was built)."""
    rule = object.__new__(Rule)
    rule.__dict__.update(zip(_RULE_FIELDS, values, strict=True))
    return rule


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    warnings: tuple[Problem, ...] = ()

    @property
    def enabled(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.enabled)


# Values of a rule that many rules repeat (tenants' copies of a rule: a handful of names,
# queries and group-by lists among 100,000 rules) and that are strings or tuples of strings:
# one object each (share_values). Bucket bounds are not among them: (1, 2) and (1.0, 2.0)
# are equal keys but are written back (snapshots) as they were given.
_SHARED_FIELDS = ("name", "query", "field", "group_by", "bucket_labels", "labels", "account",
                  "target_account", "description", "unit", "file", "quantile_labels")


def share_values(rules: Iterable[Rule]) -> None:
    """Make equal values of these rules one object (:data:`_SHARED_FIELDS`), in place: the
    rules are what they were, but the routing pickles each value once instead of once per
    rule (100,000 tenant rules: 19.7 → 12.5 MB, a third less time to pickle on the driver and
    to unpickle in every Python worker)."""
    seen: dict[Any, Any] = {}
    for rule in rules:
        values = rule.__dict__  # a frozen dataclass: its fields are set around __setattr__
        for name in _SHARED_FIELDS:
            value = values[name]
            if value is not None:
                values[name] = seen.setdefault(value, value)

"""Route stage: parsed logs → one row per (log, matching rule, series).

Every enabled rule's query is compiled once into a Column; a single ``explode`` over an array
of per-rule structs routes each log to all the rules it matches in one pass over the data.
Rule identity and series labels are data (``rule`` id, ``labels`` array, histogram ``le``),
so the rows' schema — and every state schema downstream — does not depend on the rules:
adding, changing or removing rules keeps a streaming checkpoint usable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from l2m.columns import to_column
from l2m.parse import MAX_FUTURE_MS, ROUTED, STATUS, STATUS_NAMES, TIMESTAMP, ParsePlan
from l2m.query import FieldUse
from l2m.rules import Rule

LABELS_TYPE = T.ArrayType(
    T.StructType([T.StructField("name", T.StringType()), T.StructField("value", T.StringType())])
)
# Status rows carry one row per input log with its parse status (label ``status``), so one
# job yields both the metrics and the run's summary; streaming counts them as the
# ``l2m_input_logs_total`` counter.
STATUS_RULE = "__status__"


@dataclass(frozen=True)
class Routing:
    """The compiled rules and what the parse stage must extract for them."""

    rules: tuple[Rule, ...]
    plan: ParsePlan


def plan_for(rules: Sequence[Rule], timestamp_field: str = "@timestamp",
             max_future_ms: int = MAX_FUTURE_MS) -> Routing:
    """Collect the fields of enabled rules (queries, group-by, value, account) into one plan."""
    enabled = tuple(r for r in rules if r.enabled)
    uses: list[FieldUse] = []
    for rule in enabled:
        assert rule.compiled is not None
        uses.extend(rule.compiled.fields)
        uses.extend(FieldUse(f, string=True) for f in rule.group_by)
        if rule.field:
            uses.append(FieldUse(rule.field, number=True))
        if rule.account is not None:
            uses.append(FieldUse("account", string=True))
    return Routing(enabled, ParsePlan.merge(uses, timestamp_field, max_future_ms))


def rule_condition(rule: Rule, plan: ParsePlan) -> Column:
    """Query and account scope of one rule, for a successfully parsed log."""
    assert rule.compiled is not None
    cond = F.col(STATUS).isin(*ROUTED) & to_column(rule.compiled.root, plan)
    if rule.account is not None:
        cond = cond & F.coalesce(F.col(plan.column("account", "s")) == F.lit(rule.account),
                                 F.lit(False))
    return cond


def labels_column(rule: Rule, plan: ParsePlan) -> Column:
    """Static labels plus one per present group-by field, sorted by label name."""
    entries: list[tuple[str, Column]] = [(k, F.lit(v)) for k, v in rule.labels]
    entries += [(label, F.col(plan.column(f, "s"))) for label, f in rule.group_labels]
    entries.sort(key=lambda e: e[0])
    if not entries:
        return F.array().cast(LABELS_TYPE)
    structs = F.array(*[F.struct(F.lit(k).alias("name"), v.alias("value")) for k, v in entries])
    if not rule.group_by:
        return structs
    return F.filter(structs, lambda e: e["value"].isNotNull())


def value_column(rule: Rule, plan: ParsePlan) -> Column:
    if rule.aggregation == "count":
        return F.lit(1.0)
    assert rule.field is not None
    return F.col(plan.column(rule.field, "n"))


def window_column(rule: Rule) -> Column:
    """Gauges: the one-minute window start; counters: null."""
    if rule.kind != "gauge":
        return F.lit(None).cast("long")
    return window_start(F.col(TIMESTAMP))


def window_start(ts: Column) -> Column:
    """Start of the one-minute window holding ``ts`` (ms)."""
    return F.floor(ts / F.lit(60_000)).cast("long") * F.lit(60_000)


def series_column(rule: Rule, plan: ParsePlan) -> Column:
    """The series key the streaming state uses: the group-by values in ``group_by`` order,
    each as ``<length>:<value>``, ``-`` when the field is absent (no label); static labels
    are the rule's and stay out. :func:`l2m.samples.series_labels` turns it back into
    labels. Several times cheaper per match row than a label array or JSON."""
    return encoded_values([F.col(plan.column(f, "s")) for _label, f in rule.group_labels])


def encoded_values(values: Sequence[Column]) -> Column:
    """Length-prefixed concatenation of string columns (``-`` for null): unambiguous
    whatever the values contain."""
    if not values:
        return F.lit("")
    return F.concat(*[F.coalesce(F.concat(F.length(v).cast("string"), F.lit(":"), v),
                                 F.lit("-")) for v in values])


def _match(rule_id: Column, labels: Column, le: Column, window: Column, value: Column,
           ts: Column, series: bool) -> Column:
    return F.struct(
        rule_id.alias("rule"),
        labels.alias("series" if series else "labels"),
        le.alias("le"),
        window.alias("window"),
        ts.alias("ts"),
        value.cast("double").alias("v"),
    )


def rule_match(rule: Rule, plan: ParsePlan, series: bool = False) -> Column:
    """The match struct one rule contributes to a log (null where it does not match).

    A histogram match's ``le`` is the bucket the value falls in (the first bound ≥ value,
    ``"+Inf"`` above them all or without a value); the consumer makes the counts cumulative
    per family (:func:`l2m.samples.family_samples`)."""
    cond = rule_condition(rule, plan)
    labels = series_column(rule, plan) if series else labels_column(rule, plan)
    window = window_column(rule)
    value = value_column(rule, plan)
    rule_id = F.lit(rule.id)
    # Event time only of logs that count into the series: the counter sample's timestamp.
    ts = F.when(value.isNotNull(), F.col(TIMESTAMP))
    le = F.lit(None).cast("string")
    if rule.aggregation == "histogram":
        le = F.lit("+Inf")
        for bound, label in reversed(list(zip(rule.buckets, rule.bucket_labels, strict=True))):
            le = F.when(value <= F.lit(bound), F.lit(label)).otherwise(le)
    return F.when(cond, _match(rule_id, labels, le, window, value, ts, series))


def route(parsed: DataFrame, routing: Routing, with_status: bool = True,
          series: bool = False) -> DataFrame:
    """Rows ``rule, labels, le, window, ts, v``: one per (log, matching rule, series), plus
    (``with_status``) one status row per log: rule ``__status__``, label ``status``. With
    ``series`` the labels come as their JSON object (:func:`series_column`)."""
    items = [rule_match(rule, routing.plan, series) for rule in routing.rules]
    if with_status:
        name = F.element_at(F.array(*[F.lit(n) for n in STATUS_NAMES]),
                            F.col(STATUS).cast("int") + 1)
        labels = (encoded_values([name]) if series else
                  F.array(F.struct(F.lit("status").alias("name"), name.alias("value"))))
        # Streaming: a routed log's one-minute window rides in `le`, so the input-status
        # state can count the logs that come after their window closed (l2m.counters).
        minute = (F.when(F.col(STATUS).isin(*ROUTED), window_start(F.col(TIMESTAMP))
                         .cast("string")) if series else F.lit(None).cast("string"))
        items.append(_match(F.lit(STATUS_RULE), labels, minute,
                            F.lit(None).cast("long"), F.lit(1.0), F.col(TIMESTAMP), series))
    if not items:  # no rules: no rows, but still a frame of the source's kind
        schema = T.StructType([T.StructField("series", T.StringType()) if series and
                               f.name == "labels" else f for f in MATCH_SCHEMA.fields])
        return parsed.select(F.explode(F.array().cast(T.ArrayType(schema))).alias("m")
                             ).select("m.*")
    # Explode first and drop the non-matches after: a higher-order filter over the array
    # would evaluate every rule's struct through a lambda per log.
    return (parsed.select(F.explode(F.array(*items)).alias("m"))
            .where(F.col("m").isNotNull()).select("m.*"))


MATCH_SCHEMA = T.StructType([
    T.StructField("rule", T.StringType()),
    T.StructField("labels", LABELS_TYPE),
    T.StructField("le", T.StringType()),
    T.StructField("window", T.LongType()),
    T.StructField("ts", T.LongType()),
    T.StructField("v", T.DoubleType()),
])

"""Route stage: parsed logs → one row per (log, matching rule, series).

Every enabled rule's query is compiled once into a Column; a single ``explode`` over an array
of per-rule structs routes each log to all the rules it matches in one pass over the data.
Rule identity and series labels are data (``rule`` index, ``labels`` array), so the rows'
schema does not depend on the rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from l2m.columns import to_column
from l2m.parse import OK, STATUS, TIMESTAMP, ParsePlan
from l2m.query import FieldUse
from l2m.rules import Rule

LABELS_TYPE = T.ArrayType(
    T.StructType([T.StructField("name", T.StringType()), T.StructField("value", T.StringType())])
)
# Negative rule indexes carry one row per input log with its parse status, so one job
# yields both the metrics and the run's summary.
STATUS_RULE_BASE = -1


@dataclass(frozen=True)
class Routing:
    """The compiled rules and what the parse stage must extract for them."""

    rules: tuple[Rule, ...]
    plan: ParsePlan

    @property
    def max_buckets(self) -> int:
        return max((len(r.buckets) for r in self.rules), default=0)


def plan_for(rules: Sequence[Rule], timestamp_field: str = "@timestamp") -> Routing:
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
    return Routing(enabled, ParsePlan.merge(uses, timestamp_field))


def rule_condition(rule: Rule, plan: ParsePlan) -> Column:
    """Query and account scope of one rule, for a successfully parsed log."""
    assert rule.compiled is not None
    cond = (F.col(STATUS) == F.lit(OK)) & to_column(rule.compiled.root, plan)
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


def bucket_column(rule: Rule, value: Column) -> Column:
    """Index of the first bound ≥ value (``len(buckets)`` for +Inf); null off histograms."""
    if rule.aggregation != "histogram":
        return F.lit(None).cast("int")
    expr = F.when(value.isNull(), F.lit(None).cast("int"))
    for i, bound in enumerate(rule.buckets):
        expr = expr.when(value <= F.lit(bound), F.lit(i))
    return expr.otherwise(F.lit(len(rule.buckets)))


def window_column(rule: Rule) -> Column:
    if rule.kind != "gauge":
        return F.lit(None).cast("long")
    return F.floor(F.col(TIMESTAMP) / F.lit(60_000)).cast("long") * F.lit(60_000)


def route(parsed: DataFrame, routing: Routing, with_status: bool = True) -> DataFrame:
    """Rows ``rule, labels, window, ts, v, bucket``: one per (log, matching rule, series),
    plus (``with_status``) one status row per log with ``rule = -1 - status``."""
    items: list[Column] = []
    for index, rule in enumerate(routing.rules):
        value = value_column(rule, routing.plan)
        item = F.struct(
            F.lit(index).alias("rule"),
            labels_column(rule, routing.plan).alias("labels"),
            window_column(rule).alias("window"),
            F.col(TIMESTAMP).alias("ts"),
            value.cast("double").alias("v"),
            bucket_column(rule, value).alias("bucket"),
        )
        items.append(F.when(rule_condition(rule, routing.plan), item))
    if with_status:
        items.append(F.struct(
            (F.lit(STATUS_RULE_BASE) - F.col(STATUS).cast("int")).alias("rule"),
            F.array().cast(LABELS_TYPE).alias("labels"),
            F.lit(None).cast("long").alias("window"),
            F.col(TIMESTAMP).alias("ts"),
            F.lit(None).cast("double").alias("v"),
            F.lit(None).cast("int").alias("bucket"),
        ))
    if not items:
        return parsed.sparkSession.createDataFrame([], MATCH_SCHEMA)
    matches = F.filter(F.array(*items), lambda m: m.isNotNull())
    return parsed.select(F.explode(matches).alias("m")).select("m.*")


MATCH_SCHEMA = T.StructType([
    T.StructField("rule", T.IntegerType()),
    T.StructField("labels", LABELS_TYPE),
    T.StructField("window", T.LongType()),
    T.StructField("ts", T.LongType()),
    T.StructField("v", T.DoubleType()),
    T.StructField("bucket", T.IntegerType()),
])

"""Pre-aggregation: match rows → one partial aggregate per (rule, series, window).

The partial record (``matches, n, sum, min, max, ts, buckets``) is mergeable — sums, counts
and cumulative bucket counts add, min/max/ts combine — so the same record serves the final
backfill aggregate and the streaming pre-aggregation in front of the state stages.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

KEY = ("rule", "labels", "window")


def partial_aggregates(max_buckets: int) -> list[Column]:
    """Aggregate expressions over match rows (``v`` null: the log had no usable value)."""
    contributing = F.col("v").isNotNull()
    buckets = (
        F.array(*[F.count_if(F.col("bucket") <= F.lit(i)) for i in range(max_buckets)])
        if max_buckets
        else F.array().cast("array<bigint>")
    )
    return [
        F.count(F.lit(1)).alias("matches"),
        F.count("v").alias("n"),
        F.sum("v").alias("sum"),
        F.min("v").alias("min"),
        F.max("v").alias("max"),
        F.max(F.when(contributing, F.col("ts"))).alias("ts"),
        buckets.alias("buckets"),
    ]


def aggregate(matches: DataFrame, max_buckets: int) -> DataFrame:
    """One row per (rule, labels, window): the partial aggregate of its match rows."""
    return matches.groupBy(*KEY).agg(*partial_aggregates(max_buckets))

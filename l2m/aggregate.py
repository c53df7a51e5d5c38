"""Pre-aggregation: match rows → one partial aggregate per (rule, series, window).

The partial record (``matches, n, sum, exact_sum, exact_n, min, max, ts, buckets``) is
mergeable — sums, counts and cumulative bucket counts add, min/max/ts combine — so the same
record serves the final backfill aggregate and the streaming pre-aggregation in front of the
state stages.

Sums are exact: each value enters as the decimal of its shortest representation
(``decimal(38,18)``), so a sum does not depend on the order Spark happens to add in (batch
and streaming, any partitioning, agree to the bit) and 0.1 + 0.2 is 0.3. A value or a total
outside that range falls back to the plain double sum, which is always kept alongside.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

KEY = ("rule", "labels", "window")
EXACT = "decimal(38,18)"


def partial_aggregates(max_buckets: int) -> list[Column]:
    """Aggregate expressions over match rows (``v`` null: the log had no usable value)."""
    contributing = F.col("v").isNotNull()
    exact = F.col("v").try_cast(EXACT)
    buckets = (
        F.array(*[F.count_if(F.col("bucket") <= F.lit(i)) for i in range(max_buckets)])
        if max_buckets
        else F.array().cast("array<bigint>")
    )
    return [
        F.count(F.lit(1)).alias("matches"),
        F.count("v").alias("n"),
        F.sum("v").alias("sum"),
        F.try_sum(exact).alias("exact_sum"),
        F.count(exact).alias("exact_n"),
        F.min("v").alias("min"),
        F.max("v").alias("max"),
        F.max(F.when(contributing, F.col("ts"))).alias("ts"),
        buckets.alias("buckets"),
    ]


def best_sum() -> Column:
    """The exact sum when every value and the total fit the decimal, else the double sum."""
    exact_ok = (F.col("exact_n") == F.col("n")) & F.col("exact_sum").isNotNull()
    return F.when(exact_ok, F.col("exact_sum").cast("double")).otherwise(F.col("sum"))


def aggregate(matches: DataFrame, max_buckets: int) -> DataFrame:
    """One row per (rule, labels, window): the final aggregate of its match rows."""
    return (matches.groupBy(*KEY).agg(*partial_aggregates(max_buckets))
            .withColumn("sum", best_sum()).drop("exact_sum", "exact_n"))

"""Pre-aggregation: match rows → one partial aggregate per (rule, series, window).

The partial record (``matches, n, sum, exact_sum, exact_n, min, max, ts``) is mergeable —
sums and counts add, min/max/ts combine — so the same record serves the final backfill
aggregate, the gauge windows and the counters' pre-aggregation.

Sums are exact: each value enters as the decimal of its shortest representation
(``decimal(38,18)``), so a sum does not depend on the order Spark happens to add in (batch
and streaming, any partitioning, agree to the bit) and 0.1 + 0.2 is 0.3. A value or a total
outside that range falls back to the plain double sum, which is always kept alongside.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

KEY = ("rule", "labels", "le", "window")
EXACT = "decimal(38,18)"


def partial_aggregates() -> list[Column]:
    """Aggregate expressions over match rows (``v`` null: the log had no usable value)."""
    exact = F.col("v").try_cast(EXACT)
    return [
        F.count(F.lit(1)).alias("matches"),
        F.count("v").alias("n"),
        F.sum("v").alias("sum"),
        F.try_sum(exact).alias("exact_sum"),
        F.count(exact).alias("exact_n"),
        F.min("v").alias("min"),
        F.max("v").alias("max"),
        F.max("ts").alias("ts"),
    ]


def aggregate(matches: DataFrame) -> DataFrame:
    """One row per (rule, labels, le, window): the partial aggregate of its match rows."""
    return matches.groupBy(*KEY).agg(*partial_aggregates())

"""`l2m backfill`: the rules over JSON-lines files as one Spark batch job (SPEC §3–5).

read text → parse (Python, ``mapInArrow``) → route → aggregate → final samples written by
the driver as JSON lines, one per gauge series-window and one per counter series. One pass
over the input yields both the samples and the run's summary (status rows, see
:mod:`l2m.route`)."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from l2m.aggregate import aggregate
from l2m.parse import ParsePlan, parse_lines
from l2m.progress import JobProgress
from l2m.route import STATUS_RULE, Routing, plan_for, route
from l2m.rules import Rule
from l2m.samples import Partial, family_samples, series_samples, to_json_lines


@dataclass
class BackfillSummary:
    """What a backfill read and wrote."""

    logs: int = 0  # non-blank lines
    parsed: int = 0
    malformed: int = 0
    no_timestamp: int = 0
    blank_lines: int = 0
    samples: int = 0
    seconds: float = 0.0
    matches: dict[str, int] = field(default_factory=dict)
    series: dict[str, int] = field(default_factory=dict)

    def count_status(self, status: str, count: int) -> None:
        if status == "blank":
            self.blank_lines += count
            return
        self.logs += count
        if status == "ok":
            self.parsed += count
        elif status == "malformed":
            self.malformed += count
        elif status == "no_timestamp":
            self.no_timestamp += count

    def render(self) -> str:
        rate = self.logs / self.seconds if self.seconds else 0.0
        lines = [
            f"logs read:          {self.logs}",
            f"malformed lines:    {self.malformed}",
            f"without timestamp:  {self.no_timestamp} (skipped)",
            f"samples written:    {self.samples}",
            f"time:               {self.seconds:.1f}s ({rate:,.0f} logs/s)",
            "matches per rule:",
        ]
        width = max((len(r) for r in self.matches), default=0)
        lines += [f"  {rule.ljust(width)}  {count:>10}  ({self.series.get(rule, 0)} samples)"
                  for rule, count in self.matches.items()]
        return "\n".join(lines)


def parse_frame(raw: DataFrame, plan: ParsePlan) -> DataFrame:
    """Parse a DataFrame whose first column holds JSON lines."""

    def parse_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield parse_lines(batch.column(0).to_pylist(), plan)

    return raw.mapInArrow(parse_batches, plan.spark_schema_ddl())


def input_bytes(inputs: Sequence[str]) -> int:
    total = 0
    for item in inputs:
        path = Path(item)
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        total += sum(p.stat().st_size for p in files)
    return total


def read_lines(spark: SparkSession, inputs: Sequence[str]) -> DataFrame:
    """JSON-lines files (``.gz`` too), files or directories (recursively)."""
    parallelism = spark.sparkContext.defaultParallelism
    # About four splits per core: even work at the tail of the job, finer progress. Spark's
    # default (128 MB splits) gives a 400 MB file three tasks, one of them alone at the end.
    split = input_bytes(inputs) // (4 * parallelism)
    split = min(max(split, 8 << 20), 128 << 20)
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(split))
    raw = spark.read.option("recursiveFileLookup", "true").text(list(inputs))
    # gzip is not splittable: spread a few big files over all cores before parsing.
    if raw.rdd.getNumPartitions() < parallelism:
        raw = raw.repartition(parallelism)
    return raw


def final_aggregates(spark: SparkSession, inputs: Sequence[str], routing: Routing) -> DataFrame:
    """Aggregates in output order: rules as loaded, then labels, window and bucket bound."""
    parsed = parse_frame(read_lines(spark, inputs), routing.plan)
    ids = [F.lit(r.id) for r in routing.rules]
    rule_order = F.array_position(F.array(*ids), F.col("rule")) if ids else F.lit(0)
    le_order = F.when(F.col("le") == "+Inf", F.lit(float("inf"))).otherwise(
        F.col("le").cast("double"))
    return aggregate(route(parsed, routing)).orderBy(rule_order, "rule", "labels", "window",
                                                     le_order)


def samples_from_rows(rows: Iterable[Row], rules: Sequence[Rule], summary: BackfillSummary
                      ) -> Iterator[dict[str, Any]]:
    """Turn sorted aggregate rows into samples, counting status rows into ``summary``.
    A histogram family's bucket rows are adjacent (same rule, labels, window)."""
    by_id = {r.id: r for r in rules}

    def family(row: Row) -> tuple[Any, ...]:
        return row["rule"], tuple(row["labels"]), row["window"]

    for (rule_id, labels, window), group in itertools.groupby(rows, key=family):
        if rule_id == STATUS_RULE:
            summary.count_status(labels[0]["value"], sum(r["matches"] for r in group))
            continue
        rule = by_id[rule_id]
        pairs = [(e["name"], e["value"]) for e in labels]
        parts = {r["le"]: Partial.from_row(r) for r in group}
        summary.matches[rule.id] += sum(p.matches for p in parts.values())
        if rule.aggregation == "histogram":
            produced = family_samples(rule, pairs, window, parts)
        else:
            (agg,) = parts.values()
            produced = series_samples(rule, pairs, window if window is not None else agg.ts, agg)
        summary.series[rule.id] += len(produced)
        yield from produced


def run_backfill(spark: SparkSession, rules: Sequence[Rule], inputs: Sequence[str],
                 output: str | Path, timestamp_field: str = "@timestamp",
                 progress: bool = True) -> BackfillSummary:
    """Run enabled ``rules`` over ``inputs`` and write the final samples to ``output``
    (atomically: a partial file never replaces a previous result)."""
    started = time.monotonic()
    routing = plan_for(rules, timestamp_field)
    summary = BackfillSummary(matches={r.id: 0 for r in routing.rules},
                              series={r.id: 0 for r in routing.rules})
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    frame = final_aggregates(spark, inputs, routing)
    with JobProgress(spark.sparkContext, "backfill", enabled=progress), \
            partial.open("wb") as out:
        rows = frame.toLocalIterator(prefetchPartitions=True)
        for line in to_json_lines(samples_from_rows(rows, routing.rules, summary)):
            out.write(line)
            summary.samples += 1
    os.replace(partial, output)
    summary.seconds = time.monotonic() - started
    return summary

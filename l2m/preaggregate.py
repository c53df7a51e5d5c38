"""Pre-aggregate stage (SPEC §6.4): match rows → one partial per (rule, series, le, window)
per task, vectorised in Arrow, before the shuffle into the state stage.

Counters carry no window (null): a task's rows of one series collapse into one partial.
Gauges carry their one-minute window. The partial record is the mergeable one of
:mod:`l2m.aggregate` (``matches, n, sum, exact_sum, exact_n, min, max, ts``)."""

from __future__ import annotations

import decimal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Accumulator

PARTIAL_SCHEMA = ("rule string, series string, le string, window bigint, matches bigint, "
                  "n bigint, sum double, exact_sum decimal(38,18), exact_n bigint, min double, "
                  "max double, ts bigint")

_EXACT_LIMIT = pa.scalar(decimal.Decimal(10) ** 20, pa.decimal256(76, 18))


def preaggregate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Per task: match rows → one partial per (rule, series, le, window). Exact sums run in
    76-digit decimals and fall back (null) past what decimal(38,18) holds, like Spark's
    ``try_sum``."""
    collected = list(batches)
    if not collected or not sum(b.num_rows for b in collected):
        return
    table = pa.Table.from_batches(collected)
    table = table.set_column(table.schema.get_field_index("x"), "x",
                             pc.cast(table.column("x"), pa.decimal256(76, 18)))
    grouped = table.group_by(["rule", "series", "le", "window"], use_threads=False).aggregate([
        ([], "count_all"), ("v", "count"), ("v", "sum"), ("x", "sum"), ("x", "count"),
        ("v", "min"), ("v", "max"), ("ts", "max"),
    ])
    exact = grouped.column("x_sum")
    exact = pc.if_else(pc.less(pc.abs(exact), _EXACT_LIMIT), exact,
                       pa.nulls(len(exact), pa.decimal256(76, 18)))
    out = pa.table({
        "rule": grouped.column("rule"), "series": grouped.column("series"),
        "le": grouped.column("le"), "window": grouped.column("window"),
        "matches": grouped.column("count_all"), "n": grouped.column("v_count"),
        "sum": grouped.column("v_sum"), "exact_sum": pc.cast(exact, pa.decimal128(38, 18)),
        "exact_n": grouped.column("x_count"), "min": grouped.column("v_min"),
        "max": grouped.column("v_max"), "ts": grouped.column("ts_max"),
    })
    yield from out.to_batches(max_chunksize=10_000)


@dataclass
class Reduction:
    """Rows into and out of the pre-aggregation, summed over the query's life, and (when
    set) the rows per rule — the logs each rule matched (:class:`l2m.tally.Sums`)."""

    rows_in: Accumulator[int]
    rows_out: Accumulator[int]
    matches: Accumulator[dict[Any, float]] | None = None


def counted(function: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
            reduction: Reduction
            ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``function`` with its input and output rows counted into the reduction's accumulators
    (how the pre-aggregation's reduction ratio is reported), and its input rows per rule
    (one per log and matching rule: the rule's matches)."""
    rows_in, rows_out, matches = reduction.rows_in, reduction.rows_out, reduction.matches

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def source() -> Iterator[pa.RecordBatch]:
            per_rule: dict[Any, float] = {}
            for batch in batches:
                rows_in.add(batch.num_rows)
                if matches is not None and batch.num_rows:
                    counts = pc.value_counts(batch.column("rule"))
                    for rule, n in zip(counts.field("values").to_pylist(),
                                       counts.field("counts").to_pylist(), strict=True):
                        per_rule[("matches", rule)] = per_rule.get(("matches", rule), 0) + n
                yield batch
            if per_rule and matches is not None:
                matches.add(per_rule)  # once per task: each add is pickled with the result

        for out in function(source()):
            rows_out.add(out.num_rows)
            yield out

    return run

"""Pre-aggregate stage (SPEC §6.4): match rows → one partial per (rule, series, le, window)
per read task, vectorised in Arrow, before anything reaches the JVM.

Input: match rows (:data:`l2m.engine.fanout.MATCH_SCHEMA`: ``rule, series, le, window, ts, v``) and
the ids of the rules whose samples show a sum. Output: :data:`PARTIAL_ARROW` rows — the
mergeable partial of :mod:`l2m.engine.samples` (``matches, n, sum, exact_sum, exact_n, min, max,
ts``) per key. Counters carry no window (null): a task's rows of one series collapse into
one partial. Gauges carry their one-minute window.

Exact sums: each value enters as the decimal of its shortest representation rounded half away
from zero to 18 places (what Spark's ``try_cast(v AS decimal(38,18))`` does with Java's
shortest digits), in 76-digit decimals so adding never rounds; a value or total outside what
``decimal(38,18)`` holds (±1e20) makes the key's exact sum unknown (``exact_n`` < ``n``) and
the sample falls back to the double sum, as :class:`l2m.engine.samples.Partial` reads it.
"""

from __future__ import annotations

import decimal
import functools
from collections.abc import Collection, Iterable

import pyarrow as pa
import pyarrow.compute as pc

PARTIAL_SCHEMA = ("rule string, series string, le string, window bigint, matches bigint, "
                  "n bigint, sum double, exact_sum decimal(38,18), exact_n bigint, min double, "
                  "max double, ts bigint")
PARTIAL_ARROW = pa.schema([
    pa.field("rule", pa.string()), pa.field("series", pa.string()), pa.field("le", pa.string()),
    pa.field("window", pa.int64()), pa.field("matches", pa.int64()), pa.field("n", pa.int64()),
    pa.field("sum", pa.float64()), pa.field("exact_sum", pa.decimal128(38, 18)),
    pa.field("exact_n", pa.int64()), pa.field("min", pa.float64()),
    pa.field("max", pa.float64()), pa.field("ts", pa.int64()),
])
KEY = ["rule", "series", "le", "window"]
EXACT = pa.decimal128(38, 18)
WIDE = pa.decimal256(76, 18)
# Shortest digits of a double in [1e-20, 1e20) have at most 37 decimals and 20 integer digits.
_PARSE = pa.decimal256(76, 40)
_LIMIT = 1e20
_TINY = 1e-20  # rounds to 0 at 18 places


@functools.cache
def _exact_limit() -> pa.Scalar:
    # Built on first use, not at import: a process's first pa.array/pa.scalar imports pandas
    # (0.25 s), which the source's planner process, importing this module on every query
    # start, never needs.
    return pa.scalar(decimal.Decimal(10) ** 20, WIDE)


def exact_values(v: pa.Array) -> pa.Array:
    """Each double as ``decimal(38,18)``: its shortest decimal digits, rounded half away from
    zero to 18 places; null for null, NaN, ±Inf and magnitudes of 1e20 or more."""
    v = pc.cast(v, pa.float64())
    if len(v) >= 1024:
        # Values repeat (status codes, byte counts, durations to the millisecond): converting
        # each distinct one once is most of this stage's saving.
        distinct = pc.unique(v)
        if len(distinct) * 2 <= len(v):
            return _exact(distinct).take(pc.index_in(v, distinct))
    return _exact(v)


def _exact(v: pa.Array) -> pa.Array:
    size = pc.abs(v)
    fits = pc.and_(pc.is_finite(v), pc.less(size, _LIMIT))
    tiny = pc.and_(fits, pc.less(size, _TINY))
    wanted = pc.and_not(fits, tiny)
    digits = pc.cast(pc.if_else(wanted, v, pa.scalar(None, pa.float64())), pa.string())
    rounded = pc.round(pc.cast(digits, _PARSE), ndigits=18,
                       round_mode="half_towards_infinity")
    out = pc.cast(rounded, EXACT)
    return pc.if_else(tiny, pa.scalar(decimal.Decimal(0), EXACT), out)


def preaggregate(rows: pa.Table, exact_rules: Collection[str] = ()) -> pa.Table:
    """Match rows → one partial per (rule, series, le, window). Only rows of
    ``exact_rules`` get an exact sum (casting is most of this stage's cost)."""
    if not rows.num_rows:
        return PARTIAL_ARROW.empty_table()
    rule = rows.column("rule")
    if exact_rules:
        wanted = pc.is_in(rule, pa.array(sorted(exact_rules), pa.string()))
        x = pc.cast(exact_values(pc.if_else(wanted, rows.column("v"),
                                            pa.scalar(None, pa.float64()))), WIDE)
    else:
        x = pa.nulls(rows.num_rows, WIDE)
    table = rows.append_column("x", x)
    grouped = table.group_by(KEY, use_threads=False).aggregate([
        ([], "count_all"), ("v", "count"), ("v", "sum"), ("x", "sum"), ("x", "count"),
        ("v", "min"), ("v", "max"), ("ts", "max"),
    ])
    return _partials(grouped, "count_all", "v_count", "v_sum", "x_sum", "x_count", "v_min",
                     "v_max", "ts_max")


def merge(parts: Iterable[pa.Table]) -> pa.Table:
    """Partials of the same keys → one partial per key. A part whose exact sum is unknown
    makes the merged one unknown (its ``exact_n`` does not count)."""
    tables = [p for p in parts if p.num_rows]
    if not tables:
        return PARTIAL_ARROW.empty_table()
    if len(tables) == 1:
        return tables[0]
    table = pa.concat_tables(tables)
    exact = table.column("exact_sum")
    table = table.set_column(table.schema.get_field_index("exact_sum"), "exact_sum",
                             pc.cast(exact, WIDE))
    table = table.set_column(table.schema.get_field_index("exact_n"), "exact_n",
                             pc.if_else(pc.is_valid(exact), table.column("exact_n"), 0))
    grouped = table.group_by(KEY, use_threads=False).aggregate([
        ("matches", "sum"), ("n", "sum"), ("sum", "sum"), ("exact_sum", "sum"),
        ("exact_n", "sum"), ("min", "min"), ("max", "max"), ("ts", "max"),
    ])
    return _partials(grouped, "matches_sum", "n_sum", "sum_sum", "exact_sum_sum",
                     "exact_n_sum", "min_min", "max_max", "ts_max")


def _partials(grouped: pa.Table, matches: str, n: str, total: str, exact: str, exact_n: str,
              low: str, high: str, ts: str) -> pa.Table:
    wide = grouped.column(exact)
    fits = pc.fill_null(pc.less(pc.abs(wide), _exact_limit()), False)
    return pa.table({
        "rule": grouped.column("rule"), "series": grouped.column("series"),
        "le": grouped.column("le"), "window": grouped.column("window"),
        "matches": grouped.column(matches), "n": grouped.column(n),
        "sum": pc.fill_null(grouped.column(total), 0.0),
        "exact_sum": pc.cast(pc.if_else(fits, wide, pa.scalar(None, WIDE)), EXACT),
        "exact_n": pc.if_else(fits, grouped.column(exact_n), 0),
        "min": grouped.column(low), "max": grouped.column(high), "ts": grouped.column(ts),
    }, schema=PARTIAL_ARROW)
